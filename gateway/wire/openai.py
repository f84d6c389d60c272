"""OpenAI Chat Completions wire types.

The request types are what the gateway validates a client's body against: only what
routing, limits, metering and the translations read, strict enough that a wrong type
there gets a 400 naming the `param`, and permissive about everything else. Fields we do
not know (SGLang/vLLM extras such as `top_k`, `min_p`, `regex`, new OpenAI fields) are
not an error; the raw body keeps them for pass-through, and the provider judges them.
Every shape the OpenAI API accepts is accepted: `"stream": null`, tools, tool choices and
assistant tool calls of type `custom`, `allowed_tools` choices, a token cap of 0, and
whole-number floats where an integer goes (`"n": 18.0`; bodies are converted with
`msgspec.convert(..., strict=False)`, see `gateway/ingress/openai_chat.py`). The response
types are what translations from other providers build.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

import msgspec
from msgspec import UNSET, Meta, Struct, UnsetType

# -- request ------------------------------------------------------------------------


class ImageURL(Struct, omit_defaults=True):
    url: str
    detail: str | UnsetType = UNSET


class TextPart(Struct, tag="text", tag_field="type", omit_defaults=True):
    text: str


class ImagePart(Struct, tag="image_url", tag_field="type", omit_defaults=True):
    image_url: ImageURL


class InputAudio(Struct):
    data: str
    format: str


class AudioPart(Struct, tag="input_audio", tag_field="type", omit_defaults=True):
    input_audio: InputAudio


class FilePart(Struct, tag="file", tag_field="type", omit_defaults=True):
    file: dict[str, Any]


class RefusalPart(Struct, tag="refusal", tag_field="type", omit_defaults=True):
    refusal: str


ContentPart = TextPart | ImagePart | AudioPart | FilePart | RefusalPart


class FunctionCall(Struct, omit_defaults=True):
    name: str
    arguments: str


class ToolCall(Struct, tag="function", tag_field="type"):
    id: str
    function: FunctionCall


class CustomCall(Struct, omit_defaults=True):
    name: str
    input: str


class CustomToolCall(Struct, tag="custom", tag_field="type"):
    """A call of a `custom` (free-form input) tool, replayed in an assistant turn."""

    id: str
    custom: CustomCall


AnyToolCall = ToolCall | CustomToolCall


Role = Literal["system", "developer", "user", "assistant", "tool", "function"]


class Message(Struct, omit_defaults=True):
    role: Role
    content: str | list[ContentPart] | None = None
    name: str | UnsetType = UNSET
    tool_calls: list[AnyToolCall] | UnsetType = UNSET
    tool_call_id: str | UnsetType = UNSET
    # DeepSeek returns it; clients replay it in multi-turn conversations
    reasoning_content: str | UnsetType | None = UNSET

    def text(self) -> str:
        """The message's text parts joined, for token counting and rules."""
        if self.content is None:
            return ""
        if isinstance(self.content, str):
            return self.content
        return "".join(p.text for p in self.content if isinstance(p, TextPart))


class FunctionDefinition(Struct, omit_defaults=True):
    name: str
    description: str | UnsetType = UNSET
    parameters: dict[str, Any] | UnsetType = UNSET
    strict: bool | UnsetType | None = UNSET


class Tool(Struct, tag="function", tag_field="type", omit_defaults=True):
    function: FunctionDefinition


class CustomToolDefinition(Struct, omit_defaults=True):
    name: str
    description: str | UnsetType = UNSET
    # {"type": "text"} or {"type": "grammar", "grammar": {...}}: the provider judges it
    format: dict[str, Any] | UnsetType = UNSET


class CustomTool(Struct, tag="custom", tag_field="type", omit_defaults=True):
    """A tool whose input is free text (or text matching a grammar), not JSON."""

    custom: CustomToolDefinition


AnyTool = Tool | CustomTool


class NamedFunction(Struct):
    name: str


class NamedToolChoice(Struct, tag="function", tag_field="type", omit_defaults=True):
    function: NamedFunction


class NamedCustomToolChoice(Struct, tag="custom", tag_field="type"):
    custom: NamedFunction


class AllowedTools(Struct, omit_defaults=True):
    mode: Literal["auto", "required"]
    # tool references as the client wrote them ({"type": "function", "function":
    # {"name": ...}}, {"type": "custom", "custom": {"name": ...}}, ...)
    tools: list[dict[str, Any]]

    def names(self) -> list[str]:
        """The names of the tools allowed, whatever their type."""
        out: list[str] = []
        for ref in self.tools:
            inner = ref.get(str(ref.get("type", "function")))
            name = inner.get("name") if isinstance(inner, dict) else ref.get("name")
            if isinstance(name, str):
                out.append(name)
        return out


class AllowedToolsChoice(Struct, tag="allowed_tools", tag_field="type"):
    """Restricts the model to a subset of `tools` without changing the list (which keeps
    a provider's prompt cache warm)."""

    allowed_tools: AllowedTools


ToolChoice = (
    Literal["none", "auto", "required"]
    | NamedToolChoice
    | NamedCustomToolChoice
    | AllowedToolsChoice
)


class JSONSchemaFormat(Struct, omit_defaults=True):
    name: str
    schema: dict[str, Any] | UnsetType = UNSET
    description: str | UnsetType = UNSET
    strict: bool | UnsetType | None = UNSET


class ResponseFormat(Struct, omit_defaults=True):
    type: Literal["text", "json_object", "json_schema"]
    json_schema: JSONSchemaFormat | UnsetType = UNSET


class StreamOptions(Struct, omit_defaults=True):
    include_usage: bool = False


Temperature = Annotated[float, Meta(ge=0, le=2)]
Probability = Annotated[float, Meta(ge=0, le=1)]
PositiveInt = Annotated[int, Meta(ge=1)]
# 0 is a valid token cap in the OpenAI API (the provider decides what it means)
TokenCap = Annotated[int, Meta(ge=0)]


class ChatRequest(Struct, omit_defaults=True):
    model: str
    messages: Annotated[list[Message], Meta(min_length=1)]
    # `"stream": null` means no stream; read it as `stream`
    stream_flag: bool | None = msgspec.field(default=None, name="stream")
    stream_options: StreamOptions | None = None
    max_tokens: TokenCap | None = None
    max_completion_tokens: TokenCap | None = None
    temperature: Temperature | None = None
    top_p: Probability | None = None
    n: PositiveInt | None = None
    stop: str | list[str] | None = None
    presence_penalty: Annotated[float, Meta(ge=-2, le=2)] | None = None
    frequency_penalty: Annotated[float, Meta(ge=-2, le=2)] | None = None
    seed: int | None = None
    tools: list[AnyTool] | None = None
    tool_choice: ToolChoice | None = None
    parallel_tool_calls: bool | None = None
    response_format: ResponseFormat | None = None
    user: str | None = None
    logprobs: bool | None = None
    top_logprobs: int | None = None
    metadata: dict[str, str] | None = None

    @property
    def stream(self) -> bool:
        return bool(self.stream_flag)

    @property
    def output_limit(self) -> int | None:
        """The client's cap on generated tokens, whichever field it used (0 included)."""
        if self.max_completion_tokens is not None:
            return self.max_completion_tokens
        return self.max_tokens

    def function_tools(self) -> list[Tool]:
        return [tool for tool in self.tools or () if isinstance(tool, Tool)]

    @property
    def wants_usage_chunk(self) -> bool:
        return self.stream_options is not None and self.stream_options.include_usage

    def stop_sequences(self) -> list[str]:
        if self.stop is None:
            return []
        return [self.stop] if isinstance(self.stop, str) else list(self.stop)


# -- response -----------------------------------------------------------------------


class ResponseMessage(Struct):
    role: Literal["assistant"] = "assistant"
    content: str | None = None
    tool_calls: list[ToolCall] | UnsetType = UNSET
    refusal: str | None = None
    reasoning_content: str | UnsetType = UNSET


FinishReason = Literal["stop", "length", "tool_calls", "content_filter", "function_call"]


class Choice(Struct):
    index: int
    message: ResponseMessage
    finish_reason: FinishReason | None
    logprobs: None = None


class ChatCompletion(Struct):
    id: str
    created: int
    model: str
    choices: list[Choice]
    usage: dict[str, Any] | UnsetType = UNSET
    object: Literal["chat.completion"] = "chat.completion"
    system_fingerprint: str | UnsetType = UNSET


class ChunkFunctionCall(Struct, omit_defaults=True):
    name: str | UnsetType = UNSET
    arguments: str | UnsetType = UNSET


class ChunkToolCall(Struct, omit_defaults=True):
    index: int
    id: str | UnsetType = UNSET
    type: Literal["function"] | UnsetType = UNSET
    function: ChunkFunctionCall | UnsetType = UNSET


class Delta(Struct, omit_defaults=True):
    role: Literal["assistant"] | UnsetType = UNSET
    content: str | UnsetType | None = UNSET
    tool_calls: list[ChunkToolCall] | UnsetType = UNSET
    reasoning_content: str | UnsetType = UNSET
    refusal: str | UnsetType | None = UNSET


class ChunkChoice(Struct):
    index: int
    delta: Delta
    finish_reason: FinishReason | None = None
    logprobs: None = None


class ChatCompletionChunk(Struct):
    id: str
    created: int
    model: str
    choices: list[ChunkChoice]
    usage: dict[str, Any] | UnsetType | None = UNSET
    object: Literal["chat.completion.chunk"] = "chat.completion.chunk"


class Model(Struct):
    id: str
    created: int
    owned_by: str
    object: Literal["model"] = "model"


class ModelList(Struct):
    data: list[Model]
    object: Literal["list"] = "list"


request_decoder = msgspec.json.Decoder(ChatRequest)
encoder = msgspec.json.Encoder()
