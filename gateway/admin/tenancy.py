"""The admin API's operations: read the store, decide the change (admin/decisions.py, pure),
apply it atomically with its audit entry, and bring this process's copy up to date.

A change decided on a snapshot that another admin changed meanwhile fails its
compare-and-set and is decided again on a fresh read (a few times), so concurrent
admins never overwrite each other silently.

Revoked keys are not in the snapshot every process holds: what needs them (the listing, a
key read by id, a change of a key that is not live, a tenant's deletion) reads them from
the store here.
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Callable, Sequence
from typing import Any, Protocol, TypeVar

from gateway.admin import decisions as decide
from gateway.admin.change import Change
from gateway.admin.client_keys import hash_key
from gateway.admin.decisions import Actor
from gateway.admin.records import AdminSnapshot, KeyRecord, RevokedKeys, TenantRecord
from gateway.admin.runtime_keys import RuntimeKeys
from gateway.errors import Conflict, GatewayError, NotFound, StoreUnavailable
from gateway.settings.policy import Policy
from gateway.settings.tenants import TenantSettings

KEY_PREFIX = "gw-"
# a change that keeps losing its compare-and-set to other admins gives up with a 409
ATTEMPTS = 3

Result = TypeVar("Result")


class ChangeCounter(Protocol):
    """Where each change's outcome is counted (observability's AdminMetrics): admin
    counts through this seam instead of importing observability."""

    def change(self, action: str, outcome: str) -> None: ...


def new_key() -> str:
    return KEY_PREFIX + secrets.token_urlsafe(32)


class TenancyAdmin:
    def __init__(
        self, keys: RuntimeKeys, yaml_policy: Callable[[], Policy], metrics: ChangeCounter
    ) -> None:
        self._keys = keys
        self._yaml_policy = yaml_policy
        self._metrics = metrics

    async def fresh(self) -> AdminSnapshot:
        snapshot = await self._keys.store.snapshot(self._keys.snapshot)
        self._keys.adopt(snapshot)
        return snapshot

    async def revoked(self, ids: Sequence[str] | None = None) -> RevokedKeys:
        """The revoked records of `ids` (those that are revoked), or all of them (None)."""
        return RevokedKeys.decode(await self._keys.store.revoked(ids))

    async def _apply(
        self,
        action: str,
        decide_on: Callable[[AdminSnapshot, RevokedKeys], tuple[Change, Result]],
        revoked_ids: Callable[[AdminSnapshot], Sequence[str]] = lambda s: (),
    ) -> Result:
        """`revoked_ids`: which revoked records the decision needs, from the fresh
        snapshot."""
        try:
            for attempt in range(ATTEMPTS):
                snapshot = await self.fresh()
                needed = revoked_ids(snapshot)
                revoked = await self.revoked(needed) if needed else RevokedKeys()
                change, result = decide_on(snapshot, revoked)
                applied = await self._keys.store.apply(change)
                if applied.failed is None:
                    await self.fresh()
                    self._metrics.change(action, "ok")
                    return result
                # a record changed, or a key was issued for a tenant being deleted: decide
                # again on a fresh read (which then names what is in the way)
                if applied.failed.state not in ("equal", "unowned") or attempt == ATTEMPTS - 1:
                    error = NotFound if applied.failed.status == 404 else Conflict
                    raise error(applied.failed.refusal, code=applied.failed.code)
        except StoreUnavailable:
            self._metrics.change(action, "failed")
            raise
        except GatewayError:
            self._metrics.change(action, "refused")
            raise
        raise AssertionError("unreachable: the last attempt returns or raises")

    # ------------------------------------------------------------------ tenants

    async def create_tenant(self, body: decide.NewTenant, actor: Actor) -> dict[str, Any]:
        record = await self._apply(
            "tenant.create",
            lambda s, _: decide.create_tenant(s, self._yaml_policy(), body, actor, time.time()),
        )
        return tenant_json(record.id, record, 0)

    async def update_tenant(
        self, tenant_id: str, patch: decide.TenantPatch, actor: Actor
    ) -> dict[str, Any]:
        record = await self._apply(
            "tenant.update",
            lambda s, _: decide.update_tenant(
                s, self._yaml_policy(), tenant_id, patch, actor, time.time()
            ),
        )
        snapshot = self._keys.snapshot
        return tenant_json(tenant_id, record, _live_keys(snapshot, tenant_id))

    async def delete_tenant(self, tenant_id: str, actor: Actor) -> dict[str, Any]:
        def change(s: AdminSnapshot, _: RevokedKeys) -> tuple[Change, None]:
            return decide.delete_tenant(s, self._yaml_policy(), tenant_id, actor, time.time()), None

        await self._apply("tenant.delete", change)
        return {"id": tenant_id, "object": "tenant", "deleted": True}

    async def tenants(self) -> list[dict[str, Any]]:
        snapshot = await self.fresh()
        policy = self._yaml_policy()
        rows = [tenant_json(i, t, len(t.keys), source="yaml") for i, t in policy.tenants.items()]
        rows += [
            tenant_json(i, t, _live_keys(snapshot, i))
            for i, t in sorted(snapshot.tenants.items())
            if i not in policy.tenants
        ]
        return rows

    async def tenant(self, tenant_id: str) -> dict[str, Any]:
        policy = self._yaml_policy()
        if tenant_id in policy.tenants:
            yaml_tenant = policy.tenants[tenant_id]
            return tenant_json(tenant_id, yaml_tenant, len(yaml_tenant.keys), source="yaml")
        snapshot = await self.fresh()
        record = snapshot.tenants.get(tenant_id)
        if record is None:
            raise NotFound(f"Unknown tenant '{tenant_id}'.", code="tenant_not_found")
        return tenant_json(tenant_id, record, _live_keys(snapshot, tenant_id))

    # ------------------------------------------------------------------ keys

    async def issue_key(self, body: decide.NewKey, actor: Actor) -> dict[str, Any]:
        secret = new_key()
        record = await self._apply(
            "key.create",
            lambda s, _: decide.issue_key(
                s, self._yaml_policy(), body, hash_key(secret), actor, time.time(), secret[-4:]
            ),
        )
        return {**key_json(record, time.time()), "key": secret}

    async def update_key(self, key_id: str, patch: decide.KeyPatch, actor: Actor) -> dict[str, Any]:
        record = await self._apply(
            "key.update",
            lambda s, revoked: decide.update_key(
                s, self._yaml_policy(), key_id, patch, actor, time.time(), revoked=revoked
            ),
            _unless_live(key_id),
        )
        return key_json(record, time.time())

    async def rotate_key(
        self, key_id: str, rotation: decide.Rotation, actor: Actor
    ) -> dict[str, Any]:
        secret = new_key()
        record = await self._apply(
            "key.rotate",
            lambda s, revoked: decide.rotate_key(
                s,
                self._yaml_policy(),
                key_id,
                rotation,
                hash_key(secret),
                actor,
                time.time(),
                secret[-4:],
                revoked=revoked,
            ),
            _unless_live(key_id),
        )
        return {**key_json(record, time.time()), "key": secret}

    async def revoke_key(self, key_id: str, actor: Actor) -> dict[str, Any]:
        record = await self._apply(
            "key.revoke",
            lambda s, revoked: decide.revoke_key(
                s, self._yaml_policy(), key_id, actor, time.time(), revoked=revoked
            ),
            _unless_live(key_id),
        )
        return key_json(record, time.time())

    async def keys(self, tenant: str | None = None) -> list[dict[str, Any]]:
        snapshot = await self.fresh()
        policy = self._yaml_policy()
        now = time.time()
        rows = [
            yaml_key_json(tenant_id, settings, index)
            for tenant_id, settings in policy.tenants.items()
            for index in range(len(settings.keys))
            if tenant is None or tenant == tenant_id
        ]
        # read after the snapshot: a key revoked in between is in both, and is revoked
        revoked = await self.revoked()
        live = [k for i, k in snapshot.keys.items() if i not in revoked.records]
        records = [*live, *revoked.records.values()]
        rows += [
            key_json(record, now)
            for record in sorted(records, key=lambda k: (k.tenant, k.id))
            if tenant is None or tenant == record.tenant
        ]
        return rows

    async def key(self, key_id: str) -> dict[str, Any]:
        policy = self._yaml_policy()
        for tenant_id, settings in policy.tenants.items():
            for index, found in enumerate(settings.keys):
                if found.id == key_id:
                    return yaml_key_json(tenant_id, settings, index)
        record = (await self.fresh()).keys.get(key_id)
        if record is None:
            record = (await self.revoked([key_id])).records.get(key_id)
        if record is None:
            raise NotFound(f"Unknown key '{key_id}'.", code="key_not_found")
        return key_json(record, time.time())

    async def audit(self, limit: int) -> list[dict[str, Any]]:
        entries = await self._keys.store.audit(limit)
        return [{"id": entry.id, **entry.fields} for entry in entries]


def _unless_live(key_id: str) -> Callable[[AdminSnapshot], Sequence[str]]:
    """A key change needs the key's revoked record only when it is not live (to answer
    409 revoked rather than 404 unknown)."""
    return lambda snapshot: () if key_id in snapshot.keys else (key_id,)


def _live_keys(snapshot: AdminSnapshot, tenant_id: str) -> int:
    return sum(1 for k in snapshot.keys.values() if k.tenant == tenant_id)


def _limits(value: Any) -> Any:
    return value.model_dump(mode="json", exclude_none=True) if value is not None else None


def tenant_json(
    tenant_id: str, tenant: TenantRecord | TenantSettings, keys: int, source: str = "runtime"
) -> dict[str, Any]:
    body: dict[str, Any] = {
        "id": tenant_id,
        "object": "tenant",
        "source": source,
        "limits": _limits(tenant.limits),
        "model_limits": {m: _limits(v) for m, v in tenant.model_limits.items()},
        "budgets": [b.model_dump(mode="json", exclude_none=True) for b in tenant.budgets],
        "allow_overrides": tenant.allow_overrides,
        "keys": keys,
    }
    if isinstance(tenant, TenantRecord):
        body["created_at"] = tenant.created_at
        body["created_by"] = tenant.created_by
    return body


def key_json(record: KeyRecord, now: float) -> dict[str, Any]:
    """A runtime key as the admin API shows it: never its hash, never the key."""
    return {
        "id": record.id,
        "object": "key",
        "tenant": record.tenant,
        "source": "runtime",
        "status": record.status(now),
        "hint": "..." + record.hint,
        "models": record.models,
        "limits": _limits(record.limits),
        "budgets": [b.model_dump(mode="json", exclude_none=True) for b in record.budgets],
        "created_at": record.created_at,
        "created_by": record.created_by,
        "previous_valid_until": record.previous_valid_until,
        "revoked_at": record.revoked_at,
    }


def yaml_key_json(tenant_id: str, tenant: TenantSettings, index: int) -> dict[str, Any]:
    key = tenant.keys[index]
    return {
        "id": key.id,
        "object": "key",
        "tenant": tenant_id,
        "source": "yaml",
        "status": "active",
        "models": key.models,
        "limits": _limits(key.limits),
        "budgets": [b.model_dump(mode="json", exclude_none=True) for b in key.budgets],
    }
