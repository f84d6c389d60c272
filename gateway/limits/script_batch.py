"""Script calls made in the same event-loop turn go to Redis as one pipeline.

Under load a gateway worker has dozens of requests between admission and settlement at
once. Sent one by one, each script call pays redis-py's per-command machinery (a pool
checkout, a socket write, a read, a retry wrapper, a timer): on one core that was a
third of the gateway's CPU per request. Collected for one loop turn and written as one
pipeline, they share all of it; a lone request still goes out at the next turn, so one
request at a time waits no longer than before.

Each call keeps its own answer: a script error fails only its own call, a NOSCRIPT (Redis
restarted or flushed) loads the script once and runs the calls that met it again, and a
connection failure or the deadline fails every call of that batch (the caller turns it
into `StoreUnavailable`), and drops the idle pooled connections, which a restarted
Redis has closed too. The deadline runs per batch, from when it is flushed, so a
call never waits longer than one loop turn plus `timeout_seconds`.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
from collections.abc import Sequence
from typing import Any, Protocol

from redis.asyncio import Redis
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import NoScriptError, RedisError, ResponseError


class BatchedScript(Protocol):
    name: str
    sha: str
    loads: int

    async def load(self, client: Any) -> None: ...


class _Call:
    __slots__ = ("answer", "keys", "payload", "script")

    def __init__(
        self,
        script: BatchedScript,
        keys: Sequence[str],
        payload: bytes,
        answer: asyncio.Future[Any],
    ) -> None:
        self.script = script
        self.keys = keys
        self.payload = payload
        self.answer = answer


class ScriptBatcher:
    def __init__(
        self,
        client: Redis,
        *,
        timeout_seconds: float,
        loading: asyncio.Lock,
        in_flight: asyncio.Semaphore,
        max_batch: int = 256,
    ) -> None:
        self._client = client
        self._timeout = timeout_seconds
        self._loading = loading
        self._in_flight = in_flight
        self._max_batch = max_batch
        self._pending: list[_Call] = []
        self._flush_scheduled = False
        self._sending: set[asyncio.Task[None]] = set()

    def run(
        self, script: BatchedScript, keys: Sequence[str], payload: bytes
    ) -> asyncio.Future[Any]:
        loop = asyncio.get_running_loop()
        answer: asyncio.Future[Any] = loop.create_future()
        self._pending.append(_Call(script, keys, payload, answer))
        if not self._flush_scheduled:
            self._flush_scheduled = True
            # call_soon runs after every callback already ready in this turn: the
            # requests woken together are sent together
            loop.call_soon(self._flush)
        return answer

    def _flush(self) -> None:
        self._flush_scheduled = False
        pending, self._pending = self._pending, []
        for start in range(0, len(pending), self._max_batch):
            task = asyncio.ensure_future(self._send(pending[start : start + self._max_batch]))
            self._sending.add(task)
            task.add_done_callback(self._sending.discard)

    async def _send(self, batch: list[_Call]) -> None:
        try:
            async with asyncio.timeout(self._timeout), self._in_flight:
                results = await self._execute(batch)
                again = [
                    (call, i)
                    for i, call in enumerate(batch)
                    if isinstance(results[i], NoScriptError)
                ]
                if again:
                    await self._load([call.script for call, _ in again])
                    retried = await self._execute([call for call, _ in again])
                    for (_, i), result in zip(again, retried, strict=True):
                        results[i] = result
        except BaseException as error:
            for call in batch:
                if not call.answer.done():
                    call.answer.set_exception(_as_failure(error))
            if isinstance(error, asyncio.CancelledError):
                raise
            if isinstance(error, RedisConnectionError | OSError):
                await self._drop_idle_connections()
            return
        for call, result in zip(batch, results, strict=True):
            if call.answer.done():  # its caller gave up (cancelled)
                continue
            if isinstance(result, Exception):
                call.answer.set_exception(result)
            else:
                call.answer.set_result(result)

    async def _drop_idle_connections(self) -> None:
        """After a broken connection every idle one is suspect: a Redis that restarted
        closed them all, and each would fail one later batch (long after Redis is back)."""
        with contextlib.suppress(RedisError, OSError):
            await self._client.connection_pool.disconnect(inuse_connections=False)

    async def _execute(self, batch: Sequence[_Call]) -> list[Any]:
        """One write, then the replies in order, on one pooled connection.

        Below redis-py's `Pipeline` on purpose: its per-command bookkeeping (a retry
        wrapper, observability hooks, a timer per reply) cost more than the scripts. The
        batch's own deadline bounds the reads, so replies are read without a timer each.
        """
        pool = self._client.connection_pool
        connection = await pool.get_connection()  # type: ignore[no-untyped-call]
        try:
            await connection.send_packed_command(
                connection.pack_commands(
                    [
                        ("EVALSHA", call.script.sha, len(call.keys), *call.keys, call.payload)
                        for call in batch
                    ]
                )
            )
            results: list[Any] = []
            for _ in batch:
                try:
                    results.append(await connection.read_response(timeout=math.inf))
                except ResponseError as error:  # this call's own error; the rest still read
                    results.append(error)
        except BaseException:
            # a reply left unread would be the next batch's answer
            await connection.disconnect(nowait=True)
            raise
        finally:
            await pool.release(connection)
        return results

    async def _load(self, scripts: Sequence[BatchedScript]) -> None:
        seen = {script.name: (script, script.loads) for script in scripts}
        async with self._loading:
            for script, loads_seen in seen.values():
                if script.loads == loads_seen:
                    await script.load(self._client)

    async def close(self) -> None:
        for task in list(self._sending):
            task.cancel()
        if self._sending:
            await asyncio.gather(*self._sending, return_exceptions=True)


def _as_failure(error: BaseException) -> BaseException:
    # a cancelled batch (the store closing) reads to its callers as the store going away
    if isinstance(error, asyncio.CancelledError):
        return ConnectionError("the limits store is closing")
    return error
