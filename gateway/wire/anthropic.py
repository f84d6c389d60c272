"""Anthropic Messages API wire types (`POST /v1/messages`).

Request types are exact: they encode to the body Anthropic accepts (checked in tests
against the official SDK's `MessageCreateParams`). Response and stream types are
lenient: one struct per shape with every field optional, so a block or event type we
do not translate (server tools, citations, new fields) decodes instead of failing.

Client request types (`ClientRequest` and what it holds) are what the gateway reads a
client's `/v1/messages` body as when it is the ingress: typed where the gateway acts on
a field, lenient everywhere else (any block `type`, unknown fields ignored), because the
same body may be forwarded to Anthropic unchanged and Anthropic, not us, is the judge of
what it accepts. The output types (`MessageOut`, `UsageOut`) are the exact body the
ingress answers with when the upstream was not Anthropic.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

import msgspec
from msgspec import UNSET, Meta, Struct, UnsetType

# -- request ------------------------------------------------------------------------


class CacheControl(Struct):
    """A prompt-cache breakpoint: the prefix up to this block is cached (`type` is
    always written: the struct does not omit defaults; an UNSET `ttl` is left out)."""

    type: Literal["ephemeral"] = "ephemeral"
    ttl: Literal["5m", "1h"] | UnsetType = UNSET


class Base64Source(Struct, tag="base64", tag_field="type"):
    media_type: str
    data: str


class URLSource(Struct, tag="url", tag_field="type"):
    url: str


class TextBlock(Struct, tag="text", tag_field="type", omit_defaults=True):
    text: str
    cache_control: CacheControl | UnsetType = UNSET


class ImageBlock(Struct, tag="image", tag_field="type", omit_defaults=True):
    source: Base64Source | URLSource
    cache_control: CacheControl | UnsetType = UNSET


class DocumentBlock(Struct, tag="document", tag_field="type", omit_defaults=True):
    source: Base64Source | URLSource
    cache_control: CacheControl | UnsetType = UNSET


class ToolUseBlock(Struct, tag="tool_use", tag_field="type", omit_defaults=True):
    id: str
    name: str
    input: dict[str, Any]
    cache_control: CacheControl | UnsetType = UNSET


class ToolResultBlock(Struct, tag="tool_result", tag_field="type", omit_defaults=True):
    tool_use_id: str
    content: str | list[TextBlock | ImageBlock] | UnsetType = UNSET
    is_error: bool | UnsetType = UNSET
    cache_control: CacheControl | UnsetType = UNSET


class ThinkingBlock(Struct, tag="thinking", tag_field="type"):
    """Extended thinking; the signature is Anthropic's and only Anthropic checks it
    (translated answers carry an empty one)."""

    thinking: str
    signature: str


class RedactedThinkingBlock(Struct, tag="redacted_thinking", tag_field="type"):
    data: str


ContentBlock = (
    TextBlock
    | ImageBlock
    | DocumentBlock
    | ToolUseBlock
    | ToolResultBlock
    | ThinkingBlock
    | RedactedThinkingBlock
)


class MessageParam(Struct):
    role: Literal["user", "assistant"]
    content: list[ContentBlock]


class ToolDefinition(Struct, omit_defaults=True):
    name: str
    input_schema: dict[str, Any]
    description: str | UnsetType = UNSET
    cache_control: CacheControl | UnsetType = UNSET


class ToolChoiceAuto(Struct, tag="auto", tag_field="type", omit_defaults=True):
    disable_parallel_tool_use: bool | UnsetType = UNSET


class ToolChoiceAny(Struct, tag="any", tag_field="type", omit_defaults=True):
    disable_parallel_tool_use: bool | UnsetType = UNSET


class ToolChoiceTool(Struct, tag="tool", tag_field="type", omit_defaults=True):
    name: str
    disable_parallel_tool_use: bool | UnsetType = UNSET


class ToolChoiceNone(Struct, tag="none", tag_field="type"):
    pass


ToolChoice = ToolChoiceAuto | ToolChoiceAny | ToolChoiceTool | ToolChoiceNone


class Metadata(Struct):
    user_id: str


class ThinkingEnabled(Struct, tag="enabled", tag_field="type"):
    budget_tokens: int


class MessagesRequest(Struct, omit_defaults=True):
    model: str
    max_tokens: int
    messages: list[MessageParam]
    system: list[TextBlock] | UnsetType = UNSET
    stop_sequences: list[str] | UnsetType = UNSET
    temperature: float | UnsetType = UNSET
    top_p: float | UnsetType = UNSET
    tools: list[ToolDefinition] | UnsetType = UNSET
    tool_choice: ToolChoice | UnsetType = UNSET
    metadata: Metadata | UnsetType = UNSET
    thinking: ThinkingEnabled | UnsetType = UNSET
    stream: bool | UnsetType = UNSET


# -- client requests (the ingress) ---------------------------------------------------


class ClientBlock(Struct):
    """A content block of a type the gateway translates (text, image, document,
    tool_use, tool_result, thinking, redacted_thinking); `type` says which fields mean
    something. Blocks are kept as plain objects in `ClientMessage` (any `type`, for the
    passthrough) and read as this struct only when they are translated."""

    type: str
    text: str | None = None
    source: dict[str, Any] | None = None
    id: str | None = None
    name: str | None = None
    input: dict[str, Any] | None = None
    tool_use_id: str | None = None
    content: str | list[ClientBlock] | None = None
    is_error: bool | None = None
    thinking: str | None = None
    signature: str | None = None
    data: str | None = None
    title: str | None = None
    context: str | None = None


class AnyBlock(Struct):
    """What every block has: its type (the rest is the block's own business)."""

    type: str


class ClientMessage(Struct):
    # "system": a system turn mid-conversation (Anthropic's mid-conversation-system beta)
    role: Literal["user", "assistant", "system"]
    content: str | list[dict[str, Any]]


class ClientTool(Struct):
    """A client tool (`type` absent or "custom"), or a server tool (`web_search_...`,
    `bash_...`): only the former has an input schema."""

    name: str
    type: str | None = None
    description: str | None = None
    input_schema: dict[str, Any] | None = None
    cache_control: dict[str, Any] | None = None


class ClientToolChoice(Struct):
    type: Literal["auto", "any", "tool", "none"]
    name: str | None = None
    disable_parallel_tool_use: bool | None = None


class ClientThinking(Struct):
    type: str
    budget_tokens: Annotated[int, Meta(ge=0)] | None = None


class ClientOutputConfig(Struct):
    """`output_config`: the effort to spend (`low` .. `max`) and a structured-output
    format (`{"type": "json_schema", "schema": ...}`)."""

    effort: str | None = None
    format: dict[str, Any] | None = None


class ClientMetadata(Struct):
    user_id: str | None = None


class ClientRequest(Struct):
    model: str
    max_tokens: Annotated[int, Meta(ge=1)]
    messages: list[ClientMessage]
    system: str | list[dict[str, Any]] | None = None
    stop_sequences: list[str] | None = None
    temperature: Annotated[float, Meta(ge=0, le=1)] | None = None
    top_p: Annotated[float, Meta(ge=0, le=1)] | None = None
    top_k: Annotated[int, Meta(ge=0)] | None = None
    tools: list[ClientTool] | None = None
    tool_choice: ClientToolChoice | None = None
    metadata: ClientMetadata | None = None
    thinking: ClientThinking | None = None
    output_config: ClientOutputConfig | None = None
    stream: bool = False


class CountTokensRequest(Struct):
    """`POST /v1/messages/count_tokens`: a Messages request without `max_tokens`."""

    model: str
    messages: list[ClientMessage]
    system: str | list[dict[str, Any]] | None = None
    tools: list[ClientTool] | None = None
    tool_choice: ClientToolChoice | None = None
    thinking: ClientThinking | None = None


# -- the ingress's own answers -------------------------------------------------------


class UsageOut(Struct):
    """Anthropic's counting: `input_tokens` excludes cache reads and writes."""

    input_tokens: int
    output_tokens: int
    cache_creation_input_tokens: int | None = None
    cache_read_input_tokens: int | None = None


class MessageOut(Struct):
    id: str
    model: str
    content: list[ContentBlock]
    stop_reason: str | None
    usage: UsageOut
    stop_sequence: str | None = None
    type: Literal["message"] = "message"
    role: Literal["assistant"] = "assistant"


class ErrorOut(Struct):
    type: str
    message: str


class ErrorResponseOut(Struct):
    error: ErrorOut
    type: Literal["error"] = "error"


# -- response -----------------------------------------------------------------------


class OutputTokensDetails(Struct):
    thinking_tokens: int = 0


class CacheCreation(Struct):
    """The split of `cache_creation_input_tokens` by cache lifetime (priced apart)."""

    ephemeral_5m_input_tokens: int = 0
    ephemeral_1h_input_tokens: int = 0


class ResponseUsage(Struct):
    """`usage` of a Message, and of `message_delta` (where every count is cumulative)."""

    input_tokens: int | None = None
    output_tokens: int | None = None
    cache_read_input_tokens: int | None = None
    cache_creation_input_tokens: int | None = None
    cache_creation: CacheCreation | None = None
    output_tokens_details: OutputTokensDetails | None = None


class ResponseBlock(Struct):
    """Any content block of a response; `type` says which fields are set."""

    type: str
    text: str | None = None
    thinking: str | None = None
    signature: str | None = None
    data: str | None = None
    id: str | None = None
    name: str | None = None
    input: Any = None


class Message(Struct):
    id: str = ""
    content: list[ResponseBlock] = msgspec.field(default_factory=list)
    model: str = ""
    stop_reason: str | None = None
    stop_sequence: str | None = None
    usage: ResponseUsage | None = None


class ErrorObject(Struct):
    type: str = "api_error"
    message: str = ""


class ErrorResponse(Struct):
    error: ErrorObject = msgspec.field(default_factory=ErrorObject)


class EventDelta(Struct):
    """The `delta` of content_block_delta (text, tool JSON, thinking) and of
    message_delta (stop reason)."""

    type: str | None = None
    text: str | None = None
    partial_json: str | None = None
    thinking: str | None = None
    signature: str | None = None
    stop_reason: str | None = None
    stop_sequence: str | None = None


class StreamEvent(Struct):
    """One `data:` payload of the stream, whatever its `type`."""

    type: str
    message: Message | None = None
    index: int | None = None
    content_block: ResponseBlock | None = None
    delta: EventDelta | None = None
    usage: ResponseUsage | None = None
    error: ErrorObject | None = None


message_decoder = msgspec.json.Decoder(Message)
event_decoder = msgspec.json.Decoder(StreamEvent)
error_decoder = msgspec.json.Decoder(ErrorResponse)
encoder = msgspec.json.Encoder()
