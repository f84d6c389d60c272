"""`POST /v1/completions` (legacy text completions) through the same pipeline as chat,
with the official `openai` SDK: passed through to an upstream that serves completions
(an OpenAI-compatible fake, the emulator), translated for one that speaks only chat (an
OpenAI-compatible chat server, Anthropic); limited, budgeted, priced and recorded in the
ledger as chat is."""

from __future__ import annotations

from collections.abc import Iterator
from decimal import Decimal
from typing import Any

import httpx
import openai
import pytest

from tests.emulator.emulator_process import EmulatorThread, emulator_thread
from tests.fakes.anthropic_server import AnthropicFake
from tests.fakes.openai_server import OpenAIFake
from tests.support.gateway_process import GatewayProcess, key_hash, openai_provider

CLIENT_KEY = "gw-completions-client"
LIMITED_KEY = "gw-completions-limited"
BROKE_KEY = "gw-completions-broke"
ADMIN_KEY = "gw-completions-admin"
ANTHROPIC_KEY = "sk-ant-completions-0123456789"
PRICES = {"input": 1.0, "output": 2.0}


def model(provider: str, upstream: str, **extra: Any) -> dict[str, Any]:
    return {
        "deployments": [{"provider": provider, "upstream_model": upstream}],
        "prices": PRICES,
        **extra,
    }


def policy() -> dict[str, Any]:
    return {
        "models": {
            "native-model": model("native", "upstream-native"),
            "chat-model": model("chatonly", "upstream-chat"),
            "emulated": model("emulator", "emulated-llama"),
            "claude": model("anthropic", "claude-sonnet-4-5", default_max_tokens=64),
        },
        "tenants": {
            "acme": {
                "keys": [
                    {"id": "main", "hash": key_hash(CLIENT_KEY)},
                    {
                        "id": "limited",
                        "hash": key_hash(LIMITED_KEY),
                        "limits": {"requests_per_minute": 2},
                    },
                ]
            },
            "broke": {
                "keys": [{"id": "broke", "hash": key_hash(BROKE_KEY)}],
                "budgets": [{"usd": "0.00001", "period": "month"}],
            },
        },
    }


@pytest.fixture(scope="module")
def upstreams() -> Iterator[tuple[OpenAIFake, AnthropicFake, EmulatorThread]]:
    with (
        OpenAIFake() as fake,
        AnthropicFake(api_key=ANTHROPIC_KEY) as anthropic,
        emulator_thread(time_scale=0.01, model="emulated-llama") as emulator,
    ):
        yield fake, anthropic, emulator


@pytest.fixture(scope="module")
def gateway(
    upstreams: tuple[OpenAIFake, AnthropicFake, EmulatorThread],
) -> Iterator[GatewayProcess]:
    fake, anthropic, emulator = upstreams
    config = {
        "server": {"admin_key_hash": key_hash(ADMIN_KEY)},
        "providers": {
            "native": openai_provider(fake.base_url, native_apis=["completions"]),
            "chatonly": openai_provider(fake.base_url),
            "emulator": openai_provider(emulator.base_url + "/v1", native_apis=["completions"]),
            "anthropic": {
                "kind": "anthropic",
                "base_url": anthropic.base_url,
                "api_key": ANTHROPIC_KEY,
            },
        },
    }
    with GatewayProcess(config, policy()) as process:
        yield process


@pytest.fixture
def client(gateway: GatewayProcess) -> openai.OpenAI:
    return openai.OpenAI(base_url=gateway.base_url, api_key=CLIENT_KEY, max_retries=0)


def test_a_completions_upstream_gets_the_clients_body_as_it_came(
    client: openai.OpenAI, upstreams: tuple[OpenAIFake, AnthropicFake, EmulatorThread]
) -> None:
    fake = upstreams[0]
    fake.requests.clear()
    raw = client.completions.with_raw_response.create(
        model="native-model", prompt="say hi", max_tokens=7, echo=False, extra_body={"top_k": 3}
    )
    completion = raw.parse()
    assert completion.object == "text_completion"
    assert completion.choices[0].text == "echo: say hi"
    # passed through: `model` is the served model as the upstream named it (issue 18)
    assert completion.model == "upstream-native"
    sent = fake.requests[-1].body
    assert sent["prompt"] == "say hi" and "messages" not in sent
    assert sent["model"] == "upstream-native" and sent["top_k"] == 3 and sent["max_tokens"] == 7
    assert completion.usage is not None and completion.usage.prompt_tokens == 7
    cost = Decimal(raw.headers["x-gateway-cost-usd"])
    usage = completion.usage
    assert cost == (usage.prompt_tokens * 1 + usage.completion_tokens * 2) / Decimal(1_000_000)
    assert raw.headers["x-gateway-provider"] == "native"


def test_a_prompt_array_passes_through_to_a_completions_upstream(client: openai.OpenAI) -> None:
    completion = client.completions.create(model="native-model", prompt=["one", "two"])
    assert [c.index for c in completion.choices] == [0, 1]


def test_a_chat_only_upstream_gets_the_prompt_as_one_user_message(
    client: openai.OpenAI, upstreams: tuple[OpenAIFake, AnthropicFake, EmulatorThread]
) -> None:
    fake = upstreams[0]
    fake.requests.clear()
    completion = client.completions.create(model="chat-model", prompt="say hi", stop=["\n"])
    assert completion.object == "text_completion"
    assert completion.choices[0].text == "echo: say hi"
    assert completion.choices[0].finish_reason == "stop"
    sent = fake.requests[-1].body
    assert sent["messages"] == [{"role": "user", "content": "say hi"}]
    # OpenAI's completions default, made explicit for the chat upstream
    assert sent["max_tokens"] == 16 and sent["stop"] == ["\n"]
    assert completion.usage is not None and completion.usage.completion_tokens == 3


def test_what_chat_cannot_express_is_refused_naming_the_field(client: openai.OpenAI) -> None:
    with pytest.raises(openai.BadRequestError) as caught:
        client.completions.create(model="chat-model", prompt=["one", "two"])
    assert caught.value.param == "prompt"
    with pytest.raises(openai.BadRequestError) as caught:
        client.completions.create(model="chat-model", prompt="x", echo=True)
    assert caught.value.param == "echo"


# every answer carries the served model as the upstream named it, passed through or
# written by the gateway (from chat, or from Anthropic), the usage chunk included
ANSWERED_AS = {
    "native-model": "upstream-native",
    "emulated": "emulated-llama",
    "chat-model": "upstream-chat",
    "claude": "claude-sonnet-4-5",
}


@pytest.mark.parametrize("model_name", ["native-model", "chat-model", "emulated", "claude"])
def test_streams_carry_the_text_and_the_usage_chunk(client: openai.OpenAI, model_name: str) -> None:
    stream = client.completions.create(
        model=model_name,
        prompt="tell me something",
        max_tokens=12,
        stream=True,
        stream_options={"include_usage": True},
    )
    chunks = list(stream)
    text = "".join(c.choices[0].text for c in chunks if c.choices)
    assert text.strip()
    assert all(c.object == "text_completion" for c in chunks)
    assert all(c.model == ANSWERED_AS[model_name] for c in chunks)
    final = chunks[-1]
    assert final.choices == [] and final.usage is not None
    assert final.usage.completion_tokens > 0
    extension = (final.model_extra or {}).get("x_gateway")
    assert extension is not None and Decimal(extension["cost_usd"]) > 0


@pytest.mark.parametrize("model_name", ["emulated", "claude"])
def test_emulator_and_anthropic_answer_whole_completions(
    client: openai.OpenAI, model_name: str
) -> None:
    raw = client.completions.with_raw_response.create(
        model=model_name, prompt="hello there", max_tokens=10
    )
    completion = raw.parse()
    assert completion.choices[0].text
    assert completion.usage is not None and completion.usage.total_tokens > 0
    assert Decimal(raw.headers["x-gateway-cost-usd"]) > 0


def test_completions_count_against_the_keys_rate_limit(gateway: GatewayProcess) -> None:
    limited = openai.OpenAI(base_url=gateway.base_url, api_key=LIMITED_KEY, max_retries=0)
    limited.completions.create(model="native-model", prompt="a")
    limited.chat.completions.create(
        model="native-model", messages=[{"role": "user", "content": "b"}]
    )
    # chat and completions draw on the same bucket: the third request is refused
    with pytest.raises(openai.RateLimitError) as caught:
        limited.completions.create(model="native-model", prompt="c")
    assert caught.value.response.headers.get("retry-after")


def test_completions_spend_against_the_tenants_budget(gateway: GatewayProcess) -> None:
    broke = openai.OpenAI(base_url=gateway.base_url, api_key=BROKE_KEY, max_retries=0)
    with pytest.raises(openai.RateLimitError) as caught:
        for _ in range(20):
            broke.completions.create(model="native-model", prompt="spend " * 20)
    assert caught.value.code == "insufficient_quota"


def test_the_ledger_records_completions_like_chat(
    client: openai.OpenAI, gateway: GatewayProcess
) -> None:
    before = _spend_by_model(gateway).get("emulated", {"requests": 0})
    client.completions.create(model="emulated", prompt="count me", max_tokens=5)
    after = _spend_by_model(gateway)["emulated"]
    assert after["requests"] == before["requests"] + 1
    assert Decimal(str(after["cost_usd"])) > Decimal(str(before.get("cost_usd", 0)))


def test_get_on_completions_is_405(gateway: GatewayProcess) -> None:
    response = httpx.get(
        gateway.base_url + "/completions", headers={"authorization": f"Bearer {CLIENT_KEY}"}
    )
    assert response.status_code == 405
    assert response.headers["allow"] == "POST"
    assert response.json()["error"]["code"] == "method_not_allowed"


def _spend_by_model(gateway: GatewayProcess) -> dict[str, dict[str, Any]]:
    response = httpx.get(
        gateway.url + "/admin/spend",
        params={"group_by": "model"},
        headers={"authorization": f"Bearer {ADMIN_KEY}"},
    )
    response.raise_for_status()
    return {row["group"]: row for row in response.json()["rows"]}
