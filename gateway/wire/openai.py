"""OpenAI Chat Completions wire types.

The request types are what the gateway validates a client's body against: strict
enough that a wrong type gets a 400 naming the `param`, loose enough that fields we do
not know (SGLang/vLLM extras such as `top_k`, `min_p`, `regex`) are not an error; the
raw body keeps them for pass-through. The response types are what translations from
other providers build.
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


class ToolCall(Struct):
    id: str
    function: FunctionCall
    type: Literal["function"] = "function"


Role = Literal["system", "developer", "user", "assistant", "tool", "function"]


class Message(Struct, omit_defaults=True):
    role: Role
    content: str | list[ContentPart] | None = None
    name: str | UnsetType = UNSET
    tool_calls: list[ToolCall] | UnsetType = UNSET
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


class Tool(Struct, omit_defaults=True):
    function: FunctionDefinition
    type: Literal["function"] = "function"


class NamedFunction(Struct):
    name: str


class NamedToolChoice(Struct, omit_defaults=True):
    function: NamedFunction
    type: Literal["function"] = "function"


ToolChoice = Literal["none", "auto", "required"] | NamedToolChoice


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


class ChatRequest(Struct, omit_defaults=True):
    model: str
    messages: Annotated[list[Message], Meta(min_length=1)]
    stream: bool = False
    stream_options: StreamOptions | None = None
    max_tokens: PositiveInt | None = None
    max_completion_tokens: PositiveInt | None = None
    temperature: Temperature | None = None
    top_p: Probability | None = None
    n: PositiveInt | None = None
    stop: str | list[str] | None = None
    presence_penalty: Annotated[float, Meta(ge=-2, le=2)] | None = None
    frequency_penalty: Annotated[float, Meta(ge=-2, le=2)] | None = None
    seed: int | None = None
    tools: list[Tool] | None = None
    tool_choice: ToolChoice | None = None
    parallel_tool_calls: bool | None = None
    response_format: ResponseFormat | None = None
    user: str | None = None
    logprobs: bool | None = None
    top_logprobs: int | None = None
    metadata: dict[str, str] | None = None

    @property
    def output_limit(self) -> int | None:
        """The client's cap on generated tokens, whichever field it used."""
        return self.max_completion_tokens or self.max_tokens

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
