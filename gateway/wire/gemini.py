"""Google Gemini API wire types (`models/{model}:generateContent`, REST, camelCase).

Request types encode to the body the Gemini Developer API accepts (checked in tests
against the official `google-genai` SDK models). Response types are lenient: every
field optional, unknown fields ignored, so new response fields never break decoding.
"""

from __future__ import annotations

from typing import Any

import msgspec
from msgspec import UNSET, Struct, UnsetType

# -- request ------------------------------------------------------------------------


class Blob(Struct, rename="camel"):
    mime_type: str
    data: str


class FileData(Struct, rename="camel", omit_defaults=True):
    file_uri: str
    mime_type: str | UnsetType = UNSET


class FunctionCall(Struct, omit_defaults=True):
    name: str
    args: dict[str, Any]


class FunctionResponse(Struct):
    name: str
    response: dict[str, Any]


class Part(Struct, rename="camel", omit_defaults=True):
    """One part; exactly one of the data fields is set (a oneof in Gemini's proto)."""

    text: str | UnsetType = UNSET
    inline_data: Blob | UnsetType = UNSET
    file_data: FileData | UnsetType = UNSET
    function_call: FunctionCall | UnsetType = UNSET
    function_response: FunctionResponse | UnsetType = UNSET
    thought_signature: str | UnsetType = UNSET


class Content(Struct, omit_defaults=True):
    parts: list[Part]
    role: str | UnsetType = UNSET


class FunctionDeclaration(Struct, omit_defaults=True, rename="camel"):
    name: str
    description: str | UnsetType = UNSET
    parameters: dict[str, Any] | UnsetType = UNSET
    # the arguments as JSON Schema, for what the OpenAPI subset cannot say
    parameters_json_schema: dict[str, Any] | UnsetType = UNSET


class Tool(Struct, rename="camel", omit_defaults=True):
    function_declarations: list[FunctionDeclaration] | UnsetType = UNSET
    # Google Search grounding (an empty object turns it on)
    google_search: dict[str, Any] | UnsetType = UNSET


class FunctionCallingConfig(Struct, rename="camel", omit_defaults=True):
    mode: str
    allowed_function_names: list[str] | UnsetType = UNSET


class ToolConfig(Struct, rename="camel"):
    function_calling_config: FunctionCallingConfig


class ThinkingConfig(Struct, rename="camel", omit_defaults=True):
    thinking_budget: int | UnsetType = UNSET
    include_thoughts: bool | UnsetType = UNSET


class GenerationConfig(Struct, rename="camel", omit_defaults=True):
    max_output_tokens: int | UnsetType = UNSET
    temperature: float | UnsetType = UNSET
    top_p: float | UnsetType = UNSET
    top_k: int | UnsetType = UNSET
    stop_sequences: list[str] | UnsetType = UNSET
    candidate_count: int | UnsetType = UNSET
    seed: int | UnsetType = UNSET
    presence_penalty: float | UnsetType = UNSET
    frequency_penalty: float | UnsetType = UNSET
    response_mime_type: str | UnsetType = UNSET
    response_schema: dict[str, Any] | UnsetType = UNSET
    thinking_config: ThinkingConfig | UnsetType = UNSET


class GenerateContentRequest(Struct, rename="camel", omit_defaults=True):
    contents: list[Content]
    system_instruction: Content | UnsetType = UNSET
    tools: list[Tool] | UnsetType = UNSET
    tool_config: ToolConfig | UnsetType = UNSET
    generation_config: GenerationConfig | UnsetType = UNSET


# -- response -----------------------------------------------------------------------


class ResponseFunctionCall(Struct):
    name: str = ""
    args: dict[str, Any] | None = None
    id: str | None = None


class ResponsePart(Struct, rename="camel"):
    text: str | None = None
    thought: bool | None = None
    function_call: ResponseFunctionCall | None = None
    thought_signature: str | None = None


class ResponseContent(Struct):
    parts: list[ResponsePart] | None = None
    role: str | None = None


class Candidate(Struct, rename="camel"):
    content: ResponseContent | None = None
    finish_reason: str | None = None
    index: int | None = None


class UsageMetadata(Struct, rename="camel"):
    prompt_token_count: int = 0
    candidates_token_count: int = 0
    thoughts_token_count: int = 0
    cached_content_token_count: int = 0
    tool_use_prompt_token_count: int = 0


class PromptFeedback(Struct, rename="camel"):
    block_reason: str | None = None


class ErrorStatus(Struct):
    code: int = 500
    message: str = ""
    status: str = ""
    details: list[dict[str, Any]] = msgspec.field(default_factory=list)


class GenerateContentResponse(Struct, rename="camel"):
    candidates: list[Candidate] | None = None
    usage_metadata: UsageMetadata | None = None
    prompt_feedback: PromptFeedback | None = None
    response_id: str | None = None
    model_version: str | None = None
    # a stream that fails after it started sends the error as one more event
    error: ErrorStatus | None = None


class ErrorResponse(Struct):
    error: ErrorStatus = msgspec.field(default_factory=ErrorStatus)


response_decoder = msgspec.json.Decoder(GenerateContentResponse)
error_decoder = msgspec.json.Decoder(ErrorResponse)
