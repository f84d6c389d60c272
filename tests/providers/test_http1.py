"""The http1 client against real sockets: raw HTTP/1.1 servers that answer exactly the
bytes each case needs (chunked, close-delimited, cut short, stalled, malformed)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any

import pytest

from gateway.errors import UpstreamTimeout, UpstreamUnavailable, UpstreamUnreachable
from gateway.providers.base import UpstreamRequest
from gateway.providers.http1 import Http1Client
from gateway.settings.server import ProviderSettings
from tests.support.ports import free_port

Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


async def read_request(reader: asyncio.StreamReader) -> tuple[bytes, bytes]:
    head = await reader.readuntil(b"\r\n\r\n")
    length = 0
    for line in head.split(b"\r\n"):
        if line.lower().startswith(b"content-length:"):
            length = int(line.split(b":", 1)[1])
    body = await reader.readexactly(length) if length else b""
    return head, body


def settings(port: int, **extra: Any) -> ProviderSettings:
    return ProviderSettings.model_validate(
        {"kind": "openai", "base_url": f"http://127.0.0.1:{port}/v1", **extra}
    )


def request(port: int, body: bytes = b'{"x":1}') -> UpstreamRequest:
    return UpstreamRequest(
        url=f"http://127.0.0.1:{port}/v1/chat/completions",
        body=body,
        headers={"content-type": "application/json", "Authorization": "Bearer k"},
    )


async def serve(handler: Handler) -> tuple[asyncio.Server, int, list[int]]:
    """A server on a free port; the list collects one entry per accepted connection."""
    connections: list[int] = []

    async def on_connect(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        connections.append(1)
        try:
            await handler(reader, writer)
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    server = await asyncio.start_server(on_connect, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    return server, port, connections


def run(scenario: Callable[[], Coroutine[Any, Any, Any]]) -> Any:
    return asyncio.run(scenario())


def test_keep_alive_reuses_one_connection_and_sends_the_request_as_given() -> None:
    seen: list[tuple[bytes, bytes]] = []

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while True:
            head, body = await read_request(reader)
            seen.append((head, body))
            payload = b'{"ok":%d}' % len(seen)
            writer.write(
                b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nX-Thing: a\r\n"
                b"Content-Length: %d\r\n\r\n%s" % (len(payload), payload)
            )
            await writer.drain()

    async def scenario() -> tuple[list[bytes], list[int], str | None]:
        server, port, connections = await serve(handler)
        client = Http1Client("p", settings(port))
        bodies = []
        thing = None
        for _ in range(3):
            response = await client.send(request(port))
            assert response.status == 200
            thing = response.headers.get("x-thing")
            bodies.append(await response.read())
        await client.close()
        server.close()
        return bodies, connections, thing

    bodies, connections, thing = run(scenario)
    assert bodies == [b'{"ok":1}', b'{"ok":2}', b'{"ok":3}']
    assert len(connections) == 1
    assert thing == "a"
    head, body = seen[0]
    assert head.startswith(b"POST /v1/chat/completions HTTP/1.1\r\n")
    assert b"host: 127.0.0.1:" in head.lower()
    assert b"Authorization: Bearer k" in head
    assert body == b'{"x":1}'


def test_chunked_stream_arrives_piece_by_piece_and_headers_ignore_case() -> None:
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        writer.write(
            b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
            b"Transfer-Encoding: chunked\r\n\r\n"
        )
        for i in range(3):
            data = b"data: %d\n\n" % i
            writer.write(b"%x\r\n%s\r\n" % (len(data), data))
            await writer.drain()
            await asyncio.sleep(0.02)
        writer.write(b"0\r\n\r\n")
        await writer.drain()
        await reader.read()  # keep the connection open until the client leaves

    async def scenario() -> tuple[list[bytes], str | None]:
        server, port, _ = await serve(handler)
        client = Http1Client("p", settings(port))
        response = await client.send(request(port))
        pieces = [chunk async for chunk in response.iter_bytes()]
        await response.close()
        kind = response.headers.get("Content-Type")
        await client.close()
        server.close()
        return pieces, kind

    pieces, kind = run(scenario)
    assert b"".join(pieces) == b"data: 0\n\ndata: 1\n\ndata: 2\n\n"
    assert len(pieces) >= 2  # streamed, not gathered
    assert kind == "text/event-stream"


def test_a_body_delimited_by_the_connection_closing_is_read_whole() -> None:
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\nConnection: close\r\n\r\npart one, part two")
        await writer.drain()

    async def scenario() -> bytes:
        server, port, _ = await serve(handler)
        client = Http1Client("p", settings(port))
        body = await (await client.send(request(port))).read()
        await client.close()
        server.close()
        return body

    assert run(scenario) == b"part one, part two"


def test_an_idle_connection_the_server_closed_is_not_reused() -> None:
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
        await writer.drain()
        # keep-alive announced, then closed while idle (a server's idle timeout)

    async def scenario() -> tuple[list[bytes], list[int]]:
        server, port, connections = await serve(handler)
        client = Http1Client("p", settings(port))
        first = await (await client.send(request(port))).read()
        await asyncio.sleep(0.1)
        second = await (await client.send(request(port))).read()
        await client.close()
        server.close()
        return [first, second], connections

    bodies, connections = run(scenario)
    assert bodies == [b"ok", b"ok"]
    assert len(connections) == 2


def test_a_reused_connection_closed_before_answering_is_retried_on_a_fresh_one() -> None:
    """The keep-alive race: the server's idle timer closes the connection just as the
    next request is written on it. Nothing was answered, so the request goes again on a
    new connection instead of failing (the default transport lost 16 of 60 requests this
    way against llama-server under a burst)."""
    seen: list[int] = []

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        seen.append(len(seen))
        await read_request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
        await writer.drain()
        if len(seen) == 1:
            await read_request(reader)  # the reused connection's request: no answer

    async def scenario() -> list[bytes]:
        server, port, _ = await serve(handler)
        client = Http1Client("p", settings(port))
        first = await (await client.send(request(port))).read()
        second = await (await client.send(request(port))).read()
        await client.close()
        server.close()
        return [first, second]

    assert run(scenario) == [b"ok", b"ok"]
    assert len(seen) == 2


def test_a_fresh_connection_closed_before_answering_is_an_upstream_error() -> None:
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)  # and close without a word

    async def scenario() -> None:
        server, port, connections = await serve(handler)
        client = Http1Client("p", settings(port))
        try:
            with pytest.raises(UpstreamUnavailable, match="closed the connection"):
                await client.send(request(port))
            assert len(connections) == 1  # a fresh connection is not retried
        finally:
            await client.close()
            server.close()

    run(scenario)


def test_an_answer_cut_short_is_an_upstream_error_not_a_short_body() -> None:
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\nonly this much")
        await writer.drain()

    async def scenario() -> None:
        server, port, _ = await serve(handler)
        client = Http1Client("p", settings(port))
        response = await client.send(request(port))
        try:
            with pytest.raises(UpstreamUnavailable, match="closed the connection"):
                await response.read()
        finally:
            await client.close()
            server.close()

    run(scenario)


def test_garbage_instead_of_http_is_an_upstream_error() -> None:
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        writer.write(b"SSH-2.0-OpenSSH_9.0\r\n\r\n")
        await writer.drain()
        await asyncio.sleep(0.5)

    async def scenario() -> None:
        server, port, _ = await serve(handler)
        client = Http1Client("p", settings(port))
        try:
            with pytest.raises(UpstreamUnavailable):
                await client.send(request(port))
        finally:
            await client.close()
            server.close()

    run(scenario)


def test_a_stalled_upstream_times_out_between_reads() -> None:
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n")
        await writer.drain()
        await asyncio.sleep(5)

    async def scenario() -> bytes:
        server, port, _ = await serve(handler)
        client = Http1Client("p", settings(port, timeouts={"read": 0.3}))
        response = await client.send(request(port))
        got = b""
        try:
            with pytest.raises(UpstreamTimeout, match="waiting for data from provider 'p'"):
                async for chunk in response.iter_bytes():
                    got += chunk
        finally:
            await response.close()
            await client.close()
            server.close()
        return got

    assert run(scenario) == b"hello"


def test_a_stalled_read_fails_after_its_timeout_and_not_long_after() -> None:
    """One sweep per client watches every read: a stall fails between the timeout and an
    eighth of it later, while a stream that keeps sending within the timeout never fails."""

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n")
        for _ in range(6):  # 0.6 s of chunks 0.1 s apart: each read well within 0.4 s
            writer.write(b"1\r\nx\r\n")
            await writer.drain()
            await asyncio.sleep(0.1)
        await asyncio.sleep(5)

    async def scenario() -> tuple[bytes, float]:
        server, port, _ = await serve(handler)
        client = Http1Client("p", settings(port, timeouts={"read": 0.4}))
        response = await client.send(request(port))
        got, last = b"", 0.0
        try:
            with pytest.raises(UpstreamTimeout):
                async for chunk in response.iter_bytes():
                    got += chunk
                    last = time.monotonic()
            return got, time.monotonic() - last
        finally:
            await response.close()
            await client.close()
            server.close()

    got, stalled_for = run(scenario)
    assert got == b"x" * 6
    assert 0.4 <= stalled_for < 0.4 * 1.125 + 0.15


def _paced_events(events: list[bytes], gap: float, then_stall: float = 0.0) -> Handler:
    """An SSE answer, each event its own HTTP chunk `gap` after the one before (one read
    each), then the end, after a stall of `then_stall` seconds if given."""

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n")
        await writer.drain()
        for event in events:
            await asyncio.sleep(gap)  # (the first too: it comes after the iterating began)
            writer.write(b"%x\r\n%s\r\n" % (len(event), event))
            await writer.drain()
        await asyncio.sleep(then_stall or gap)  # (the end: a read of its own)
        writer.write(b"0\r\n\r\n")
        await writer.drain()
        await reader.read()

    return handler


def test_offered_reads_are_taken_in_the_read_callback_and_the_rest_yielded_in_order() -> None:
    """`iter_offered`: each read goes to `take` where it arrives (no task is running: the
    consuming task was not woken for it); what it leaves is yielded, after everything
    taken before it and before anything after it."""
    events = [b"data: %d%s\n\n" % (i, b" keep" if i in (2, 5) else b"") for i in range(8)]

    async def scenario() -> tuple[list[tuple[str, bytes]], list[bool]]:
        server, port, _ = await serve(_paced_events(events, 0.05))
        client = Http1Client("p", settings(port))
        response = await client.send(request(port))
        order: list[tuple[str, bytes]] = []
        in_a_task: list[bool] = []

        def take(data: bytes) -> bool:
            in_a_task.append(asyncio.current_task() is not None)
            if b"keep" in data:
                return False
            order.append(("taken", data))
            return True

        async for chunk in response.iter_offered(take):
            order.append(("yielded", chunk))
        await client.close()
        server.close()
        return order, in_a_task

    order, in_a_task = run(scenario)
    assert b"".join(data for _, data in order) == b"".join(events)
    assert [data for how, data in order if how == "yielded"] == [events[2], events[5]]
    assert len(in_a_task) == len(events) and not any(in_a_task)


def test_a_read_of_one_whole_chunk_is_offered_as_it_came_and_the_rest_parsed() -> None:
    """`take_chunk` gets each read that is exactly one whole chunk, as it came; a chunk
    with an extension, one split over reads (its size line too), several in one read,
    or one `take_chunk` declines go through the parser to `take`, and the parser stays
    in step: the body arrives whole and in order, and the next whole chunk skips it
    again."""
    writes = [
        b"5\r\nfirst\r\n",
        b"0006\r\nsecond\r\n",
        b"A\r\n0123456789\r\n",
        b"4;ext=1\r\nwith\r\n",
        b"8\r\nspl",
        b"it it\r\n",
        b"0",  # the size line 0a, split: the next read looks whole, and is not
        b"a\r\nabcdefghij\r\n",
        b"3\r\none\r\n3\r\ntwo\r\n",
        b"8\r\ndeclined\r\n",
        b"5\r\nafter\r\n",
    ]

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n")
        await writer.drain()
        for piece in [*writes, b"0\r\n\r\n"]:
            await asyncio.sleep(0.03)  # each its own read
            writer.write(piece)
            await writer.drain()
        await reader.read()

    async def scenario() -> list[tuple[str, bytes]]:
        server, port, _ = await serve(handler)
        client = Http1Client("p", settings(port))
        response = await client.send(request(port))
        order: list[tuple[str, bytes]] = []

        def take(data: bytes) -> bool:
            order.append(("parsed", data))
            return True

        def take_chunk(read: bytes, start: int, stop: int) -> bool:
            if read[start:stop] == b"declined":
                return False
            assert read in writes
            order.append(("whole", read[start:stop]))
            return True

        async for chunk in response.iter_offered(take, take_chunk):
            order.append(("yielded", chunk))
        await client.close()
        server.close()
        return order

    order = run(scenario)
    assert order == [
        ("whole", b"first"),
        ("whole", b"second"),
        ("whole", b"0123456789"),
        ("parsed", b"with"),
        ("parsed", b"spl"),
        ("parsed", b"it it"),
        ("parsed", b"abcdefghij"),
        ("parsed", b"onetwo"),
        ("parsed", b"declined"),
        ("whole", b"after"),
    ]


def test_reads_taken_as_they_arrive_still_time_out_between_reads() -> None:
    """Reads that never wake the consumer keep the read timeout between reads: a stream
    that keeps sending outlives the timeout, a stall after it fails within it."""
    events = [b"data: %d\n\n" % i for i in range(6)]  # 0.6 s of reads 0.1 s apart

    async def scenario() -> tuple[list[bytes], float]:
        server, port, _ = await serve(_paced_events(events, 0.1, then_stall=5))
        client = Http1Client("p", settings(port, timeouts={"read": 0.4}))
        response = await client.send(request(port))
        taken: list[bytes] = []
        last = 0.0

        def take(data: bytes) -> bool:
            nonlocal last
            taken.append(data)
            last = time.monotonic()
            return True

        try:
            with pytest.raises(UpstreamTimeout, match="waiting for data from provider 'p'"):
                async for chunk in response.iter_offered(take):
                    raise AssertionError(f"yielded {chunk!r}, which take took")
            return taken, time.monotonic() - last
        finally:
            await response.close()
            await client.close()
            server.close()

    taken, stalled_for = run(scenario)
    assert b"".join(taken) == b"".join(events)
    assert 0.4 <= stalled_for < 0.4 * 1.125 + 0.15


def test_a_take_that_fails_leaves_the_read_and_the_rest_to_the_consumer(
    caplog: pytest.LogCaptureFixture,
) -> None:
    events = [b"data: %d\n\n" % i for i in range(4)]

    async def scenario() -> list[bytes]:
        server, port, _ = await serve(_paced_events(events, 0.05))
        client = Http1Client("p", settings(port))
        response = await client.send(request(port))
        offered: list[bytes] = []

        def take(data: bytes) -> bool:
            offered.append(data)
            if len(offered) == 2:
                raise RuntimeError("a bug")
            return True

        yielded = [chunk async for chunk in response.iter_offered(take)]
        await client.close()
        server.close()
        assert offered == events[:2]
        return yielded

    assert b"".join(run(scenario)) == b"".join(events[1:])
    assert "relaying an upstream read failed" in caplog.text


def test_nothing_listening_is_unreachable() -> None:
    async def scenario() -> None:
        port = free_port()
        client = Http1Client("p", settings(port))
        try:
            with pytest.raises(UpstreamUnreachable, match="could not connect to provider 'p'"):
                await client.send(request(port))
        finally:
            await client.close()

    run(scenario)


def test_a_full_pool_waits_its_pool_timeout_then_says_so() -> None:
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n")
        await writer.drain()
        await asyncio.sleep(5)

    async def scenario() -> None:
        server, port, _ = await serve(handler)
        client = Http1Client(
            "p", settings(port, pool={"max_connections": 1}, timeouts={"pool": 0.2})
        )
        held = await client.send(request(port))
        try:
            with pytest.raises(UpstreamTimeout, match="free connection"):
                await client.send(request(port))
            await held.close()  # the slot comes back
            again = await asyncio.wait_for(client.send(request(port)), 2)
            await again.close()
        finally:
            await client.close()
            server.close()

    run(scenario)


def test_a_slow_reader_pauses_the_upstream_and_still_gets_every_byte() -> None:
    chunk = b"x" * 65536
    count = 64  # 4 MiB, past the high-water mark

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % (len(chunk) * count))
        for _ in range(count):
            writer.write(chunk)
            await writer.drain()

    async def scenario() -> int:
        server, port, _ = await serve(handler)
        client = Http1Client("p", settings(port))
        response = await client.send(request(port))
        total = 0
        async for piece in response.iter_bytes():
            total += len(piece)
            await asyncio.sleep(0.001)
        await client.close()
        server.close()
        return total

    assert run(scenario) == len(chunk) * count


@pytest.fixture
def tls_files(tmp_path: Any) -> tuple[str, str]:
    """A self-signed certificate for localhost, made with the openssl CLI."""
    import shutil
    import subprocess

    if shutil.which("openssl") is None:
        pytest.skip("openssl CLI not installed")
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
         "-subj", "/CN=localhost", "-addext", "subjectAltName=DNS:localhost",
         "-keyout", str(key), "-out", str(cert)],
        check=True, capture_output=True,
    )  # fmt: skip
    return str(cert), str(key)


def _tls_scenario(cert: str, key: str) -> Callable[[], Coroutine[Any, Any, bytes]]:
    import ssl

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 6\r\n\r\nsecret")
        await writer.drain()

    async def scenario() -> bytes:
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        context.load_cert_chain(cert, key)
        server = await asyncio.start_server(handler, "127.0.0.1", 0, ssl=context)
        port = server.sockets[0].getsockname()[1]
        provider = ProviderSettings.model_validate(
            {"kind": "openai", "base_url": f"https://localhost:{port}/v1"}
        )
        client = Http1Client("p", provider)
        try:
            response = await client.send(
                UpstreamRequest(url=f"https://localhost:{port}/v1/chat/completions", body=b"{}")
            )
            return await response.read()
        finally:
            await client.close()
            server.close()

    return scenario


def test_https_upstreams_are_called_over_verified_tls(
    tls_files: tuple[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    cert, key = tls_files
    # OpenSSL's default verify paths honour SSL_CERT_FILE: trust only this certificate
    monkeypatch.setenv("SSL_CERT_FILE", cert)
    assert run(_tls_scenario(cert, key)) == b"secret"


def test_an_untrusted_certificate_is_refused_and_named_as_tls(
    tls_files: tuple[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    cert, key = tls_files
    monkeypatch.delenv("SSL_CERT_FILE", raising=False)
    with pytest.raises(UpstreamUnreachable, match="TLS with provider 'p' failed"):
        run(_tls_scenario(cert, key))


def test_bursts_against_a_server_that_closes_idle_and_worn_connections_lose_nothing() -> None:
    """llama-server's HTTP layer (cpp-httplib) in small: each connection serves requests
    one after another, is closed after `IDLE` seconds without one, and after `MAX_USES`
    requests (the last answered with `connection: close`). Bursts of streamed answers,
    each starting around the moment the server closes the connections the previous one
    left idle, so reused connections meet every stage of the server's close."""
    idle, max_uses, burst, chunks = 0.05, 5, 24, 4
    answered: list[int] = []

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        for use in range(1, max_uses + 1):
            try:
                await asyncio.wait_for(read_request(reader), idle if use > 1 else 5)
            except TimeoutError:
                return  # the idle timer: closed without a word
            last = use == max_uses
            writer.write(
                b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
                + (b"connection: close\r\n" if last else b"")
                + b"transfer-encoding: chunked\r\n\r\n"
            )
            for n in range(chunks):
                event = b"data: %d\n\n" % n
                writer.write(b"%x\r\n%s\r\n" % (len(event), event))
                await writer.drain()
                await asyncio.sleep(0.001)
            writer.write(b"0\r\n\r\n")
            await writer.drain()
            answered.append(use)

    async def one(client: Http1Client, port: int) -> bytes:
        response = await client.send(request(port))
        return b"".join([chunk async for chunk in response.iter_bytes()])

    async def scenario() -> tuple[list[Any], int]:
        server, port, connections = await serve(handler)
        client = Http1Client("p", settings(port))
        outcomes: list[Any] = []
        try:
            # back to back (connections wear out), then around the idle timer: before
            # it, at it and just after it
            pauses = (0.0,) * 5 + (0.04, 0.05, 0.06) + (0.0,) * 5 + (0.045, 0.05, 0.055)
            for pause in pauses:
                await asyncio.sleep(pause)
                wave = [one(client, port) for _ in range(burst)]
                outcomes += await asyncio.gather(*wave, return_exceptions=True)
        finally:
            await client.close()
            server.close()
        return outcomes, len(connections)

    outcomes, connections = run(scenario)
    expected = b"".join(b"data: %d\n\n" % n for n in range(chunks))
    failures = [repr(o) for o in outcomes if not isinstance(o, bytes)]
    assert not failures, (len(failures), failures[:3])
    assert outcomes == [expected] * len(outcomes)
    # the server's closes happened: connections were replaced, and others were reused
    assert burst < connections < len(outcomes)
    assert max_uses in answered, (sorted(set(answered)), connections, len(outcomes))
