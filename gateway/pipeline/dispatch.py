"""Dispatch stage: try each candidate in plan order, with retries, until one answers.

A candidate's retryable failure is retried on the same deployment while its retry
policy allows; then the next candidate is tried (fallback). Only failures before the
first byte reaches the client are retried: once a stream has started, an upstream error
ends it with an error event.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import TypeVar

from gateway.errors import GatewayError, UpstreamError, UpstreamRejected
from gateway.pipeline.flow import Candidate, Flow
from gateway.providers.base import Call, StreamTranslation, Target, Translated, Translation
from gateway.providers.registry import translator_for
from gateway.providers.transport import Transport, UpstreamResponse
from gateway.settings.server import ProviderSettings

T = TypeVar("T")


@dataclass(slots=True)
class OpenStream:
    response: UpstreamResponse
    translation: StreamTranslation
    target: Target


class Dispatcher:
    def __init__(self, providers: Mapping[str, ProviderSettings], transport: Transport) -> None:
        self._providers = dict(providers)
        self._translations: dict[str, Translation] = {
            name: translator_for(p.kind) for name, p in providers.items()
        }
        self._transport = transport

    def target_for(self, candidate: Candidate) -> Target:
        name = candidate.deployment.provider
        settings = self._providers[name]
        model = candidate.settings
        return Target(
            provider=name,
            settings=settings,
            upstream_model=candidate.deployment.upstream_model,
            base_url=settings.base_url,
            default_max_tokens=model.default_max_tokens or model.max_output_tokens,
        )

    async def complete(self, flow: Flow, call: Call) -> Translated:
        async def attempt(candidate: Candidate, target: Target) -> Translated:
            translation = self._translations[target.provider]
            upstream = translation.build_request(call, target)
            response = await self._transport.send(target.provider, upstream)
            body = await response.read()
            if response.status >= 400:
                raise translation.map_error(response.status, body, response.headers, target)
            return translation.parse_response(body, call, target)

        return await self._run(flow, attempt)

    async def open_stream(self, flow: Flow, call: Call) -> OpenStream:
        async def attempt(candidate: Candidate, target: Target) -> OpenStream:
            translation = self._translations[target.provider]
            upstream = translation.build_request(call, target)
            response = await self._transport.send(target.provider, upstream)
            if response.status >= 400:
                body = await response.read()
                raise translation.map_error(response.status, body, response.headers, target)
            return OpenStream(response, translation.stream(call, target), target)

        return await self._run(flow, attempt)

    async def _run(self, flow: Flow, attempt: Callable[[Candidate, Target], Awaitable[T]]) -> T:
        last_error: GatewayError | None = None
        for candidate in flow.candidates:
            target = self.target_for(candidate)
            policy = target.settings.retry
            deadline = time.monotonic() + policy.deadline_seconds
            for number in range(1, policy.max_attempts + 1):
                flow.attempts += 1
                if number > 1:
                    flow.retries += 1
                flow.upstream_started = time.perf_counter()
                try:
                    result = await attempt(candidate, target)
                except UpstreamError as exc:
                    if not exc.provider:
                        exc.provider = target.provider
                    last_error = exc
                    delay = _backoff(number, policy.base_delay_seconds, policy.max_delay_seconds)
                    if exc.retry_after is not None:
                        delay = max(delay, exc.retry_after)
                    if (
                        not exc.retryable
                        or number == policy.max_attempts
                        or time.monotonic() + delay > deadline
                    ):
                        break
                    await asyncio.sleep(delay)
                    continue
                flow.served_by = candidate
                flow.provider = target.provider
                return result
            if isinstance(last_error, UpstreamRejected) and not last_error.retryable:
                # the request itself was refused: another model would refuse it too
                raise last_error
            cause = last_error.cause if isinstance(last_error, UpstreamError) else "error"
            flow.fallback_from.append(f"{candidate.model}:{cause}")
        assert last_error is not None, "a plan always has at least one candidate"
        raise last_error


def _backoff(attempt: int, base: float, cap: float) -> float:
    """Full jitter: uniform in [0, min(cap, base * 2^(attempt-1))]."""
    return random.uniform(0, min(cap, base * (2 ** (attempt - 1))))
