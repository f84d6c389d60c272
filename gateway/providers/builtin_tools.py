"""Provider built-in tools a client asked for (OpenAI Responses `web_search`, ...),
as each upstream API can serve them.

A built-in tool runs on the provider's side, so it cannot be translated into a
function: it maps to the upstream's own built-in tool where one exists (web search:
Anthropic's `web_search` server tool, Gemini's Google Search grounding) and is
otherwise dropped, or refused with a 400 naming it when the provider's settings say
`builtin_tools: refuse`. Either way the answer says so in x-gateway-route
(`changed=mapped-tool:web_search->...` or `dropped-tool:...`).
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass, field

from gateway.errors import InvalidRequest
from gateway.providers.base import Call, Target

# the Responses API's names for the web search tool (its dated and preview variants)
WEB_SEARCH = frozenset(
    {"web_search", "web_search_preview", "web_search_2025_08_26", "web_search_preview_2025_03_11"}
)


@dataclass(slots=True)
class BuiltinPlan:
    """Which built-in tools one upstream call serves, and what it says about the rest."""

    web_search: bool = False
    changes: list[str] = field(default_factory=list)


def plan_builtin_tools(
    call: Call, target: Target, served_as: Collection[str] = ()
) -> BuiltinPlan | None:
    """`served_as`: what this upstream calls a web search (empty: it has none here).
    None when the client asked for no built-in tool (nearly every request)."""
    if not call.builtin_tools:
        return None
    plan = BuiltinPlan()
    for name in call.builtin_tools:
        if name in WEB_SEARCH and served_as:
            plan.web_search = True
            plan.changes.append(f"mapped-tool:{name}->{'+'.join(served_as)}")
            continue
        if target.settings.builtin_tools == "refuse":
            raise InvalidRequest(
                f"The built-in tool '{name}' has no equivalent on '{target.provider}', and "
                "its provider settings say `builtin_tools: refuse`. Remove the tool or ask "
                "for a model whose provider runs it.",
                param="tools",
                code="unsupported_tool",
            )
        plan.changes.append(f"dropped-tool:{name}")
    return plan
