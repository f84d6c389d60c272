"""Prompt prefix hashes for placement: computed once per request, from the messages alone.

The prompt is rendered the way every chat template starts it (tool definitions, then the
messages in order, each as its role and text) and cut into blocks of `block_chars`
characters. Each block's hash chains the previous one, so `hashes[i]` names the first
i+1 blocks exactly, like the block hashes of vLLM's prefix cache and the paths of
SGLang's radix tree.

Blocks are cut in two segments: the *head* (tools and the leading system/developer
messages, or the first user turn when there is none) and the rest. The head's last block
ends where the head ends, so `hashes[anchor]` is a hash of exactly the head: every
request with the same system prompt gets the same anchor hash, whatever the user asks.

Characters stand in for tokens (about four per token in English) because hashing text
is far cheaper than tokenizing it, and the placement only needs "same prefix or not".
blake2b, not `hash()`: Python salts `hash()` per process, and every gateway must agree.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator, Sequence
from hashlib import blake2b

import msgspec

from gateway.routing.balancing.base import BalanceRequest
from gateway.wire.openai import ChatRequest, Message

# 256 characters is about 64 tokens: fine-grained enough to tell prompts apart early,
# coarse enough that hashing a 16k-character prompt costs 64 small digests.
DEFAULT_BLOCK_CHARS = 256
DEFAULT_MAX_BLOCKS = 64
_HEAD_ROLES = frozenset({"system", "developer"})
_MESSAGE_END = "\x1e"


def balance_request(
    chat: ChatRequest,
    tenant: str | None = None,
    *,
    block_chars: int = DEFAULT_BLOCK_CHARS,
    max_blocks: int = DEFAULT_MAX_BLOCKS,
) -> BalanceRequest:
    """The placement facts of a chat request: its prefix block hashes and its tenant."""
    head, rest = split_head(chat)
    head_blocks = -(-len(head) // block_chars)
    blocks = itertools.chain(_blocks(head, block_chars), _blocks(rest, block_chars))
    hashes: list[int] = []
    previous = b""
    for block in itertools.islice(blocks, max_blocks):
        previous = _chain(previous, block)
        hashes.append(int.from_bytes(previous, "big"))
    return BalanceRequest(
        prefix_hashes=tuple(hashes),
        anchor=max(0, min(head_blocks, len(hashes)) - 1),
        tenant=tenant,
    )


def split_head(chat: ChatRequest) -> tuple[str, str]:
    """The prompt's stable head and the rest, rendered as text."""
    messages = chat.messages
    head_count = 0
    while head_count < len(messages) and messages[head_count].role in _HEAD_ROLES:
        head_count += 1
    if head_count == 0:
        # no system prompt: a conversation's first turn is what its later turns share
        head_count = 1
    tools = msgspec.json.encode(chat.tools).decode() if chat.tools else ""
    head = tools + _render(messages[:head_count])
    return head, _render(messages[head_count:])


def _render(messages: Sequence[Message]) -> str:
    return "".join(f"{m.role}\n{m.text()}{_MESSAGE_END}" for m in messages)


def _blocks(text: str, block_chars: int) -> Iterator[str]:
    for start in range(0, len(text), block_chars):
        yield text[start : start + block_chars]


def _chain(previous: bytes, block: str) -> bytes:
    return blake2b(previous + block.encode("utf-8"), digest_size=8).digest()
