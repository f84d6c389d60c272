"""The texts evaluation needs, from what the pipeline holds: the conversation (as the
judge prompt shows it and the reference model is asked it) and the served answer's text
from the chat-form body or stream payloads the respond stage recorded."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import Any

import msgspec

_json = msgspec.json.Decoder()


def text_of(content: Any) -> str:
    """A chat message's text: a string, or its text parts joined (images left out)."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(
            part["text"]
            for part in content
            if isinstance(part, dict) and isinstance(part.get("text"), str)
        )
    return ""


def conversation_of(messages: Sequence[Any]) -> list[tuple[str, str]]:
    """(role, text) turns of an OpenAI chat `messages` list, the empty ones left out."""
    turns = []
    for message in messages:
        if not isinstance(message, dict):
            continue
        text = text_of(message.get("content"))
        if text:
            turns.append((str(message.get("role", "user")), text))
    return turns


def reference_messages(conversation: Sequence[tuple[str, str]]) -> list[dict[str, str]]:
    """The conversation as plain chat messages for the reference model (tool calls and
    attachments are not replayed: the reference answers the text)."""
    roles = {"system", "developer", "user", "assistant"}
    return [
        {"role": role if role in roles else "user", "content": text} for role, text in conversation
    ]


def last_user_turn(conversation: Sequence[tuple[str, str]]) -> str:
    for role, text in reversed(conversation):
        if role == "user":
            return text
    return conversation[-1][1] if conversation else ""


def sha256(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def whole_answer_text(body: bytes) -> str | None:
    """A chat.completion's first choice's text (None: not a chat completion with text)."""
    try:
        payload = _json.decode(body)
        text = payload["choices"][0]["message"].get("content")
    except (msgspec.DecodeError, KeyError, IndexError, TypeError, AttributeError):
        return None
    return text if isinstance(text, str) and text.strip() else None


def streamed_answer_text(payloads: Sequence[bytes]) -> str | None:
    """The first choice's text from chat.completion.chunk payloads, joined."""
    pieces: list[str] = []
    for payload in payloads:
        try:
            chunk = _json.decode(payload)
        except msgspec.DecodeError:
            continue
        if not isinstance(chunk, dict):
            continue
        for choice in chunk.get("choices") or ():
            if isinstance(choice, dict) and choice.get("index", 0) == 0:
                delta = choice.get("delta")
                if isinstance(delta, dict) and isinstance(delta.get("content"), str):
                    pieces.append(delta["content"])
    text = "".join(pieces)
    return text if text.strip() else None
