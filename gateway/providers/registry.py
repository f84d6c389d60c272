"""The one lookup from a provider kind to its translation."""

from __future__ import annotations

from gateway.providers.base import Translation
from gateway.providers.openai_compatible import OpenAICompatible


def translator_for(kind: str) -> Translation:
    if kind == "openai":
        return OpenAICompatible()
    raise ValueError(f"provider kind {kind!r} has no translation yet")
