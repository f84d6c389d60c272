"""Anthropic Messages API wire types (`POST /v1/messages`).

Request types are exact: they encode to the body Anthropic accepts (checked in tests
against the official SDK's `MessageCreateParams`). Response and stream types are
lenient: one struct per shape with every field optional, so a block or event type we
do not translate (server tools, citations, new fields) decodes instead of failing.
"""

from __future__ import annotations

from typing import Any, Literal

import msgspec
from msgspec import UNSET, Struct, UnsetType

# -- request ------------------------------------------------------------------------


class Base64Source(Struct, tag="base64", tag_field="type"):
    media_type: str
    data: str


class URLSource(Struct, tag="url", tag_field="type"):
    url: str


class TextBlock(Struct, tag="text", tag_field="type"):
    text: str


class ImageBlock(Struct, tag="image", tag_field="type"):
    source: Base64Source | URLSource


class DocumentBlock(Struct, tag="document", tag_field="type"):
    source: Base64Source | URLSource


class ToolUseBlock(Struct, tag="tool_use", tag_field="type"):
    id: str
    name: str
    input: dict[str, Any]


class ToolResultBlock(Struct, tag="tool_result", tag_field="type", omit_defaults=True):
    tool_use_id: str
    content: str | list[TextBlock | ImageBlock] | UnsetType = UNSET
    is_error: bool | UnsetType = UNSET


ContentBlock = TextBlock | ImageBlock | DocumentBlock | ToolUseBlock | ToolResultBlock


class MessageParam(Struct):
    role: Literal["user", "assistant"]
    content: list[ContentBlock]


class ToolDefinition(Struct, omit_defaults=True):
    name: str
    input_schema: dict[str, Any]
    description: str | UnsetType = UNSET


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
    stream: bool | UnsetType = UNSET


# -- response -----------------------------------------------------------------------


class OutputTokensDetails(Struct):
    thinking_tokens: int = 0


class ResponseUsage(Struct):
    """`usage` of a Message, and of `message_delta` (where every count is cumulative)."""

    input_tokens: int | None = None
    output_tokens: int | None = None
    cache_read_input_tokens: int | None = None
    cache_creation_input_tokens: int | None = None
    output_tokens_details: OutputTokensDetails | None = None


class ResponseBlock(Struct):
    """Any content block of a response; `type` says which fields are set."""

    type: str
    text: str | None = None
    thinking: str | None = None
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
