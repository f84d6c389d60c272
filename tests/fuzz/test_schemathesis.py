"""The project's own fuzz suite, part 1: schemathesis generates requests (valid and
invalid) from the gateway's own `GET /openapi.json` and sends them to a live gateway in
front of the OpenAI, Anthropic and Gemini fakes. Fixed seed, bounded examples (a CI
budget of about a minute). Every answer must be one the gateway owns up to: no 5xx
(the fakes are healthy, so a 5xx is the gateway's own), every error OpenAI-shaped, a
stream ending `data: [DONE]`, no upstream key anywhere; and the gateway must still serve
a normal request afterwards."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from typing import Any

import httpx
import openai
import pytest
from hypothesis import HealthCheck, given, seed, settings
from hypothesis import strategies as st

from tests.fakes.anthropic_server import AnthropicFake
from tests.fakes.gemini_server import GeminiFake
from tests.fakes.openai_server import OpenAIFake
from tests.support.gateway_process import GatewayProcess, key_hash, openai_provider

KEY = "gw-test-key-fuzz"
OPENAI_KEY = "sk-upstream-FUZZ-SECRET-5c1e"
ANTHROPIC_KEY = "sk-ant-FUZZ-SECRET-9d2a"
GEMINI_KEY = "AIza-FUZZ-SECRET-77b3"
SECRETS = (OPENAI_KEY, ANTHROPIC_KEY, GEMINI_KEY)
MODELS = ("fast-model", "claude", "gemini")
CHAT_EXAMPLES = 100


def _model(provider: str, upstream: str) -> dict[str, Any]:
    return {
        "deployments": [{"provider": provider, "upstream_model": upstream}],
        "prices": {"input": 1.0, "output": 2.0},
        "capabilities": ["tools", "vision", "json_schema", "streaming"],
    }


@pytest.fixture(scope="module")
def fuzz_gateway() -> Iterator[GatewayProcess]:
    never_open = {"failure_threshold": 100_000, "min_requests": 100_000}
    once = {"max_attempts": 1}
    with (
        OpenAIFake() as openai_fake,
        AnthropicFake(api_key=ANTHROPIC_KEY) as anthropic_fake,
        GeminiFake(api_key=GEMINI_KEY) as gemini_fake,
    ):
        config = {
            "providers": {
                "fake": openai_provider(openai_fake.base_url, retry=once, breaker=never_open),
                "anthropic": {
                    "kind": "anthropic",
                    "base_url": anthropic_fake.base_url,
                    "api_key": "${FUZZ_ANTHROPIC_KEY}",
                    "retry": once,
                    "breaker": never_open,
                },
                "google": {
                    "kind": "gemini",
                    "base_url": gemini_fake.base_url,
                    "api_key": "${FUZZ_GEMINI_KEY}",
                    "retry": once,
                    "breaker": never_open,
                },
            }
        }
        policy = {
            "models": {
                "fast-model": _model("fake", "upstream-fast"),
                "claude": _model("anthropic", "claude-sonnet-4-5"),
                "gemini": _model("google", "gemini-2.5-flash"),
            },
            "tenants": {"acme": {"keys": [{"id": "fuzz", "hash": key_hash(KEY)}]}},
        }
        env = {
            "FAKE_UPSTREAM_KEY": OPENAI_KEY,
            "FUZZ_ANTHROPIC_KEY": ANTHROPIC_KEY,
            "FUZZ_GEMINI_KEY": GEMINI_KEY,
        }
        with GatewayProcess(config, policy, env=env) as process:
            yield process


def _steer(case: Any) -> None:
    """Most generated bodies name a random model (a 404); send two in three to a real one,
    chosen by the body's hash so the run stays reproducible."""
    body = case.body
    if isinstance(body, dict) and isinstance(body.get("model"), str):
        digest = hashlib.sha256(json.dumps(body, sort_keys=True, default=str).encode()).digest()
        if digest[0] % 3:
            body["model"] = MODELS[digest[1] % len(MODELS)]


def check_answer(case: Any) -> None:
    _steer(case)
    case.headers = {**(case.headers or {}), "Authorization": f"Bearer {KEY}"}
    response = case.call(timeout=30)
    status = response.status_code
    content = response.content or b""
    where = f"{case.method} {case.path} {case.body!r:.300} -> {status}: {content[:300]!r}"
    assert status < 500, where
    headers = " ".join(f"{k}: {v}" for k, v in response.headers.items())
    for secret in SECRETS:
        assert secret.encode() not in content and secret not in headers, where
    content_type = str(response.headers.get("content-type", ""))
    if status >= 400:
        assert "application/json" in content_type, where
        error = json.loads(content)["error"]
        assert set(error) == {"message", "type", "param", "code"}, where
        assert isinstance(error["message"], str) and error["message"], where
    elif "text/event-stream" in content_type:
        lines = [line for line in content.decode().splitlines() if line]
        assert lines, where
        for line in lines[:-1]:
            assert line.startswith("data: {"), where
            json.loads(line.removeprefix("data: "))
        # schemathesis stops reading a stream after 20 events (or its timeout): the end
        # is checked only on the streams it read to the end
        if not response.stream_cut_short:
            assert lines[-1] == "data: [DONE]", where


def fuzz(strategy: st.SearchStrategy[Any], examples: int) -> None:
    @seed(15)
    @settings(
        max_examples=examples,
        deadline=None,
        derandomize=True,
        database=None,
        suppress_health_check=list(HealthCheck),
    )
    @given(strategy)
    def run(case: Any) -> None:
        check_answer(case)

    run()


# the strategies, not schemathesis' pytest plugin (whose lazy fixture loader needs an
# older pytest): valid and invalid requests for each operation in the document
@pytest.mark.parametrize(
    "path,method,examples",
    [("/v1/chat/completions", "POST", CHAT_EXAMPLES), ("/v1/models", "GET", 10)],
)
def test_every_generated_request_gets_an_answer_the_gateway_owns(
    fuzz_gateway: GatewayProcess, path: str, method: str, examples: int
) -> None:
    # imported here: half a second of every worker's collection, for two tests
    import schemathesis
    from schemathesis.generation.modes import GenerationMode

    operation = schemathesis.openapi.from_url(fuzz_gateway.url + "/openapi.json")[path][method]
    cases = st.one_of(
        operation.as_strategy(GenerationMode.POSITIVE),
        operation.as_strategy(GenerationMode.NEGATIVE),
    )
    fuzz(cases, examples)


def test_the_gateway_still_serves_after_the_fuzzing(fuzz_gateway: GatewayProcess) -> None:
    assert httpx.get(fuzz_gateway.url + "/healthz").status_code == 200
    client = openai.OpenAI(base_url=fuzz_gateway.base_url, api_key=KEY, max_retries=0)
    for model in MODELS:
        reply = client.chat.completions.create(
            model=model, messages=[{"role": "user", "content": "still there?"}]
        )
        assert reply.choices[0].message.content
