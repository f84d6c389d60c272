"""The one lookup from a provider kind to its translation."""

from __future__ import annotations

from gateway.providers.anthropic import AnthropicTranslation
from gateway.providers.base import Translation
from gateway.providers.gemini import GeminiTranslation
from gateway.providers.openai_compatible import OpenAICompatible


def translator_for(kind: str) -> Translation:
    if kind == "openai":
        return OpenAICompatible()
    if kind == "anthropic":
        return AnthropicTranslation()
    if kind == "gemini":
        return GeminiTranslation()
    raise ValueError(f"unknown provider kind {kind!r}")
