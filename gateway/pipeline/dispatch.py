"""Dispatch stage: try each candidate in plan order, with retries, until one answers.

A candidate's retryable failure is retried on the same deployment while its retry
policy allows; then the next candidate is tried (fallback). Only failures before the
first byte reaches the client are retried: once a stream has started, an upstream error
ends it with an error event.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import random
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import TypeVar

from gateway.errors import (
    GatewayError,
    InvalidRequest,
    Overloaded,
    UpstreamError,
    UpstreamRejected,
    UpstreamUnavailable,
    UpstreamUnreachable,
)
from gateway.pipeline.flow import Flow, ServingOption
from gateway.pools import ReplicaPool
from gateway.pools.lease import ReplicaLease
from gateway.providers.base import (
    Call,
    StreamTranslation,
    Target,
    Translated,
    Translation,
    UpstreamResponse,
)
from gateway.providers.registry import translation_for
from gateway.providers.transport import Transport
from gateway.resilience.async_breaker import AsyncBreaker, AsyncBreakerBoard
from gateway.resilience.breaker import BreakerConfig, BreakerState, is_breaker_failure
from gateway.resilience.deadline import Deadline
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
    ) -> None:
        self._providers = dict(providers)
        self._breakers = breakers
        self._on_retry = on_retry
        # breakers report transitions; their first (closed) state is reported from here
        self._on_circuit = on_circuit
        self._known_breakers: set[str] = set()
        self._pools = {
            name: ReplicaPool.from_provider(name, p)
            for name, p in providers.items()
            if p.replicas is not None
        }
        self._rng = random.Random()
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
        # a target per (model, deployment) settings pair; a policy reload brings new
        # settings objects, which miss and are built afresh
        self._targets: dict[tuple[int, int], tuple[ServingOption, Target]] = {}

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
                upstream = translation.build_request(call, target)
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

    async def open_stream(self, flow: Flow, call: Call) -> OpenStream:
        async def attempt(candidate: ServingOption, target: Target) -> OpenStream:
            translation = self.translation(call, target.provider)
            target, lease = await self._place(flow, call, target)
            try:
                upstream = translation.build_request(call, target)
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
        return dataclasses.replace(target, base_url=lease.url), lease

    def _leave(
        self, target: Target, lease: ReplicaLease | None, error: BaseException | None
    ) -> None:
        if lease is None:
            return
        pool = self._pools[target.provider]
        if isinstance(error, UpstreamUnreachable):
            pool.mark_unreachable(lease)
        pool.record_result(lease, error is None or not is_breaker_failure(error))
        lease.release()

    async def start(self) -> None:
        for pool in self._pools.values():
            await pool.start()

    async def stop(self) -> None:
        for pool in self._pools.values():
            await pool.stop()

    @property
    def pools(self) -> Mapping[str, ReplicaPool]:
        return self._pools

    async def _run(self, flow: Flow, attempt: Callable[[ServingOption, Target], Awaitable[T]]) -> T:
        last_error: GatewayError | None = None
        for candidate in flow.candidates:
            target = self.target_for(candidate)
            breaker = self._breakers.get(
                candidate.deployment_id, self._breaker_configs[target.provider]
            )
            if candidate.deployment_id not in self._known_breakers:
                self._known_breakers.add(candidate.deployment_id)
                self._on_circuit(candidate.deployment_id, breaker.state)
            if not breaker.would_allow():
                last_error = UpstreamUnavailable(
                    f"provider '{target.provider}' is failing; its circuit breaker is open",
                    provider=target.provider,
                    code="circuit_open",
                )
                flow.fallback_from.append(f"{candidate.model}:circuit_open")
                continue
            try:
                return await self._with_retries(flow, candidate, target, breaker, attempt)
            except Overloaded as exc:
                # a saturated GPU pool: another candidate may have room
                last_error = exc
                flow.fallback_from.append(f"{candidate.model}:overloaded")
            except UpstreamError as exc:
                if isinstance(exc, UpstreamRejected) and not exc.retryable:
                    # the request itself was refused: another model would refuse it too
                    raise
                last_error = exc
                flow.fallback_from.append(f"{candidate.model}:{exc.cause}")
        if last_error is None:
            raise UpstreamUnavailable("no deployment could serve this request", provider="")
        raise last_error

    async def _with_retries(
        self,
        flow: Flow,
        candidate: ServingOption,
        target: Target,
        breaker: AsyncBreaker,
        attempt: Callable[[ServingOption, Target], Awaitable[T]],
    ) -> T:
        policy = self._retry_policies[target.provider]
        deadline = Deadline.starting_now(policy.deadline)
        number = 0
        while True:
            number += 1
            if not await breaker.allow():
                raise UpstreamUnavailable(
                    f"provider '{target.provider}' is failing; its circuit breaker is open",
                    provider=target.provider,
                    code="circuit_open",
                    retryable=False,
                )
            flow.attempts += 1
            flow.upstream_started = time.perf_counter()
            try:
                result = await attempt(candidate, target)
            except UpstreamError as exc:
                if not exc.provider:
                    exc.provider = target.provider
                if is_breaker_failure(exc):
                    await breaker.record_failure()
                else:
                    await breaker.release()
                decision = decide_retry(
                    policy,
                    exc,
                    attempt=number,
                    remaining=deadline.remaining(time.monotonic()),
                    rng=self._rng,
                )
                if not decision.retry:
                    raise
                flow.retries += 1
                self._on_retry(target.provider, exc.cause)
                await asyncio.sleep(decision.delay)
                continue
            except BaseException:
                await breaker.release()
                raise
            await breaker.record_success()
            flow.served_by = candidate
            flow.provider = target.provider
            return result


def untranslatable(field: str, provider: str) -> InvalidRequest:
    return InvalidRequest(
        f"'{field}' can only be served by an upstream that speaks the API you called; "
        f"provider '{provider}', which this request was routed to, does not.",
        param=field,
        code="unsupported_parameter",
    )
