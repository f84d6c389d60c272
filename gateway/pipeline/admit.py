"""Admit stage: token buckets, concurrency leases and the budget reservation for this
request, checked and taken in one store round trip; and their settlement afterwards.

Admission is made against the plan's first candidate (its model's tenant+model limits,
its deployment's limits, its worst-case cost). A fallback to another candidate is served
under that admission rather than paying a second round trip.

A concurrency lease lives its whole life here: taken by `admit`, renewed while the
request is served (`holding`), freed with the request's settlement (`settle_later`).

The prompt's tokens are counted only where the count could change the decision (see
FAR_FROM_LIMITS below); the one case with a second round trip is a request reserved by
the bound and refused for tokens or budget, decided again on its count.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from contextlib import AbstractAsyncContextManager, nullcontext
from decimal import Decimal

from gateway.limits import (
    LimitStore,
    Settlement,
    admit_waiting,
    expected_tokens,
    rate_limit_headers,
    refusal_error,
    settlement_for,
)
from gateway.limits.leases import LeaseKeeper
from gateway.limits.request_limits import AdmissionTemplate, LimitScope, limit_owners
from gateway.limits.spec import MICROS_PER_USD, Admission, AdmissionRequest, micros_to_usd
from gateway.metering.cost import largest_output_within, request_worst_case
from gateway.observability.metrics import GatewayMetrics
from gateway.pipeline.budget_use import BudgetUse
from gateway.pipeline.flow import Flow
from gateway.pipeline.running_task import TaskFinder
from gateway.tokens import PromptCounter

log = logging.getLogger("gateway.admit")

_NOTHING_HELD: AbstractAsyncContextManager[None] = nullcontext()

# A request whose key's limits are far off reserves its prompt's UTF-8 length (a bound
# no token count exceeds: pipeline/prompt_size) instead of a BPE count (~100 us a KB):
# when the headroom its key's last admission left, within HEADROOM_FRESH_SECONDS, holds
# FAR_FROM_LIMITS times the reservation in every tokens bucket and budget. The bound
# over-reserves until the settlement puts real usage in its place; a bound refused for
# tokens or budget is counted and decided again, so it refuses nothing a count admits.
FAR_FROM_LIMITS = 16
HEADROOM_FRESH_SECONDS = 1.0


# a worst case in USD, times FAR_FROM_LIMITS, in the budgets' micro-dollars
MICROS_FAR = FAR_FROM_LIMITS * MICROS_PER_USD


class _Headroom:
    __slots__ = ("micros", "seen_at", "tokens")

    def __init__(self) -> None:
        # the least left in its tokens buckets (inf: none) and budgets (None: none)
        self.tokens = math.inf
        self.micros: int | None = None
        self.seen_at = 0.0


class Admitter:
    def __init__(
        self,
        store: LimitStore,
        key_prefix: str,
        metrics: GatewayMetrics,
        budget_use: BudgetUse,
        counter: PromptCounter,
        shared: bool = False,
    ) -> None:
        self._store = store
        self._counter = counter
        self._keeper = LeaseKeeper(store)
        # a shared (Redis) store: its latency and errors are worth a metric
        self._shared = shared
        self._prefix = key_prefix
        self._metrics = metrics
        self._budget_use = budget_use
        self._soft_warned: dict[str, float] = {}
        self._to_settle: list[Settlement] = []
        self._settler: asyncio.Future[None] | None = None
        # requests admitted by the store and not yet settled: while others are, their
        # admissions and settlements will carry a settlement to the store soon; when none
        # are, nothing will, and the next request (one at a time, the client's next) would
        # find the settlement in its admission's trip, ahead of it (`_settle_queued`)
        self._unsettled = 0
        self._extra_settlers: set[asyncio.Future[None]] = set()
        # the drain task is started on the request's loop, found without a getpid
        # (asyncio.ensure_future asks for the running loop: a system call on Python 3.11)
        self._tasks = TaskFinder()
        # who-limits-what for each (tenant, key, model, deployment) under the current
        # policy: the same for every request until the policy is reloaded
        self._templates_view: object = None
        self._templates: dict[tuple[str, str, str, str], AdmissionTemplate] = {}
        # per template, what its last admission left (see `_far_from_limits`)
        self._headroom: dict[AdmissionTemplate, _Headroom] = {}

    async def admit(self, flow: Flow) -> None:
        assert flow.request is not None and flow.caller is not None and flow.candidates
        caller = flow.caller
        template = self._template(flow)
        if not template.limits_anything:
            return  # the common case of an unlimited key: no planning, no store call
        route = flow.view.policy.routes.get(flow.route)
        queue_ms = route.queue_ms if route is not None else 0
        prompt_tokens = flow.prompt_tokens_estimate or 0
        reservation: tuple[int, Decimal] | None = None  # (tokens, worst case) by the bound
        if flow.prompt_tokens_estimate is None and template.needs_prompt_tokens:
            # planning did not need the count (pipeline/prompt_size); this admission does,
            # unless the key's limits are far off: then the bound reserves instead (not
            # where a refusal waits in a queue first: a bound's would wait twice)
            bound = flow.prompt_tokens_bound
            if bound is not None and not queue_ms:
                by_bound = self._reservation(flow, template, bound)
                if self._far_from_limits(template, *by_bound):
                    prompt_tokens, reservation = bound, by_bound
            if reservation is None:
                prompt_tokens = await self._count(flow)
        bounded = reservation is not None
        if reservation is None:
            reservation = self._reservation(flow, template, prompt_tokens)
        request, admission = await self._admit(flow, template, queue_ms, *reservation)
        if bounded and admission.refused_kind in ("tokens", "budget"):
            # reserved by the bound, and the headroom went since it was seen: decided
            # again on the count, so a bound refuses nothing a count would admit
            prompt_tokens = await self._count(flow)
            reservation = self._reservation(flow, template, prompt_tokens)
            request, admission = await self._admit(flow, template, queue_ms, *reservation)
        flow.admission_request, flow.admission = request, admission
        if admission.allowed:
            self._unsettled += 1
            if not admission.degraded and template.needs_prompt_tokens:
                self._remember_headroom(template, admission)
        elif self._headroom:
            # refused: the headroom seen is gone; the next requests count (one trip each)
            self._headroom.pop(template, None)
        if admission.budgets:
            used = admission.budgets[0].used_fraction
            for budget in admission.budgets:  # (a loop: max over a generator cost more)
                if budget.used_fraction > used:
                    used = budget.used_fraction
            self._budget_use.saw(caller.tenant_id, used)
            self._metrics.budget_used(caller.tenant_id, used)
            soft = template.soft_fraction
            if soft is not None and used >= soft:
                self._warn_soft_limit_passed(caller.tenant_id, used, soft)
        if not admission.allowed:
            self._metrics.rate_limited(
                admission.refused_scope or "unknown", admission.refused_kind or "unknown"
            )
            raise refusal_error(admission, _fitting_max_tokens(flow, admission, prompt_tokens))
        flow.headers.update(rate_limit_headers(admission))

    async def _count(self, flow: Flow) -> int:
        assert flow.request is not None
        counted = flow.prompt_tokens_estimate = await self._counter.count(
            flow.request,
            stop_after=flow.view.counting_limit,
            pieces=flow.prompt_pieces,
            bound=flow.prompt_tokens_bound,
        )
        return counted

    def _reservation(
        self, flow: Flow, template: AdmissionTemplate, prompt_tokens: int
    ) -> tuple[int, Decimal]:
        """What the request takes from the tokens buckets and reserves of the budgets."""
        assert flow.request is not None
        candidate = flow.candidates[0]
        model = candidate.settings
        tokens = expected_tokens(prompt_tokens, flow.request.output_limit, model)
        if not template.reserves_budgets:
            return tokens, Decimal(0)
        prices = model.prices_on(candidate.deployment)
        worst_case = request_worst_case(flow.request, model, prices, prompt_tokens=prompt_tokens)
        return tokens, worst_case

    async def _admit(
        self,
        flow: Flow,
        template: AdmissionTemplate,
        queue_ms: int,
        tokens: int,
        worst_case: Decimal,
    ) -> tuple[AdmissionRequest, Admission]:
        request = template.build(
            # the id only the gateway makes: a client may repeat its `x-request-id`, and two
            # requests sharing one would share a concurrency slot and one settlement
            flow.record_id or flow.request_id,
            expected_tokens=tokens,
            worst_case_cost_usd=worst_case,
            now=time.time(),
        )
        started = time.perf_counter()
        if queue_ms:
            admission = await admit_waiting(self._store, request, max_wait_seconds=queue_ms / 1000)
        else:
            admission = await self._store.admit(request)
        if self._shared:
            if admission.degraded:
                self._metrics.redis_error("admit")
            else:
                self._metrics.redis_latency("admit", time.perf_counter() - started)
        return request, admission

    def _far_from_limits(
        self, template: AdmissionTemplate, tokens: int, worst_case: Decimal
    ) -> bool:
        """Whether the headroom this key's admissions last saw, lately, holds FAR_FROM_LIMITS
        of this reservation in every tokens bucket and budget."""
        seen = self._headroom.get(template)
        if seen is None or time.monotonic() - seen.seen_at > HEADROOM_FRESH_SECONDS:
            return False
        if tokens * FAR_FROM_LIMITS > seen.tokens:
            return False
        return seen.micros is None or worst_case * MICROS_FAR <= seen.micros

    def _remember_headroom(self, template: AdmissionTemplate, admission: Admission) -> None:
        seen = self._headroom.get(template)
        if seen is None:
            seen = self._headroom[template] = _Headroom()
        bucket = admission.tokens
        seen.tokens = math.inf if bucket is None else bucket.remaining
        budgets = admission.budgets
        seen.micros = min([b.limit_micros - b.used_micros for b in budgets]) if budgets else None
        seen.seen_at = time.monotonic()

    def holding(self, flow: Flow) -> AbstractAsyncContextManager[None]:
        """Keeps the request's concurrency leases renewed while it is served; they are
        freed with its settlement (one store round trip for both)."""
        if flow.admission is None or not flow.admission.leases:
            return _NOTHING_HELD  # most requests hold no lease: no generator per request
        return self._keeper.holding(flow.admission.leases)

    def _template(self, flow: Flow) -> AdmissionTemplate:
        assert flow.caller is not None
        caller, candidate = flow.caller, flow.candidates[0]
        if self._templates_view is not flow.view:
            self._templates_view = flow.view
            self._templates = {}
            self._headroom = {}
        cache_key = (caller.tenant_id, caller.key_id, candidate.model, candidate.deployment_id)
        template = self._templates.get(cache_key)
        if template is None:
            scope = LimitScope(
                caller.tenant_id,
                caller.tenant,
                caller.key,
                candidate.model,
                candidate.settings,
                candidate.deployment_id,
                candidate.deployment,
            )
            template = AdmissionTemplate(limit_owners(scope, self._prefix))
            self._templates[cache_key] = template
        return template

    def _warn_soft_limit_passed(self, tenant_id: str, used: float, soft: float) -> None:
        """A budget's `soft_fraction`: a log line (at most once a minute per tenant) beside
        the `gateway_budget_used_ratio` gauge that alerts watch."""
        now = time.monotonic()
        if now < self._soft_warned.get(tenant_id, 0.0):
            return
        self._soft_warned[tenant_id] = now + 60
        log.warning(
            "tenant %s has used %.0f%% of a budget (soft limit %.0f%%)",
            tenant_id,
            used * 100,
            soft * 100,
        )

    def settle_later(self, flow: Flow) -> None:
        """Real usage replaces the reservation: tokens refunded or charged, the budget's
        hold replaced by the real cost (zero when nothing was served), and the request's
        concurrency leases freed, all in one store call.

        Queued, not awaited: the response has gone out. One drain task sends whatever
        settlements have queued up since it last ran, together (one pipeline on a single
        Redis), instead of a task per request."""
        if flow.admission is None or flow.admission_request is None:
            return
        if not flow.admission.allowed:
            return
        self._unsettled -= 1
        usage = flow.usage
        settlement = settlement_for(
            flow.admission_request,
            flow.admission,
            actual_tokens=usage.total_tokens if usage else 0,
            actual_cost_usd=flow.cost or Decimal(0),
            release_leases=True,
        )
        if not settlement:
            return
        self._to_settle.append(settlement)
        settler = self._settler
        if settler is None or settler.done():
            self._settler = self._start_settling()
        elif self._unsettled == 0:
            # the drain task waits for company that will not come (nothing else is
            # admitted): this one sends what has queued at once, and the store's write
            # takes the waiting settlements along
            extra = self._start_settling()
            self._extra_settlers.add(extra)
            extra.add_done_callback(self._extra_settlers.discard)

    def _start_settling(self) -> asyncio.Future[None]:
        try:
            loop = self._tasks.current().get_loop()
        except RuntimeError:  # called outside a task (a test, a loop callback)
            return asyncio.ensure_future(self._settle_queued())
        return loop.create_task(self._settle_queued())

    async def _settle_queued(self) -> None:
        while self._to_settle:
            batch = list(self._to_settle)
            self._to_settle.clear()
            try:
                # alone, sent at once: Redis runs it while the client sends its next
                # request, not in that request's admission trip
                await self._store.settle_many(batch, can_wait=self._unsettled > 0)
            except Exception:
                log.exception("settling limits for %d requests failed", len(batch))

    async def drain(self) -> None:
        """Wait for every queued settlement (at shutdown)."""
        self._keeper.stop()
        while True:
            waiting = [s for s in (self._settler, *self._extra_settlers) if s and not s.done()]
            if not waiting:
                return
            await asyncio.shield(asyncio.gather(*waiting))


def _fitting_max_tokens(flow: Flow, admission: Admission, prompt_tokens: int) -> int | None:
    """For a budget refusal: the largest `max_tokens` the refusing budget would still hold
    (what its message suggests), or None when the refusal is not a budget's."""
    refusal = admission.refusal
    if refusal is None or refusal.kind != "budget" or flow.request is None:
        return None
    if refusal.never_fits:
        available = int(refusal.limit)
    else:
        state = next((b for b in admission.budgets if b.scope == refusal.scope), None)
        if state is None:
            return None
        available = state.limit_micros - state.used_micros
    candidate = flow.candidates[0]
    model = candidate.settings
    return largest_output_within(
        micros_to_usd(max(0, available)),
        prompt_tokens,
        model.prices_on(candidate.deployment),
        ceiling=model.max_output_tokens,
        choices=flow.request.n or 1,
    )
