"""Which client API each path speaks: the one table the HTTP layer consults to hand a
request to the pipeline with its codec."""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

from gateway.ingress.anthropic_messages import AnthropicMessagesCodec
from gateway.ingress.base import IngressCodec
from gateway.ingress.embeddings import EmbeddingsCodec
from gateway.ingress.openai_chat import OpenAIChatCodec
from gateway.ingress.openai_completions import OpenAICompletionsCodec
from gateway.ingress.openai_responses import OpenAIResponsesCodec
from gateway.json_body import DEFAULT_MAX_DEPTH


def ingress_codecs(max_json_depth: int = DEFAULT_MAX_DEPTH) -> Mapping[str, IngressCodec]:
    """Path -> the codec of the API served there."""
    return MappingProxyType(
        {
            "/v1/chat/completions": OpenAIChatCodec(max_json_depth),
            "/v1/completions": OpenAICompletionsCodec(max_json_depth),
            "/v1/responses": OpenAIResponsesCodec(),
            "/v1/embeddings": EmbeddingsCodec(),
            "/v1/messages": AnthropicMessagesCodec(max_json_depth),
        }
    )
