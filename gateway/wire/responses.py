"""OpenAI Responses API wire types (`POST /v1/responses`).

The request is typed where the gateway reads it (routing, limits, translation) and loose
where it forwards (input items and tools stay JSON objects: the codec converts them one
by one so a wrong item gets a 400 naming `input[3].call_id`, and a same-API passthrough
sends them on untouched). The response and stream events are built as plain JSON
objects by the codec; their shapes are what the official SDK's types parse.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from msgspec import UNSET, Meta, Struct, UnsetType

PositiveInt = Annotated[int, Meta(ge=1)]
Temperature = Annotated[float, Meta(ge=0, le=2)]
Probability = Annotated[float, Meta(ge=0, le=1)]

# Tools OpenAI runs on its side: an upstream that is not OpenAI's Responses API cannot.
BUILTIN_TOOLS = frozenset(
    {
        "web_search",
        "web_search_preview",
        "web_search_2025_08_26",
        "web_search_preview_2025_03_11",
        "file_search",
        "computer",
        "computer_use",
        "computer_use_preview",
        "code_interpreter",
        "image_generation",
        "mcp",
        "local_shell",
        "shell",
        "apply_patch",
        "tool_search",
        "custom",
    }
)


class TextFormat(Struct, omit_defaults=True):
    type: Literal["text", "json_object", "json_schema"]
    name: str | UnsetType = UNSET
    schema: dict[str, Any] | UnsetType = UNSET
    description: str | UnsetType = UNSET
    strict: bool | UnsetType | None = UNSET


class TextConfig(Struct, omit_defaults=True):
    format: TextFormat | UnsetType = UNSET
    verbosity: str | UnsetType | None = UNSET


class ReasoningConfig(Struct, omit_defaults=True):
    effort: Literal["none", "minimal", "low", "medium", "high", "xhigh"] | UnsetType | None = UNSET
    summary: str | UnsetType | None = UNSET
    generate_summary: str | UnsetType | None = UNSET


class ResponsesRequest(Struct, omit_defaults=True):
    model: str
    input: str | list[dict[str, Any]] = []
    instructions: str | None = None
    tools: list[dict[str, Any]] | None = None
    tool_choice: str | dict[str, Any] | None = None
    parallel_tool_calls: bool | None = None
    text: TextConfig | None = None
    reasoning: ReasoningConfig | None = None
    max_output_tokens: PositiveInt | None = None
    metadata: dict[str, str] | None = None
    store: bool = True
    previous_response_id: str | None = None
    stream: bool = False
    temperature: Temperature | None = None
    top_p: Probability | None = None
    user: str | None = None
    truncation: Literal["auto", "disabled"] | None = None
    top_logprobs: int | None = None
