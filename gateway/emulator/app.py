"""The emulator's HTTP face: a bare ASGI app (no framework, to stay fast).

Routes: `POST /v1/chat/completions`, `POST /v1/embeddings` (see embeddings.py),
`GET /v1/models`, `GET /health` (and SGLang's `/health_generate`), `GET /metrics`.
With `time_scale == 0` chat completions bypass the scheduler and are answered at once;
otherwise each becomes a sequence in the scheduler and its tokens are sent as the engine
produces them.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import time
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

import msgspec

from gateway.emulator.completions import as_chat_request, body_receive, completions_send
from gateway.emulator.embeddings import EmbeddingsRejected, embeddings_body
from gateway.emulator.engine import Engine, EngineFailed, Ticket
from gateway.emulator.faults import Faults
from gateway.emulator.generation import Reply, ReplyRequest, ReplyWriter
from gateway.emulator.metrics import CONTENT_TYPE, EmulatorCollector, MetricsPage
from gateway.emulator.options import EmulatorOptions
from gateway.emulator.scheduler import PromptTooLong, Scheduler, Sequence
from gateway.emulator.tokenizer import Tokenizer, render_prompt, tokenizer_named
from gateway.emulator.wire import (
    DONE_EVENT,
    BadRequest,
    EmulatorRequest,
    StreamWriter,
    completion_body,
    decode_request,
    error_body,
    usage,
)

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]

_JSON = [(b"content-type", b"application/json")]
_SSE = [(b"content-type", b"text/event-stream; charset=utf-8"), (b"cache-control", b"no-cache")]


class EmulatorApp:
    def __init__(self, options: EmulatorOptions, faults: Faults | None = None) -> None:
        self.options = options
        self.scheduler = Scheduler(options.scheduler_config(), options.gpu_profile())
        self.engine = None if options.instant else Engine(self.scheduler, options.time_scale)
        self.faults = faults or Faults(options)
        self._writer = ReplyWriter(
            options.seed, options.min_output_tokens, options.max_output_tokens
        )
        self._tokenizer: Tokenizer = tokenizer_named(options.tokenizer)
        self._ids = itertools.count(1)
        self._id_prefix = f"chatcmpl-{options.seed & 0xFFFF:04x}"
        self._inflight = 0
        self._created = int(time.time())
        running = (lambda: self._inflight) if options.instant else None
        self._metrics = MetricsPage(
            EmulatorCollector(self.scheduler, options.model, options.metrics_style, running)
        )
        self._models_body = msgspec.json.encode(
            {
                "object": "list",
                "data": [
                    {
                        "id": options.model,
                        "object": "model",
                        "created": self._created,
                        "owned_by": "gateway-emulator",
                    }
                ],
            }
        )

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        kind = scope["type"]
        if kind == "http":
            await self._http(scope, receive, send)
        elif kind == "lifespan":
            await self._lifespan(receive, send)

    async def _lifespan(self, receive: Receive, send: Send) -> None:
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                if self.engine is not None:
                    self.engine.start()
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                if self.engine is not None:
                    await self.engine.stop()
                await send({"type": "lifespan.shutdown.complete"})
                return

    async def _http(self, scope: Scope, receive: Receive, send: Send) -> None:
        path = scope["path"]
        method = scope["method"]
        if path == "/v1/chat/completions":
            if method != "POST":
                return await _error(send, 405, "use POST for /v1/chat/completions")
            return await self._chat(receive, send)
        if path == "/v1/completions":
            if method != "POST":
                return await _error(send, 405, "use POST for /v1/completions")
            chat_body = as_chat_request(await _read_body(receive))
            return await self._chat(body_receive(chat_body, receive), completions_send(send))
        if path == "/v1/embeddings":
            if method != "POST":
                return await _error(send, 405, "use POST for /v1/embeddings")
            return await self._embeddings(receive, send)
        if method != "GET":
            if path in ("/v1/models", "/health", "/health_generate", "/metrics"):
                return await _error(send, 405, f"use GET for {path}")
            return await _error(send, 404, f"no route for {method} {path}")
        if path == "/v1/models":
            return await _respond(send, 200, _JSON, self._models_body)
        if path in ("/health", "/health_generate"):
            return await _respond(send, 200, _JSON, b'{"status":"ok"}')
        if path == "/metrics":
            headers = [(b"content-type", CONTENT_TYPE.encode())]
            return await _respond(send, 200, headers, self._metrics.render())
        return await _error(send, 404, f"no route for {method} {path}")

    async def _embeddings(self, receive: Receive, send: Send) -> None:
        try:
            body = embeddings_body(await _read_body(receive), self.options.model, self.options.seed)
        except EmbeddingsRejected as bad:
            return await _error(send, 400, bad.message, bad.param)
        await _respond(send, 200, _JSON, body)

    # -- chat completions ---------------------------------------------------------------

    async def _chat(self, receive: Receive, send: Send) -> None:
        body = await _read_body(receive)
        faults = self.faults
        try:
            request = decode_request(body)
        except BadRequest as bad:
            await _error(send, 400, bad.message, bad.param)
            faults.answered()
            return
        if faults.slow_start:
            await asyncio.sleep(faults.slow_start)
        if faults.should_fail():
            await _error(send, faults.fail_status, "emulated upstream failure (--fail-rate)")
            faults.answered()
            return
        self._inflight += 1
        try:
            if self.engine is None:
                await self._answer_now(request, send)
            else:
                await self._answer_scheduled(self.engine, request, receive, send)
        finally:
            self._inflight -= 1
        faults.answered()

    def _plan(self, request: EmulatorRequest, prompt: str) -> list[Reply]:
        """One reply per choice (`n`), each its own deterministic answer."""
        last = request.messages[-1]
        return [
            self._writer.reply(
                ReplyRequest(
                    prompt=prompt,
                    limit=request.limit,
                    ignore_eos=bool(request.ignore_eos),
                    stop=request.stop_sequences,
                    tools=request.function_tools(),
                    tool_choice=request.tool_choice,
                    response_format=request.response_format,
                    seed=request.seed,
                    index=index,
                    last_role=last.role,
                    last_text=last.text(),
                )
            )
            for index in range(request.n)
        ]

    async def _answer_now(self, request: EmulatorRequest, send: Send) -> None:
        prompt = render_prompt(request.messages, request.tools)
        prompt_tokens = self._tokenizer.count(prompt)
        replies = self._plan(request, prompt)
        generated = sum(reply.tokens for reply in replies)
        stats = self.scheduler.stats
        stats.requests_total += 1
        stats.prompt_tokens_total += prompt_tokens
        stats.generation_tokens_total += generated
        for reply in replies:
            stats.record_finish(reply.finish_reason)
        usage_block = usage(prompt_tokens, generated, 0)
        completion_id = f"{self._id_prefix}{next(self._ids):08x}"
        model = request.model or self.options.model
        created = int(time.time())
        top = request.logprobs_top
        if not request.stream:
            body = completion_body(completion_id, created, model, replies, usage_block, top)
            await _respond(send, 200, _JSON, body)
            return
        writer = StreamWriter(completion_id, created, model, replies, top)
        events = writer.events(max(r.tokens for r in replies), finished=True)
        if request.wants_usage_chunk:
            events += writer.usage_event(usage_block)
        await _respond(send, 200, _SSE, events + DONE_EVENT)

    async def _answer_scheduled(
        self, engine: Engine, request: EmulatorRequest, receive: Receive, send: Send
    ) -> None:
        prompt = render_prompt(request.messages, request.tools)
        tokens = self._tokenizer.tokenize(prompt, self.options.page_size)
        replies = self._plan(request, prompt)
        longest = max(replies, key=lambda reply: reply.tokens)
        rid = next(self._ids)
        # the choices of `n` decode side by side: the sequence runs as long as the longest
        seq = Sequence(
            rid=rid,
            prompt_tokens=tokens.count,
            page_keys=tokens.page_keys,
            output_target=max(1, longest.tokens),
            arrival=0.0,
            finish_reason=longest.finish_reason,
        )
        try:
            ticket = engine.submit(seq, every_token=request.stream)
        except PromptTooLong as error:
            await _error(send, 400, str(error), "messages")
            return
        except EngineFailed as error:
            await _error(send, 500, str(error))
            return
        watcher = asyncio.get_running_loop().create_task(_watch_disconnect(receive, engine, ticket))
        try:
            completion_id = f"{self._id_prefix}{rid:08x}"
            model = request.model or self.options.model
            if request.stream:
                await self._stream(ticket, request, replies, completion_id, model, send)
            else:
                await self._complete(ticket, request, replies, completion_id, model, send)
        finally:
            watcher.cancel()

    async def _complete(
        self,
        ticket: Ticket,
        request: EmulatorRequest,
        replies: list[Reply],
        completion_id: str,
        model: str,
        send: Send,
    ) -> None:
        seq = ticket.seq
        while not seq.finished:
            await ticket.changed()
            if ticket.disconnected:
                return
            if ticket.failed:
                await _error(send, 500, "the emulator's scheduler loop has failed")
                return
        final = [_truncated(reply, seq) for reply in replies]
        generated = sum(reply.tokens for reply in final)
        usage_block = usage(seq.prompt_tokens, generated, seq.cached_tokens)
        created = int(time.time())
        top = request.logprobs_top
        body = completion_body(completion_id, created, model, final, usage_block, top)
        await _respond(send, 200, _JSON, body)

    async def _stream(
        self,
        ticket: Ticket,
        request: EmulatorRequest,
        replies: list[Reply],
        completion_id: str,
        model: str,
        send: Send,
    ) -> None:
        seq = ticket.seq
        final = [_truncated(reply, seq) for reply in replies]
        writer = StreamWriter(completion_id, int(time.time()), model, final, request.logprobs_top)
        await send({"type": "http.response.start", "status": 200, "headers": _SSE})
        while True:
            await ticket.changed()
            if ticket.disconnected:
                return
            if ticket.failed:
                # headers are out: end the stream without [DONE], as a dying server would
                await send({"type": "http.response.body", "body": b""})
                return
            finished = seq.finished
            events = writer.events(seq.output_tokens, finished)
            if finished:
                if request.wants_usage_chunk:
                    generated = sum(reply.tokens for reply in final)
                    usage_block = usage(seq.prompt_tokens, generated, seq.cached_tokens)
                    events += writer.usage_event(usage_block)
                await send({"type": "http.response.body", "body": events + DONE_EVENT})
                return
            if events:
                await send({"type": "http.response.body", "body": events, "more_body": True})


def _truncated(reply: Reply, seq: Sequence) -> Reply:
    """The reply as the scheduler will end it: cut if the KV cache capped its length."""
    if seq.output_target >= reply.tokens:
        return reply
    return Reply(reply.pieces[: seq.output_target], "length", reply.tool_call, reply.digest)


async def _watch_disconnect(receive: Receive, engine: Engine, ticket: Ticket) -> None:
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            ticket.disconnected = True
            engine.abort(ticket)
            ticket.notify()
            return


async def _read_body(receive: Receive) -> bytes:
    chunks: list[bytes] = []
    while True:
        message = await receive()
        if message["type"] != "http.request":
            break
        chunks.append(message.get("body", b""))
        if not message.get("more_body", False):
            break
    return chunks[0] if len(chunks) == 1 else b"".join(chunks)


async def _respond(
    send: Send, status: int, headers: list[tuple[bytes, bytes]], body: bytes
) -> None:
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


async def _error(send: Send, status: int, message: str, param: str | None = None) -> None:
    headers = list(_JSON)
    if status in (429, 503):
        headers.append((b"retry-after", b"1"))
    with contextlib.suppress(OSError):
        await _respond(send, status, headers, error_body(status, message, param))


def build_app(options: EmulatorOptions) -> EmulatorApp:
    """The ASGI app of one emulated replica."""
    return EmulatorApp(options)
