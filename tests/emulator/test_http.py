"""The emulator over real HTTP, judged by the official `openai` SDK and Prometheus' parser."""

from __future__ import annotations

import contextlib
import json
import signal
import time
from collections.abc import Iterator

import httpx
import jsonschema
import openai
import pytest
from prometheus_client.parser import text_string_to_metric_families

from gateway.emulator.scheduler import StepResult
from tests.emulator.emulator_process import EmulatorProcess, emulator_thread, running_emulator

SYSTEM = "You are a meticulous assistant for a logistics company. " * 40
WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "parameters": {
            "type": "object",
            "properties": {
                "city": {"type": "string"},
                "days": {"type": "integer"},
                "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
            },
            "required": ["city", "days", "unit"],
        },
    },
}


@pytest.fixture(scope="module")
def emulator() -> Iterator[EmulatorProcess]:
    with running_emulator("--time-scale", "0.01", "--model", "emu-8b") as process:
        yield process


@pytest.fixture
def client(emulator: EmulatorProcess) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{emulator.base_url}/v1", api_key="unused", max_retries=0)


def metric_families(base_url: str) -> dict[str, object]:
    text = httpx.get(f"{base_url}/metrics").text
    return {family.name: family for family in text_string_to_metric_families(text)}


def sample_value(base_url: str, name: str) -> float:
    for family in text_string_to_metric_families(httpx.get(f"{base_url}/metrics").text):
        for sample in family.samples:
            if sample.name == name:
                return float(sample.value)
    raise AssertionError(f"{name} not on the metrics page")


# -- chat completions ----------------------------------------------------------------


def test_a_completion_parses_with_usage_and_echoes_the_requested_model(
    client: openai.OpenAI,
) -> None:
    reply = client.chat.completions.create(
        model="any-name", messages=[{"role": "user", "content": "Say something."}]
    )
    assert reply.model == "any-name"
    assert reply.choices[0].message.role == "assistant"
    assert reply.choices[0].message.content
    assert reply.choices[0].finish_reason == "stop"
    assert reply.usage is not None
    assert reply.usage.prompt_tokens > 0
    assert 16 <= reply.usage.completion_tokens <= 256
    assert reply.usage.total_tokens == reply.usage.prompt_tokens + reply.usage.completion_tokens


def test_the_same_prompt_gets_the_same_reply(client: openai.OpenAI) -> None:
    messages = [{"role": "user", "content": "Determinism, please."}]
    first = client.chat.completions.create(model="m", messages=messages)  # type: ignore[arg-type]
    second = client.chat.completions.create(model="m", messages=messages)  # type: ignore[arg-type]
    assert first.choices[0].message.content == second.choices[0].message.content


def test_max_tokens_cuts_the_reply_with_finish_reason_length(client: openai.OpenAI) -> None:
    reply = client.chat.completions.create(
        model="m", messages=[{"role": "user", "content": "Long answer."}], max_tokens=5
    )
    assert reply.choices[0].finish_reason == "length"
    assert reply.usage is not None and reply.usage.completion_tokens == 5


def test_ignore_eos_and_unknown_fields_generate_exactly_the_limit(client: openai.OpenAI) -> None:
    reply = client.chat.completions.create(
        model="m",
        messages=[{"role": "user", "content": "Benchmark me."}],
        max_completion_tokens=300,
        extra_body={"ignore_eos": True, "top_k": 20, "min_p": 0.1, "regex": ".*"},
    )
    assert reply.usage is not None and reply.usage.completion_tokens == 300


def test_a_stream_starts_with_the_role_and_ends_with_finish_reason_and_done(
    emulator: EmulatorProcess,
) -> None:
    body = {
        "model": "m",
        "stream": True,
        "max_tokens": 4,
        "messages": [{"role": "user", "content": "Stream it."}],
    }
    with httpx.stream("POST", f"{emulator.base_url}/v1/chat/completions", json=body) as response:
        assert response.headers["content-type"].startswith("text/event-stream")
        lines = [line for line in response.iter_lines() if line]
    assert all(line.startswith("data: ") for line in lines)
    assert lines[-1] == "data: [DONE]"
    chunks = [json.loads(line[6:]) for line in lines[:-1]]
    assert chunks[0]["choices"][0]["delta"]["role"] == "assistant"
    assert [c["choices"][0]["finish_reason"] for c in chunks] == [None] * 4 + ["length"]
    assert all("usage" not in chunk for chunk in chunks)


def test_a_stream_with_include_usage_ends_with_a_usage_chunk(client: openai.OpenAI) -> None:
    stream = client.chat.completions.create(
        model="m",
        messages=[{"role": "user", "content": "Count my tokens."}],
        stream=True,
        stream_options={"include_usage": True},
    )
    chunks = list(stream)
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    last = chunks[-1]
    assert last.choices == []
    assert last.usage is not None
    assert last.usage.completion_tokens >= 16
    assert chunks[-2].choices[0].finish_reason == "stop"
    assert text.strip()


def test_a_repeated_prefix_reports_cached_tokens(client: openai.OpenAI) -> None:
    def ask(question: str) -> openai.types.CompletionUsage:
        reply = client.chat.completions.create(
            model="m",
            messages=[{"role": "system", "content": SYSTEM}, {"role": "user", "content": question}],
            max_tokens=2,
        )
        assert reply.usage is not None
        return reply.usage

    cold = ask("Where is parcel 1?")
    warm = ask("Where is parcel 2?")
    assert cold.prompt_tokens_details is not None and warm.prompt_tokens_details is not None
    assert cold.prompt_tokens_details.cached_tokens == 0
    cached = warm.prompt_tokens_details.cached_tokens
    assert cached is not None
    assert len(SYSTEM) // 4 - 16 <= cached < warm.prompt_tokens
    assert cached % 16 == 0


def test_a_required_tool_choice_answers_with_one_tool_call(client: openai.OpenAI) -> None:
    reply = client.chat.completions.create(
        model="m",
        messages=[{"role": "user", "content": "Weather in Lyon?"}],
        tools=[WEATHER_TOOL],  # type: ignore[list-item]
        tool_choice="required",
    )
    choice = reply.choices[0]
    assert choice.finish_reason == "tool_calls"
    assert choice.message.content is None
    calls = choice.message.tool_calls
    assert calls is not None and len(calls) == 1
    assert calls[0].function.name == "get_weather"  # type: ignore[union-attr]
    arguments = json.loads(calls[0].function.arguments)  # type: ignore[union-attr]
    jsonschema.validate(arguments, WEATHER_TOOL["function"]["parameters"])  # type: ignore[index]


def test_a_streamed_tool_call_arrives_in_openai_deltas(client: openai.OpenAI) -> None:
    stream = client.chat.completions.create(
        model="m",
        messages=[{"role": "user", "content": "Weather in Oslo?"}],
        tools=[WEATHER_TOOL],  # type: ignore[list-item]
        tool_choice={"type": "function", "function": {"name": "get_weather"}},
        stream=True,
    )
    chunks = list(stream)
    first = chunks[0].choices[0].delta
    assert first.role == "assistant"
    assert first.tool_calls is not None and first.tool_calls[0].id
    assert first.tool_calls[0].function is not None
    assert first.tool_calls[0].function.name == "get_weather"
    arguments = "".join(
        (c.choices[0].delta.tool_calls or [])[0].function.arguments or ""  # type: ignore[union-attr]
        for c in chunks
    )
    jsonschema.validate(json.loads(arguments), WEATHER_TOOL["function"]["parameters"])  # type: ignore[index]
    assert chunks[-1].choices[0].finish_reason == "tool_calls"


def test_auto_tool_choice_answers_with_text_when_no_tool_is_asked_for(
    client: openai.OpenAI,
) -> None:
    reply = client.chat.completions.create(
        model="m",
        messages=[{"role": "user", "content": "Just talk."}],
        tools=[WEATHER_TOOL],  # type: ignore[list-item]
    )
    assert reply.choices[0].message.tool_calls is None
    assert reply.choices[0].finish_reason == "stop"


# -- errors and small routes ---------------------------------------------------------


def test_bad_requests_get_openai_shaped_400s(
    emulator: EmulatorProcess, client: openai.OpenAI
) -> None:
    url = f"{emulator.base_url}/v1/chat/completions"
    malformed = httpx.post(url, content=b"{not json")
    missing = httpx.post(url, json={"model": "m"})
    for response in (malformed, missing):
        assert response.status_code == 400
        assert set(response.json()["error"]) == {"message", "type", "param", "code"}
    assert missing.json()["error"]["param"] == "messages"
    with pytest.raises(openai.BadRequestError):
        client.chat.completions.create(model="m", messages=[])


PRODUCTION_ACCEPTS = {
    "custom tool": {"tools": [{"type": "custom", "custom": {"name": "apply_patch"}}]},
    "stream null": {"stream": None},
    "logprobs null": {"logprobs": None, "top_logprobs": None},
    "whole-number floats": {"seed": 7.0, "n": 2.0, "max_tokens": 12.0},
    "max_tokens 0": {"max_tokens": 0},
    "streamed, n as a float": {"stream": True, "n": 2.0},
}


@pytest.mark.parametrize("extra", PRODUCTION_ACCEPTS.values(), ids=PRODUCTION_ACCEPTS.keys())
def test_requests_the_gateway_accepts_are_answered(
    emulator: EmulatorProcess, extra: dict[str, object]
) -> None:
    body = {"model": "m", "messages": [{"role": "user", "content": "hi"}], **extra}
    response = httpx.post(f"{emulator.base_url}/v1/chat/completions", json=body)
    assert response.status_code == 200, response.text
    if extra.get("stream"):
        assert response.text.endswith("data: [DONE]\n\n")
        data = [line[6:] for line in response.text.splitlines() if line.startswith("data: ")]
        chunks = [json.loads(payload) for payload in data[:-1]]
        assert {c["choices"][0]["index"] for c in chunks if c["choices"]} == {0, 1}
        return
    completion = openai.types.chat.ChatCompletion.model_validate(response.json())
    assert len(completion.choices) == int(extra.get("n", 1))  # type: ignore[call-overload]
    if extra.get("max_tokens") == 0:
        assert completion.usage is not None and completion.usage.completion_tokens == 0
        assert completion.choices[0].finish_reason == "length"


def test_models_and_health(emulator: EmulatorProcess, client: openai.OpenAI) -> None:
    assert [model.id for model in client.models.list()] == ["emu-8b"]
    assert httpx.get(f"{emulator.base_url}/health").status_code == 200
    assert httpx.get(f"{emulator.base_url}/nowhere").status_code == 404


def test_a_client_that_leaves_mid_stream_frees_its_slot(emulator: EmulatorProcess) -> None:
    body = {
        "model": "m",
        "stream": True,
        "max_tokens": 100_000,
        "messages": [{"role": "user", "content": "Never stop."}],
        "ignore_eos": True,
    }
    with httpx.stream("POST", f"{emulator.base_url}/v1/chat/completions", json=body) as response:
        # keep the iterator: dropping it would close the response early
        lines = response.iter_lines()
        next(lines)
        assert sample_value(emulator.base_url, "sglang:num_running_reqs") >= 1
    deadline = time.monotonic() + 5
    while sample_value(emulator.base_url, "sglang:num_running_reqs") > 0:
        assert time.monotonic() < deadline, "the aborted stream still holds its slot"
        time.sleep(0.02)


def test_the_metrics_page_speaks_sglang(emulator: EmulatorProcess, client: openai.OpenAI) -> None:
    for question in ("a", "b"):
        client.chat.completions.create(
            model="m",
            messages=[{"role": "system", "content": SYSTEM}, {"role": "user", "content": question}],
            max_tokens=3,
        )
    families = metric_families(emulator.base_url)
    expected = {
        "sglang:num_running_reqs": "gauge",
        "sglang:num_queue_reqs": "gauge",
        "sglang:token_usage": "gauge",
        "sglang:cache_hit_rate": "gauge",
        "sglang:gen_throughput": "gauge",
        "sglang:prompt_tokens": "counter",
        "sglang:cached_tokens": "counter",
        "sglang:time_to_first_token_seconds": "histogram",
        "sglang:inter_token_latency_seconds": "histogram",
    }
    for name, kind in expected.items():
        assert getattr(families[name], "type", None) == kind, name
    assert all(
        sample.labels.get("model_name") == "emu-8b"
        for family in families.values()
        for sample in family.samples  # type: ignore[attr-defined]
    )
    assert sample_value(emulator.base_url, "sglang:time_to_first_token_seconds_count") >= 2
    assert sample_value(emulator.base_url, "sglang:cached_tokens_total") > 0
    assert sample_value(emulator.base_url, "sglang:gen_throughput") > 0


# -- other modes ---------------------------------------------------------------------


def test_requests_beyond_the_batch_limit_wait_in_the_queue() -> None:
    body = {
        "model": "m",
        "stream": True,
        "max_tokens": 50_000,
        "ignore_eos": True,
        "messages": [{"role": "user", "content": "Hold the slot."}],
    }
    with (
        emulator_thread(time_scale=0.05, max_running_requests=2) as emulator,
        httpx.Client(base_url=emulator.base_url) as http,
        contextlib.ExitStack() as streams,
    ):
        for _ in range(5):
            streams.enter_context(http.stream("POST", "/v1/chat/completions", json=body))
        assert sample_value(emulator.base_url, "sglang:num_running_reqs") == 2
        assert sample_value(emulator.base_url, "sglang:num_queue_reqs") == 3
        assert sample_value(emulator.base_url, "sglang:token_usage") > 0
        streams.close()
        deadline = time.monotonic() + 5
        while sample_value(emulator.base_url, "sglang:num_queue_reqs") > 0:
            assert time.monotonic() < deadline, "aborted requests stayed queued"
            time.sleep(0.02)


def test_vllm_style_metrics_use_vllm_names() -> None:
    with emulator_thread(time_scale=0.01, metrics_style="vllm") as emulator:
        client = openai.OpenAI(base_url=f"{emulator.base_url}/v1", api_key="x", max_retries=0)
        for question in ("a", "b"):
            client.chat.completions.create(
                model="m",
                messages=[
                    {"role": "system", "content": SYSTEM},
                    {"role": "user", "content": question},
                ],
                max_tokens=2,
            )
        families = metric_families(emulator.base_url)
        for name in (
            "vllm:num_requests_running",
            "vllm:num_requests_waiting",
            "vllm:kv_cache_usage_perc",
            "vllm:gpu_cache_usage_perc",
            "vllm:time_to_first_token_seconds",
        ):
            assert name in families, name
        hits = sample_value(emulator.base_url, "vllm:prefix_cache_hits_total")
        queries = sample_value(emulator.base_url, "vllm:prefix_cache_queries_total")
        assert 0 < hits < queries
        assert not any(name.startswith("sglang:") for name in families)


def test_instant_mode_answers_without_scheduling() -> None:
    with emulator_thread(time_scale=0) as emulator:
        client = openai.OpenAI(base_url=f"{emulator.base_url}/v1", api_key="x", max_retries=0)
        reply = client.chat.completions.create(
            model="m", messages=[{"role": "user", "content": "Fast."}], max_tokens=7
        )
        assert reply.usage is not None and reply.usage.completion_tokens == 7
        chunks = list(
            client.chat.completions.create(
                model="m",
                messages=[{"role": "user", "content": "Fast."}],
                max_tokens=7,
                stream=True,
                stream_options={"include_usage": True},
            )
        )
        text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
        assert text == reply.choices[0].message.content
        assert chunks[-1].usage is not None and chunks[-1].usage.completion_tokens == 7
        assert sample_value(emulator.base_url, "sglang:generation_tokens_total") == 14


def test_injected_failures_come_late_as_503s_the_sdk_understands() -> None:
    with emulator_thread(time_scale=0, fail_rate=1.0, slow_start_ms=200) as emulator:
        client = openai.OpenAI(base_url=f"{emulator.base_url}/v1", api_key="x", max_retries=0)
        started = time.monotonic()
        with pytest.raises(openai.InternalServerError) as caught:
            client.chat.completions.create(model="m", messages=[{"role": "user", "content": "?"}])
        assert time.monotonic() - started >= 0.2
        assert caught.value.status_code == 503
        assert caught.value.body is not None
        assert httpx.get(f"{emulator.base_url}/health").status_code == 200


def test_a_broken_scheduler_loop_answers_500_instead_of_hanging() -> None:
    def broken_step(now: float) -> StepResult:
        raise RuntimeError("emulated scheduler bug")

    with emulator_thread(time_scale=0.01) as emulator:
        emulator.app.scheduler.step = broken_step  # type: ignore[method-assign]
        client = openai.OpenAI(base_url=f"{emulator.base_url}/v1", api_key="x", max_retries=0)
        for _ in range(2):
            with pytest.raises(openai.InternalServerError):
                client.chat.completions.create(
                    model="m", messages=[{"role": "user", "content": "?"}], timeout=5
                )


def test_sigterm_stops_the_server_cleanly() -> None:
    emulator = EmulatorProcess("--time-scale", "0.01")
    emulator.start()
    try:
        assert emulator.process is not None
        emulator.process.send_signal(signal.SIGTERM)
        assert emulator.wait(timeout=10) == 0
    finally:
        emulator.stop()


def test_the_process_exits_after_crash_after_answers() -> None:
    emulator = EmulatorProcess("--time-scale", "0", "--crash-after", "2")
    emulator.start()
    try:
        client = openai.OpenAI(base_url=f"{emulator.base_url}/v1", api_key="x", max_retries=0)
        for _ in range(2):
            client.chat.completions.create(model="m", messages=[{"role": "user", "content": "?"}])
        assert emulator.wait(timeout=5) == 3
        with pytest.raises(openai.APIConnectionError):
            client.chat.completions.create(model="m", messages=[{"role": "user", "content": "?"}])
    finally:
        emulator.stop()
