"""The contract both conversation stores keep (one contract test suite proves it)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from gateway.state.stored_response import StoredResponse


@dataclass(frozen=True, slots=True)
class RecordLimits:
    ttl_seconds: int
    # a record's encoded size; larger records are not stored (the caller says so)
    max_record_bytes: int


class ConversationStore(Protocol):
    """Records are per tenant: one tenant's load or delete never sees another's records,
    whatever the id. Redis failures raise StoreUnavailable."""

    limits: RecordLimits

    async def save(self, tenant: str, record: StoredResponse) -> bool:
        """Keep the record for `limits.ttl_seconds`; False when it is over the size cap."""
        ...

    async def load(self, tenant: str, response_id: str) -> StoredResponse | None: ...

    async def delete(self, tenant: str, response_id: str) -> bool:
        """True when a record was there to delete."""
        ...

    async def close(self) -> None: ...
