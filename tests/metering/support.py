"""Helpers for the metering tests: ledger records priced like real traffic, a Redis client
without hidden retries, and a TCP proxy that can lose Redis's replies."""

from __future__ import annotations

import asyncio
import contextlib
from datetime import UTC, datetime, timedelta
from decimal import Decimal

from redis.asyncio import Redis
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff

from gateway.metering.cost import cost_of
from gateway.metering.ledger_record import LedgerRecord
from gateway.settings.catalog import Prices
from gateway.usage import Usage

D = Decimal
PRICES = {
    ("gpt-4.1", "openai"): Prices(input=D("2.00"), cached_input=D("0.50"), output=D("8.00")),
    ("claude-sonnet-4.5", "anthropic"): Prices(
        input=D("3.00"), cached_input=D("0.30"), cache_write=D("3.75"), output=D("15.00")
    ),
    ("gemini-2.5-flash", "gemini"): Prices(
        input=D("0.30"), cached_input=D("0.03"), output=D("2.50")
    ),
    ("deepseek-v3.2", "deepseek"): Prices(
        input=D("0.28"), cached_input=D("0.028"), output=D("0.42")
    ),
}
MODELS = list(PRICES)
TENANTS = ["acme", "globex", "initech"]


def today_midnight() -> datetime:
    return datetime.now(UTC).replace(hour=0, minute=0, second=0, microsecond=0)


def make_record(n: int, day: datetime | None = None, *, prefix: str = "req") -> LedgerRecord:
    """The n-th request of a synthetic load: varied tenants, keys, models and usage."""
    model, provider = MODELS[n % len(MODELS)]
    tenant = TENANTS[n % len(TENANTS)]
    usage = Usage(
        input_tokens=1_000 + 37 * n,
        cached_input_tokens=(11 * n) % 500,
        cache_write_tokens=(7 * n) % 200 if provider == "anthropic" else 0,
        output_tokens=50 + (13 * n) % 900,
        estimated=n % 17 == 0,
    )
    moment = (day or today_midnight()) + timedelta(seconds=n % 80_000)
    return LedgerRecord.settled(
        time=moment.timestamp(),
        request_id=f"{prefix}-{n}",
        tenant=tenant,
        key_id=f"{tenant}-key-{n % 2}",
        model=model,
        provider=provider,
        deployment=f"{provider}/{model}",
        status=200,
        usage=usage,
        cost=cost_of(usage, PRICES[model, provider]),
        route="auto",
        latency_ms=120.5,
        ttft_ms=40.0 if n % 2 else None,
        retries=n % 3,
        fallback_from="gpt-4.1" if n % 5 == 0 else "",
    )


def client(port: int) -> Redis:
    """A client that reports a failure at once instead of retrying behind our back."""
    return Redis(
        host="127.0.0.1",
        port=port,
        retry=Retry(NoBackoff(), 0),
        socket_timeout=5,
        socket_connect_timeout=2,
    )


class ReplyLosingProxy:
    """Forwards a TCP connection to Redis; with `lose_replies` set, Redis still receives
    and executes every command but the connection is cut before its reply arrives."""

    def __init__(self, upstream_port: int) -> None:
        self.upstream_port = upstream_port
        self.lose_replies = False
        self.port = 0
        self._server: asyncio.Server | None = None

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._handle, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.upstream_port)

        async def to_redis() -> None:
            while data := await reader.read(65536):
                up_writer.write(data)
                await up_writer.drain()

        async def to_client() -> None:
            while data := await up_reader.read(65536):
                if self.lose_replies:
                    writer.close()  # the client sees the connection drop, Redis carries on
                    continue
                writer.write(data)
                await writer.drain()

        sending = asyncio.create_task(to_redis())
        receiving = asyncio.create_task(to_client())
        with contextlib.suppress(Exception):
            await asyncio.wait([sending, receiving], return_when=asyncio.FIRST_COMPLETED)
        # let Redis finish what it was sent before its side of the connection closes
        with contextlib.suppress(Exception):
            await asyncio.wait_for(asyncio.shield(receiving), 1.0)
        for task in (sending, receiving):
            task.cancel()
        for stream in (writer, up_writer):
            stream.close()
            with contextlib.suppress(Exception):
                await stream.wait_closed()
