from __future__ import annotations

import io
import json
import logging
import random
import threading
from collections.abc import Callable, Iterator
from decimal import Decimal

import pydantic
import pytest

from gateway.observability.logs import (
    AccessLog,
    LogFormat,
    LogPipeline,
    RequestLogEntry,
    redact,
)
from gateway.settings.server import ListenSettings

SECRETS = (
    "sk-proj-Abc123def456ghi789jkl",
    "sk-ant-api03-AAAAbbbbCCCCddddEEEE",
    "AIzaSyD-1234567890abcdefghijklmnopqrs",
    "gsk_abcdefghijklmnop1234",
    "hunter2-password-value",
)


def entry(**overrides: object) -> RequestLogEntry:
    fields: dict[str, object] = {
        "request_id": "req_123",
        "status": 200,
        "latency_ms": 412.5,
        "tenant": "acme",
        "key_id": "acme-prod",
        "route": "auto",
        "model": "gpt-4.1",
        "provider": "openai",
        "stream": True,
        "input_tokens": 10,
        "output_tokens": 5,
        "cost_usd": Decimal("0.000060"),
        "ttft_ms": 120.0,
        "retries": 1,
        "fallback": True,
        "fallback_from": "claude-sonnet-4.5",
        "fallback_reason": "upstream_timeout",
    }
    fields.update(overrides)
    return RequestLogEntry(**fields)  # type: ignore[arg-type]


@pytest.fixture
def logger() -> Iterator[logging.Logger]:
    named = logging.getLogger("tests.observability.access")
    named.propagate = False
    yield named
    named.handlers.clear()


def run_pipeline(
    logger: logging.Logger,
    log_format: LogFormat,
    write: Callable[[AccessLog], None],
    log_content: bool = False,
) -> str:
    stream = io.StringIO()
    with LogPipeline(log_format, stream=stream) as pipeline:
        pipeline.install(logger)
        write(AccessLog(logger, log_content=log_content))
    return stream.getvalue()


def test_a_request_becomes_one_json_line_with_its_outcome(logger: logging.Logger):
    output = run_pipeline(logger, "json", lambda log: log.request(entry()))

    lines = output.splitlines()
    assert len(lines) == 1
    record = json.loads(lines[0])
    assert record["msg"] == "request"
    assert record["level"] == "info"
    assert record["ts"].endswith("Z")
    expected = {
        "request_id": "req_123",
        "tenant": "acme",
        "route": "auto",
        "model": "gpt-4.1",
        "provider": "openai",
        "status": 200,
        "input_tokens": 10,
        "output_tokens": 5,
        "cost_usd": 0.00006,
        "latency_ms": 412.5,
        "ttft_ms": 120.0,
        "retries": 1,
        "fallback": True,
        "fallback_from": "claude-sonnet-4.5",
    }
    assert {k: record[k] for k in expected} == expected


def test_a_5xx_request_is_logged_as_a_warning(logger: logging.Logger):
    output = run_pipeline(logger, "json", lambda log: log.request(entry(status=502)))
    assert json.loads(output)["level"] == "warning"


def test_dev_mode_writes_a_human_readable_line(logger: logging.Logger):
    output = run_pipeline(logger, "text", lambda log: log.request(entry()))

    assert not output.lstrip().startswith("{")
    for part in ("200", "auto -> gpt-4.1@openai", "412ms", "ttft=120ms", "tokens=10/5"):
        assert part in output
    assert "fallback from claude-sonnet-4.5 (upstream_timeout)" in output


@pytest.mark.parametrize("log_format", ["json", "text"])
def test_what_the_gateway_changed_is_in_the_line_with_key_shaped_names_masked(
    logger: logging.Logger, log_format: LogFormat
):
    # a dropped field's name is the client's: one shaped like a key is masked
    changed = f"max_tokens:32000->8192,dropped:{SECRETS[0]}"
    output = run_pipeline(logger, log_format, lambda log: log.request(entry(changed=changed)))
    assert "max_tokens:32000->8192,dropped:sk-***" in output
    assert SECRETS[0][3:] not in output
    if log_format == "json":
        assert json.loads(output)["changed"] == "max_tokens:32000->8192,dropped:sk-***"


@pytest.mark.parametrize("log_format", ["json", "text"])
def test_message_content_is_left_out_unless_enabled(logger: logging.Logger, log_format: LogFormat):
    content = {"messages": [{"role": "user", "content": "the launch code is 0000"}]}
    hidden = run_pipeline(logger, log_format, lambda log: log.request(entry(content=content)))
    shown = run_pipeline(
        logger, log_format, lambda log: log.request(entry(content=content)), log_content=True
    )
    assert "launch code" not in hidden
    assert "launch code" in shown


@pytest.mark.parametrize("log_format", ["json", "text"])
def test_no_secret_reaches_a_log_line(logger: logging.Logger, log_format: LogFormat):
    def write(log: AccessLog) -> None:
        log.request(
            entry(
                error_type="upstream_error",
                content={"messages": [{"role": "user", "content": f"my key is {SECRETS[0]}"}]},
            )
        )
        logger.warning("upstream said: invalid key %s", SECRETS[1])
        logger.error("headers: {'Authorization': 'Bearer %s'}", SECRETS[2])
        logger.info("retrying", extra={"url": f"https://example.com/v1?key={SECRETS[2]}"})
        logger.info("groq key %s", SECRETS[3])
        logger.info("db config password=%s api_key: %s", SECRETS[4], "plainvalue123")
        try:
            raise RuntimeError(f"connect failed with x-api-key: {SECRETS[1]}")
        except RuntimeError:
            logger.exception("dispatch failed")

    output = run_pipeline(logger, log_format, write, log_content=True)

    assert output.count("\n") >= 7
    for secret in (*SECRETS, "plainvalue123"):
        assert secret not in output
        assert secret[8:] not in output
    assert "***" in output


def test_a_quoted_secret_in_logged_content_is_masked_and_the_line_stays_json(
    logger: logging.Logger,
):
    """Inside the JSON line a message's quotes are escaped (`password=\\"x\\"`): the mask
    must cover the value and leave the escape, or the line keeps the secret and breaks."""
    said = 'connect with password="hunter2secret" and {"api_key": "abcdefsecret"}'
    content = {"messages": [{"role": "user", "content": said}]}
    output = run_pipeline(
        logger, "json", lambda log: log.request(entry(content=content)), log_content=True
    )
    record = json.loads(output)
    logged = record["content"]["messages"][0]["content"]
    assert "hunter2secret" not in output and "abcdefsecret" not in output
    assert logged == 'connect with password="***" and {"api_key": "***"}'


def test_redact_keeps_ordinary_text_and_masks_key_shapes():
    ordinary = '{"input_tokens":10,"key_id":"acme-prod","model":"gpt-4.1","task":"ask-me"}'
    assert redact(ordinary) == ordinary
    assert redact("Authorization: Bearer abc.def-ghi") == "Authorization: Bearer ***"
    assert redact("key sk-1234567890abcdef end") == "key sk-*** end"
    assert redact('{"api_key": "s3cr3t"}') == '{"api_key": "***"}'


def test_a_stalled_log_stream_never_blocks_the_caller(logger: logging.Logger):
    release = threading.Event()

    class StalledStream(io.StringIO):
        def write(self, text: str) -> int:
            release.wait()
            return super().write(text)

    stream = StalledStream()
    pipeline = LogPipeline("json", stream=stream, queue_size=10)
    pipeline.install(logger)
    pipeline.start()
    access = AccessLog(logger)
    for i in range(100):
        access.request(entry(request_id=f"req_{i}"))

    # the writer holds at most one queue-full batch while its write is stuck
    assert pipeline.dropped >= 100 - 2 * 10
    release.set()
    pipeline.stop()
    written = stream.getvalue().splitlines()
    assert len(written) + pipeline.dropped == 100
    assert all(json.loads(line)["msg"] == "request" for line in written)


def test_stopping_the_pipeline_writes_every_queued_line_and_detaches_it(
    logger: logging.Logger,
):
    stream = io.StringIO()
    pipeline = LogPipeline("json", stream=stream)
    pipeline.install(logger)
    pipeline.start()
    for i in range(500):
        AccessLog(logger).request(entry(request_id=f"req_{i}"))
    pipeline.stop()
    logger.info("after stop")

    lines = stream.getvalue().splitlines()
    assert [json.loads(line)["request_id"] for line in lines] == [f"req_{i}" for i in range(500)]
    assert pipeline.handler not in logger.handlers


def test_content_goes_in_the_configured_share_of_lines() -> None:
    random.seed(20)
    sampled = AccessLog(log_content=True, content_share=0.3)
    drawn = sum(sampled.wants_content() for _ in range(10_000)) / 10_000
    assert 0.27 < drawn < 0.33  # 0.3 +- 6 standard deviations of 10,000 draws
    assert all(AccessLog(log_content=True).wants_content() for _ in range(100))
    assert not any(AccessLog(content_share=1.0).wants_content() for _ in range(100))


def test_a_content_share_without_content_logging_is_refused() -> None:
    assert ListenSettings(log_content=True, log_content_share=0.05).log_content_share == 0.05
    with pytest.raises(pydantic.ValidationError, match="does nothing unless log_content"):
        ListenSettings(log_content_share=0.05)
    for share in (0, 1.5):
        with pytest.raises(pydantic.ValidationError):
            ListenSettings(log_content=True, log_content_share=share)
