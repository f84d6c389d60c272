"""Expected cost of serving a request on one deployment, before it is sent."""

from __future__ import annotations

from decimal import Decimal

from gateway.settings.catalog import ModelSettings, Prices
from gateway.settings.routes import RouteSettings
from gateway.usage import Usage


def expected_output_tokens(
    model: ModelSettings,
    route: RouteSettings,
    request_max_tokens: int | None,
    route_median: int | None,
) -> int:
    """The request's max_tokens, capped by the route's recent median output when known;
    without either, the route's `expected_output_tokens`, else the model's default or max
    output. Never above what the model can produce."""
    if request_max_tokens and route_median:
        estimate = min(request_max_tokens, route_median)
    elif request_max_tokens or route_median:
        estimate = request_max_tokens or route_median or 0
    elif route.expected_output_tokens is not None:
        estimate = route.expected_output_tokens
    else:
        estimate = model.default_max_tokens or model.max_output_tokens
    return min(estimate, model.max_output_tokens)


def expected_cost(prices: Prices, prompt_tokens: int, output_tokens: int) -> Decimal:
    """USD, through the one price formula; no cache hits are assumed."""
    return prices.cost_of(Usage(input_tokens=prompt_tokens, output_tokens=output_tokens))


def usd(amount: Decimal) -> str:
    """A cost for people: six decimals are enough to tell cheap models apart."""
    return f"${amount:.6f}"
