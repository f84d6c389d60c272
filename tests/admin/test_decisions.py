"""The admin API's decisions and the merge rule with YAML, pure: every collision with the
YAML policy is a 409 naming what is in the way, bad references a 400 naming the field,
and the merged policy serves runtime keys beside YAML ones (revoked ones never, rotated
ones' old hashes until their grace ends)."""

from __future__ import annotations

import time
from typing import Any

import pytest

from gateway.admin import decisions as decide
from gateway.admin.change import Change
from gateway.admin.client_keys import hash_key
from gateway.admin.decisions import Actor
from gateway.admin.merge import merge
from gateway.admin.records import AdminSnapshot, RevokedKeys
from gateway.errors import AuthenticationFailed, Conflict, InvalidRequest, NotFound
from gateway.pipeline.policy_view import PolicyView
from gateway.settings.policy import Policy

ADMIN = Actor("alice", "10.0.0.1")
NOW = 1_800_000_000.0


def yaml_policy() -> Policy:
    return Policy.model_validate(
        {
            "models": {
                "small": {
                    "aliases": ["tiny"],
                    "deployments": [{"provider": "p", "upstream_model": "s"}],
                    "prices": {"input": 1, "output": 2},
                }
            },
            "routes": {"cheap": {"models": ["small"]}},
            "tenants": {"gitops": {"keys": [{"id": "ops-key", "hash": hash_key("sk-yaml")}]}},
        }
    )


def applied(snapshot: AdminSnapshot, change: Change) -> AdminSnapshot:
    """What a store's snapshot reads after `change` (its expectations assumed to hold)."""
    tables: dict[str, dict[str, str]] = {
        "tenants": dict(snapshot.tenant_json),
        "keys": dict(snapshot.key_json),
        "hashes": {},
        "revoked": {},
    }
    for table, name, value in change.write:
        tables[table][name] = value
    for table, name in change.delete:
        tables[table].pop(name, None)
    revoked = snapshot.revoked + len(tables["revoked"])
    return AdminSnapshot.decode(
        snapshot.version + 1, tables["tenants"], tables["keys"], revoked=revoked
    )


def revoked_by(change: Change) -> RevokedKeys:
    """The revoked records `change` writes (what the store's revoked table then holds)."""
    return RevokedKeys.decode(
        {name: value for table, name, value in change.write if table == "revoked"}
    )


NONE_REVOKED = RevokedKeys()


def with_tenant_and_key(key: str = "sk-runtime", **key_fields: Any) -> AdminSnapshot:
    policy = yaml_policy()
    change, _ = decide.create_tenant(
        AdminSnapshot(), policy, decide.NewTenant(id="team-a"), ADMIN, NOW
    )
    snapshot = applied(AdminSnapshot(), change)
    body = decide.NewKey(tenant="team-a", id="k1", **key_fields)
    change, _ = decide.issue_key(snapshot, policy, body, hash_key(key), ADMIN, NOW, key[-4:])
    return applied(snapshot, change)


def test_a_runtime_tenant_may_not_take_a_yaml_tenants_id() -> None:
    with pytest.raises(Conflict, match="YAML policy") as raised:
        decide.create_tenant(
            AdminSnapshot(), yaml_policy(), decide.NewTenant(id="gitops"), ADMIN, NOW
        )
    assert raised.value.param == "id" and raised.value.status == 409


def test_keys_of_yaml_tenants_and_yaml_key_ids_are_refused() -> None:
    snapshot = with_tenant_and_key()
    policy = yaml_policy()
    with pytest.raises(Conflict, match="read-only at runtime"):
        decide.issue_key(
            snapshot, policy, decide.NewKey(tenant="gitops", id="new"), "sha256:" + "0" * 64,
            ADMIN, NOW, "0000",
        )  # fmt: skip
    with pytest.raises(Conflict, match="YAML tenant 'gitops'"):
        decide.issue_key(
            snapshot, policy, decide.NewKey(tenant="team-a", id="ops-key"), "sha256:" + "1" * 64,
            ADMIN, NOW, "1111",
        )  # fmt: skip
    with pytest.raises(Conflict, match="YAML policy"):
        decide.revoke_key(snapshot, policy, "ops-key", ADMIN, NOW, revoked=NONE_REVOKED)


def test_unknown_tenant_is_a_404_and_a_reused_key_id_is_expected_absent() -> None:
    snapshot = with_tenant_and_key()
    with pytest.raises(NotFound, match="Unknown tenant 'nobody'"):
        decide.issue_key(
            snapshot, yaml_policy(), decide.NewKey(tenant="nobody", id="k9"), "sha256:" + "2" * 64,
            ADMIN, NOW, "2222",
        )  # fmt: skip
    change, _ = decide.issue_key(
        snapshot, yaml_policy(), decide.NewKey(tenant="team-a", id="k1"), "sha256:" + "3" * 64,
        ADMIN, NOW, "3333",
    )  # fmt: skip
    # the id check is the store's, atomic with the write: k1 must be absent, live or revoked
    expected = [(e.table, e.field, e.state) for e in change.expect]
    assert ("keys", "k1", "absent") in expected and ("revoked", "k1", "absent") in expected


def test_references_to_unknown_models_and_routes_are_400s_naming_the_field() -> None:
    snapshot = with_tenant_and_key()
    policy = yaml_policy()
    with pytest.raises(InvalidRequest) as raised:
        decide.update_key(
            snapshot, policy, "k1", decide.KeyPatch(models=["gpt-9"]), ADMIN, NOW,
            revoked=NONE_REVOKED,
        )  # fmt: skip
    assert raised.value.param == "models"
    patch = decide.TenantPatch.model_validate(
        {"budgets": [{"usd": 5, "downgrade_fraction": 0.5, "downgrade_route": "nowhere"}]}
    )
    with pytest.raises(InvalidRequest) as raised:
        decide.update_tenant(snapshot, policy, "team-a", patch, ADMIN, NOW)
    assert raised.value.param == "budgets.0.downgrade_route"
    # aliases and routes are names a key may be allowed
    decide.update_key(
        snapshot, policy, "k1", decide.KeyPatch(models=["tiny", "cheap"]), ADMIN, NOW,
        revoked=NONE_REVOKED,
    )  # fmt: skip


def test_malformed_bodies_name_the_field() -> None:
    with pytest.raises(InvalidRequest, match="not valid JSON"):
        decide.parse_body(b"{", decide.NewTenant)
    with pytest.raises(InvalidRequest, match="JSON object"):
        decide.parse_body(b"[1]", decide.NewTenant)
    with pytest.raises(InvalidRequest) as raised:
        decide.parse_body(b'{"id": "a b"}', decide.NewTenant)
    assert raised.value.param == "id"
    with pytest.raises(InvalidRequest) as raised:
        decide.parse_body(b'{"id": "ok", "limits": {"requests_per_minute": 0}}', decide.NewTenant)
    assert raised.value.param == "limits.requests_per_minute"
    with pytest.raises(InvalidRequest, match="unknown field"):
        decide.parse_body(b'{"tenant": "t", "id": "k", "hash": "x"}', decide.NewKey)


def test_the_merged_view_serves_runtime_keys_beside_yaml_ones() -> None:
    snapshot = with_tenant_and_key(models=["small"], limits={"requests_per_minute": 7})
    merged = merge(yaml_policy(), snapshot, NOW)
    view = PolicyView.build(merged.policy, merged.retiring)
    runtime = view.keys.authenticate("sk-runtime")
    assert (runtime.tenant_id, runtime.key_id, runtime.key.models) == ("team-a", "k1", ["small"])
    assert runtime.key.limits is not None and runtime.key.limits.requests_per_minute == 7
    assert view.keys.authenticate("sk-yaml").tenant_id == "gitops"


def test_a_rotated_key_works_until_its_grace_ends_and_a_revoked_one_never() -> None:
    policy = yaml_policy()
    snapshot = with_tenant_and_key("sk-old")
    now = time.time()
    change, _ = decide.rotate_key(
        snapshot, policy, "k1", decide.Rotation(grace_seconds=60), hash_key("sk-new"), ADMIN,
        now, "-new", revoked=NONE_REVOKED,
    )  # fmt: skip
    rotated = applied(snapshot, change)
    view = PolicyView.build(*_merged(policy, rotated, now))
    assert view.keys.authenticate("sk-new").key_id == "k1"
    assert view.keys.authenticate("sk-old").key_id == "k1"
    # the same record with its grace over: the old key is refused, the new one is not
    expired = rotated.keys["k1"].model_copy(update={"previous_valid_until": now - 1})
    later = AdminSnapshot(rotated.version, rotated.tenants, {"k1": expired})
    view = PolicyView.build(*_merged(policy, later, now))
    with pytest.raises(AuthenticationFailed):
        view.keys.authenticate("sk-old")
    change, _ = decide.revoke_key(rotated, policy, "k1", ADMIN, now, revoked=NONE_REVOKED)
    revoked = applied(rotated, change)
    view = PolicyView.build(*_merged(policy, revoked, now))
    for key in ("sk-old", "sk-new"):
        with pytest.raises(AuthenticationFailed):
            view.keys.authenticate(key)
    with pytest.raises(Conflict, match="revoked"):
        decide.rotate_key(
            revoked, policy, "k1", decide.Rotation(), hash_key("sk-3"), ADMIN, now, "sk-3",
            revoked=revoked_by(change),
        )  # fmt: skip


def test_a_revocation_moves_the_record_out_of_the_snapshot_every_process_holds() -> None:
    policy = yaml_policy()
    snapshot = with_tenant_and_key()
    change, record = decide.revoke_key(snapshot, policy, "k1", ADMIN, NOW, revoked=NONE_REVOKED)
    assert record.revoked_at == NOW
    assert ("keys", "k1") in change.delete and ("hashes", hash_key("sk-runtime")) in change.delete
    assert [(table, name) for table, name, _ in change.write] == [("revoked", "k1")]
    # compare-and-set on the live record it moves
    [expect] = change.expect
    assert (expect.table, expect.field, expect.value) == ("keys", "k1", snapshot.key_json["k1"])
    after = applied(snapshot, change)
    assert after.keys == {} and after.key_json == {} and after.revoked == 1


def test_a_key_change_on_a_revoked_id_is_a_409_when_its_record_is_read() -> None:
    policy = yaml_policy()
    snapshot = with_tenant_and_key()
    change, _ = decide.revoke_key(snapshot, policy, "k1", ADMIN, NOW, revoked=NONE_REVOKED)
    after, revoked = applied(snapshot, change), revoked_by(change)
    patch = decide.KeyPatch(models=None)
    with pytest.raises(Conflict, match="revoked") as raised:
        decide.update_key(after, policy, "k1", patch, ADMIN, NOW, revoked=revoked)
    assert raised.value.code == "key_revoked"
    with pytest.raises(Conflict, match="revoked"):
        decide.revoke_key(after, policy, "k1", ADMIN, NOW, revoked=revoked)
    with pytest.raises(NotFound):
        decide.update_key(after, policy, "nope", patch, ADMIN, NOW, revoked=revoked)


def test_deleting_a_tenant_expects_it_unchanged_and_no_key_naming_it() -> None:
    policy = yaml_policy()
    snapshot = with_tenant_and_key()
    with pytest.raises(Conflict, match=r"still has keys \(k1\)"):
        decide.delete_tenant(snapshot, policy, "team-a", ADMIN, NOW)
    change, _ = decide.revoke_key(snapshot, policy, "k1", ADMIN, NOW, revoked=NONE_REVOKED)
    after = applied(snapshot, change)
    delete = decide.delete_tenant(after, policy, "team-a", ADMIN, NOW)
    assert [(e.table, e.field, e.state, e.value) for e in delete.expect] == [
        ("tenants", "team-a", "equal", after.tenant_json["team-a"]),
        ("keys", "team-a", "unowned", ""),
    ]
    # what apply.lua looks for in a record: the compact JSON the records are stored as
    assert '"tenant":"team-a"' in snapshot.key_json["k1"]


def test_a_snapshot_leaves_out_revoked_records_found_among_the_live_ones() -> None:
    """A store written by a gateway from before the revoked table: revoked records in the
    keys hash are counted, not held."""
    policy = yaml_policy()
    snapshot = with_tenant_and_key()
    change, _ = decide.revoke_key(snapshot, policy, "k1", ADMIN, NOW, revoked=NONE_REVOKED)
    [(_, _, stored)] = change.write
    decoded = AdminSnapshot.decode(7, dict(snapshot.tenant_json), {"k1": stored}, revoked=2)
    assert decoded.keys == {} and decoded.key_json == {}
    assert (decoded.revoked, decoded.misplaced) == (3, 1)


def test_a_yaml_edit_that_collides_shadows_the_runtime_entry() -> None:
    snapshot = with_tenant_and_key()
    policy = Policy.model_validate(
        {
            **yaml_policy().model_dump(),
            "tenants": {
                "team-a": {"keys": [{"id": "other", "hash": hash_key("sk-other")}]},
            },
        }
    )
    merged = merge(policy, snapshot, NOW)
    assert "tenant team-a" in merged.shadowed
    view = PolicyView.build(merged.policy, merged.retiring)
    assert view.keys.authenticate("sk-other").tenant_id == "team-a"
    with pytest.raises(AuthenticationFailed):
        view.keys.authenticate("sk-runtime")


def _merged(policy: Policy, snapshot: AdminSnapshot, now: float) -> tuple[Any, Any]:
    merged = merge(policy, snapshot, now)
    return merged.policy, merged.retiring
