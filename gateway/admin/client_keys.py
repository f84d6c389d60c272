"""Client keys: stored as SHA-256 hashes, looked up by hash, compared in constant time."""

from __future__ import annotations

import hashlib
import hmac
import time
from collections.abc import Iterable
from dataclasses import dataclass, field

from gateway.authorization import bearer_token
from gateway.errors import AuthenticationFailed
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
    # a rotated key's old hash: refused from this moment on (unix seconds)
    valid_until: float | None = None
    # `key.id`, read once: the settings are a pydantic model, whose every attribute read
    # goes through its `__getattr__` hook, and the pipeline asks for it several times
    key_id: str = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "key_id", self.key.id)


class KeyIndex:
    def __init__(
        self, policy: Policy, retiring: Iterable[tuple[str, str, KeySettings, float]] = ()
    ) -> None:
        """`retiring`: (old hash, tenant id, key, valid until) of rotated keys in their grace."""
        self._by_hash: dict[str, Caller] = {}
        # presented key -> its caller, for keys that passed: a key's SHA-256 is computed
        # once per index, not per request. An index lives as long as its policy view, so
        # a key revoked or rotated (a new view, a new index) is checked afresh; a rotated
        # key's old hash keeps its `valid_until` check on every request
        self._passed: dict[str, Caller] = {}
        for tenant_id, tenant in policy.tenants.items():
            for key in tenant.keys:
                self._by_hash[key.hash] = Caller(tenant_id, tenant, key)
        for old_hash, tenant_id, key, valid_until in retiring:
            tenant = policy.tenants[tenant_id]
            self._by_hash.setdefault(old_hash, Caller(tenant_id, tenant, key, valid_until))

    def authenticate(self, token: str | None) -> Caller:
        """The caller whose key `token` is (None: no key sent; "": a malformed header,
        as `gateway.authorization.bearer_token` reads it)."""
        if token is None:
            raise AuthenticationFailed("Missing API key: send it as 'Authorization: Bearer <key>'.")
        if not token:
            raise AuthenticationFailed("Malformed Authorization header: expected 'Bearer <key>'.")
        caller = self._passed.get(token)
        if caller is None:
            presented = hash_key(token)
            caller = self._by_hash.get(presented)
            # the dict lookup is on a hash of the key; compare_digest keeps the final
            # check constant-time as well
            if caller is None:
                raise AuthenticationFailed("Incorrect API key provided.")
            if caller.valid_until is None and not hmac.compare_digest(caller.key.hash, presented):
                raise AuthenticationFailed("Incorrect API key provided.")
            if len(self._passed) < _PASSED_KEYS:
                self._passed[token] = caller
        if caller.valid_until is not None and time.time() >= caller.valid_until:
            raise AuthenticationFailed(
                "This API key was rotated and its grace period is over: use the new key."
            )
        return caller


# how many presented keys an index remembers as passed (the rest are hashed per request)
_PASSED_KEYS = 4096
