"""The policy a request sees: the YAML policy with the runtime tenants and keys added.

YAML wins every collision. The admin API refuses to create one (409), but a later YAML
edit can still add a tenant id or a key the runtime set already has: the runtime entry
is then left out (shadowed) and named in the log, and the YAML one serves.
"""

from __future__ import annotations

from dataclasses import dataclass

from gateway.admin.records import AdminSnapshot
from gateway.settings.policy import Policy
from gateway.settings.tenants import KeySettings, TenantSettings


@dataclass(frozen=True, slots=True)
class RetiringKey:
    """A rotated key's old hash, accepted until `valid_until` (unix seconds)."""

    hash: str
    tenant_id: str
    key: KeySettings
    valid_until: float


@dataclass(frozen=True, slots=True)
class MergedPolicy:
    policy: Policy
    retiring: tuple[RetiringKey, ...] = ()
    # runtime tenants and keys a YAML entry hides, for the log
    shadowed: tuple[str, ...] = ()


def merge(policy: Policy, snapshot: AdminSnapshot, now: float) -> MergedPolicy:
    if not snapshot.tenants:
        return MergedPolicy(policy)
    yaml_ids = {k.id for t in policy.tenants.values() for k in t.keys}
    yaml_hashes = {k.hash for t in policy.tenants.values() for k in t.keys}
    shadowed: list[str] = []
    keys_of: dict[str, list[KeySettings]] = {}
    retiring: list[RetiringKey] = []
    for record in snapshot.keys.values():
        if record.revoked_at is not None:
            continue
        if record.id in yaml_ids or record.hash in yaml_hashes:
            shadowed.append(f"key {record.id}")
            continue
        settings = record.settings()
        keys_of.setdefault(record.tenant, []).append(settings)
        if (
            record.previous_hash is not None
            and record.previous_valid_until is not None
            and record.previous_valid_until > now
            and record.previous_hash not in yaml_hashes
        ):
            retiring.append(
                RetiringKey(
                    record.previous_hash, record.tenant, settings, record.previous_valid_until
                )
            )
    tenants: dict[str, TenantSettings] = dict(policy.tenants)
    for tenant_id, tenant in snapshot.tenants.items():
        if tenant_id in policy.tenants:
            shadowed.append(f"tenant {tenant_id}")
            continue
        tenants[tenant_id] = tenant.settings(keys_of.get(tenant_id, []))
    retiring = [r for r in retiring if r.tenant_id in tenants and r.tenant_id not in policy.tenants]
    merged = Policy(models=policy.models, routes=policy.routes, tenants=tenants, rules=policy.rules)
    return MergedPolicy(merged, tuple(retiring), tuple(shadowed))
