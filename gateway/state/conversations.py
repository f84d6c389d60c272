"""What the Responses endpoints ask of the store, with the API's rules on top: a
continuation of an unknown (or another tenant's) response is a 404; a store that is down
fails a continuation with a 503 but only skips the saving of a new response (the answer
still goes out, and `x-gateway-store` says it was not kept)."""

from __future__ import annotations

import logging
from typing import Any

from gateway.errors import NotFound, StoreUnavailable
from gateway.state.conversation_store import ConversationStore
from gateway.state.stored_response import StoredResponse, continuation_items

log = logging.getLogger("gateway.state")

STORE_HEADER = "x-gateway-store"


def not_found(response_id: str, param: str | None = None) -> NotFound:
    return NotFound(
        f"No response with id '{response_id}' is stored for your tenant (it may have "
        "expired, been deleted, or been created with store: false).",
        param=param,
        code="response_not_found",
    )


class Conversations:
    def __init__(self, store: ConversationStore) -> None:
        self.store = store

    async def record(self, tenant: str, response_id: str) -> StoredResponse:
        found = await self.store.load(tenant, response_id)
        if found is None:
            raise not_found(response_id)
        return found

    async def history(self, tenant: str, previous_response_id: str) -> list[dict[str, Any]]:
        """The input items a continuation starts from (404 / 503 as the module says)."""
        found = await self.store.load(tenant, previous_response_id)
        if found is None:
            raise not_found(previous_response_id, "previous_response_id")
        return continuation_items(found)

    async def keep(
        self,
        tenant: str,
        response: dict[str, Any],
        input_items: list[dict[str, Any]],
    ) -> str:
        """Store a finished response; the value for the `x-gateway-store` header."""
        record = StoredResponse(
            id=str(response["id"]),
            created_at=int(response.get("created_at") or 0),
            response=response,
            input_items=input_items,
        )
        try:
            saved = await self.store.save(tenant, record)
        except StoreUnavailable as exc:
            log.warning("response %s not stored: %s", record.id, exc.message)
            return "skipped; store unavailable"
        return "stored" if saved else "skipped; over max_record_bytes"

    async def delete(self, tenant: str, response_id: str) -> None:
        if not await self.store.delete(tenant, response_id):
            raise not_found(response_id)
