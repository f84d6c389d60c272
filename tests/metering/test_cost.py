"""Cost against hand-worked examples from the providers' published prices (USD per
million tokens), in exact decimals."""

from __future__ import annotations

from decimal import Decimal

import msgspec
import pytest

from gateway.metering.cost import (
    GpuHourAmortizer,
    cost_of,
    format_usd,
    output_cap,
    request_worst_case,
    worst_case_cost,
)
from gateway.settings.catalog import DeploymentSettings, ModelSettings, Prices, PriceTier
from gateway.tokens import count_prompt
from gateway.usage import Usage
from gateway.wire.openai import ChatRequest

D = Decimal

GPT_41 = Prices(input=D("2.00"), cached_input=D("0.50"), output=D("8.00"))
SONNET_45 = Prices(
    input=D("3.00"),
    cached_input=D("0.30"),
    cache_write=D("3.75"),
    output=D("15.00"),
    tiers=[
        PriceTier(
            above_input_tokens=200_000,
            input=D("6.00"),
            cached_input=D("0.60"),
            cache_write=D("7.50"),
            output=D("22.50"),
        )
    ],
)
GEMINI_25_FLASH = Prices(input=D("0.30"), cached_input=D("0.03"), output=D("2.50"))
DEEPSEEK_V32 = Prices(input=D("0.28"), cached_input=D("0.028"), output=D("0.42"))


def test_gpt41_prices_cached_prompt_tokens_at_the_cached_rate() -> None:
    # 6,000 uncached x 2.00 + 4,000 cached x 0.50 + 1,500 out x 8.00 = 26,000 micro-USD
    usage = Usage(input_tokens=10_000, cached_input_tokens=4_000, output_tokens=1_500)
    assert cost_of(usage, GPT_41) == D("0.026")


def test_sonnet_prices_cache_reads_and_writes_apart_from_plain_input() -> None:
    # Anthropic reported input 1,000 + cache_read 20,000 + cache_creation 5,000, out 800:
    # 1,000 x 3 + 20,000 x 0.30 + 5,000 x 3.75 + 800 x 15 = 39,750 micro-USD
    usage = Usage(
        input_tokens=26_000,
        cached_input_tokens=20_000,
        cache_write_tokens=5_000,
        output_tokens=800,
    )
    assert cost_of(usage, SONNET_45) == D("0.03975")


def test_sonnet_long_context_tier_applies_to_the_whole_request_above_200k() -> None:
    # 250,000 in x 6.00 + 2,000 out x 22.50 = 1,545,000 micro-USD
    long = Usage(input_tokens=250_000, output_tokens=2_000)
    assert cost_of(long, SONNET_45) == D("1.545")
    # exactly at the threshold is not above it: base prices, 600,000 + 30,000
    at_threshold = Usage(input_tokens=200_000, output_tokens=2_000)
    assert cost_of(at_threshold, SONNET_45) == D("0.63")


def test_sonnet_long_context_tier_has_its_own_cache_prices() -> None:
    # 150,000 x 6 + 100,000 x 0.60 + 50,000 x 7.50 + 1,000 x 22.50 = 1,357,500 micro-USD
    usage = Usage(
        input_tokens=300_000,
        cached_input_tokens=100_000,
        cache_write_tokens=50_000,
        output_tokens=1_000,
    )
    assert cost_of(usage, SONNET_45) == D("1.3575")


def test_sonnet_long_context_tier_prices_one_hour_cache_writes_at_its_own_rate() -> None:
    # above 200k the tier's 1-hour write (2 x 6.00 input = 12.00), not its 5-minute 7.50:
    # 150,000 x 6 + 40,000 x 7.50 + 60,000 x 12 + 1,000 x 22.50 = 1,942,500 micro-USD
    prices = SONNET_45.model_copy(
        update={
            "cache_write_1h": D("6.00"),
            "tiers": [SONNET_45.tiers[0].model_copy(update={"cache_write_1h": D("12.00")})],
        }
    )
    usage = Usage(
        input_tokens=250_000,
        cache_write_tokens=100_000,
        cache_write_1h_tokens=60_000,
        output_tokens=1_000,
    )
    assert cost_of(usage, prices) == D("1.9425")


def test_worst_case_reserves_a_prompt_written_to_the_one_hour_cache() -> None:
    prices = Prices(input=D("3"), output=D("15"), cache_write=D("3.75"), cache_write_1h=D("6"))
    # 100,000 x 6.00 + 1,000 x 15 = 615,000 micro-USD
    assert worst_case_cost(100_000, 1_000, prices) == D("0.615")


def test_gemini_flash_bills_thinking_tokens_as_output() -> None:
    # 4,000 x 0.30 + 8,000 x 0.03 + 3,000 out (2,000 of them thinking) x 2.50 = 8,940
    usage = Usage(
        input_tokens=12_000,
        cached_input_tokens=8_000,
        output_tokens=3_000,
        reasoning_tokens=2_000,
    )
    assert cost_of(usage, GEMINI_25_FLASH) == D("0.00894")


def test_deepseek_prices_cache_hits_at_a_tenth() -> None:
    # 36,000 x 0.28 + 64,000 x 0.028 + 5,000 x 0.42 = 13,972 micro-USD
    usage = Usage(input_tokens=100_000, cached_input_tokens=64_000, output_tokens=5_000)
    assert cost_of(usage, DEEPSEEK_V32) == D("0.013972")


def test_many_tiny_costs_sum_without_drift() -> None:
    one_cached_token = Usage(input_tokens=1, cached_input_tokens=1)
    total = sum((cost_of(one_cached_token, DEEPSEEK_V32) for _ in range(10_000)), D(0))
    assert total == D("0.00028")
    assert sum(0.028e-6 for _ in range(10_000)) != 0.00028  # what floats would have done


def test_deployment_prices_override_the_model_prices() -> None:
    discounted = Prices(input=D("1.50"), output=D("6.00"))
    model = ModelSettings(
        prices=GPT_41,
        deployments=[
            DeploymentSettings(provider="openai", upstream_model="gpt-4.1"),
            DeploymentSettings(provider="azure", upstream_model="gpt-4.1", prices=discounted),
        ],
    )
    plain, azure = model.deployments
    usage = Usage(input_tokens=1_000_000, output_tokens=1_000_000)
    assert cost_of(usage, model.prices_on(plain)) == D("10.00")
    assert cost_of(usage, model.prices_on(azure)) == D("7.50")
    assert model.prices_on() is GPT_41


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_gpu_hour_is_priced_at_the_expected_throughput_before_any_traffic() -> None:
    clock = FakeClock()
    amortizer = GpuHourAmortizer(D("2.00"), 1_000_000, clock=clock)
    prices = Prices(input=D(0), output=D(0), gpu_hour=D("2.00"))
    # served: 1,000 uncached input + 500 output; the 200 prefix-cache hits are free
    usage = Usage(input_tokens=1_200, cached_input_tokens=200, output_tokens=500)
    assert cost_of(usage, prices, amortizer) == D("0.003")  # 1,500 x $2 / 1M


def test_gpu_hour_price_follows_observed_throughput_as_the_window_fills() -> None:
    clock = FakeClock()
    amortizer = GpuHourAmortizer(D("2.00"), 1_000_000, clock=clock)
    for _ in range(30):  # 1,000,000 tokens over the first half hour
        clock.now += 60
        amortizer.observe(1_000_000 // 30 + (1 if _ < 1_000_000 % 30 else 0))
    # half observed (1M) + half assumed at the expected rate (0.5M) = 1.5M tokens/hour
    assert amortizer.tokens_per_hour() == D(1_500_000)
    for _ in range(30):  # 3,000,000 more in the second half hour
        clock.now += 60
        amortizer.observe(100_000)
    assert amortizer.tokens_per_hour() == D(4_000_000)
    usage = Usage(input_tokens=1_000, output_tokens=500)
    assert cost_of(usage, Prices(input=D(0), output=D(0), gpu_hour=D(2)), amortizer) == D("0.00075")


def test_gpu_hour_price_after_an_idle_hour_is_capped_by_the_minimum_utilization() -> None:
    clock = FakeClock()
    amortizer = GpuHourAmortizer(D("2.00"), 1_000_000, clock=clock)
    clock.now += 7200
    assert amortizer.tokens_per_hour() == D(100_000)
    assert amortizer.price_per_token() == D("0.00002")


def test_gpu_hour_uses_a_throughput_reported_by_the_pool() -> None:
    amortizer = GpuHourAmortizer(D("4.00"), 1_000_000, clock=FakeClock())
    amortizer.observe_rate(D(8_000_000))
    assert amortizer.price_per_token() == D("0.0000005")


def test_gpu_hour_prices_without_an_amortizer_are_refused() -> None:
    with pytest.raises(ValueError, match="GpuHourAmortizer"):
        cost_of(Usage(input_tokens=1), Prices(input=D(0), output=D(0), gpu_hour=D(2)))


def test_amortizer_for_prices_starts_from_the_gpu_class_throughput() -> None:
    h100 = GpuHourAmortizer.for_prices(Prices(input=D(0), output=D(0), gpu_hour=D(3)), "h100")
    assert h100 is not None and h100.expected_tokens_per_hour == 21_600_000
    assert GpuHourAmortizer.for_prices(GPT_41) is None


def test_worst_case_prices_the_prompt_as_a_cache_write_when_that_costs_more() -> None:
    # 150,000 x 3.75 (cache write beats 3.00 input) + 4,000 x 15 = 622,500 micro-USD
    assert worst_case_cost(150_000, 4_000, SONNET_45) == D("0.6225")
    # above 200k the tier's prices: 210,000 x 7.50 + 4,000 x 22.50
    assert worst_case_cost(210_000, 4_000, SONNET_45) == D("1.665")
    # no cache-write price: plain input, 10,000 x 2 + 1,000 x 8
    assert worst_case_cost(10_000, 1_000, GPT_41) == D("0.028")


@pytest.mark.parametrize(
    "prices",
    [
        GPT_41,
        SONNET_45,
        Prices(input=D("1"), output=D("2"), cache_write_1h=D("9")),
        Prices(
            input=D("1"),
            output=D("2"),
            tiers=[
                PriceTier(above_input_tokens=1_000, input=D("2"), output=D("3"), cache_write=D("5"))
            ],
        ),
    ],
)
@pytest.mark.parametrize("prompt", [10, 5_000, 250_000])
def test_worst_case_is_the_dearest_of_a_plain_and_a_cache_written_prompt(
    prices: Prices, prompt: int
) -> None:
    plain = Usage(input_tokens=prompt, output_tokens=300)
    written = Usage(input_tokens=prompt, cache_write_tokens=prompt, output_tokens=300)
    for_an_hour = Usage(
        input_tokens=prompt,
        cache_write_tokens=prompt,
        cache_write_1h_tokens=prompt,
        output_tokens=300,
    )
    expected = max(cost_of(plain, prices), cost_of(written, prices), cost_of(for_an_hour, prices))
    assert worst_case_cost(prompt, 300, prices) == expected


def test_worst_case_is_never_below_the_real_cost() -> None:
    real = Usage(
        input_tokens=150_000,
        cached_input_tokens=50_000,
        cache_write_tokens=90_000,
        output_tokens=4_000,
    )
    assert cost_of(real, SONNET_45) <= worst_case_cost(150_000, 4_000, SONNET_45)


def test_output_cap_takes_the_request_cap_within_the_model_limit_per_choice() -> None:
    model = ModelSettings(
        deployments=[DeploymentSettings(provider="p", upstream_model="m")],
        max_output_tokens=8_192,
    )
    assert output_cap(model, None) == 8_192
    assert output_cap(model, 100, choices=3) == 300
    assert output_cap(model, 20_000) == 8_192
    with_default = model.model_copy(update={"default_max_tokens": 1_024})
    assert output_cap(with_default, None) == 1_024


def _request(**extra: object) -> ChatRequest:
    body = {
        "model": "gpt-4.1",
        "messages": [
            {"role": "system", "content": "You are terse."},
            {"role": "user", "content": "Name three prime numbers."},
        ],
        **extra,
    }
    return msgspec.convert(body, ChatRequest)


def test_request_worst_case_counts_the_prompt_and_the_clients_max_tokens() -> None:
    model = ModelSettings(
        deployments=[DeploymentSettings(provider="p", upstream_model="m")], prices=GPT_41
    )
    request = _request(max_tokens=1_000)
    prompt = count_prompt(request)
    expected = (prompt * D("2.00") + 1_000 * D("8.00")) / 1_000_000
    assert request_worst_case(request, model, GPT_41) == expected


def test_format_usd_rounds_only_for_display() -> None:
    assert format_usd(D("0.013972")) == "0.013972"
    assert format_usd(D("0.0000005")) == "0.000000"
    assert format_usd(D("1.545"), 2) == "1.54"  # banker's rounding, half to even
