"""Dispatch stage: try each candidate in plan order, with retries, until one answers.

A candidate's retryable failure is retried on the same deployment while its retry
policy allows, all within its provider's `timeouts.total`; then the next candidate is
tried (fallback). Only failures before the first byte reaches the client are retried:
once a stream has started, an upstream error ends it with an error event.

Candidates whose circuit is open or that cool down after a 429 are set aside and tried
only when nothing else served the request (panic mode, `reason=panic` in the route
header), unless their provider says `breaker.when_all_open: fail_fast`: then a request
with nothing else to try gets 503 with retry-after. See gateway/resilience/breaker.py.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import math
import random
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import TypeVar, cast

import msgspec

from gateway.errors import (
    GatewayError,
    InvalidRequest,
    Overloaded,
    UpstreamError,
    UpstreamRejected,
    UpstreamTimeout,
    UpstreamUnavailable,
    UpstreamUnreachable,
)
from gateway.pipeline.change_notes import change_notes
from gateway.pipeline.flow import Flow, ServingOption
from gateway.pipeline.output_clamp import clamp_output
from gateway.pipeline.running_task import TaskFinder
from gateway.pools import ReplicaPool
from gateway.pools.lease import ReplicaLease
from gateway.providers.base import (
    BatchedTranslation,
    Call,
    StreamTranslation,
    Target,
    Translated,
    Translation,
    UpstreamRequest,
    UpstreamResponse,
)
from gateway.providers.registry import translation_for
from gateway.providers.transport import Transport
from gateway.resilience.async_breaker import AsyncBreaker, AsyncBreakerBoard
from gateway.resilience.breaker import (
    Blocked,
    BreakerConfig,
    BreakerState,
    Verdict,
    is_backpressure,
    verdict,
)
from gateway.resilience.deadline import Deadline, TotalWatch
from gateway.resilience.retry import RetryPolicy, decide_retry
from gateway.routing.balancing import balance_request
from gateway.settings.server import ProviderSettings

T = TypeVar("T")


@dataclass(slots=True)
class OpenStream:
    response: UpstreamResponse
    translation: StreamTranslation
    target: Target
    # the API the translated stream is in (the client's own for a same-API passthrough)
    api: str
    # called once when the stream ends, with the error that ended it (if any)
    finish: Callable[[BaseException | None], None] = lambda error: None


class Dispatcher:
    def __init__(
        self,
        providers: Mapping[str, ProviderSettings],
        transport: Transport,
        breakers: AsyncBreakerBoard,
        on_retry: Callable[[str, str], None] = lambda provider, cause: None,
        on_circuit: Callable[[str, BreakerState], None] = lambda deployment, state: None,
        on_panic: Callable[[str, str], None] = lambda route, deployment: None,
        on_fail_fast: Callable[[str], None] = lambda route: None,
        on_cooldown: Callable[[str], None] = lambda deployment: None,
    ) -> None:
        self._providers = dict(providers)
        # each provider's timeouts.total, read once (settings attributes are pydantic's)
        self._total_timeouts = {name: p.timeouts.total for name, p in self._providers.items()}
        # one watch per budget, shared by the providers that have it
        watches: dict[float, TotalWatch] = {}
        self._total_watches = {
            name: watches.setdefault(total, TotalWatch(total))
            for name, total in self._total_timeouts.items()
        }
        self._breakers = breakers
        self._on_retry = on_retry
        # breakers report transitions; their first (closed) state is reported from here
        self._on_circuit = on_circuit
        self._on_panic = on_panic
        self._on_fail_fast = on_fail_fast
        self._on_cooldown = on_cooldown
        self._known_breakers: set[str] = set()
        # stream verdicts on their way to a (possibly shared) breaker
        self._verdicts: set[asyncio.Future[None]] = set()
        self._pools = {
            # the pool's probes go out the provider's own client, like its traffic
            name: ReplicaPool.from_provider(name, p, client=transport.client(name))
            for name, p in providers.items()
            if p.replicas is not None
        }
        self._rng = random.Random()
        # deployments (provider, base URL) that refused the form a batched translation
        # asked in (base64 embeddings on vLLM before 0.5): asked in the common form from
        # then on, for this process's life (a server upgraded meanwhile costs the
        # gateway's own encoding, never an answer)
        self._common_form_only: set[tuple[str, str]] = set()
        # per (client API, provider): built on first use
        self._translations: dict[tuple[str, str], Translation] = {}
        self._transport = transport
        # built once per provider rather than per request (each validates its settings)
        self._retry_policies = {
            name: RetryPolicy.from_settings(p.retry) for name, p in providers.items()
        }
        self._breaker_configs = {
            name: BreakerConfig.from_settings(p.breaker) for name, p in providers.items()
        }
        self._when_all_open = {name: p.breaker.when_all_open for name, p in providers.items()}
        # a target per (model, deployment) settings pair; a policy reload brings new
        # settings objects, which miss and are built afresh
        self._targets: dict[tuple[int, int], tuple[ServingOption, Target]] = {}
        # each attempt's timer cancels the request's task: found without a getpid
        self._tasks = TaskFinder()

    def target_for(self, candidate: ServingOption) -> Target:
        cache_key = (id(candidate.settings), id(candidate.deployment))
        cached = self._targets.get(cache_key)
        if (
            cached is not None
            and cached[0].settings is candidate.settings
            and cached[0].deployment is candidate.deployment
        ):
            return cached[1]
        name = candidate.deployment.provider
        settings = self._providers[name]
        model = candidate.settings
        target = Target(
            provider=name,
            settings=settings,
            upstream_model=candidate.deployment.upstream_model,
            base_url=settings.base_url,
            default_max_tokens=model.default_max_tokens or model.max_output_tokens,
            reasoning="reasoning" in model.capabilities,
        )
        if len(self._targets) > 4096:  # reloads never pile up stale entries
            self._targets.clear()
        # the candidate keeps its settings objects alive, so their ids stay theirs
        self._targets[cache_key] = (candidate, target)
        return target

    def translation(self, call: Call, provider: str) -> Translation:
        """The translation for the client's API on this provider; a request only a
        same-API upstream can serve is refused by the others, naming the field."""
        key = (call.api, provider)
        translation = self._translations.get(key)
        if translation is None:
            translation = self._translations[key] = translation_for(
                call.api, self._providers[provider]
            )
        if call.untranslatable is not None and translation.api != call.api:
            raise untranslatable(call.untranslatable, provider)
        return translation

    async def complete(self, flow: Flow, call: Call) -> Translated:
        async def attempt(candidate: ServingOption, target: Target) -> Translated:
            translation = self.translation(call, target.provider)
            target, lease = await self._place(flow, call, target)
            try:
                if _is_batched(type(translation)):
                    result = await self._send_batches(flow, translation, call, target)
                else:
                    upstream = self._build(flow, translation, call, candidate, target)
                    if flow.trace is not None:
                        upstream.headers.update(flow.trace.upstream_headers(upstream.url))
                    response = await self._transport.send(target.provider, upstream)
                    body = await response.read()
                    if response.status >= 400:
                        raise translation.map_error(response.status, body, response.headers, target)
                    result = translation.parse_response(body, call, target)
                result.api = translation.api
            except BaseException as exc:
                self._leave(target, lease, exc)
                raise
            self._leave(target, lease, None)
            return result

        return await self._run(flow, attempt)

    async def _send_batches(
        self, flow: Flow, translation: Translation, call: Call, target: Target
    ) -> Translated:
        """Every batch of one request to the same deployment, one after another (a
        provider's per-key concurrency is the caller's to spend, not ours)."""
        # the class check `complete` made: isinstance on a runtime Protocol walks its
        # members (~53k instructions a request), issubclass is cached by class (~6k)
        assert _is_batched(type(translation))
        batched = cast(BatchedTranslation, translation)
        bodies: list[bytes] = []
        deployment = (target.provider, target.base_url)
        common_only = deployment in self._common_form_only
        for upstream in batched.build_requests(call, target):
            if common_only:
                upstream = batched.in_common_form(upstream) or upstream
            if flow.trace is not None:
                upstream.headers.update(flow.trace.upstream_headers(upstream.url))
            response = await self._transport.send(target.provider, upstream)
            body = await response.read()
            if response.status >= 400 and batched.refuses_form(response.status, body):
                # asked again in the form every upstream takes, and so from now on
                common = batched.in_common_form(upstream)
                if common is not None:
                    self._common_form_only.add(deployment)
                    common_only = True
                    response = await self._transport.send(target.provider, common)
                    body = await response.read()
            if response.status >= 400:
                raise translation.map_error(response.status, body, response.headers, target)
            bodies.append(body)
        return batched.parse_responses(bodies, call, target)

    async def open_stream(self, flow: Flow, call: Call) -> OpenStream:
        async def attempt(candidate: ServingOption, target: Target) -> OpenStream:
            translation = self.translation(call, target.provider)
            target, lease = await self._place(flow, call, target)
            try:
                upstream = self._build(flow, translation, call, candidate, target)
                if flow.trace is not None:
                    upstream.headers.update(flow.trace.upstream_headers(upstream.url))
                response = await self._transport.send(target.provider, upstream)
                if response.status >= 400:
                    body = await response.read()
                    raise translation.map_error(response.status, body, response.headers, target)
            except BaseException as exc:
                self._leave(target, lease, exc)
                raise
            # the replica stays held until the stream ends (OpenStream.finish)
            finish = functools.partial(self._leave, target, lease)
            stream = translation.stream(call, target)
            return OpenStream(response, stream, target, translation.api, finish)

        return await self._run(flow, attempt)

    @staticmethod
    def _build(
        flow: Flow,
        translation: Translation,
        call: Call,
        candidate: ServingOption,
        target: Target,
    ) -> UpstreamRequest:
        """The upstream request for one attempt: the output cap clamped to the model's
        maximum output, and what this attempt changed of the client's request noted
        for x-gateway-route (an earlier attempt's notes replaced)."""
        served, clamped = clamp_output(call, candidate.settings.max_output_tokens)
        upstream = translation.build_request(served, target)
        changes = [clamped] if clamped is not None else []
        if translation.api != call.api:
            changes.extend(call.translation_changes)
        changes.extend(upstream.changes)
        flow.changes = change_notes(changes) if changes else changes
        return upstream

    async def _place(
        self, flow: Flow, call: Call, target: Target
    ) -> tuple[Target, ReplicaLease | None]:
        """For a GPU pool, a replica: chosen by the pool's balancer, waiting in its fair
        queue when every replica is full."""
        pool = self._pools.get(target.provider)
        if pool is None:
            return target, None
        tenant = flow.caller.tenant_id if flow.caller is not None else None
        lease = await pool.acquire(
            balance_request(call.request, tenant),
            tenant,
            queue_timeout=pool.settings.queue_timeout_ms / 1000,
        )
        flow.headers["x-gateway-replica"] = f"{target.provider}/{lease.replica}"
        return dataclasses.replace(target, base_url=lease.url), lease

    def _leave(
        self, target: Target, lease: ReplicaLease | None, error: BaseException | None
    ) -> None:
        if lease is None:
            return
        pool = self._pools[target.provider]
        if isinstance(error, UpstreamUnreachable):
            pool.mark_unreachable(lease)
        outcome = verdict(error)
        # an outcome that says nothing of the replica gives its trial slot back instead
        if outcome in ("healthy", "failure"):
            pool.record_result(lease, outcome == "healthy")
        lease.release()

    async def start(self) -> None:
        await self._breakers.start()
        for pool in self._pools.values():
            await pool.start()

    async def stop(self) -> None:
        for pool in self._pools.values():
            await pool.stop()
        await self._breakers.stop()

    @property
    def pools(self) -> Mapping[str, ReplicaPool]:
        return self._pools

    async def _run(self, flow: Flow, attempt: Callable[[ServingOption, Target], Awaitable[T]]) -> T:
        """Each candidate in plan order; those ejected or cooling down are set aside and
        tried last, in panic mode, so that a breaker never removes the last way out."""
        held_back: list[_Option] = []
        last_error: GatewayError | None = None
        for candidate in flow.candidates:
            option = self._option(candidate)
            blocked = option.breaker.blocked()
            if blocked is None and not await option.breaker.allow():
                now = time.monotonic()
                blocked = option.breaker.blocked() or Blocked("circuit_open", now, now)
            if blocked is not None:
                held_back.append(msgspec.structs.replace(option, blocked=blocked))
                flow.skipped.append(f"{candidate.model}:{blocked.reason}")
                continue
            _fell_back_from(flow)
            try:
                return await self._serve_on(flow, option, attempt, counted=True)
            except (Overloaded, UpstreamError) as exc:
                last_error = self._fall_back(flow, candidate, exc)
        panicking = [o for o in held_back if self._when_all_open[o.target.provider] == "panic"]
        if held_back and not panicking and last_error is None:
            self._on_fail_fast(flow.route or "none")
            raise _all_set_aside(held_back)
        for option in sorted(panicking, key=lambda o: o.set_aside_since):
            candidate = option.candidate
            flow.panic = True
            flow.skipped.remove(f"{candidate.model}:{option.reason}")
            self._on_panic(flow.route or "none", candidate.deployment_id)
            _fell_back_from(flow)
            try:
                return await self._serve_on(flow, option, attempt, counted=False)
            except (Overloaded, UpstreamError) as exc:
                last_error = self._fall_back(flow, candidate, exc)
        if last_error is None:
            raise UpstreamUnavailable("no deployment could serve this request", provider="")
        if len(flow.failed_attempts) > 1:
            last_error.message += " (attempts: " + ", ".join(flow.failed_attempts) + ")"
        raise last_error

    def _option(self, candidate: ServingOption) -> _Option:
        target = self.target_for(candidate)
        breaker = self._breakers.get(
            candidate.deployment_id, self._breaker_configs[target.provider]
        )
        if candidate.deployment_id not in self._known_breakers:
            self._known_breakers.add(candidate.deployment_id)
            self._on_circuit(candidate.deployment_id, breaker.state)
        return _Option(candidate, target, breaker)

    @staticmethod
    def _fall_back(
        flow: Flow, candidate: ServingOption, exc: Overloaded | UpstreamError
    ) -> GatewayError:
        """Note the failed candidate and return its error, or raise it when no other
        candidate could do better. It becomes a fallback only when another candidate is
        then tried (`_fell_back_from`): retries on the last one are not a fallback."""
        if isinstance(exc, Overloaded):
            # a saturated GPU pool: another candidate may have room
            flow.failed_attempts.append(f"{candidate.model}:overloaded")
            flow.failed_candidate = f"{candidate.model}:overloaded"
            return exc
        if isinstance(exc, UpstreamRejected) and not exc.retryable:
            # the request itself was refused: another model would refuse it too
            raise exc
        flow.failed_candidate = f"{candidate.model}:{exc.cause}"
        return exc

    async def _serve_on(
        self,
        flow: Flow,
        option: _Option,
        attempt: Callable[[ServingOption, Target], Awaitable[T]],
        *,
        counted: bool,
    ) -> T:
        """One candidate, retried as its provider's policy says. The retries belong to
        the request: the breaker is asked once before (by the caller) and told the
        request's outcome once after, so a request's own failures never refuse its
        next attempt. A success after retries says nothing either way. `counted` is
        False in panic mode: the circuit was open, the outcome is not its business."""
        candidate, target, breaker = option.candidate, option.target, option.breaker
        provider = target.provider
        policy = self._retry_policies[provider]
        started = time.monotonic()
        retry_deadline = Deadline(started, policy.deadline)
        total = Deadline(started, self._total_timeouts[provider])
        outcome: Verdict = "neutral"
        number = 0
        trace = flow.trace
        try:
            while True:
                number += 1
                flow.attempts += 1
                flow.upstream_started = time.perf_counter()
                traced = (
                    trace.attempt_started(number, candidate.model, target.upstream_model, provider)
                    if trace is not None
                    else None
                )
                try:
                    result = await _within(
                        total,
                        provider,
                        attempt(candidate, target),
                        self._tasks,
                        self._total_watches[provider],
                    )
                except Overloaded:
                    if traced is not None:
                        traced.ended("overloaded")
                    raise
                except UpstreamError as exc:
                    if traced is not None:
                        traced.ended(exc.cause)
                    if not exc.provider:
                        exc.provider = provider
                    flow.failed_attempts.append(f"{candidate.model}:{exc.cause}")
                    if is_backpressure(exc) and breaker.cool_down(exc.retry_after):
                        self._on_cooldown(candidate.deployment_id)
                    now = time.monotonic()
                    decision = decide_retry(
                        policy,
                        exc,
                        attempt=number,
                        remaining=min(retry_deadline.remaining(now), total.remaining(now)),
                        rng=self._rng,
                        # every dispatched request is a generation: see retry_non_idempotent
                        idempotent=False,
                    )
                    if not decision.retry:
                        outcome = verdict(exc)
                        raise
                    flow.retries += 1
                    self._on_retry(provider, exc.cause)
                    await asyncio.sleep(decision.delay)
                    continue
                outcome = "healthy" if number == 1 else "neutral"
                flow.served_by = candidate
                flow.provider = provider
                if counted and isinstance(result, OpenStream):
                    # a stream's outcome is known when it ends: a broken one is a failure
                    self._judge_when_finished(result, breaker, outcome)
                    counted = False
                return result
        finally:
            if counted:
                # back-pressure was answered by the cooldown; it is no ill health
                await breaker.record("neutral" if outcome == "backpressure" else outcome)

    def _judge_when_finished(self, stream: OpenStream, breaker: AsyncBreaker, ok: Verdict) -> None:
        """Report the stream's outcome to its breaker when it ends (`ok` if it ended
        well, the error's verdict if it broke), once, off the client's path."""
        finish = stream.finish

        def finished(error: BaseException | None) -> None:
            finish(error)
            outcome = ok if error is None else verdict(error)
            task = asyncio.ensure_future(
                breaker.record("neutral" if outcome == "backpressure" else outcome)
            )
            self._verdicts.add(task)
            task.add_done_callback(self._verdicts.discard)

        stream.finish = finished


class _Option(msgspec.Struct, frozen=True):
    """A candidate with what dispatching it needs; `blocked` when it was set aside."""

    candidate: ServingOption
    target: Target
    breaker: AsyncBreaker
    blocked: Blocked | None = None

    @property
    def reason(self) -> str:
        return self.blocked.reason if self.blocked is not None else ""

    @property
    def set_aside_since(self) -> float:
        return self.blocked.since if self.blocked is not None else 0.0


@functools.cache
def _is_batched(kind: type) -> bool:
    """Once per translation class: a runtime-checkable Protocol's isinstance walks the
    protocol's members on every call (~10 us, on every request)."""
    return issubclass(kind, BatchedTranslation)


async def _within(
    deadline: Deadline,
    provider: str,
    attempt: Awaitable[T],
    tasks: TaskFinder,
    watch: TotalWatch,
) -> T:
    """The attempt, cut off when the request's `timeouts.total` runs out: the budget's
    watch cancels the task, as asyncio.timeout does, without its context object or a
    timer of its own (`tasks` finds the task without a getpid)."""
    task = tasks.current()
    cancelling = task.cancelling()
    cutoff = watch.add(deadline.expires_at, task)
    try:
        return await attempt
    except asyncio.CancelledError:
        # ours only if no one else cancelled the task meanwhile (a client that left)
        if cutoff.expired and task.uncancel() <= cancelling:
            raise UpstreamTimeout(
                f"provider '{provider}' did not answer within its timeouts.total "
                f"({deadline.budget:g}s, retries included)",
                provider=provider,
                retryable=False,
            ) from None
        raise
    finally:
        watch.discard(cutoff)


def _fell_back_from(flow: Flow) -> None:
    """Another candidate is about to be tried: the one that failed before it is a
    fallback."""
    if flow.failed_candidate is not None:
        flow.fallback_from.append(flow.failed_candidate)
        flow.failed_candidate = None


def _all_set_aside(held_back: list[_Option]) -> UpstreamUnavailable:
    """The fail_fast answer: 503, retry when the first circuit half-opens (or cooldown
    ends)."""
    now = time.monotonic()
    wait = min(max(0.0, o.blocked.until - now) for o in held_back if o.blocked is not None)
    names = ", ".join(f"{o.candidate.model}:{o.reason}" for o in held_back)
    error = UpstreamUnavailable(
        f"every deployment that could serve this request is failing or busy ({names}); "
        f"retry in {max(1, math.ceil(wait))}s",
        provider=held_back[0].target.provider,
        code="circuit_open",
        retry_after=wait,
        retryable=False,
    )
    error.status = 503
    error.type = "service_unavailable"
    return error


def untranslatable(field: str, provider: str) -> InvalidRequest:
    return InvalidRequest(
        f"'{field}' can only be served by an upstream that speaks the API you called; "
        f"provider '{provider}', which this request was routed to, does not.",
        param=field,
        code="unsupported_parameter",
    )
