"""A tenant near its budget is moved to a cheaper route instead of being cut off, and
crossing its soft limit leaves a log line; past the budget it gets insufficient_quota."""

from __future__ import annotations

import time

import openai
import pytest

from tests.api.conftest import CLIENT_KEY
from tests.fakes.openai_server import OpenAIFake
from tests.support.gateway_process import GatewayProcess, key_hash, openai_provider

USER = [{"role": "user", "content": "hello budget"}]


def test_budget_soft_limit_downgrade_then_quota() -> None:
    with OpenAIFake() as fake:
        config = {"providers": {"fake": openai_provider(fake.base_url)}}
        policy = {
            "models": {
                "premium": {
                    "deployments": [{"provider": "fake", "upstream_model": "premium-up"}],
                    # ~10 prompt + 4 output tokens at $10/M: ~$0.00014 a request
                    "prices": {"input": 10, "output": 10},
                },
                "budget": {
                    "deployments": [{"provider": "fake", "upstream_model": "budget-up"}],
                    "prices": {"input": 5, "output": 5},
                },
            },
            "routes": {
                "auto": {"strategy": "ordered", "models": ["premium"]},
                "cheap": {"strategy": "ordered", "models": ["budget"]},
            },
            "tenants": {
                "acme": {
                    "budgets": [
                        {
                            "usd": "0.002",
                            "period": "month",
                            "soft_fraction": 0.3,
                            "downgrade_fraction": 0.5,
                            "downgrade_route": "cheap",
                        }
                    ],
                    "keys": [{"id": "k", "hash": key_hash(CLIENT_KEY)}],
                }
            },
        }
        with GatewayProcess(config, policy) as gateway:
            client = openai.OpenAI(base_url=gateway.base_url, api_key=CLIENT_KEY, max_retries=0)
            served: list[str] = []
            with pytest.raises(openai.RateLimitError) as refused:
                for _ in range(40):
                    raw = client.chat.completions.with_raw_response.create(
                        model="auto", messages=USER, max_tokens=4
                    )
                    served.append(raw.headers["x-gateway-model"])
            assert refused.value.code == "insufficient_quota", refused.value.message
            # premium first, then the downgrade route once half the budget is used
            assert served and served[0] == "premium", refused.value.message
            assert "budget" in served
            switch = served.index("budget")
            assert set(served[:switch]) == {"premium"}
            assert set(served[switch:]) == {"budget"}
            # log lines reach the file from the log writer's thread, a moment later
            deadline = time.monotonic() + 10
            while "soft limit 30%" not in gateway.log():
                assert time.monotonic() < deadline, "no soft-limit warning in the log"
                time.sleep(0.05)


def test_a_budget_refusal_names_the_max_tokens_that_would_fit() -> None:
    """Without max_tokens the reservation is the model's whole output limit: 64,000 tokens
    at $15/M is $0.96, more than a $0.50 budget; the refusal says which max_tokens fits, and
    asking for exactly that is admitted."""
    with OpenAIFake() as fake:
        config = {"providers": {"fake": openai_provider(fake.base_url)}}
        policy = {
            "models": {
                "big-output": {
                    "deployments": [{"provider": "fake", "upstream_model": "big-up"}],
                    "prices": {"input": 3, "output": 15},
                    "max_output_tokens": 64000,
                },
            },
            "routes": {"auto": {"strategy": "ordered", "models": ["big-output"]}},
            "tenants": {
                "acme": {
                    "budgets": [{"usd": "0.50", "period": "day"}],
                    "keys": [{"id": "k", "hash": key_hash(CLIENT_KEY)}],
                }
            },
        }
        with GatewayProcess(config, policy) as gateway:
            client = openai.OpenAI(base_url=gateway.base_url, api_key=CLIENT_KEY, max_retries=0)
            with pytest.raises(openai.RateLimitError) as refused:
                client.chat.completions.create(model="auto", messages=USER)
            assert refused.value.code == "insufficient_quota"
            message = refused.value.message
            assert "can never fit" in message, message
            suggested = int(message.split("Set max_tokens to at most ")[1].split(" ")[0])
            # $0.50 holds the prompt's few tokens at $3/M and about 33,000 output at $15/M
            assert 33_000 <= suggested < 33_334, message
            answer = client.chat.completions.create(
                model="auto", messages=USER, max_tokens=suggested
            )
            assert answer.choices[0].message.content
            with pytest.raises(openai.RateLimitError) as over:
                client.chat.completions.create(
                    model="auto", messages=USER, max_tokens=suggested + 1
                )
            # one token more and the worst case is over the whole budget
            assert "can never fit" in over.value.message, over.value.message
