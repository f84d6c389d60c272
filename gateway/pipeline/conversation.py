"""Conversation stage (Responses API), between decode and plan: a request continuing a
stored response (`previous_response_id`) gets that conversation inlined, in the internal
request (so routing, limits and budgets count every token the upstream will bill) and in
the client's own body (so a same-API upstream gets the whole conversation too); a
request with `store` (the default) has its answer kept before the last bytes go out.

Rules (see gateway/state/conversations.py): another tenant's id is a 404; a store that
is down fails a continuation with a 503 and only skips saving a new response
(`x-gateway-store` says so on a non-streamed answer, whose headers are not sent yet).
"""

from __future__ import annotations

import logging
from typing import Any

from gateway.ingress.openai_chat import convert
from gateway.ingress.openai_responses import ResponsesBody, final_response, input_items, to_chat
from gateway.pipeline.flow import Flow
from gateway.state import STORE_HEADER, Conversations
from gateway.state.stored_response import item_list
from gateway.wire.apis import OPENAI_RESPONSES
from gateway.wire.responses import ResponsesRequest

log = logging.getLogger("gateway.conversation")

__all__ = ["ConversationStage", "item_list"]


class ConversationStage:
    def __init__(self, conversations: Conversations) -> None:
        self.conversations = conversations

    async def resume(self, flow: Flow) -> None:
        if flow.api != OPENAI_RESPONSES:
            return
        assert flow.native is not None and flow.caller is not None
        native = flow.native
        # the typed request decode made with the client's body (ResponsesBody), else anew
        request: ResponsesRequest = (
            native.request if type(native) is ResponsesBody else convert(native, ResponsesRequest)
        )
        if not request.previous_response_id and not request.store:
            return  # nothing to load and nothing to keep (`store` defaults to true)
        tenant = flow.caller.tenant_id
        items = input_items(request.input)
        if request.previous_response_id:
            history = await self.conversations.history(tenant, request.previous_response_id)
            flow.request, flow.raw = to_chat(request, history + items, history=len(history))
            items = history + items
            flow.native = {**flow.native, "input": items}
        if request.store:
            conversation = items

            async def keep(answer: bytes) -> None:
                await self._keep(flow, tenant, conversation, answer)

            flow.on_answer = keep

    async def _keep(
        self, flow: Flow, tenant: str, items: list[dict[str, Any]], answer: bytes
    ) -> None:
        try:
            response = final_response(answer)
            if response is None or response.get("status") == "failed":
                return
            flow.headers[STORE_HEADER] = await self.conversations.keep(tenant, response, items)
        except Exception:
            # the answer goes out whatever happens to its record
            log.exception("storing response of request %s failed", flow.request_id)
            flow.headers[STORE_HEADER] = "skipped; store error"
