"""What the admin API stores: runtime tenants and keys, and one snapshot of them all.

A record is the settings a YAML tenant or key has (the same pydantic pieces, so limits and
budgets validate the same way) plus who made it and when. A key record holds the key's
SHA-256 hash, never the key; after a rotation it also holds the previous hash and the
moment that hash stops working.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Annotated

from pydantic import Field, StringConstraints

from gateway.settings.base import Strict
from gateway.settings.catalog import RateLimitSettings
from gateway.settings.tenants import BudgetSettings, KeySettings, TenantSettings

# tenant and key ids become Redis key parts, ledger fields and metric labels: keep them plain
RecordId = Annotated[
    str, StringConstraints(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.\-]{0,63}$", strict=True)
]


class TenantRecord(Strict):
    id: RecordId
    limits: RateLimitSettings | None = None
    model_limits: dict[str, RateLimitSettings] = Field(default_factory=dict)
    budgets: list[BudgetSettings] = Field(default_factory=list)
    allow_overrides: bool = False
    created_at: float
    created_by: str

    def settings(self, keys: list[KeySettings]) -> TenantSettings:
        # built from a record validated when it was decided and decoded: no second
        # validation, which every process pays on every change, for every tenant and key
        return TenantSettings.model_construct(
            keys=keys,
            limits=self.limits,
            model_limits=self.model_limits,
            budgets=self.budgets,
            allow_overrides=self.allow_overrides,
        )


class KeyRecord(Strict):
    id: RecordId
    tenant: RecordId
    hash: Annotated[str, StringConstraints(pattern=r"^sha256:[0-9a-f]{64}$")]
    # the key's last four characters, so a person can tell two keys apart in a list
    hint: str
    models: list[str] | None = None
    limits: RateLimitSettings | None = None
    budgets: list[BudgetSettings] = Field(default_factory=list)
    created_at: float
    created_by: str
    # set by a rotation: the old key works until previous_valid_until (unix seconds)
    previous_hash: str | None = None
    previous_valid_until: float | None = None
    revoked_at: float | None = None

    def settings(self) -> KeySettings:
        return KeySettings.model_construct(
            id=self.id,
            hash=self.hash,
            models=self.models,
            limits=self.limits,
            budgets=self.budgets,
        )

    def status(self, now: float) -> str:
        if self.revoked_at is not None:
            return "revoked"
        if self.previous_valid_until is not None and now < self.previous_valid_until:
            return "rotating"
        return "active"


@dataclass(frozen=True, slots=True)
class AdminSnapshot:
    """Every runtime tenant and live key at one version of the store: each process holds
    one. Revoked keys are only counted; their records stay in the store, read on demand by
    the admin API (`RevokedKeys`), so a process's copy grows with the live keys, not with
    every key ever issued."""

    version: int = 0
    tenants: dict[str, TenantRecord] = field(default_factory=dict)
    keys: dict[str, KeyRecord] = field(default_factory=dict)
    # the stored JSON of each record, what a compare-and-set change expects to find
    tenant_json: dict[str, str] = field(default_factory=dict)
    key_json: dict[str, str] = field(default_factory=dict)
    # how many keys are revoked (a metric)
    revoked: int = 0
    # revoked records found among the live ones (written there by a gateway from before
    # the revoked table), dropped from this copy; counted in `revoked`
    misplaced: int = 0

    @classmethod
    def decode(
        cls,
        version: int,
        tenants: dict[str, str],
        keys: dict[str, str],
        previous: AdminSnapshot | None = None,
        revoked: int = 0,
    ) -> AdminSnapshot:
        """The records of the stored JSON; a record whose JSON is the same as in
        `previous` is reused, not decoded again (a change touches one or two). A revoked
        record among `keys` is dropped (and counted as misplaced)."""
        before = previous or cls()
        live: dict[str, KeyRecord] = {}
        live_json: dict[str, str] = {}
        for i, raw in keys.items():
            record = (
                before.keys[i]
                if before.key_json.get(i) == raw
                else KeyRecord.model_validate_json(raw)
            )
            if record.revoked_at is None:
                live[i] = record
                live_json[i] = raw
        misplaced = len(keys) - len(live)
        return cls(
            version,
            {
                i: before.tenants[i]
                if before.tenant_json.get(i) == raw
                else TenantRecord.model_validate_json(raw)
                for i, raw in tenants.items()
            },
            live,
            dict(tenants),
            live_json,
            revoked + misplaced,
            misplaced,
        )


@dataclass(frozen=True, slots=True)
class RevokedKeys:
    """Revoked key records read from the store for one admin answer or decision (never
    held by a process: the admin API reads the ones it needs)."""

    records: dict[str, KeyRecord] = field(default_factory=dict)
    # the stored JSON of each record, what a compare-and-set change expects to find
    stored_json: dict[str, str] = field(default_factory=dict)

    @classmethod
    def decode(cls, stored: dict[str, str]) -> RevokedKeys:
        return cls(
            {i: KeyRecord.model_validate_json(raw) for i, raw in stored.items()}, dict(stored)
        )
