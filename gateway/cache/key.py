"""What makes two requests the same to the response cache (pure).

The key covers everything that can change the answer, and nothing that cannot:

- the client's API (an Anthropic client never gets an OpenAI-shaped answer), whether it
  streams (a stream is replayed as a stream), the tenant (never shared across tenants)
  and the model the plan chose to serve it;
- the client's whole request body as it sent it (messages, tools, temperature,
  max_tokens, seed, response_format, n, the requested model name, fields the gateway does
  not model, a Responses conversation as resumed), its keys sorted, less `INCIDENTAL`
  fields, which label, route or store a request but do not change what a model answers;
- for Anthropic clients, the `anthropic-version` and `anthropic-beta` headers, which do.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from typing import Any

import msgspec

from gateway.redis_names import scope_path

# bump when the entry format or the key's contents change: old entries are then missed
KEY_VERSION = "v1"

# fields that never change the answer. `stream` is keyed apart (it decides the replay's
# framing); `stream_options` only asks for the usage chunk, which a replay adds or drops
# per the request asking now
INCIDENTAL = frozenset(
    {
        "user",
        "metadata",
        "stream",
        "stream_options",
        "store",
        "safety_identifier",
        "prompt_cache_key",
        "prompt_cache_retention",
    }
)

_encoder = msgspec.json.Encoder(order="sorted")


def request_digest(
    api: str,
    tenant: str,
    model: str,
    stream: bool,
    native: Mapping[str, Any],
    headers: Mapping[str, str],
) -> str:
    """The hex digest naming one request's answer; `headers` are the request headers that
    change it (Anthropic's version and betas, as the ingress codec kept them)."""
    body = {k: v for k, v in native.items() if k not in INCIDENTAL}
    canonical = _encoder.encode([KEY_VERSION, api, tenant, model, stream, body, headers])
    return hashlib.sha256(canonical).hexdigest()


def cache_key(prefix: str, tenant: str, digest: str) -> str:
    """`gw:rc:<tenant>:{<digest>}`: the digest is the Redis Cluster hash tag, so one
    tenant's entries spread over every shard; the tenant in the name lets an operator
    find (SCAN) or drop one tenant's entries."""
    return f"{scope_path(prefix)}:rc:{scope_path(tenant)}:{{{digest}}}"
