"""Every failure is OpenAI-shaped and raises the SDK's matching exception class."""

from __future__ import annotations

import anthropic
import httpx
import openai
import pytest

from tests.api.conftest import CLIENT_KEY, LIMITED_KEY
from tests.fakes.openai_server import OpenAIFake, Reply
from tests.support.gateway_process import GatewayProcess

USER = [{"role": "user", "content": "hi"}]


def assert_openai_error_body(response: httpx.Response) -> dict[str, object]:
    error = response.json()["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert isinstance(error["message"], str) and error["message"]
    return error  # type: ignore[no-any-return]


def test_malformed_json_is_400_invalid_json(gateway: GatewayProcess) -> None:
    response = httpx.post(
        gateway.base_url + "/chat/completions",
        content=b'{"model": "fast-model", "messages": [',
        headers={"authorization": f"Bearer {CLIENT_KEY}", "content-type": "application/json"},
    )
    assert response.status_code == 400
    assert assert_openai_error_body(response)["code"] == "invalid_json"


def test_schema_violation_names_the_param(client: openai.OpenAI) -> None:
    with pytest.raises(openai.BadRequestError) as caught:
        client.chat.completions.create(
            model="fast-model",
            messages=[{"role": "wizard", "content": "hi"}],  # type: ignore[list-item,misc]
        )
    assert caught.value.param == "messages[0].role"
    assert "wizard" in caught.value.message


def test_out_of_range_value_names_the_param(client: openai.OpenAI) -> None:
    with pytest.raises(openai.BadRequestError) as caught:
        client.chat.completions.create(model="fast-model", messages=USER, temperature=7)
    assert caught.value.param == "temperature"


def test_missing_messages_names_the_param(client: openai.OpenAI) -> None:
    with pytest.raises(openai.BadRequestError) as caught:
        client.chat.completions.create(model="fast-model", messages=[])
    assert caught.value.param == "messages"


def test_missing_key_is_401(gateway: GatewayProcess) -> None:
    response = httpx.post(gateway.base_url + "/chat/completions", json={})
    assert response.status_code == 401
    assert assert_openai_error_body(response)["code"] == "invalid_api_key"


def test_wrong_key_raises_authentication_error(gateway: GatewayProcess) -> None:
    client = openai.OpenAI(base_url=gateway.base_url, api_key="gw-wrong", max_retries=0)
    with pytest.raises(openai.AuthenticationError):
        client.chat.completions.create(model="fast-model", messages=USER)
    with pytest.raises(openai.AuthenticationError):
        client.models.list()


def test_model_not_allowed_for_key_is_403(gateway: GatewayProcess) -> None:
    client = openai.OpenAI(base_url=gateway.base_url, api_key=LIMITED_KEY, max_retries=0)
    with pytest.raises(openai.PermissionDeniedError) as caught:
        client.chat.completions.create(model="fast-model", messages=USER)
    assert caught.value.param == "model"


def test_unknown_model_is_404(client: openai.OpenAI) -> None:
    with pytest.raises(openai.NotFoundError) as caught:
        client.chat.completions.create(model="gpt-17", messages=USER)
    assert "gpt-17" in caught.value.message


def test_body_over_the_limit_is_413_and_the_server_stays_healthy(
    gateway: GatewayProcess, client: openai.OpenAI
) -> None:
    forty_mib = b"x" * (40 * 1024 * 1024)

    def body() -> object:
        yield b'{"model":"fast-model","messages":[{"role":"user","content":"'
        for start in range(0, len(forty_mib), 1 << 20):
            yield forty_mib[start : start + (1 << 20)]
        yield b'"}]}'

    with httpx.Client(timeout=30) as http:
        # no Content-Length: the gateway must count while reading, not buffer first
        response = http.post(
            gateway.base_url + "/chat/completions",
            content=body(),
            headers={"authorization": f"Bearer {CLIENT_KEY}", "content-type": "application/json"},
        )
    assert response.status_code == 413
    assert assert_openai_error_body(response)["code"] == "request_too_large"
    declared = httpx.post(
        gateway.base_url + "/chat/completions",
        content=forty_mib,
        headers={"authorization": f"Bearer {CLIENT_KEY}"},
    )
    assert declared.status_code == 413
    assert client.chat.completions.create(model="fast-model", messages=USER).choices


def test_upstream_4xx_passes_through_with_its_message(
    client: openai.OpenAI, fake: OpenAIFake
) -> None:
    fake.enqueue(Reply.error(400, "This model's maximum context length is 8192 tokens."))
    with pytest.raises(openai.BadRequestError) as caught:
        client.chat.completions.create(model="fast-model", messages=USER)
    assert "maximum context length" in caught.value.message
    assert len(fake.requests) == 1


def upstream_refusal_naming_a_param() -> Reply:
    error = {
        "message": "Invalid value: 'tool'. Supported values are: 'system', 'user'.",
        "type": "invalid_request_error",
        "param": "messages[0].role",
        "code": "invalid_value",
    }
    return Reply(status=400, body={"error": error})


def test_upstream_4xx_keeps_the_param_the_upstream_named(
    client: openai.OpenAI, fake: OpenAIFake
) -> None:
    fake.enqueue(upstream_refusal_naming_a_param())
    with pytest.raises(openai.BadRequestError) as caught:
        client.chat.completions.create(model="fast-model", messages=USER)
    assert caught.value.param == "messages[0].role"
    assert "Supported values" in caught.value.message
    # the Responses API's shape carries it too
    fake.enqueue(upstream_refusal_naming_a_param())
    with pytest.raises(openai.BadRequestError) as responses:
        client.responses.create(model="fast-model", input="hi")
    assert responses.value.param == "messages[0].role"


def test_upstream_4xx_param_reaches_an_anthropic_client_in_anthropics_shape(
    gateway: GatewayProcess, fake: OpenAIFake
) -> None:
    fake.enqueue(upstream_refusal_naming_a_param())
    answer = httpx.post(
        gateway.url + "/v1/messages",
        json={"model": "fast-model", "max_tokens": 5, "messages": USER},
        headers={"x-api-key": CLIENT_KEY, "anthropic-version": "2023-06-01"},
    )
    assert answer.status_code == 400
    body = answer.json()
    assert body["type"] == "error" and body["error"]["type"] == "invalid_request_error"
    # Anthropic names the field at the start of its message
    assert body["error"]["message"].startswith("messages[0].role: Invalid value")


def test_upstream_5xx_after_retries_is_502_naming_the_provider(
    client: openai.OpenAI, fake: OpenAIFake
) -> None:
    fake.enqueue(*[Reply.error(500, "boom")] * 3)
    with pytest.raises(openai.InternalServerError) as caught:
        client.chat.completions.create(model="fast-model", messages=USER)
    assert caught.value.status_code == 502
    assert "'fake'" in caught.value.message
    assert len(fake.requests) == 3


def test_upstream_auth_failure_is_502_naming_config_never_the_key(
    client: openai.OpenAI, fake: OpenAIFake, gateway: GatewayProcess
) -> None:
    fake.enqueue(Reply.error(401, "Incorrect API key provided: sk-upstr*****cret"))
    with pytest.raises(openai.InternalServerError) as caught:
        client.chat.completions.create(model="fast-model", messages=USER)
    assert caught.value.status_code == 502
    assert "api_key configured for 'fake'" in caught.value.message
    assert "sk-" not in caught.value.message
    assert "sk-upstream-secret" not in gateway.log()


def test_upstream_timeout_is_504(client: openai.OpenAI, fake: OpenAIFake) -> None:
    # each of the three attempts waits out the 1 s read timeout of "impatient-model"'s
    # provider (tests/api/conftest.py); the replies come well after it, and the fake's
    # shutdown waits for the last
    fake.enqueue(*[Reply(delay=3)] * 3)
    with pytest.raises(openai.InternalServerError) as caught:
        client.chat.completions.create(model="impatient-model", messages=USER)
    assert caught.value.status_code == 504
    assert "timed out" in caught.value.message


def test_connection_refused_is_502(gateway: GatewayProcess, tmp_path: object) -> None:
    with GatewayProcess(
        {"providers": {"down": {"kind": "openai", "base_url": "http://127.0.0.1:9/v1"}}},
        {
            "models": {"m": {"deployments": [{"provider": "down", "upstream_model": "m"}]}},
            "tenants": {"t": {"keys": [{"id": "k", "hash": _hash(CLIENT_KEY)}]}},
        },
    ) as other:
        client = openai.OpenAI(base_url=other.base_url, api_key=CLIENT_KEY, max_retries=0)
        with pytest.raises(openai.InternalServerError) as caught:
            client.chat.completions.create(model="m", messages=USER)
        assert caught.value.status_code == 502
        assert "could not connect to provider 'down'" in caught.value.message


def test_stream_failing_after_first_chunk_ends_with_error_event_not_a_retry(
    client: openai.OpenAI, fake: OpenAIFake
) -> None:
    fake.enqueue(Reply(words=["a", "b", "c"], fail_after_chunks=2))
    stream = client.chat.completions.create(model="fast-model", messages=USER, stream=True)
    received: list[str] = []
    with pytest.raises(openai.APIError) as caught:
        for chunk in stream:
            if chunk.choices:
                received.append(chunk.choices[0].delta.content or "")
    assert "upstream crashed" in caught.value.message
    assert "".join(received) == "a b"
    assert len(fake.requests) == 1


def failing_midway_naming_a_param() -> Reply:
    return Reply(
        words=["a", "b", "c"],
        fail_after_chunks=1,
        stream_error="Invalid value: string too long.",
        stream_error_param="messages[0].content",
        stream_error_code="string_above_max_length",
    )


def test_an_error_in_the_middle_of_a_stream_keeps_the_param_the_upstream_named(
    client: openai.OpenAI, fake: OpenAIFake
) -> None:
    fake.enqueue(failing_midway_naming_a_param())
    stream = client.chat.completions.create(model="fast-model", messages=USER, stream=True)
    with pytest.raises(openai.APIError) as caught:
        for _ in stream:
            pass
    assert caught.value.param == "messages[0].content"
    assert caught.value.code == "string_above_max_length"
    assert "string too long" in caught.value.message


def test_a_mid_stream_error_keeps_its_param_in_the_responses_shape(
    client: openai.OpenAI, fake: OpenAIFake
) -> None:
    fake.enqueue(failing_midway_naming_a_param())
    errors = [
        event
        for event in client.responses.create(model="fast-model", input="hi", stream=True)
        if event.type == "error"
    ]
    assert [(e.param, e.code) for e in errors] == [
        ("messages[0].content", "string_above_max_length")
    ]


def test_a_mid_stream_error_keeps_its_param_in_anthropics_shape(
    gateway: GatewayProcess, fake: OpenAIFake
) -> None:
    fake.enqueue(failing_midway_naming_a_param())
    claude = anthropic.Anthropic(base_url=gateway.url, api_key=CLIENT_KEY, max_retries=0)
    stream = claude.messages.create(model="fast-model", max_tokens=5, messages=USER, stream=True)
    with pytest.raises(anthropic.APIStatusError) as caught:
        for _ in stream:
            pass
    body = caught.value.body
    assert isinstance(body, dict) and body["type"] == "error"
    # Anthropic names the field at the start of its message
    assert body["error"]["message"].startswith("messages[0].content: Invalid value")


def test_a_mid_stream_error_keeps_its_param_in_a_legacy_completion_stream(
    client: openai.OpenAI, fake: OpenAIFake
) -> None:
    fake.enqueue(failing_midway_naming_a_param())
    stream = client.completions.create(model="fast-model", prompt="hi", stream=True)
    with pytest.raises(openai.APIError) as caught:
        for _ in stream:
            pass
    assert caught.value.param == "messages[0].content"


def test_unknown_path_is_openai_shaped_404(gateway: GatewayProcess) -> None:
    response = httpx.get(gateway.base_url + "/nothing-here")
    assert response.status_code == 404
    assert_openai_error_body(response)


def _hash(key: str) -> str:
    from tests.support.gateway_process import key_hash

    return key_hash(key)
