"""A fake Gemini API (`POST /v1beta/models/{model}:generateContent` and
`:streamGenerateContent?alt=sse`; `/v1/` too, which the google-genai 3.x client uses)
on 127.0.0.1.

It rejects what the real API rejects, with Google's error bodies: no `x-goog-api-key`
(403 PERMISSION_DENIED), a wrong one (400 API_KEY_INVALID), unknown fields anywhere (the
official `google-genai` models forbid them; schema keywords outside Gemini's subset such
as `additionalProperties` too), roles other than user/model, empty contents or parts, an
OBJECT parameter schema without properties, function responses that do not answer the
function call turn right before them. Bodies are built from `google-genai` types.

    with GeminiFake() as fake:
        fake.enqueue_response(text_response("hi"))     # JSON, or SSE chunks when streaming
        fake.enqueue_chunks([...])                      # exactly these stream chunks
        fake.enqueue_error(429, "RESOURCE_EXHAUSTED", "Quota exceeded")
"""

from __future__ import annotations

import itertools
import json
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import pydantic
from google.genai import types as gt

from tests.fakes import FakeServer, Received, Reply, pieces, sse
from tests.fakes.openai_server import fake_vector

DEFAULT_KEY = "AIza-fake-key"
STATUS_CODES = {
    "INVALID_ARGUMENT": 400,
    "FAILED_PRECONDITION": 400,
    "PERMISSION_DENIED": 403,
    "NOT_FOUND": 404,
    "RESOURCE_EXHAUSTED": 429,
    "INTERNAL": 500,
    "UNAVAILABLE": 503,
    "DEADLINE_EXCEEDED": 504,
}
_PATH = re.compile(r"^/v1(?:beta)?/models/([^/:]+):(generateContent|streamGenerateContent)$")
_TOP_LEVEL = {
    "contents",
    "systemInstruction",
    "tools",
    "toolConfig",
    "generationConfig",
    "safetySettings",
    "cachedContent",
}
# Gemini API's Schema (an OpenAPI subset); the SDK's Schema model is wider (Vertex)
_SCHEMA_KEYS = {
    "type",
    "format",
    "title",
    "description",
    "nullable",
    "enum",
    "maxItems",
    "minItems",
    "properties",
    "required",
    "minProperties",
    "maxProperties",
    "minLength",
    "maxLength",
    "pattern",
    "example",
    "anyOf",
    "propertyOrdering",
    "default",
    "items",
    "minimum",
    "maximum",
}


# -- building answers from SDK types -------------------------------------------------


def text_response(
    text: str,
    *,
    finish_reason: str = "STOP",
    prompt_tokens: int = 10,
    output_tokens: int = 5,
    thoughts_tokens: int | None = None,
    cached_tokens: int | None = None,
) -> gt.GenerateContentResponse:
    return make_response(
        [gt.Part(text=text)],
        finish_reason=finish_reason,
        usage=usage(prompt_tokens, output_tokens, thoughts_tokens, cached_tokens),
    )


def call_response(
    calls: Sequence[tuple[str, dict[str, Any]]], *, text: str | None = None
) -> gt.GenerateContentResponse:
    """A function-calling answer: (name, args) per call, after optional text."""
    parts = [gt.Part(text=text)] if text else []
    parts += [gt.Part(function_call=gt.FunctionCall(name=n, args=a)) for n, a in calls]
    return make_response(parts, finish_reason="STOP", usage=usage(10, 5))


def usage(
    prompt: int, output: int, thoughts: int | None = None, cached: int | None = None
) -> gt.GenerateContentResponseUsageMetadata:
    return gt.GenerateContentResponseUsageMetadata(
        prompt_token_count=prompt,
        candidates_token_count=output,
        thoughts_token_count=thoughts,
        cached_content_token_count=cached,
        total_token_count=prompt + output + (thoughts or 0),
    )


def make_response(
    parts: Sequence[gt.Part],
    *,
    finish_reason: str,
    usage: gt.GenerateContentResponseUsageMetadata,
    model: str = "gemini-2.5-flash",
) -> gt.GenerateContentResponse:
    return gt.GenerateContentResponse(
        candidates=[
            gt.Candidate(
                content=gt.Content(role="model", parts=list(parts)),
                finish_reason=gt.FinishReason(finish_reason),
                index=0,
            )
        ],
        usage_metadata=usage,
        model_version=model,
        response_id="fake-response-id",
    )


def dump(response: gt.GenerateContentResponse) -> dict[str, Any]:
    """The REST JSON of an SDK response (camelCase, nulls omitted, bytes base64)."""
    dumped: dict[str, Any] = response.model_dump(mode="json", by_alias=True, exclude_none=True)
    return dumped


def response_chunks(
    response: gt.GenerateContentResponse,
    split: Callable[[str], list[str]] = lambda s: pieces(s, 8),
) -> list[dict[str, Any]]:
    """The chunks Gemini streams for `response`: each text part cut by `split`, each
    function call whole, running usage on every chunk, the finish reason on the last."""
    full = dump(response)
    candidate = full["candidates"][0]
    final_usage = full.get("usageMetadata", {})
    prompt_only = {"promptTokenCount": final_usage.get("promptTokenCount", 0)}
    chunks: list[dict[str, Any]] = []
    for part in candidate["content"]["parts"]:
        if "text" in part:
            texts = [p for p in split(part["text"]) if p] or [""]
            chunks += [{**part, "text": t} for t in texts]
        else:
            chunks.append(part)
    chunks = chunks or [{"text": ""}]
    out = []
    for n, part in enumerate(chunks):
        body: dict[str, Any] = {
            "candidates": [{"content": {"role": "model", "parts": [part]}, "index": 0}],
            "usageMetadata": prompt_only,
            "modelVersion": full.get("modelVersion", "gemini-2.5-flash"),
            "responseId": full.get("responseId", "fake-response-id"),
        }
        if n == len(chunks) - 1:
            body["candidates"][0]["finishReason"] = candidate.get("finishReason", "STOP")
            body["usageMetadata"] = final_usage
        out.append(body)
    return out


def error_body(
    status: str, message: str, details: list[dict[str, Any]] | None = None
) -> dict[str, Any]:
    error: dict[str, Any] = {
        "code": STATUS_CODES.get(status, 500),
        "message": message,
        "status": status,
    }
    if details:
        error["details"] = details
    return {"error": error}


# -- validation, as the real API does it ---------------------------------------------


class Rejection(Exception):
    def __init__(self, status: str, message: str, details: list[dict[str, Any]] | None = None):
        super().__init__(message)
        self.status = status
        self.message = message
        self.details = details or []


def check_request(request: Received, api_key: str) -> tuple[str, bool, dict[str, Any]]:
    """(model, stream, body), or a Rejection with the error the real API would send."""
    match = _PATH.match(request.path)
    if request.method != "POST" or match is None:
        raise Rejection("NOT_FOUND", f"Requested entity was not found: {request.path}")
    key = request.headers.get("x-goog-api-key") or request.query.get("key", [""])[0]
    if not key:
        raise Rejection(
            "PERMISSION_DENIED",
            "Method doesn't allow unregistered callers (callers without established "
            "identity). Please use API Key or other form of API consumer identity to call "
            "this API.",
        )
    if key != api_key:
        raise Rejection(
            "INVALID_ARGUMENT",
            "API key not valid. Please pass a valid API key.",
            [
                {
                    "@type": "type.googleapis.com/google.rpc.ErrorInfo",
                    "reason": "API_KEY_INVALID",
                    "domain": "googleapis.com",
                }
            ],
        )
    try:
        body = json.loads(request.body)
    except ValueError:
        raise Rejection("INVALID_ARGUMENT", "Invalid JSON payload received.") from None
    for name in set(body) - _TOP_LEVEL:
        raise Rejection(
            "INVALID_ARGUMENT",
            f'Invalid JSON payload received. Unknown name "{name}": Cannot find field.',
        )
    _check_contents(body)
    _check_models(body)
    _check_tool_mix(match.group(1), body.get("tools", []))
    for t, tool in enumerate(body.get("tools", [])):
        for f, declaration in enumerate(tool.get("functionDeclarations", [])):
            if "parameters" in declaration:
                where = f"tools[{t}].function_declarations[{f}].parameters"
                _check_schema(declaration["parameters"], where)
    schema = body.get("generationConfig", {}).get("responseSchema")
    if schema is not None:
        _check_schema(schema, "generation_config.response_schema")
    return match.group(1), match.group(2) == "streamGenerateContent", body


def _check_tool_mix(model: str, tools: list[dict[str, Any]]) -> None:
    """Gemini 2.x grounds with Google Search or calls functions, never both in one
    request (combining them came with Gemini 3)."""
    searching = any("googleSearch" in tool or "google_search" in tool for tool in tools)
    functions = any(tool.get("functionDeclarations") for tool in tools)
    if searching and functions and model.startswith("gemini-2"):
        raise Rejection("INVALID_ARGUMENT", "Tool use with function calling is unsupported")


def _check_contents(body: dict[str, Any]) -> None:
    contents = body.get("contents")
    if not contents:
        raise Rejection(
            "INVALID_ARGUMENT", "* GenerateContentRequest.contents: contents is not specified\n"
        )
    for i, content in enumerate(contents):
        if content.get("role") not in ("user", "model"):
            raise Rejection("INVALID_ARGUMENT", "Please use a valid role: user, model.")
        if not content.get("parts"):
            raise Rejection(
                "INVALID_ARGUMENT",
                f"* GenerateContentRequest.contents[{i}].parts: contents.parts must not be "
                "empty.\n",
            )
    for earlier, later in itertools.pairwise(contents):
        responses = [p for p in later["parts"] if "functionResponse" in p]
        if not responses:
            continue
        calls = [p for p in earlier["parts"] if "functionCall" in p]
        if earlier["role"] != "model" or not calls:
            raise Rejection(
                "INVALID_ARGUMENT",
                "Please ensure that function response turn comes immediately after a "
                "function call turn.",
            )
        if len(calls) != len(responses):
            raise Rejection(
                "INVALID_ARGUMENT",
                "Please ensure that the number of function response parts is equal to the "
                "number of function call parts of the function call turn.",
            )
    if contents[0].get("role") == "user" and any(
        "functionResponse" in p for p in contents[0]["parts"]
    ):
        raise Rejection(
            "INVALID_ARGUMENT",
            "Please ensure that function response turn comes immediately after a function "
            "call turn.",
        )


def _check_models(body: dict[str, Any]) -> None:
    checks: list[tuple[type[pydantic.BaseModel], Any, str]] = [
        (gt.Content, c, f"contents[{i}]") for i, c in enumerate(body["contents"])
    ]
    if "systemInstruction" in body:
        checks.append((gt.Content, body["systemInstruction"], "system_instruction"))
    checks += [(gt.Tool, t, f"tools[{i}]") for i, t in enumerate(body.get("tools", []))]
    if "toolConfig" in body:
        checks.append((gt.ToolConfig, body["toolConfig"], "tool_config"))
    if "generationConfig" in body:
        checks.append((gt.GenerationConfig, body["generationConfig"], "generation_config"))
    for model, value, where in checks:
        try:
            model.model_validate_json(json.dumps(value))
        except pydantic.ValidationError as error:
            first = error.errors()[0]
            loc = ".".join(str(p) for p in first["loc"])
            raise Rejection(
                "INVALID_ARGUMENT",
                f'Invalid JSON payload received. Unknown name or bad value at "{where}.{loc}": '
                f"{first['msg']}",
            ) from None


def _check_schema(schema: Any, where: str) -> None:
    if not isinstance(schema, dict):
        return
    for key in schema:
        if key not in _SCHEMA_KEYS:
            raise Rejection(
                "INVALID_ARGUMENT",
                f"Invalid JSON payload received. Unknown name \"{key}\" at '{where}': "
                "Cannot find field.",
            )
    if str(schema.get("type", "")).upper() == "OBJECT" and not schema.get("properties"):
        raise Rejection(
            "INVALID_ARGUMENT",
            f"* GenerateContentRequest.{where}.properties: should be non-empty for OBJECT type\n",
        )
    for name, sub in (schema.get("properties") or {}).items():
        _check_schema(sub, f"{where}.properties[{name}]")
    if "items" in schema:
        _check_schema(schema["items"], f"{where}.items")
    for n, sub in enumerate(schema.get("anyOf") or []):
        _check_schema(sub, f"{where}.any_of[{n}]")


# -- the server ----------------------------------------------------------------------


@dataclass
class _Scripted:
    response: gt.GenerateContentResponse | None = None
    chunks: Sequence[dict[str, Any]] | None = None
    error: tuple[int, dict[str, Any]] | None = None
    headers: dict[str, str] = field(default_factory=dict)
    delay: float = 0.0
    chunk_delay: float = 0.0


class GeminiFake(FakeServer):
    def __init__(self, api_key: str = DEFAULT_KEY) -> None:
        super().__init__()
        self.api_key = api_key
        # batchEmbedContents takes at most this many requests
        self.embedding_batch_cap = 100

    def __enter__(self) -> GeminiFake:
        self.start()
        return self

    def enqueue_response(
        self, response: gt.GenerateContentResponse, *, delay: float = 0.0, chunk_delay: float = 0.0
    ) -> None:
        """Answer the next request with `response` (as chunks if it streams)."""
        self.enqueue(_Scripted(response=response, delay=delay, chunk_delay=chunk_delay))

    def enqueue_chunks(
        self, chunks: Sequence[dict[str, Any]], *, delay: float = 0.0, chunk_delay: float = 0.0
    ) -> None:
        """Answer the next request with exactly these SSE chunks (dicts sent as JSON)."""
        self.enqueue(_Scripted(chunks=chunks, delay=delay, chunk_delay=chunk_delay))

    def enqueue_error(
        self,
        status: int,
        code: str,
        message: str,
        *,
        details: list[dict[str, Any]] | None = None,
        headers: dict[str, str] | None = None,
        delay: float = 0.0,
    ) -> None:
        body = error_body(code, message, details)
        body["error"]["code"] = status
        self.enqueue(_Scripted(error=(status, body), headers=headers or {}, delay=delay))

    def respond(self, request: Received) -> Reply:
        if _EMBED_PATH.match(request.path):
            return self._embed(request)
        try:
            _, stream, body = check_request(request, self.api_key)
        except Rejection as rejection:
            status = STATUS_CODES.get(rejection.status, 400)
            return Reply(status, error_body(rejection.status, rejection.message, rejection.details))
        scripted = self.next_scripted() or _Scripted(response=_echo(body))
        if scripted.error is not None:
            status, error = scripted.error
            return Reply(status, error, headers=scripted.headers, delay=scripted.delay)
        chunks = scripted.chunks
        if chunks is None and stream:
            assert scripted.response is not None
            chunks = response_chunks(scripted.response)
        if chunks is not None:
            if request.query.get("alt") != ["sse"]:
                # without alt=sse Gemini streams one JSON array
                return Reply(body=list(chunks), headers=scripted.headers, delay=scripted.delay)
            return Reply(
                chunks=[sse(None, chunk) for chunk in chunks],
                headers=scripted.headers,
                delay=scripted.delay,
                chunk_delay=scripted.chunk_delay,
            )
        assert scripted.response is not None
        return Reply(body=dump(scripted.response), headers=scripted.headers, delay=scripted.delay)

    def _embed(self, request: Received) -> Reply:
        """`embedContent` / `batchEmbedContents`, rejecting what Gemini rejects: a bad or
        missing key, unknown fields, a batch over the cap, a request naming another model."""
        try:
            model, method, body = check_embed_request(request, self.api_key)
            scripted = self.next_scripted()
            if isinstance(scripted, _Scripted) and scripted.error is not None:
                status, error = scripted.error
                return Reply(status, error, headers=scripted.headers, delay=scripted.delay)
            if method == "embedContent":
                values = _embed_values(body, model)
                return Reply(body={"embedding": {"values": values}})
            entries = body.get("requests")
            if not isinstance(entries, list) or not entries:
                raise Rejection("INVALID_ARGUMENT", "requests must not be empty")
            if len(entries) > self.embedding_batch_cap:
                raise Rejection(
                    "INVALID_ARGUMENT",
                    f"* BatchEmbedContentsRequest.requests: at most {self.embedding_batch_cap} "
                    "requests can be in one batch",
                )
            vectors = [{"values": _embed_values(entry, model)} for entry in entries]
            return Reply(body={"embeddings": vectors})
        except Rejection as rejection:
            status = STATUS_CODES.get(rejection.status, 400)
            return Reply(status, error_body(rejection.status, rejection.message, rejection.details))


_EMBED_PATH = re.compile(r"^/v1(?:beta)?/models/([^/:]+):(embedContent|batchEmbedContents)$")
_EMBED_FIELDS = {"model", "content", "outputDimensionality", "taskType", "title"}
EMBED_DIMENSIONS = 3072


def check_embed_request(request: Received, api_key: str) -> tuple[str, str, dict[str, Any]]:
    match = _EMBED_PATH.match(request.path)
    assert match is not None
    key = request.headers.get("x-goog-api-key") or request.query.get("key", [""])[0]
    if key != api_key:
        raise Rejection("INVALID_ARGUMENT", "API key not valid. Please pass a valid API key.")
    try:
        body = json.loads(request.body)
    except ValueError:
        raise Rejection("INVALID_ARGUMENT", "Invalid JSON payload received.") from None
    return match.group(1), match.group(2), body


def _embed_values(entry: dict[str, Any], model: str) -> list[float]:
    for name in set(entry) - _EMBED_FIELDS:
        raise Rejection(
            "INVALID_ARGUMENT",
            f'Invalid JSON payload received. Unknown name "{name}": Cannot find field.',
        )
    if entry.get("model", f"models/{model}") != f"models/{model}":
        raise Rejection("INVALID_ARGUMENT", "the model of each request must match the URL")
    content = gt.Content.model_validate(entry.get("content"))
    text = " ".join(part.text or "" for part in content.parts or [])
    if not text:
        raise Rejection("INVALID_ARGUMENT", "content must have text")
    dimensions = entry.get("outputDimensionality") or EMBED_DIMENSIONS
    return fake_vector(text, dimensions)


def _echo(body: dict[str, Any]) -> gt.GenerateContentResponse:
    said = " ".join(p.get("text", "") for p in body["contents"][-1]["parts"])
    text = f"fake Gemini reply to: {said}".strip()
    return text_response(
        text, prompt_tokens=max(1, len(json.dumps(body)) // 4), output_tokens=len(text.split())
    )
