"""The chat fields a translation to another upstream API leaves out, named for
x-gateway-route (`changed=dropped:seed`).

A chat body sent to an OpenAI-compatible upstream goes as it came (the upstream judges
every field); one translated to Anthropic Messages or Gemini is rebuilt from the fields
that API can carry, so any other field the client set (an OpenAI-only option such as
`logprobs`, `web_search_options`, `prediction`) is not sent. That is said, never silent.
A field set to null, or to what its absence means (`logprobs: false`), asks for nothing
and is not named.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gateway.wire.openai import ChatRequest

# every field the typed chat request models, as clients spell them (`stream`, ...)
CHAT_FIELDS = frozenset(ChatRequest.__struct_encode_fields__)

# read by the translations from the body beside the typed request
_RAW_OPTIONS = frozenset({"reasoning_effort"})

ANTHROPIC_CARRIED = (CHAT_FIELDS | _RAW_OPTIONS) - {
    "seed",
    "presence_penalty",
    "frequency_penalty",
    "logprobs",
    "top_logprobs",
    "metadata",
}

GEMINI_CARRIED = (CHAT_FIELDS | _RAW_OPTIONS | {"top_k"}) - {
    "logprobs",
    "top_logprobs",
    "metadata",
    "user",
    "parallel_tool_calls",
}


# what a field's absence means: sent with this value, leaving it out changes nothing
_ABSENT_MEANS: dict[str, Any] = {"logprobs": False, "parallel_tool_calls": True}


def dropped_fields(body: Mapping[str, Any], carried: frozenset[str]) -> list[str]:
    """`dropped:NAME` for each field of the chat `body` the translation does not carry."""
    return [
        f"dropped:{name}"
        for name, value in body.items()
        if name not in carried and value is not None and _ABSENT_MEANS.get(name) != value
    ]
