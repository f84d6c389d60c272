"""What a request cost: catalog prices applied to normalized usage, in exact decimals.

The one price formula is `Prices.cost_of` (gateway/settings/catalog.py); this module
chooses which `Prices` apply, adds the self-hosted GPU-hour share, bounds the worst case
for admission, and estimates usage when a provider reported none.

Self-hosted GPU pricing
-----------------------
A GPU costs its hourly price whether it is busy or idle, so the honest per-token price
is `gpu_hour / tokens served per hour`. :class:`GpuHourAmortizer` keeps a sliding window
(default one hour) of the tokens a deployment served. Until the window has filled, the
missing part is assumed to have run at the configured expected throughput, so the first
requests after start are priced at `gpu_hour / expected_tokens_per_hour` and the price
drifts to the observed one as the window fills. Throughput never counts as lower than
`min_utilization` times the expected one, so a request after an idle hour is not
charged the whole idle hour.

"Tokens served" are the tokens the GPU computed: uncached input, cache writes and output.
Prefix-cache hits (`cached_input_tokens`) cost the GPU almost nothing and are not
counted. Each gateway process observes only its own traffic; with several replicas in
front of one pool, pass the pool's scraped throughput to `observe_rate` instead.

All amounts are `Decimal` USD; quantize only for display (`format_usd`).
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable
from decimal import ROUND_HALF_EVEN, Decimal
from typing import TYPE_CHECKING

from gateway.settings.catalog import ModelSettings, Prices
from gateway.tokens import count_prompt
from gateway.usage import Usage

if TYPE_CHECKING:
    from gateway.wire.openai import ChatRequest

SECONDS_PER_HOUR = Decimal(3600)

# Rough continuous-batching throughput (tokens per hour, prompt + output) of an 8B-class
# model on one GPU: a starting point that observation replaces within the window.
EXPECTED_TOKENS_PER_HOUR: dict[str, int] = {
    "v100": 3_600_000,
    "a100": 10_800_000,
    "h100": 21_600_000,
}
DEFAULT_EXPECTED_TOKENS_PER_HOUR = EXPECTED_TOKENS_PER_HOUR["a100"]


def served_tokens(usage: Usage) -> int:
    """Tokens a self-hosted GPU actually computed for this usage (cache hits excluded)."""
    return usage.input_tokens - usage.cached_input_tokens + usage.output_tokens


class GpuHourAmortizer:
    """Converts a deployment's $/GPU-hour into $/token from the tokens it serves.

    One instance per self-hosted deployment, owned by whoever owns the deployment's
    lifetime; `clock` is injectable so tests control time.
    """

    def __init__(
        self,
        gpu_hour_usd: Decimal,
        expected_tokens_per_hour: int = DEFAULT_EXPECTED_TOKENS_PER_HOUR,
        *,
        window_seconds: float = 3600.0,
        bucket_seconds: float = 60.0,
        min_utilization: Decimal = Decimal("0.1"),
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if expected_tokens_per_hour <= 0:
            raise ValueError("expected_tokens_per_hour must be positive")
        if window_seconds <= 0 or bucket_seconds <= 0 or bucket_seconds > window_seconds:
            raise ValueError("need 0 < bucket_seconds <= window_seconds")
        self.gpu_hour_usd = gpu_hour_usd
        self.expected_tokens_per_hour = expected_tokens_per_hour
        self.window_seconds = window_seconds
        self.bucket_seconds = bucket_seconds
        self.min_utilization = min_utilization
        self._clock = clock
        self._started = clock()
        # (bucket index, tokens) oldest first; bounded by window / bucket
        self._buckets: deque[tuple[int, int]] = deque()
        self._reported_rate: Decimal | None = None

    @classmethod
    def for_prices(
        cls,
        prices: Prices,
        gpu_class: str | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> GpuHourAmortizer | None:
        """An amortizer for prices with a `gpu_hour` (expected throughput from the pool's
        GPU class), None for per-token prices."""
        if prices.gpu_hour is None:
            return None
        expected = EXPECTED_TOKENS_PER_HOUR.get(gpu_class or "", DEFAULT_EXPECTED_TOKENS_PER_HOUR)
        return cls(prices.gpu_hour, expected, clock=clock)

    def observe(self, tokens: int) -> None:
        """Count tokens the deployment served (call once per settled request)."""
        if tokens <= 0:
            return
        index = int(self._clock() // self.bucket_seconds)
        if self._buckets and self._buckets[-1][0] == index:
            self._buckets[-1] = (index, self._buckets[-1][1] + tokens)
        else:
            self._buckets.append((index, tokens))
        self._expire(index)

    def observe_rate(self, tokens_per_hour: Decimal | None) -> None:
        """Use a throughput measured elsewhere (the pool's metrics); None reverts to
        counting this process's own traffic."""
        self._reported_rate = tokens_per_hour

    def tokens_per_hour(self) -> Decimal:
        """Observed throughput, the expected one filling the part of the window not yet seen."""
        expected = Decimal(self.expected_tokens_per_hour)
        if self._reported_rate is not None:
            rate = self._reported_rate
        else:
            now = self._clock()
            self._expire(int(now // self.bucket_seconds))
            window = Decimal(repr(self.window_seconds))
            elapsed = min(Decimal(repr(max(0.0, now - self._started))), window)
            observed = Decimal(sum(tokens for _, tokens in self._buckets))
            unseen_share = expected * (window - elapsed) / SECONDS_PER_HOUR
            rate = (observed + unseen_share) * SECONDS_PER_HOUR / window
        return max(rate, expected * self.min_utilization)

    def price_per_token(self) -> Decimal:
        return self.gpu_hour_usd / self.tokens_per_hour()

    def cost_of(self, usage: Usage) -> Decimal:
        return served_tokens(usage) * self.price_per_token()

    def _expire(self, current_index: int) -> None:
        oldest = current_index - int(self.window_seconds // self.bucket_seconds)
        while self._buckets and self._buckets[0][0] <= oldest:
            self._buckets.popleft()


def cost_of(usage: Usage, prices: Prices, amortizer: GpuHourAmortizer | None = None) -> Decimal:
    """USD for one request: per-token prices plus, for self-hosted, the GPU-hour share.

    Prices with a `gpu_hour` need the deployment's amortizer; pricing them without one
    would silently drop the GPU's cost, so it is an error.
    """
    cost = prices.cost_of(usage)
    if prices.gpu_hour is not None:
        if amortizer is None:
            raise ValueError("prices with gpu_hour need a GpuHourAmortizer for the deployment")
        cost += amortizer.cost_of(usage)
    return cost


def output_cap(model: ModelSettings, requested: int | None, choices: int = 1) -> int:
    """The most output tokens a request can produce: the client's cap (or the model's
    default), never above the model's limit, times the number of choices."""
    cap = requested or model.default_max_tokens or model.max_output_tokens
    return min(cap, model.max_output_tokens) * max(1, choices)


def worst_case_cost(
    prompt_tokens: int,
    max_output_tokens: int,
    prices: Prices,
    amortizer: GpuHourAmortizer | None = None,
) -> Decimal:
    """The most a request can cost, for budget reservations at admission.

    Nothing is assumed cached; the prompt is priced at the highest of the input and
    cache-write (5-minute and 1-hour) prices, since a request may write its whole prompt
    to a cache.
    """
    plain = Usage(input_tokens=prompt_tokens, output_tokens=max_output_tokens)
    plain_cost = cost_of(plain, prices, amortizer)
    if not _has_cache_write_prices(prices):
        # cache writes are priced as input: the written prompt costs the same (admission
        # asks this once per request)
        return plain_cost
    written = Usage(
        input_tokens=prompt_tokens,
        cache_write_tokens=prompt_tokens,
        output_tokens=max_output_tokens,
    )
    # the whole prompt written for five minutes, or for an hour
    written_for_an_hour = Usage(
        input_tokens=prompt_tokens,
        cache_write_tokens=prompt_tokens,
        cache_write_1h_tokens=prompt_tokens,
        output_tokens=max_output_tokens,
    )
    return max(
        plain_cost,
        cost_of(written, prices, amortizer),
        cost_of(written_for_an_hour, prices, amortizer),
    )


def _has_cache_write_prices(prices: Prices) -> bool:
    if prices.cache_write is not None or prices.cache_write_1h is not None:
        return True
    for tier in prices.tiers:  # (a loop: `any` over a generator cost more)
        if tier.cache_write is not None or tier.cache_write_1h is not None:
            return True
    return False


def largest_output_within(
    budget_usd: Decimal,
    prompt_tokens: int,
    prices: Prices,
    ceiling: int,
    choices: int = 1,
    amortizer: GpuHourAmortizer | None = None,
) -> int:
    """The largest `max_tokens` (at most `ceiling`) whose worst case fits `budget_usd`, or 0
    when not even one output token does: what a budget refusal tells the client to ask for.
    The worst case grows with the cap (tiers only raise the rate), so a bisection is exact."""
    choices = max(1, choices)

    def fits(cap: int) -> bool:
        return worst_case_cost(prompt_tokens, cap * choices, prices, amortizer) <= budget_usd

    low, high = 0, ceiling
    while low < high:
        middle = (low + high + 1) // 2
        if fits(middle):
            low = middle
        else:
            high = middle - 1
    return low if low > 0 and fits(low) else 0


def request_worst_case(
    request: ChatRequest,
    model: ModelSettings,
    prices: Prices,
    amortizer: GpuHourAmortizer | None = None,
    prompt_tokens: int | None = None,
) -> Decimal:
    """`worst_case_cost` for a chat request, counting its prompt unless given."""
    if prompt_tokens is None:
        prompt_tokens = count_prompt(request, model.tokenizer)
    cap = output_cap(model, request.output_limit, request.n or 1)
    return worst_case_cost(prompt_tokens, cap, prices, amortizer)


def format_usd(amount: Decimal, places: int = 6) -> str:
    """A fixed-point string for headers and tables (display only, never for sums)."""
    return str(amount.quantize(Decimal(1).scaleb(-places), rounding=ROUND_HALF_EVEN))
