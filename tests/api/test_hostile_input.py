"""Hostile and odd input against a real gateway process (issue 15): each test is one class
of input that got a 500, a stall, a text/plain answer or a refusal of a valid request
before, and checks the answer is now an OpenAI-shaped error (or a served request)."""

from __future__ import annotations

import gzip
import json
import socket
import subprocess
import sys
import threading
import time
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest

from tests.fakes.openai_server import OpenAIFake
from tests.fuzz.raw_upstream import RawUpstream, sse, valid_chunk
from tests.support.gateway_process import REPO, GatewayProcess, key_hash, openai_provider

KEY = "gw-test-key-hostile"
AUTH = {"authorization": f"Bearer {KEY}", "content-type": "application/json"}
USER = [{"role": "user", "content": "hi"}]
MAX_BODY = 8 * 1024 * 1024
ROUTE = (sys.executable, "-m", "gateway.cli.main", "route")


def hostile_policy() -> dict[str, Any]:
    return {
        "models": {
            "fast-model": {
                "deployments": [{"provider": "fake", "upstream_model": "upstream-fast"}],
                "prices": {"input": 1.0, "output": 2.0},
                # room for a 5 MB prompt, so it is counted in full rather than refused
                "context_window": 4_000_000,
            },
            "raw-model": {
                "deployments": [{"provider": "raw", "upstream_model": "upstream-raw"}],
                "prices": {"input": 1.0, "output": 2.0},
            },
        },
        "tenants": {"acme": {"keys": [{"id": "hostile", "hash": key_hash(KEY)}]}},
    }


@pytest.fixture(scope="module")
def fake() -> Iterator[OpenAIFake]:
    with OpenAIFake(dialect="compatible") as server:
        yield server


@pytest.fixture(scope="module")
def raw() -> Iterator[RawUpstream]:
    with RawUpstream() as server:
        yield server


@pytest.fixture(scope="module")
def gateway(fake: OpenAIFake, raw: RawUpstream) -> Iterator[GatewayProcess]:
    once = {"max_attempts": 1}
    # these tests make the raw upstream fail on purpose: its breaker must not open
    never_open = {"failure_threshold": 1000, "min_requests": 1000}
    config = {
        "server": {
            "max_body_bytes": MAX_BODY,
            "shutdown_grace_seconds": 2,
            "connections": {
                "header_timeout_seconds": 1,
                "body_idle_timeout_seconds": 1,
                "body_timeout_seconds": 3,
                "keep_alive_timeout_seconds": 5,
                "max_connections": 64,
            },
        },
        "providers": {
            "fake": openai_provider(fake.base_url, retry=once),
            "raw": openai_provider(raw.base_url, retry=once, breaker=never_open),
        },
    }
    with GatewayProcess(config, hostile_policy()) as process:
        yield process


@pytest.fixture
def client(gateway: GatewayProcess, raw: RawUpstream) -> openai.OpenAI:
    raw.clear()
    return openai.OpenAI(base_url=gateway.base_url, api_key=KEY, max_retries=0)


def post(gateway: GatewayProcess, body: bytes, **headers: str) -> httpx.Response:
    return httpx.post(
        gateway.base_url + "/chat/completions",
        content=body,
        headers={**AUTH, **headers},
        timeout=30,
    )


def openai_error(response: httpx.Response) -> dict[str, Any]:
    assert response.headers["content-type"].startswith("application/json"), response.text
    error = response.json()["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert isinstance(error["message"], str) and error["message"]
    return error  # type: ignore[no-any-return]


def still_serves(client: openai.OpenAI) -> None:
    reply = client.chat.completions.create(model="fast-model", messages=USER)  # type: ignore[arg-type]
    assert reply.choices[0].message.content


# -- item 2: one defensive decoder; upstream answers decoded as defensively ---------


def chat_body(content: bytes) -> bytes:
    return b'{"model": "fast-model", "messages": [{"role": "user", "content": "' + content + b'"}]}'


@pytest.mark.parametrize("bad", [b"\xff", b"\xed\xa0\x80"], ids=["0xff", "encoded-surrogate"])
def test_a_body_that_is_not_utf8_is_a_400_naming_the_byte_offset(
    gateway: GatewayProcess, client: openai.OpenAI, bad: bytes
) -> None:
    body = chat_body(b"ok " + bad)
    response = post(gateway, body)
    assert response.status_code == 400
    error = openai_error(response)
    assert error["code"] == "invalid_json"
    assert "not valid UTF-8" in error["message"]
    assert f"byte offset {body.index(bad)}" in error["message"]
    still_serves(client)


@pytest.mark.parametrize("depth", [129, 1_000, 100_000])
def test_json_nested_past_the_depth_limit_is_a_400(
    gateway: GatewayProcess, client: openai.OpenAI, depth: int
) -> None:
    nested = b"[" * depth + b"]" * depth
    body = b'{"model": "fast-model", "messages": [], "extra": ' + nested + b"}"
    response = post(gateway, body)
    assert response.status_code == 400
    assert "nested more than 128 levels" in openai_error(response)["message"]
    still_serves(client)


def test_an_escaped_lone_surrogate_is_a_400_that_says_so(gateway: GatewayProcess) -> None:
    response = post(gateway, chat_body(b"\\ud800"))
    assert response.status_code == 400
    message = openai_error(response)["message"]
    assert "unpaired UTF-16 surrogate" in message and "\\ud800" in message
    assert "truncated" not in message


def test_route_explain_refuses_such_files_without_a_traceback(
    gateway: GatewayProcess, tmp_path: Path
) -> None:
    for name, body in {
        "utf8.json": chat_body(b"\xff"),
        "deep.json": b'{"model": "fast-model", "x": ' + b"[" * 5000 + b"]" * 5000 + b"}",
    }.items():
        path = tmp_path / name
        path.write_bytes(body)
        done = subprocess.run(
            [*ROUTE, "--config", str(gateway.config_path), "--explain", str(path)],
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert done.returncode == 1, done.stdout
        assert "Traceback" not in done.stderr
        assert done.stderr.startswith("error: ")


@pytest.mark.parametrize(
    "body",
    [
        b'{"id": "x", "choices": [], "usage": {"prompt_tokens": "many"}}',
        b'{"id": "x", "choices": [], "usage": {"prompt_tokens": -5}}',
        b'{"id": "x", "choices": [], "usage": [1]}',
        b'{"id": "x", "choices": [], "usage": {"prompt_tokens_details": "none"}}',
        b"[1, 2, 3]",
        b'"a string"',
        b'{"choices": "not a list"}',
        b'{"choices": []' + b', "x": ' + b"[" * 5000 + b"]" * 5000 + b"}",
        b'{"choices": [], "note": "\xff"}',
    ],
    ids=["usage-many", "usage-negative", "usage-list", "details-string", "array", "string",
         "choices-string", "deep", "not-utf8"],
)  # fmt: skip
def test_a_malformed_upstream_answer_is_a_502_naming_the_provider(
    client: openai.OpenAI, raw: RawUpstream, body: bytes
) -> None:
    raw.answer(body)
    with pytest.raises(openai.APIStatusError) as caught:
        client.chat.completions.create(model="raw-model", messages=USER)  # type: ignore[arg-type]
    assert caught.value.status_code == 502
    assert "'raw'" in caught.value.message
    still_serves(client)


def sse_lines(gateway: GatewayProcess, model: str) -> list[str]:
    body = {"model": model, "messages": USER, "stream": True}
    with httpx.stream(
        "POST", gateway.base_url + "/chat/completions", json=body, headers=AUTH, timeout=30
    ) as response:
        assert response.status_code == 200, response.read()
        return [line for line in response.iter_lines() if line]


@pytest.mark.parametrize(
    "bad_chunk",
    [
        json.dumps(valid_chunk(usage={"prompt_tokens": "many"})).encode(),
        b'{"usage": {"prompt_tokens": 1}, "choices": [' + b"[" * 5000,
        b"this is not json",
    ],
    ids=["usage-many", "truncated", "not-json"],
)
def test_a_malformed_stream_chunk_ends_the_stream_with_an_error_event_and_done(
    gateway: GatewayProcess, client: openai.OpenAI, raw: RawUpstream, bad_chunk: bytes
) -> None:
    raw.stream(sse(valid_chunk("first"), bad_chunk, valid_chunk("never")))
    lines = sse_lines(gateway, "raw-model")
    assert lines[-1] == "data: [DONE]"
    error = json.loads(lines[-2].removeprefix("data: "))["error"]
    assert "'raw'" in error["message"]
    assert error["type"] == "upstream_error"
    assert not any("never" in line for line in lines)
    still_serves(client)


# -- item 3: a large prompt does not stall other requests -------------------------


def test_a_5mb_prompt_does_not_hold_up_a_small_request(
    gateway: GatewayProcess, client: openai.OpenAI
) -> None:
    """One 5 MB prompt of one repeated character (the worst case for BPE) and a small
    request sent while it is being counted: the small one must be answered first.
    (Ordering, not timing: counting on the event loop answers them in the other order.)"""
    big = json.dumps(
        {"model": "fast-model", "messages": [{"role": "user", "content": "a" * 5_000_000}]}
    )
    finished: list[str] = []
    uploaded = threading.Event()

    def send_big() -> None:
        def body() -> Iterator[bytes]:
            data = big.encode()
            for at in range(0, len(data), 1 << 20):
                yield data[at : at + (1 << 20)]
            uploaded.set()

        response = httpx.post(
            gateway.base_url + "/chat/completions", content=body(), headers=AUTH, timeout=60
        )
        assert response.status_code == 200, response.text
        finished.append("big")

    thread = threading.Thread(target=send_big)
    thread.start()
    assert uploaded.wait(30)
    time.sleep(0.2)  # the gateway has read and parsed the body; it is counting it now
    still_serves(client)
    finished.append("small")
    thread.join(60)
    assert finished == ["small", "big"]


# -- item 4: timeouts and a connection cap -----------------------------------------


def connect(gateway: GatewayProcess) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", gateway.port), timeout=10)
    return sock


def read_until_closed(sock: socket.socket) -> bytes:
    data = b""
    try:
        while chunk := sock.recv(65536):
            data += chunk
    except (ConnectionResetError, TimeoutError):
        pass
    return data


def json_answer(raw_response: bytes) -> tuple[int, dict[str, Any]]:
    head, _, body = raw_response.partition(b"\r\n\r\n")
    status = int(head.split(b" ")[1])
    assert b"content-type: application/json" in head.lower()
    error = json.loads(body)["error"]
    assert set(error) == {"message", "type", "param", "code"}
    return status, error


def metric(gateway: GatewayProcess, reason: str) -> float:
    text = httpx.get(gateway.url + "/metrics").text
    for line in text.splitlines():
        if line.startswith(f'gateway_connections_closed_total{{reason="{reason}"}}'):
            return float(line.rsplit(" ", 1)[1])
    return 0.0


def test_headers_dribbled_slowly_get_a_408_and_the_connection_closed(
    gateway: GatewayProcess,
) -> None:
    before = metric(gateway, "header_timeout")
    sock = connect(gateway)
    request = b"GET /healthz HTTP/1.1\r\nHost: gw\r\nX-Slow: " + b"a" * 100
    sent = 0
    try:
        for byte in request:  # one byte every 50 ms: the whole header would take 6 s
            sock.send(bytes([byte]))
            sent += 1
            time.sleep(0.05)
    except (BrokenPipeError, ConnectionResetError):
        pass
    assert sent < len(request)
    status, error = json_answer(read_until_closed(sock))
    assert status == 408 and error["code"] == "request_timeout"
    assert metric(gateway, "header_timeout") == before + 1


def test_a_half_sent_body_gets_a_408_and_the_connection_closed(gateway: GatewayProcess) -> None:
    before = metric(gateway, "body_timeout")
    sock = connect(gateway)
    sock.sendall(
        b"POST /v1/chat/completions HTTP/1.1\r\nHost: gw\r\nAuthorization: Bearer "
        + KEY.encode()
        + b'\r\nContent-Length: 100\r\n\r\n{"model"'
    )
    status, error = json_answer(read_until_closed(sock))
    assert status == 408 and "stalled" in error["message"]
    assert metric(gateway, "body_timeout") == before + 1


def test_a_body_dribbled_faster_than_the_idle_timeout_still_meets_a_whole_body_deadline(
    gateway: GatewayProcess,
) -> None:
    before = metric(gateway, "body_deadline")
    sock = connect(gateway)
    body = chat_body(b"hi")
    sock.sendall(
        b"POST /v1/chat/completions HTTP/1.1\r\nHost: gw\r\nAuthorization: Bearer "
        + KEY.encode()
        + b"\r\nContent-Length: "
        + str(len(body)).encode()
        + b"\r\n\r\n"
    )
    started = time.monotonic()
    sent = 0
    try:
        for byte in body:  # one byte every 0.4 s: never idle for 1 s, whole in 20+ s
            sock.send(bytes([byte]))
            sent += 1
            time.sleep(0.4)
    except (BrokenPipeError, ConnectionResetError):
        pass
    took = time.monotonic() - started
    assert sent < len(body)
    status, error = json_answer(read_until_closed(sock))
    assert status == 408 and error["code"] == "request_timeout"
    assert "within 3 s" in error["message"]
    assert took < 10
    assert metric(gateway, "body_deadline") == before + 1


def test_an_idle_connection_is_closed_before_its_first_request(gateway: GatewayProcess) -> None:
    before = metric(gateway, "idle_timeout")
    sock = connect(gateway)
    assert read_until_closed(sock) == b""  # closed by the gateway, within the test timeout
    assert metric(gateway, "idle_timeout") >= before + 1


def test_past_max_connections_new_ones_get_a_503_and_the_gateway_keeps_serving(
    gateway: GatewayProcess, client: openai.OpenAI
) -> None:
    before = metric(gateway, "too_many_connections")
    held = [connect(gateway) for _ in range(80)]
    try:
        time.sleep(0.3)
        refused = []
        for sock in held:
            sock.settimeout(0.05)
            try:
                data = sock.recv(65536)
            except TimeoutError:
                continue
            if data:
                refused.append(json_answer(data))
        assert len(refused) >= 80 - 64
        assert all(status == 503 and e["code"] == "too_many_connections" for status, e in refused)
    finally:
        for sock in held:
            sock.close()
    time.sleep(0.3)
    assert metric(gateway, "too_many_connections") >= before + 80 - 64
    still_serves(client)


# -- item 5: the HTTP server's own refusals are OpenAI-shaped ---------------------


@pytest.mark.parametrize(
    "request_bytes",
    [
        b"POST /v1/chat/completions HTTP/1.1\r\nHost: gw\r\nContent-Length: abc\r\n\r\n",
        b"POST /v1/chat/completions HTTP/1.1\r\nHost: gw\r\nContent-Length: 5\r\n"
        b"Transfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
        b"GET /healthz HTTP/1.1\r\nHost: gw\r\nX-Bad: a\x7fb\r\n\r\n",
    ],
    ids=["invalid-content-length", "content-length-and-chunked", "del-in-header"],
)
def test_a_request_the_http_parser_refuses_gets_an_openai_shaped_400(
    gateway: GatewayProcess, request_bytes: bytes
) -> None:
    sock = connect(gateway)
    sock.sendall(request_bytes)
    status, error = json_answer(read_until_closed(sock))
    assert status == 400
    assert error["type"] == "invalid_request_error" and error["code"] == "invalid_http_request"


@pytest.mark.parametrize(
    "headers",
    [
        b"".join(b"X-H%d: v\r\n" % i for i in range(150)),
        b"X-Big: " + b"a" * 70_000 + b"\r\n",
    ],
    ids=["too-many", "too-large"],
)
def test_too_many_or_too_large_headers_get_an_openai_shaped_431(
    gateway: GatewayProcess, headers: bytes
) -> None:
    sock = connect(gateway)
    sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: gw\r\n" + headers + b"\r\n")
    status, error = json_answer(read_until_closed(sock))
    assert status == 431 and error["code"] == "request_header_fields_too_large"


# -- item 6: every request the OpenAI API accepts is accepted ----------------------


CUSTOM_TOOL = {"type": "custom", "custom": {"name": "sql", "description": "Run SQL."}}
FUNCTION_TOOL = {
    "type": "function",
    "function": {"name": "lookup", "parameters": {"type": "object", "properties": {}}},
}


@pytest.mark.parametrize(
    "extra",
    [
        {"stream": None},
        {"tools": [CUSTOM_TOOL], "tool_choice": {"type": "custom", "custom": {"name": "sql"}}},
        {
            "tools": [CUSTOM_TOOL, FUNCTION_TOOL],
            "tool_choice": {
                "type": "allowed_tools",
                "allowed_tools": {
                    "mode": "auto",
                    "tools": [{"type": "function", "function": {"name": "lookup"}}],
                },
            },
        },
        {"max_tokens": 0},
        {"max_completion_tokens": 0},
        {"n": 18.0, "top_logprobs": 2.0, "seed": 7.0},
        {
            "messages": [
                {"role": "user", "content": "run it"},
                {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [
                        {"id": "c1", "type": "custom", "custom": {"name": "sql", "input": "1"}}
                    ],
                },
                {"role": "tool", "tool_call_id": "c1", "content": "1"},
            ],
            "tools": [CUSTOM_TOOL],
        },
    ],
    ids=["stream-null", "custom-tool", "allowed-tools", "max-tokens-0",
         "max-completion-tokens-0", "whole-floats", "custom-tool-call"],
)  # fmt: skip
def test_a_request_the_openai_api_accepts_is_served_and_passed_through(
    gateway: GatewayProcess, fake: OpenAIFake, extra: dict[str, Any]
) -> None:
    body = {"model": "fast-model", "messages": USER, **extra}
    fake.requests.clear()
    response = post(gateway, json.dumps(body).encode())
    assert response.status_code == 200, response.text
    forwarded = fake.requests[-1].body
    for name, value in extra.items():
        assert forwarded[name] == value  # passed through as the client sent it


# -- item 8: compressed bodies ------------------------------------------------------


@pytest.mark.parametrize(
    "encoding,compress",
    [
        ("gzip", gzip.compress),
        ("deflate", zlib.compress),
        ("deflate", lambda data: zlib.compress(data)[2:-4]),  # raw deflate, as some send it
    ],
    ids=["gzip", "deflate", "raw-deflate"],
)
def test_a_gzip_or_deflate_body_is_decoded(
    gateway: GatewayProcess, encoding: str, compress: Any
) -> None:
    body = json.dumps({"model": "fast-model", "messages": USER}).encode()
    response = post(gateway, compress(body), **{"content-encoding": encoding})
    assert response.status_code == 200, response.text
    assert response.json()["choices"][0]["message"]["content"]


def test_a_zip_bomb_is_refused_at_the_body_limit(gateway: GatewayProcess) -> None:
    bomb = gzip.compress(b'{"model": "fast-model", "pad": "' + b"0" * (64 * 1024 * 1024))
    assert len(bomb) < MAX_BODY // 10
    response = post(gateway, bomb, **{"content-encoding": "gzip"})
    assert response.status_code == 413
    assert "decompressed" in openai_error(response)["message"]


def test_a_corrupt_gzip_body_is_a_400(gateway: GatewayProcess) -> None:
    response = post(gateway, b"\x1f\x8b\x08\x00garbage", **{"content-encoding": "gzip"})
    assert response.status_code == 400
    assert "gzip" in openai_error(response)["message"]


def test_an_unsupported_content_encoding_is_a_415(gateway: GatewayProcess) -> None:
    response = post(gateway, b"\x0b\x80", **{"content-encoding": "br"})
    assert response.status_code == 415
    error = openai_error(response)
    assert error["code"] == "unsupported_content_encoding" and "br" in error["message"]
