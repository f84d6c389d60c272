"""How many tokens the prompt holds, counted only where the count can change a decision.

BPE costs ~60 ns a character (tiktoken, cl100k), about a tenth of a small request's CPU,
and most requests need no count at all: a concrete model with a prompt that fits its
context window whatever it holds, served to a key that reserves no tokens and no money.
So the pipeline asks twice:

- before planning: routes rank by expected cost, rules may test the prompt's size, and a
  budget downgrade can turn a request into a route; a concrete model needs the count only
  when the cheap upper bound (a token is at least one byte of UTF-8) might not fit the
  smallest context window in the catalog. Otherwise the planner works with the bound:
  every model's window holds it, and a concrete model's expected cost ranks nothing.
- before admission (`pipeline/admit`): where a tokens-per-minute bucket takes the
  prompt's tokens or a budget reserves its worst-case cost, the prompt is counted then,
  exactly as planning would have counted it; unless the key's limits are far off, where
  the bound reserves instead (and a bound refused is counted and decided again).

What is left uncounted stays `None` on the flow; the price of a request whose provider
reported no usage counts it then (`pipeline/pricing`).
"""

from __future__ import annotations

from collections.abc import Mapping

from gateway.pipeline.flow import Flow
from gateway.pipeline.policy_view import PolicyView
from gateway.routing.features import ROUTE_HEADER
from gateway.tokens import PromptCounter, pieces_upper_bound, prompt_pieces
from gateway.wire.openai import ChatRequest


def planning_needs_count(
    view: PolicyView, request: ChatRequest, headers: Mapping[str, str], bound: int
) -> bool:
    """Whether the plan for this request could differ with the exact count."""
    if view.sized_planning or request.model in view.policy.routes or ROUTE_HEADER in headers:
        return True
    window = view.smallest_context_window
    return window is None or bound + (request.output_limit or 0) > window


async def before_planning(counter: PromptCounter, flow: Flow, headers: Mapping[str, str]) -> None:
    assert flow.request is not None
    view = flow.view
    pieces = prompt_pieces(flow.request)
    bound = pieces_upper_bound(pieces)
    if planning_needs_count(view, flow.request, headers, bound):
        flow.prompt_tokens_estimate = await counter.count(
            flow.request, stop_after=view.counting_limit, pieces=pieces, bound=bound
        )
    else:
        flow.prompt_tokens_bound = bound
        flow.prompt_pieces = pieces
