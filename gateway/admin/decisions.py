"""The admin API's decisions, pure: a request body + the current snapshot + the YAML
policy -> one Change for the store (or a 4xx naming what is wrong).

The merge rule with YAML lives here. YAML tenants and keys are the GitOps source and are
read-only at runtime: a runtime tenant may not take a YAML tenant's id, a runtime key may
not take a YAML key's id, and runtime keys belong to runtime tenants. Each such collision
is a 409 that says which YAML entry is in the way.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, TypeVar

import msgspec
from pydantic import BaseModel, Field, ValidationError

from gateway.admin.change import Change, Expect
from gateway.admin.records import AdminSnapshot, KeyRecord, RecordId, RevokedKeys, TenantRecord
from gateway.errors import Conflict, InvalidRequest, NotFound
from gateway.settings.base import Strict
from gateway.settings.catalog import RateLimitSettings
from gateway.settings.policy import Policy
from gateway.settings.tenants import BudgetSettings

# a rotation's old key works this long by default, and at most this long
DEFAULT_GRACE_SECONDS = 3600
MAX_GRACE_SECONDS = 30 * 86400


class NewTenant(Strict):
    id: RecordId
    limits: RateLimitSettings | None = None
    model_limits: dict[str, RateLimitSettings] = Field(default_factory=dict)
    budgets: list[BudgetSettings] = Field(default_factory=list)
    allow_overrides: bool = False


class TenantPatch(Strict):
    """Only the fields sent change; `null` clears `limits`."""

    limits: RateLimitSettings | None = None
    model_limits: dict[str, RateLimitSettings] | None = None
    budgets: list[BudgetSettings] | None = None
    allow_overrides: bool | None = None


class NewKey(Strict):
    tenant: RecordId
    id: RecordId
    # the models and routes the key may use (absent or null: all of them)
    models: list[str] | None = None
    limits: RateLimitSettings | None = None
    budgets: list[BudgetSettings] = Field(default_factory=list)


class KeyPatch(Strict):
    """Only the fields sent change; `null` clears `models` (all models) or `limits`."""

    models: list[str] | None = None
    limits: RateLimitSettings | None = None
    budgets: list[BudgetSettings] | None = None


class Rotation(Strict):
    grace_seconds: int = Field(DEFAULT_GRACE_SECONDS, ge=0, le=MAX_GRACE_SECONDS)


@dataclass(frozen=True, slots=True)
class Actor:
    """Who asked: the name the client gave (x-gateway-actor, else "admin") and from where."""

    name: str
    address: str


BodyModel = TypeVar("BodyModel", bound=BaseModel)


def parse_body(raw: bytes, model: type[BodyModel]) -> BodyModel:
    """The JSON body as `model`, or a 400 naming the first field that is wrong."""
    try:
        data = msgspec.json.decode(raw) if raw.strip() else {}
    except msgspec.DecodeError:
        raise InvalidRequest("The request body is not valid JSON.") from None
    if not isinstance(data, dict):
        raise InvalidRequest("The request body must be a JSON object.")
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(part) for part in first["loc"]) or None
        reason = (
            "unknown field" if first["type"] == "extra_forbidden" else first["msg"]
        ).removeprefix("Value error, ")
        raise InvalidRequest(f"{where or 'body'}: {reason}", param=where) from None


def create_tenant(
    snapshot: AdminSnapshot, policy: Policy, body: NewTenant, actor: Actor, now: float
) -> tuple[Change, TenantRecord]:
    if body.id in policy.tenants:
        raise Conflict(
            f"Tenant '{body.id}' is defined in the YAML policy, which is read-only at "
            "runtime: pick another id, or change it in the policy file.",
            param="id",
            code="tenant_in_yaml",
        )
    _check_tenant_references(policy, body.model_limits, body.budgets)
    record = TenantRecord(**body.model_dump(), created_at=now, created_by=actor.name)
    change = Change(
        "tenant.create",
        body.id,
        expect=(Expect("tenants", body.id, "absent", f"Tenant '{body.id}' already exists."),),
        write=(("tenants", body.id, record.model_dump_json()),),
        audit=_audit(actor, "tenant.create", body.id, body.id, now, body),
    )
    return change, record


def update_tenant(
    snapshot: AdminSnapshot,
    policy: Policy,
    tenant_id: str,
    patch: TenantPatch,
    actor: Actor,
    now: float,
) -> tuple[Change, TenantRecord]:
    current = _runtime_tenant(snapshot, policy, tenant_id)
    record = current.model_copy(update=_patched(patch, {"model_limits": {}, "budgets": []}))
    _check_tenant_references(policy, record.model_limits, record.budgets)
    record = TenantRecord.model_validate(record.model_dump())
    change = Change(
        "tenant.update",
        tenant_id,
        expect=(_unchanged("tenants", tenant_id, snapshot.tenant_json[tenant_id], "Tenant"),),
        write=(("tenants", tenant_id, record.model_dump_json()),),
        audit=_audit(actor, "tenant.update", tenant_id, tenant_id, now, patch),
    )
    return change, record


def delete_tenant(
    snapshot: AdminSnapshot, policy: Policy, tenant_id: str, actor: Actor, now: float
) -> Change:
    _runtime_tenant(snapshot, policy, tenant_id)
    live = sorted(k.id for k in snapshot.keys.values() if k.tenant == tenant_id)
    if live:
        raise Conflict(
            f"Tenant '{tenant_id}' still has keys ({', '.join(live)}): revoke them first.",
            code="tenant_has_keys",
        )
    return Change(
        "tenant.delete",
        tenant_id,
        expect=(
            _unchanged("tenants", tenant_id, snapshot.tenant_json[tenant_id], "Tenant"),
            # a key issued for it after this snapshot was read: no compare-and-set on the
            # records read here would see it, and it would be left without a tenant
            Expect(
                "keys",
                tenant_id,
                "unowned",
                f"Tenant '{tenant_id}' has a key issued a moment ago: revoke it first.",
                code="tenant_has_keys",
            ),
        ),
        delete=(("tenants", tenant_id),),
        audit=_audit(actor, "tenant.delete", tenant_id, tenant_id, now, None),
    )


def issue_key(
    snapshot: AdminSnapshot,
    policy: Policy,
    body: NewKey,
    key_hash: str,
    actor: Actor,
    now: float,
    hint: str,
) -> tuple[Change, KeyRecord]:
    """A new key for a runtime tenant; `key_hash` is the hash of the key the caller made
    and will show once."""
    if body.tenant in policy.tenants:
        raise Conflict(
            f"Tenant '{body.tenant}' is defined in the YAML policy: its keys are added there "
            "(YAML tenants are read-only at runtime). Runtime keys belong to runtime tenants "
            "(POST /admin/tenants).",
            param="tenant",
            code="tenant_in_yaml",
        )
    if body.tenant not in snapshot.tenants:
        raise NotFound(
            f"Unknown tenant '{body.tenant}': create it first (POST /admin/tenants).",
            param="tenant",
            code="tenant_not_found",
        )
    yaml_owner = next(
        (t for t, s in policy.tenants.items() for k in s.keys if k.id == body.id), None
    )
    if yaml_owner is not None:
        raise Conflict(
            f"Key id '{body.id}' is a key of YAML tenant '{yaml_owner}': pick another id.",
            param="id",
            code="key_id_in_yaml",
        )
    if any(k.hash == key_hash for s in policy.tenants.values() for k in s.keys):
        raise Conflict("That key is already configured in the YAML policy.", code="key_in_yaml")
    _check_key_references(policy, body.models, body.budgets)
    record = KeyRecord(
        **body.model_dump(), hash=key_hash, hint=hint, created_at=now, created_by=actor.name
    )
    change = Change(
        "key.create",
        body.id,
        expect=(
            Expect(
                "tenants",
                body.tenant,
                "present",
                f"Unknown tenant '{body.tenant}': create it first (POST /admin/tenants).",
                status=404,
                code="tenant_not_found",
            ),
            # a live key's id, or a revoked one's: ids are never reused
            *(
                Expect(
                    table,
                    body.id,
                    "absent",
                    f"Key id '{body.id}' is already used (ids of revoked keys are not reused).",
                )
                for table in ("keys", "revoked")
            ),
            Expect("hashes", key_hash, "absent", "That key is already issued."),
        ),
        write=(("keys", body.id, record.model_dump_json()), ("hashes", key_hash, body.id)),
        audit=_audit(actor, "key.create", body.id, body.tenant, now, body),
    )
    return change, record


def update_key(
    snapshot: AdminSnapshot,
    policy: Policy,
    key_id: str,
    patch: KeyPatch,
    actor: Actor,
    now: float,
    *,
    revoked: RevokedKeys,
) -> tuple[Change, KeyRecord]:
    current = _live_key(snapshot, revoked, policy, key_id)
    record = current.model_copy(update=_patched(patch, {"budgets": []}))
    record = KeyRecord.model_validate(record.model_dump())
    _check_key_references(policy, record.models, record.budgets)
    change = Change(
        "key.update",
        key_id,
        expect=(_unchanged("keys", key_id, snapshot.key_json[key_id], "Key"),),
        write=(("keys", key_id, record.model_dump_json()),),
        audit=_audit(actor, "key.update", key_id, current.tenant, now, patch),
    )
    return change, record


def rotate_key(
    snapshot: AdminSnapshot,
    policy: Policy,
    key_id: str,
    rotation: Rotation,
    key_hash: str,
    actor: Actor,
    now: float,
    hint: str,
    *,
    revoked: RevokedKeys,
) -> tuple[Change, KeyRecord]:
    """A new key for the same record; the old one keeps working `grace_seconds` more. A
    key rotated again within its grace loses the older key at once."""
    current = _live_key(snapshot, revoked, policy, key_id)
    record = current.model_copy(
        update={
            "hash": key_hash,
            "hint": hint,
            "previous_hash": current.hash if rotation.grace_seconds else None,
            "previous_valid_until": now + rotation.grace_seconds
            if rotation.grace_seconds
            else None,
        }
    )
    deletes: tuple[tuple[Any, str], ...] = ()
    if current.previous_hash is not None:
        deletes = (("hashes", current.previous_hash),)
    if not rotation.grace_seconds:
        deletes = (*deletes, ("hashes", current.hash))
    change = Change(
        "key.rotate",
        key_id,
        expect=(
            _unchanged("keys", key_id, snapshot.key_json[key_id], "Key"),
            Expect("hashes", key_hash, "absent", "That key is already issued."),
        ),
        write=(("keys", key_id, record.model_dump_json()), ("hashes", key_hash, key_id)),
        delete=deletes,
        audit=_audit(actor, "key.rotate", key_id, current.tenant, now, rotation),
    )
    return change, record


def revoke_key(
    snapshot: AdminSnapshot,
    policy: Policy,
    key_id: str,
    actor: Actor,
    now: float,
    *,
    revoked: RevokedKeys,
) -> tuple[Change, KeyRecord]:
    """The record moves from the live keys to the revoked ones (which no process holds)."""
    current = _live_key(snapshot, revoked, policy, key_id)
    record = current.model_copy(
        update={"revoked_at": now, "previous_hash": None, "previous_valid_until": None}
    )
    hashes = [current.hash, *([current.previous_hash] if current.previous_hash else [])]
    change = Change(
        "key.revoke",
        key_id,
        expect=(_unchanged("keys", key_id, snapshot.key_json[key_id], "Key"),),
        write=(("revoked", key_id, record.model_dump_json()),),
        delete=(("keys", key_id), *(("hashes", h) for h in hashes)),
        audit=_audit(actor, "key.revoke", key_id, current.tenant, now, None),
    )
    return change, record


def _patched(patch: BaseModel, cleared: dict[str, Any]) -> dict[str, Any]:
    """The fields a patch sets; `null` for a list or table field empties it."""
    changes = {name: getattr(patch, name) for name in patch.model_fields_set}
    for name, empty in cleared.items():
        if name in changes and changes[name] is None:
            changes[name] = empty
    if changes.get("allow_overrides", False) is None:
        changes["allow_overrides"] = False
    return changes


def _runtime_tenant(snapshot: AdminSnapshot, policy: Policy, tenant_id: str) -> TenantRecord:
    if tenant_id in policy.tenants:
        raise Conflict(
            f"Tenant '{tenant_id}' is defined in the YAML policy, which is read-only at "
            "runtime: change it in the policy file.",
            code="tenant_in_yaml",
        )
    found = snapshot.tenants.get(tenant_id)
    if found is None:
        raise NotFound(f"Unknown tenant '{tenant_id}'.", code="tenant_not_found")
    return found


def _live_key(
    snapshot: AdminSnapshot, revoked: RevokedKeys, policy: Policy, key_id: str
) -> KeyRecord:
    """`revoked`: the revoked record of `key_id` if there is one (read when the snapshot
    has no live key of that id)."""
    found = snapshot.keys.get(key_id)
    if found is None:
        if key_id in revoked.records:
            raise Conflict(f"Key '{key_id}' is revoked.", code="key_revoked")
        if any(k.id == key_id for s in policy.tenants.values() for k in s.keys):
            raise Conflict(
                f"Key '{key_id}' is defined in the YAML policy, which is read-only at "
                "runtime: change it in the policy file.",
                code="key_in_yaml",
            )
        raise NotFound(f"Unknown key '{key_id}'.", code="key_not_found")
    return found


def _unchanged(table: Any, name: str, stored: str, what: str) -> Expect:
    return Expect(
        table,
        name,
        "equal",
        f"{what} '{name}' changed while this change was made: read it again and retry.",
        value=stored,
    )


def _check_tenant_references(
    policy: Policy, model_limits: dict[str, RateLimitSettings], budgets: list[BudgetSettings]
) -> None:
    for name in model_limits:
        if policy.canonical_model(name) is None:
            raise InvalidRequest(f"model_limits: unknown model '{name}'", param="model_limits")
    _check_budgets(policy, budgets)


def _check_key_references(
    policy: Policy, models: list[str] | None, budgets: list[BudgetSettings]
) -> None:
    for name in models or ():
        if policy.canonical_model(name) is None and name not in policy.routes:
            raise InvalidRequest(
                f"models: unknown model or route '{name}' (GET /v1/models lists them)",
                param="models",
            )
    _check_budgets(policy, budgets)


def _check_budgets(policy: Policy, budgets: list[BudgetSettings]) -> None:
    for i, budget in enumerate(budgets):
        target = budget.downgrade_route
        if budget.downgrade_fraction is not None and target is None:
            raise InvalidRequest(
                f"budgets.{i}.downgrade_route: needed with downgrade_fraction",
                param=f"budgets.{i}.downgrade_route",
            )
        if (
            target is not None
            and target not in policy.routes
            and not policy.canonical_model(target)
        ):
            raise InvalidRequest(
                f"budgets.{i}.downgrade_route: unknown route '{target}'",
                param=f"budgets.{i}.downgrade_route",
            )


def _audit(
    actor: Actor, action: str, target: str, tenant: str, now: float, body: BaseModel | None
) -> dict[str, str]:
    detail = body.model_dump(mode="json", exclude_unset=True) if body is not None else {}
    return {
        "at": datetime.fromtimestamp(now, UTC).isoformat(timespec="milliseconds"),
        "actor": actor.name,
        "address": actor.address,
        "action": action,
        "target": target,
        "tenant": tenant,
        "detail": json.dumps(detail, separators=(",", ":"), sort_keys=True),
    }
