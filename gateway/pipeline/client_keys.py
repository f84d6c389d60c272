"""Client keys: stored as SHA-256 hashes, looked up by hash, compared in constant time."""

from __future__ import annotations

import hashlib
import hmac
from dataclasses import dataclass

from gateway.errors import AuthenticationFailed
from gateway.ingress.base import bearer_token
from gateway.settings.policy import Policy
from gateway.settings.tenants import KeySettings, TenantSettings

__all__ = ["Caller", "KeyIndex", "bearer_token", "hash_key"]


def hash_key(key: str) -> str:
    return "sha256:" + hashlib.sha256(key.encode("utf-8")).hexdigest()


@dataclass(frozen=True, slots=True)
class Caller:
    tenant_id: str
    tenant: TenantSettings
    key: KeySettings

    @property
    def key_id(self) -> str:
        return self.key.id


class KeyIndex:
    def __init__(self, policy: Policy) -> None:
        self._by_hash: dict[str, Caller] = {}
        for tenant_id, tenant in policy.tenants.items():
            for key in tenant.keys:
                self._by_hash[key.hash] = Caller(tenant_id, tenant, key)

    def authenticate(self, token: str | None) -> Caller:
        """The caller whose key `token` is (None: no key sent; "": a malformed header,
        as `ingress.base.bearer_token` reads it)."""
        if token is None:
            raise AuthenticationFailed("Missing API key: send it as 'Authorization: Bearer <key>'.")
        if not token:
            raise AuthenticationFailed("Malformed Authorization header: expected 'Bearer <key>'.")
        presented = hash_key(token)
        caller = self._by_hash.get(presented)
        # the dict lookup is on a hash of the key; compare_digest keeps the final
        # check constant-time as well
        if caller is None or not hmac.compare_digest(caller.key.hash, presented):
            raise AuthenticationFailed("Incorrect API key provided.")
        return caller
