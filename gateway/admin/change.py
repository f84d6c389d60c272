"""One admin change as data: what must hold, what to write, and the audit entry, applied
by a store all at once or not at all.

admin/decisions.py decides a change (pure, from a snapshot); a store only checks the
expectations and writes. A failed expectation names itself, so the caller can answer
409 or 404 for the right reason, and nothing was written.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

# the store's four hashes: tenant id -> record, live key id -> record, key hash -> key id,
# revoked key id -> record. A revocation moves the record from keys to revoked, so what
# every process reads and holds grows with the live keys, not with every key ever issued
Table = Literal["tenants", "keys", "hashes", "revoked"]
TABLES: tuple[Table, ...] = ("tenants", "keys", "hashes", "revoked")


@dataclass(frozen=True, slots=True)
class Expect:
    """`state` absent / present, or equal: the field holds exactly `value` (a
    compare-and-set on a record read earlier), or unowned: no record of `table` names
    `field` as its tenant (a tenant's deletion against a key issued for it meanwhile,
    which no compare-and-set on the records read earlier can see). `refusal` is why the
    change cannot go on."""

    table: Table
    field: str
    state: Literal["absent", "present", "equal", "unowned"]
    refusal: str
    value: str = ""
    # 404 for a record that is gone, 409 for one that exists or changed
    status: int = 409
    code: str = "conflict"


@dataclass(frozen=True, slots=True)
class Change:
    action: str
    target: str
    expect: tuple[Expect, ...] = ()
    # (table, field, value) set, and (table, field) deleted
    write: tuple[tuple[Table, str, str], ...] = ()
    delete: tuple[tuple[Table, str], ...] = ()
    # who, what, when: the audit entry's fields (the store adds the version)
    audit: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Applied:
    """`failed`: the expectation that did not hold (nothing written); else `version`, the
    store's version after the change."""

    version: int = 0
    failed: Expect | None = None


@dataclass(frozen=True, slots=True)
class AuditEntry:
    id: str
    fields: dict[str, str]
