"""Script calls to a single Redis, pipelined on one connection the batcher owns.

Under load a gateway worker has dozens of requests between admission and settlement at
once; one request at a time, it has two script calls per request. Through redis-py's
command path each call paid a pool checkout, a retry wrapper, observability hooks and a
timer per reply: ~100 us of CPU per call one at a time, a third of the gateway's CPU per
request under load. Here calls made in the same event-loop turn are written together in
one `write` on one long-lived connection, without waiting for earlier answers; a single
reader task hands each reply, in order, to its caller's future.

redis-py connects (and authenticates, selects the database); after that the batcher
reads and writes the connection's stream itself: a batch is written the moment it is
flushed (the RESP is packed here, once per batch), with no writer task to wake, unless
the socket is still taking an earlier batch (then a drain task writes what queues up
behind it); and the reader feeds what the socket returns to the connection's hiredis
reader and hands out every reply it completes, without redis-py's per-reply coroutines
(four a reply, and a timeout context). Where that reader is not hiredis (RESP3, or a
redis-py without it) the reader goes through redis-py's `read_response` instead. The
connection has no socket timeout of its own, since the batch deadline below bounds every
wait.

Calls that can share one script run (`run_merged`: the same script over the same keys,
such as admissions of one API key) are joined, per turn, into a single EVALSHA whose
reply has one answer per call: Redis pays its per-script and per-command costs once per
batch instead of once per request. Calls of one group keep their order; the groups of a
turn run one after another, which may not be the order their first calls came in (calls
made in the same turn are concurrent: any order is one they could have arrived in).

Each call keeps its own answer: a script error fails only its own call (or its merged
run), and a NOSCRIPT (Redis restarted or flushed) loads the script and runs that call
again. A broken connection fails the calls waiting on it, and the next call connects
afresh. A batch not fully answered within `timeout_seconds` of being written means the
connection (or Redis) is stuck: every call waiting on it fails with `TimeoutError` and
the connection is dropped, so nothing waits longer than one loop turn plus
`timeout_seconds` (plus the connect timeout when a new connection is needed). One
watchdog timer per connection, armed at the oldest unanswered call's deadline, checks
this (a timer per batch cost ~50,000 instructions per request, callgrind).
"""

from __future__ import annotations

import asyncio
import contextlib
import math
from collections import deque
from collections.abc import Callable, Sequence
from typing import Any, Protocol

from redis._parsers.hiredis import NOT_ENOUGH_DATA, _AsyncHiredisParser
from redis.asyncio import Redis
from redis.asyncio.connection import AbstractConnection
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import NoScriptError, RedisError, ResponseError

from gateway.redis_resp import pack_command, pack_commands


class BatchedScript(Protocol):
    name: str
    sha: str
    source: str
    loads: int


# calls merged into one script run at most: bounds how long one run holds Redis
MAX_MERGED = 256
# how long a call that can wait (a settlement: its response has gone out) waits for a
# call that cannot to carry it: under load the next turn's admissions do, in one write.
# (The admit stage lets a settlement wait only while other requests it admitted are
# unsettled: one request at a time, the next admission would find it ahead in its trip)
WAIT_FOR_COMPANY_SECONDS = 0.002
# bytes the socket may hold unsent before later batches wait for it to drain
WRITE_HIGH_WATER = 256 * 1024


class _Call:
    __slots__ = ("answer", "answered", "command", "deadline", "parts", "retried", "script")

    def __init__(
        self,
        command: bytes,
        answer: asyncio.Future[Any] | None,
        script: BatchedScript | None = None,
        parts: list[asyncio.Future[Any]] | None = None,
    ) -> None:
        self.command = command  # RESP, packed
        # None: the batcher's own command (SCRIPT LOAD), or a merged run (`parts`)
        self.answer = answer
        self.script = script
        # a merged run: its reply is a list, item i answering parts[i]
        self.parts = parts
        self.answered = False
        self.retried = False
        self.deadline = 0.0  # loop time by which its batch must be answered, once written


MergedCommand = Callable[[list[Any]], bytes]


class _Merge:
    """Calls of one merge group queued in this turn: `build(items)` packs their run."""

    __slots__ = ("answers", "build", "items", "script")

    def __init__(self, script: BatchedScript, build: MergedCommand) -> None:
        self.script = script
        self.build = build
        self.items: list[Any] = []
        self.answers: list[asyncio.Future[Any]] = []


class ScriptBatcher:
    def __init__(
        self,
        client: Redis,
        *,
        timeout_seconds: float,
        company_wait_seconds: float | None = None,
    ) -> None:
        self._client = client
        self._timeout = timeout_seconds
        self._company_wait = (
            WAIT_FOR_COMPANY_SECONDS if company_wait_seconds is None else company_wait_seconds
        )
        self._connection: AbstractConnection | None = None
        self._connecting: asyncio.Task[None] | None = None
        self._reader: asyncio.Task[None] | None = None
        # the connection's stream, written by `_flush` directly while the socket keeps up
        self._stream: asyncio.StreamWriter | None = None
        # while the socket drains: the task writing what queued up behind it (`_outbox`,
        # packed batches in the order their calls joined `_sent`)
        self._writer: asyncio.Task[None] | None = None
        self._outbox: list[bytes] = []
        # the loop the batcher serves, asked for once per connection: on Python 3.11
        # every asyncio.get_running_loop() is a getpid system call (a request made ~4 here)
        self._bound_loop: asyncio.AbstractEventLoop | None = None
        self._unsent: list[_Call] = []
        self._merging: dict[object, _Merge] = {}
        # written, waiting for their replies, in the order Redis answers them
        self._sent: deque[_Call] = deque()
        self._flush_scheduled = False
        self._closed = False
        self._closing: set[asyncio.Task[None]] = set()
        # scripts with a SCRIPT LOAD written and not yet answered
        self._loading: set[str] = set()
        # one timer watches the oldest unanswered call's deadline (replies come in order)
        self._watchdog: asyncio.TimerHandle | None = None
        # flushes what can wait when nothing else has by then
        self._company_timer: asyncio.TimerHandle | None = None

    def _loop(self) -> asyncio.AbstractEventLoop:
        loop = self._bound_loop
        if loop is None:
            loop = self._bound_loop = asyncio.get_running_loop()
        return loop

    def run(
        self, script: BatchedScript, keys: Sequence[str], args: Sequence[str | bytes | int]
    ) -> asyncio.Future[Any]:
        command = ("EVALSHA", script.sha, len(keys), *keys, *args)
        return self.run_packed(script, pack_command(command))

    def run_packed(self, script: BatchedScript, command: bytes) -> asyncio.Future[Any]:
        """Run `command`, an EVALSHA of `script` already packed as RESP (gateway.redis_resp):
        a caller that sends many alike keeps their constant part packed."""
        answer: asyncio.Future[Any] = self._loop().create_future()
        self._queue(_Call(command, answer, script))
        return answer

    def run_merged(
        self,
        script: BatchedScript,
        group: object,
        build: MergedCommand,
        item: Any,
        *,
        can_wait: bool = False,
    ) -> asyncio.Future[Any]:
        """Run one call of `script` that shares a run with the other calls of `group`
        queued in the same turn: `build(items)` packs the EVALSHA for their items, in
        order, and its reply is a list of their answers, in the same order. A call that
        `can_wait` goes out with the next flush another call makes, or after
        `company_wait_seconds` (WAIT_FOR_COMPANY_SECONDS)."""
        loop = self._loop()
        answer: asyncio.Future[Any] = loop.create_future()
        merge = self._merging.get(group)
        if merge is None:
            merge = self._merging[group] = _Merge(script, build)
        merge.items.append(item)
        merge.answers.append(answer)
        if len(merge.items) >= MAX_MERGED:
            del self._merging[group]
            self._unsent.append(_merged_call(merge))
        if not can_wait:
            self._schedule_flush()
        elif self._company_timer is None and not self._flush_scheduled:
            self._company_timer = loop.call_later(self._company_wait, self._flush)
        return answer

    def _queue(self, call: _Call) -> None:
        self._unsent.append(call)
        self._schedule_flush()

    def _schedule_flush(self) -> None:
        if not self._flush_scheduled:
            self._flush_scheduled = True
            # call_soon runs after every callback already ready in this turn: the
            # requests woken together are written together
            self._loop().call_soon(self._flush)

    def _flush(self) -> None:
        self._flush_scheduled = False
        if self._company_timer is not None:
            self._company_timer.cancel()
            self._company_timer = None
        self._flush_merging()
        if not self._unsent:
            return
        if self._closed:
            self._fail(self._unsent, ConnectionError("the limits store is closing"))
            self._unsent = []
            return
        connection = self._connection
        if connection is None:
            if self._connecting is None:
                self._connecting = asyncio.ensure_future(self._connect())
            return  # written once connected
        calls, self._unsent = self._unsent, []
        loop = self._loop()
        deadline = loop.time() + self._timeout
        for call in calls:
            call.deadline = deadline
        self._sent.extend(calls)
        data = b"".join([call.command for call in calls])
        if self._writer is not None:
            self._outbox.append(data)  # behind what the socket has not taken yet
        else:
            stream = self._stream
            assert stream is not None  # set with the connection
            try:
                stream.write(data)
            except BaseException as error:  # a closed transport: its callers learn why
                self._drop(connection, error)
                return
            if stream.transport.get_write_buffer_size() > WRITE_HIGH_WATER:
                self._writer = asyncio.ensure_future(self._drain(connection, stream))
        if self._watchdog is None:
            self._watchdog = loop.call_at(deadline, self._check_answered, connection)

    def _flush_merging(self) -> None:
        if self._merging:
            self._unsent.extend([_merged_call(merge) for merge in self._merging.values()])
            self._merging.clear()

    async def _drain(self, connection: AbstractConnection, stream: asyncio.StreamWriter) -> None:
        """Wait for the socket to take what it holds, writing what queued up meanwhile;
        then `_flush` writes directly again."""
        try:
            while True:
                await stream.drain()
                if not self._outbox:
                    break
                data, self._outbox = b"".join(self._outbox), []
                stream.write(data)
        except asyncio.CancelledError:
            raise
        except BaseException as error:  # a broken connection: its callers learn why
            self._drop(connection, error, writing=True)
            return
        self._writer = None

    async def _connect(self) -> None:
        try:
            pool = self._client.connection_pool
            # no socket timeout: the batch deadline (the watchdog) bounds every wait,
            # and a timed write would cost a task per batch. RESP2 whatever the client
            # speaks (redis-py 8 defaults to RESP3): the reader hands replies straight
            # off hiredis only on RESP2, and script replies read the same in both
            kwargs = {**pool.connection_kwargs, "socket_timeout": None, "protocol": 2}
            connection: AbstractConnection = pool.connection_class(**kwargs)
            async with asyncio.timeout(self._timeout):
                await connection.connect()  # type: ignore[no-untyped-call]
        except BaseException as error:
            self._connecting = None
            waiting, self._unsent = self._unsent, []
            self._fail(waiting, error)
            if isinstance(error, asyncio.CancelledError):
                raise
            return
        self._connecting = None
        if self._closed:
            await connection.disconnect()
            return
        self._connection = connection
        self._stream = connection._writer
        self._reader = asyncio.ensure_future(self._read(connection))
        self._flush()

    async def _read(self, connection: AbstractConnection) -> None:
        try:
            parser = connection._parser
            stream = connection._reader
            if (
                isinstance(parser, _AsyncHiredisParser)
                and parser._reader is not None
                and stream is not None
                and not _resp3(connection)
            ):
                await self._read_replies(parser, stream)
            while True:
                try:
                    reply: Any = await connection.read_response(
                        timeout=math.inf, disconnect_on_error=False
                    )
                except ResponseError as error:  # this call's own error
                    reply = error
                self._answer_next(reply)
        except asyncio.CancelledError:
            raise
        except BaseException as error:  # a broken connection
            self._drop(connection, error, reading=True)

    async def _read_replies(
        self, parser: _AsyncHiredisParser, stream: asyncio.StreamReader
    ) -> None:
        """What redis-py's `read_response` does for each reply on a RESP2 connection,
        for every reply one socket read completes: a reply that is a ConnectionError
        (or a list led by one) breaks the connection, any other error answers its call."""
        replies = parser._reader
        assert replies is not None
        gets = replies.gets
        read_size = parser._read_size
        while True:
            reply = gets()
            while reply is NOT_ENOUGH_DATA:
                data = await stream.read(read_size)
                if not data:
                    raise RedisConnectionError("Connection closed by server.")
                replies.feed(data)
                reply = gets()
            if isinstance(reply, RedisConnectionError):
                raise reply
            if isinstance(reply, list) and reply and isinstance(reply[0], RedisConnectionError):
                raise reply[0]
            self._answer_next(reply)

    def _answer_next(self, reply: Any) -> None:
        if not self._sent:
            raise ConnectionError("Redis answered a command nobody sent")
        call = self._sent.popleft()
        call.answered = True
        self._deliver(call, reply)

    def _deliver(self, call: _Call, reply: Any) -> None:
        answer = call.answer
        if call.parts is not None:
            if not (isinstance(reply, NoScriptError) and not call.retried):
                _answer_parts(call.parts, reply)
                return
        elif answer is None:  # our SCRIPT LOAD
            if call.script is not None:
                self._loading.discard(call.script.sha)
                if not isinstance(reply, BaseException):
                    call.script.loads += 1
            return
        elif answer.done():  # its caller gave up (cancelled)
            return
        if isinstance(reply, NoScriptError) and call.script is not None and not call.retried:
            # Redis forgot the script (restart, flush): load it, then run the call again;
            # both are written in order on this connection, so the call sees the script
            call.retried = True
            call.answered = False
            if call.script.sha not in self._loading:  # one load for a batch that met it
                self._loading.add(call.script.sha)
                load = pack_commands([("SCRIPT", "LOAD", call.script.source)])
                self._queue(_Call(load, None, call.script))
            self._queue(call)
            return
        assert answer is not None
        if isinstance(reply, BaseException):
            answer.set_exception(reply)
        else:
            answer.set_result(reply)

    def _check_answered(self, connection: AbstractConnection) -> None:
        """The watchdog: the oldest call still waiting is past its batch's deadline means
        the connection (or Redis) is stuck; else look again at its deadline."""
        self._watchdog = None
        if connection is not self._connection:
            return
        if not self._sent:  # (the reader takes each call off as its reply is read)
            return
        oldest = self._sent[0].deadline
        loop = self._loop()
        if loop.time() >= oldest:
            self._drop(connection, TimeoutError())
        else:
            self._watchdog = loop.call_at(oldest, self._check_answered, connection)

    def _drop(
        self,
        connection: AbstractConnection,
        error: BaseException,
        *,
        reading: bool = False,
        writing: bool = False,
    ) -> None:
        """The connection is broken or stuck: fail what waits on it, close it, and let the
        next call connect again."""
        if connection is not self._connection:
            return
        self._connection = None
        self._stream = None
        # the next connection binds the loop again (a store reused by another loop)
        self._bound_loop = None
        if self._watchdog is not None:
            self._watchdog.cancel()
            self._watchdog = None
        self._loading.clear()
        waiting = list(self._sent)
        self._sent.clear()
        self._fail(waiting, error)
        self._outbox.clear()
        reader, self._reader = self._reader, None
        if reader is not None and not reading:
            reader.cancel()
        writer, self._writer = self._writer, None
        if writer is not None and not writing:
            writer.cancel()
        closing = asyncio.ensure_future(self._close_quietly(connection))
        self._closing.add(closing)
        closing.add_done_callback(self._closing.discard)

    async def _close_quietly(self, connection: AbstractConnection) -> None:
        with contextlib.suppress(RedisError, OSError):
            await connection.disconnect(nowait=True)
        # a Redis that restarted closed the pool's idle connections too
        with contextlib.suppress(RedisError, OSError):
            await self._client.connection_pool.disconnect(inuse_connections=False)

    @staticmethod
    def _fail(calls: Sequence[_Call], error: BaseException) -> None:
        failure = _as_failure(error)
        for call in calls:
            if call.answer is not None and not call.answer.done():
                call.answer.set_exception(failure)
            elif call.parts is not None:
                _answer_parts(call.parts, failure)

    async def close(self) -> None:
        self._closed = True
        if self._company_timer is not None:
            self._company_timer.cancel()
            self._company_timer = None
        closing = ConnectionError("the limits store is closing")
        if self._connecting is not None:
            self._connecting.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._connecting
        self._flush_merging()
        self._fail(self._unsent, closing)
        self._unsent = []
        connection = self._connection
        if connection is not None:
            self._drop(connection, closing)
        for task in (self._reader, self._writer):
            if task is not None:
                task.cancel()
        if connection is not None:
            with contextlib.suppress(RedisError, OSError):
                await connection.disconnect(nowait=True)


def _resp3(connection: AbstractConnection) -> bool:
    protocol = getattr(connection, "protocol", None)
    try:
        return protocol is not None and int(protocol) >= 3
    except (TypeError, ValueError):
        return True  # not a version we know: redis-py's own path reads it


def _merged_call(merge: _Merge) -> _Call:
    return _Call(merge.build(merge.items), None, merge.script, merge.answers)


def _answer_parts(parts: list[asyncio.Future[Any]], reply: Any) -> None:
    """A merged run's reply to each of its calls: the list item, or the run's error."""
    if not isinstance(reply, BaseException) and (
        not isinstance(reply, list) or len(reply) != len(parts)
    ):
        reply = ResponseError(f"a merged script run answered {reply!r:.80}")
    for index, part in enumerate(parts):
        if part.done():  # its caller gave up (cancelled)
            continue
        if isinstance(reply, BaseException):
            part.set_exception(reply)
        else:
            part.set_result(reply[index])


def _as_failure(error: BaseException) -> BaseException:
    # a cancelled connect (the store closing) reads to its callers as the store going away
    if isinstance(error, asyncio.CancelledError):
        return ConnectionError("the limits store is closing")
    return error
