"""The model catalog (`policies/models.yaml`): what each model alias is, where it runs,
what it costs and what it is good at."""

from __future__ import annotations

from decimal import Decimal
from functools import cached_property
from typing import Literal

from pydantic import Field, model_validator

from gateway.settings.base import Strict
from gateway.usage import Usage

MILLION = Decimal(1_000_000)

Capability = Literal["tools", "vision", "json_schema", "reasoning", "streaming"]


class PriceTier(Strict):
    """Prices that apply instead of the base ones when a request's input exceeds a size."""

    above_input_tokens: int = Field(ge=0)
    input: Decimal = Field(ge=0)
    output: Decimal = Field(ge=0)
    cached_input: Decimal | None = Field(None, ge=0)
    cache_write: Decimal | None = Field(None, ge=0)
    # one-hour cache writes above the threshold; falls back to the tier's cache_write
    cache_write_1h: Decimal | None = Field(None, ge=0)


class Prices(Strict):
    """USD per million tokens. Missing cache prices fall back to the input price."""

    input: Decimal = Field(ge=0)
    output: Decimal = Field(ge=0)
    cached_input: Decimal | None = Field(None, ge=0)
    cache_write: Decimal | None = Field(None, ge=0)
    # one-hour cache writes (Anthropic's `ttl: 1h`); falls back to cache_write
    cache_write_1h: Decimal | None = Field(None, ge=0)
    tiers: list[PriceTier] = Field(default_factory=list)
    # self-hosted: the GPU's hourly cost, amortised over the tokens it serves
    gpu_hour: Decimal | None = Field(None, ge=0)

    def tier_for(self, input_tokens: int) -> PriceTier | None:
        """The highest tier whose threshold the request's input exceeds, if any."""
        chosen: PriceTier | None = None
        for tier in self.tiers:
            if input_tokens > tier.above_input_tokens and (
                chosen is None or tier.above_input_tokens > chosen.above_input_tokens
            ):
                chosen = tier
        return chosen

    @cached_property
    def plain_prices(self) -> tuple[Decimal, Decimal] | None:
        """(input, output) when no tier and no cache price of its own applies, else None:
        read once (every attribute read of a pydantic model goes through its `__getattr__`
        hook; `cost_of` runs a few times a request)."""
        if self.tiers or self.cached_input is not None or self.cache_write is not None:
            return None
        return self.input, self.output

    def cost_of(self, usage: Usage) -> Decimal:
        """Exact USD cost of one request's usage: the one price formula of the gateway.

        Cached reads and cache writes are priced apart from the rest of the input;
        reasoning tokens are output tokens. A tier applies to the whole request when its
        input exceeds the tier's threshold (how Anthropic and Google price long context).
        """
        plain = self.plain_prices
        if plain is not None and not usage.cached_input_tokens and not usage.cache_write_tokens:
            # most requests: no tier, nothing cached, no cache prices of their own (so the
            # terms left out are zeros at the input price's exponent): the same Decimal
            return (usage.input_tokens * plain[0] + usage.output_tokens * plain[1]) / MILLION
        tier = self.tier_for(usage.input_tokens)
        input_price = tier.input if tier else self.input
        output_price = tier.output if tier else self.output
        cached_price = _first(tier.cached_input if tier else None, self.cached_input, input_price)
        write_price = _first(tier.cache_write if tier else None, self.cache_write, input_price)
        if tier:
            hour_price = _first(tier.cache_write_1h, write_price)
        else:
            hour_price = _first(self.cache_write_1h, write_price)
        hour_writes = min(usage.cache_write_1h_tokens, usage.cache_write_tokens)
        micro_usd = (
            usage.uncached_input_tokens * input_price
            + usage.cached_input_tokens * cached_price
            + (usage.cache_write_tokens - hour_writes) * write_price
            + hour_writes * hour_price
            + usage.output_tokens * output_price
        )
        return micro_usd / MILLION


def _first(*prices: Decimal | None) -> Decimal:
    for price in prices:
        if price is not None:
            return price
    return Decimal(0)


class RateLimitSettings(Strict):
    """Token buckets and a concurrency cap. `*_burst` is the bucket's capacity (defaults to
    one minute's worth); the bucket refills continuously at the per-minute rate."""

    requests_per_minute: int | None = Field(None, ge=1)
    tokens_per_minute: int | None = Field(None, ge=1)
    requests_burst: int | None = Field(None, ge=1)
    tokens_burst: int | None = Field(None, ge=1)
    max_concurrent: int | None = Field(None, ge=1)


class DeploymentSettings(Strict):
    provider: str
    upstream_model: str
    id: str | None = None
    weight: float = Field(1.0, gt=0)
    limits: RateLimitSettings | None = None
    prices: Prices | None = None

    @property
    def key(self) -> str:
        """Its name in plans, breakers, stats and limits: its `id`, else provider/model."""
        return self.id or f"{self.provider}/{self.upstream_model}"


def _default_capabilities() -> list[Capability]:
    return ["tools", "streaming", "json_schema"]


class ModelSettings(Strict):
    deployments: list[DeploymentSettings] = Field(min_length=1)
    prices: Prices = Prices(input=Decimal(0), output=Decimal(0))
    context_window: int = Field(128_000, ge=1)
    max_output_tokens: int = Field(8192, ge=1)
    default_max_tokens: int | None = Field(None, ge=1)
    capabilities: list[Capability] = Field(default_factory=_default_capabilities)
    quality: dict[str, float] = Field(default_factory=dict)
    aliases: list[str] = Field(default_factory=list)
    limits: RateLimitSettings | None = None
    # which tokenizer approximates this model's counts (see gateway/tokens.py)
    tokenizer: Literal["cl100k", "approx"] = "cl100k"
    owned_by: str | None = None
    # what the model does: chat models serve chat, completions and Responses; embedding
    # models serve /v1/embeddings only (priced per input token: `prices.input`)
    kind: Literal["chat", "embedding"] = "chat"
    # an embedding model's vector size when the client asks for none
    dimensions: int | None = Field(None, ge=1)

    def prices_on(self, deployment: DeploymentSettings | None = None) -> Prices:
        """The deployment's own prices when it has them, else the model's."""
        if deployment is not None and deployment.prices is not None:
            return deployment.prices
        return self.prices

    @model_validator(mode="after")
    def _default_max_within_limit(self) -> ModelSettings:
        if self.default_max_tokens and self.default_max_tokens > self.max_output_tokens:
            raise ValueError("default_max_tokens must not exceed max_output_tokens")
        return self
