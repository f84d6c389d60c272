"""The one lookup from a client API and a provider to the translation that serves it
(Envoy AI Gateway's GetTranslator): a same-API passthrough where the provider speaks the
client's API itself, else the provider's translation from the internal chat request."""

from __future__ import annotations

from gateway.providers.anthropic import AnthropicTranslation
from gateway.providers.anthropic_native import AnthropicNativeTranslation
from gateway.providers.base import Translation
from gateway.providers.embeddings import GeminiEmbeddings, OpenAIEmbeddings
from gateway.providers.gemini import GeminiTranslation
from gateway.providers.openai_compatible import OpenAICompatible
from gateway.providers.openai_responses import OpenAIResponsesPassthrough
from gateway.settings.server import ProviderSettings
from gateway.wire.apis import (
    ANTHROPIC_MESSAGES,
    OPENAI_COMPLETIONS,
    OPENAI_EMBEDDINGS,
    OPENAI_RESPONSES,
)


def translator_for(kind: str) -> Translation:
    """The translation from the internal chat request to a provider kind's API."""
    if kind == "openai":
        return OpenAICompatible()
    if kind == "anthropic":
        return AnthropicTranslation()
    if kind == "gemini":
        return GeminiTranslation()
    raise ValueError(f"unknown provider kind {kind!r}")


def translation_for(api: str, provider: ProviderSettings) -> Translation:
    """The translation serving a request in client API `api` on `provider`."""
    if api == ANTHROPIC_MESSAGES and provider.kind == "anthropic":
        return AnthropicNativeTranslation()
    if api == OPENAI_COMPLETIONS and provider.serves_natively("completions"):
        return OpenAICompatible(api=OPENAI_COMPLETIONS, path="/completions")
    if api == OPENAI_RESPONSES and provider.serves_natively("responses"):
        return OpenAIResponsesPassthrough()
    if api == OPENAI_EMBEDDINGS and provider.kind == "openai":
        return OpenAIEmbeddings()
    if api == OPENAI_EMBEDDINGS and provider.kind == "gemini":
        return GeminiEmbeddings()
    return translator_for(provider.kind)
