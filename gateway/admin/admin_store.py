"""The contract every admin store keeps (Redis for a fleet, memory for one process)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from gateway.admin.change import Applied, AuditEntry, Change
from gateway.admin.records import AdminSnapshot

# the audit stream keeps this many entries (older ones are trimmed)
AUDIT_ENTRIES = 10_000


class AdminStore(Protocol):
    async def version(self) -> int:
        """The store's version: it grows with every change (0: nothing ever written)."""
        ...

    async def snapshot(self, previous: AdminSnapshot | None = None) -> AdminSnapshot:
        """Every tenant and live key and the version they are at, read at one instant
        (records the same as in `previous` are reused); revoked keys only counted."""
        ...

    async def revoked(self, ids: Sequence[str] | None = None) -> dict[str, str]:
        """The stored JSON of revoked keys: those of `ids` that are revoked, or every one
        (None). For the admin API only: no process holds them."""
        ...

    async def apply(self, change: Change) -> Applied:
        """Check every expectation, then write everything and the audit entry, atomically."""
        ...

    async def audit(self, limit: int) -> list[AuditEntry]:
        """The newest `limit` audit entries, newest first."""
        ...

    async def open_session(self, token_hash: str, ttl_seconds: int) -> None: ...

    async def session_alive(self, token_hash: str) -> bool: ...

    async def end_session(self, token_hash: str) -> None: ...
