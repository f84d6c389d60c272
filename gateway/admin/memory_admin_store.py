"""The admin store of a single process (store.kind memory): same contract as Redis."""

from __future__ import annotations

import json
import time
from collections import deque
from collections.abc import Sequence

from gateway.admin.admin_store import AUDIT_ENTRIES
from gateway.admin.change import TABLES, Applied, AuditEntry, Change, Table
from gateway.admin.records import AdminSnapshot


class MemoryAdminStore:
    def __init__(self, audit_entries: int = AUDIT_ENTRIES) -> None:
        self._version = 0
        self._tables: dict[Table, dict[str, str]] = {table: {} for table in TABLES}
        self._audit: deque[AuditEntry] = deque(maxlen=audit_entries)
        # token hash -> monotonic expiry
        self._sessions: dict[str, float] = {}

    async def version(self) -> int:
        return self._version

    async def snapshot(self, previous: AdminSnapshot | None = None) -> AdminSnapshot:
        tables = self._tables
        return AdminSnapshot.decode(
            self._version, tables["tenants"], tables["keys"], previous, len(tables["revoked"])
        )

    async def revoked(self, ids: Sequence[str] | None = None) -> dict[str, str]:
        stored = self._tables["revoked"]
        if ids is None:
            return dict(stored)
        return {i: stored[i] for i in ids if i in stored}

    async def apply(self, change: Change) -> Applied:
        for expect in change.expect:
            if expect.state == "unowned":
                if any(
                    json.loads(record).get("tenant") == expect.field
                    for record in self._tables[expect.table].values()
                ):
                    return Applied(failed=expect)
                continue
            current = self._tables[expect.table].get(expect.field)
            if (
                (expect.state == "absent" and current is not None)
                or (expect.state == "present" and current is None)
                or (expect.state == "equal" and current != expect.value)
            ):
                return Applied(failed=expect)
        for table, name, value in change.write:
            self._tables[table][name] = value
        for table, name in change.delete:
            self._tables[table].pop(name, None)
        self._version += 1
        entry_id = f"{int(time.time() * 1000)}-{self._version}"
        self._audit.append(AuditEntry(entry_id, {**change.audit, "version": str(self._version)}))
        return Applied(version=self._version)

    async def audit(self, limit: int) -> list[AuditEntry]:
        return list(reversed(self._audit))[:limit]

    async def open_session(self, token_hash: str, ttl_seconds: int) -> None:
        now = time.monotonic()
        # sessions expire; drop the dead ones so the table stays as small as the live set
        self._sessions = {h: t for h, t in self._sessions.items() if t > now}
        self._sessions[token_hash] = now + ttl_seconds

    async def session_alive(self, token_hash: str) -> bool:
        expires = self._sessions.get(token_hash)
        return expires is not None and expires > time.monotonic()

    async def end_session(self, token_hash: str) -> None:
        self._sessions.pop(token_hash, None)
