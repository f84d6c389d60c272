"""A lean closed-loop HTTP/1.1 load generator on raw asyncio streams.

httpx costs hundreds of microseconds per request on the client side, which would make
the load generator, not the proxy, the bottleneck on a 2-core machine. This client sends
one pre-encoded request per turn on a keep-alive connection and parses just enough of
the response (status, Content-Length or chunked framing) to know where it ends.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field

UNIQUE_SLOT = b"@@@@@@@@"


@dataclass
class Result:
    latencies: list[float] = field(default_factory=list)
    ttfb: list[float] = field(default_factory=list)
    errors: int = 0
    statuses: dict[int, int] = field(default_factory=dict)
    elapsed: float = 0.0
    # requests answered during the warm-up: not in the figures above, but the server's
    # CPU counter ran for them too
    warmup: int = 0

    @property
    def count(self) -> int:
        return len(self.latencies)

    @property
    def rate(self) -> float:
        return self.count / self.elapsed if self.elapsed else 0.0

    def percentile(self, q: float, values: list[float] | None = None) -> float:
        data = sorted(self.latencies if values is None else values)
        if not data:
            return float("nan")
        index = min(len(data) - 1, max(0, round(q / 100 * (len(data) - 1))))
        return data[index]


def build_request(host: str, port: int, path: str, body: bytes, headers: dict[str, str]) -> bytes:
    lines = [
        f"POST {path} HTTP/1.1",
        f"Host: {host}:{port}",
        "Content-Type: application/json",
        f"Content-Length: {len(body)}",
        *(f"{k}: {v}" for k, v in headers.items()),
    ]
    return ("\r\n".join(lines) + "\r\n\r\n").encode() + body


async def _read_response(reader: asyncio.StreamReader) -> tuple[int, float | None]:
    """Read one response; return its status and the time its first body byte arrived."""
    head = await reader.readuntil(b"\r\n\r\n")
    status = int(head[9:12])
    lower = head.lower()
    first_byte: float | None = None
    if b"transfer-encoding: chunked" in lower:
        while True:
            size_line = await reader.readuntil(b"\r\n")
            size = int(size_line.strip().split(b";")[0], 16)
            if first_byte is None:
                first_byte = time.perf_counter()
            if size == 0:
                await reader.readuntil(b"\r\n")
                break
            await reader.readexactly(size + 2)
    else:
        start = lower.find(b"content-length:")
        if start < 0:
            raise ValueError("response without length")
        end = lower.find(b"\r\n", start)
        length = int(lower[start + 15 : end])
        await reader.readexactly(length)
        first_byte = time.perf_counter()
    return status, first_byte


async def run_load(
    host: str,
    port: int,
    request: bytes,
    concurrency: int,
    duration: float,
    max_requests: int | None = None,
    warmup: float = 0.5,
) -> Result:
    result = Result()
    stop_at = time.perf_counter() + warmup + duration
    measure_from = time.perf_counter() + warmup
    sent = 0
    # a request may carry a counter slot, so every request differs (no cache can hide a
    # per-request cost); the slot has a fixed width, so Content-Length stays right
    unique = UNIQUE_SLOT in request

    async def worker() -> None:
        nonlocal sent
        reader: asyncio.StreamReader | None = None
        writer: asyncio.StreamWriter | None = None
        while time.perf_counter() < stop_at and (max_requests is None or sent < max_requests):
            sent += 1
            try:
                if writer is None:
                    reader, writer = await asyncio.open_connection(host, port)
                assert reader is not None
                started = time.perf_counter()
                if unique:
                    writer.write(request.replace(UNIQUE_SLOT, b"%08d" % sent, 1))
                else:
                    writer.write(request)
                status, first = await _read_response(reader)
                finished = time.perf_counter()
            except asyncio.IncompleteReadError as exc:
                if exc.partial:
                    result.errors += 1
                # else: the server closed an idle keep-alive connection; reconnect and resend
                if writer is not None:
                    writer.close()
                writer = reader = None
                continue
            except (OSError, ValueError):
                result.errors += 1
                if writer is not None:
                    writer.close()
                writer = reader = None
                await asyncio.sleep(0.01)
                continue
            if started < measure_from:
                result.warmup += 1
                continue
            result.statuses[status] = result.statuses.get(status, 0) + 1
            if status != 200:
                result.errors += 1
                continue
            result.latencies.append(finished - started)
            if first is not None:
                result.ttfb.append(first - started)
        if writer is not None:
            writer.close()

    await asyncio.gather(*(worker() for _ in range(concurrency)))
    result.elapsed = time.perf_counter() - measure_from
    return result
