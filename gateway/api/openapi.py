"""`GET /openapi.json`: the gateway's endpoints as an OpenAPI 3.1 document, derived from
the wire types (msgspec writes their JSON Schema), so the document cannot drift from
what the gateway accepts. Clients can generate code from it, and the project's own fuzz
suite (tests/fuzz) drives schemathesis with it."""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version
from typing import Any

import msgspec

from gateway.errors import ErrorEnvelope
from gateway.wire.openai import ChatCompletion, ChatCompletionChunk, ChatRequest, ModelList

_REF = "#/components/schemas/{name}"


def _json(ref: dict[str, Any]) -> dict[str, Any]:
    return {"application/json": {"schema": ref}}


def _errors(ref: dict[str, Any], *statuses: int) -> dict[str, Any]:
    what = {
        400: "Malformed JSON or a schema violation (`param` names the field)",
        401: "Missing or unknown key",
        403: "The key may not use that model",
        404: "Unknown model or route",
        408: "The request did not arrive in time",
        413: "Body over server.max_body_bytes (after decompression)",
        415: "Unsupported Content-Encoding",
        429: "A rate limit or budget",
        431: "Request headers too large",
        502: "The upstream failed (names the provider)",
        503: "Overloaded, or the store is down in fail_closed mode",
        504: "The upstream timed out",
    }
    return {str(s): {"description": what[s], "content": _json(ref)} for s in statuses}


def _version() -> str:
    try:
        return version("gateway")
    except PackageNotFoundError:
        return "0"


def openapi_document() -> bytes:
    refs, components = msgspec.json.schema_components(
        [ChatRequest, ChatCompletion, ChatCompletionChunk, ModelList, ErrorEnvelope],
        ref_template=_REF,
    )
    request, completion, chunk, models, error = refs
    bearer: list[dict[str, list[str]]] = [{"bearer": []}]
    document: dict[str, Any] = {
        "openapi": "3.1.0",
        "info": {
            "title": "gateway",
            "version": _version(),
            "description": "An OpenAI-compatible cost-and-model routing gateway.",
        },
        "paths": {
            "/v1/chat/completions": {
                "post": {
                    "operationId": "createChatCompletion",
                    "security": bearer,
                    "requestBody": {"required": True, "content": _json(request)},
                    "responses": {
                        "200": {
                            "description": "A completion, or with `stream: true` a stream of "
                            "chunks (`data: <chunk>` events ending `data: [DONE]`)",
                            "content": {
                                **_json(completion),
                                "text/event-stream": {"schema": chunk},
                            },
                        },
                        **_errors(error, 400, 401, 403, 404, 408, 413, 415, 429, 431),
                        **_errors(error, 502, 503, 504),
                    },
                }
            },
            "/v1/models": {
                "get": {
                    "operationId": "listModels",
                    "security": bearer,
                    "responses": {
                        "200": {"description": "What the key may use", "content": _json(models)},
                        **_errors(error, 401),
                    },
                }
            },
            "/healthz": {
                "get": {
                    "operationId": "health",
                    "responses": {"200": {"description": "The process is alive"}},
                }
            },
        },
        "components": {
            "schemas": components,
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
        },
    }
    return msgspec.json.encode(document)
