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

On a shared store, far from a key's limits, a request alone on this replica need not
wait for its admission at all: the store is asked, off the request path, for a grant,
an admission made ahead (its own id, twice a request's need) that the key's next
request here adopts if it fits. See GRANT_SECONDS below and `_ask_grant`.
"""

from __future__ import annotations

import asyncio
import logging
import math
import secrets
import time
from collections.abc import Coroutine
from contextlib import AbstractAsyncContextManager, nullcontext
from decimal import Decimal
from typing import Any

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

# A grant (an admission made ahead, off the request path, see `_ask_grant`) lives this
# long unused, then is settled at zero: every bucket refunded, the budgets' hold dropped,
# its concurrency slot freed. It is asked for only where the key's last admission left
# room for FAR_FROM_LIMITS requests and slots and GRANT_FAR_FROM_LIMITS requests' tokens
# and worst cases, and kept only where its own answer still does, so what a grant holds
# beyond what a request would (one request and one slot idle, per key and model on each
# replica, for at most this long; a request's tokens and worst case more while the
# request it serves is in flight) cannot refuse anyone but at a limit's edge under a
# burst. Every request is still served under an admission taken before it went
# upstream: limits and budgets are never exceeded.
GRANT_SECONDS = 1.0
# A grant's one request and one slot are held idle at most GRANT_SECONDS; its tokens and
# worst case, twice a request's, are held beyond the request it serves while that request
# is in flight (its settlement puts real usage in their place): for a whole answer, not a
# second, so tokens buckets and budgets must hold this many requests' worth to be far.
GRANT_FAR_FROM_LIMITS = 64
MICROS_GRANT_FAR = GRANT_FAR_FROM_LIMITS * MICROS_PER_USD
# a grant is asked for only if the key's last admission was seen this recently
GRANT_HEADROOM_SECONDS = 30.0


class _Headroom:
    __slots__ = ("micros", "requests", "seen_at", "slots", "tokens")

    def __init__(self) -> None:
        # the least left in its tokens buckets (inf: none) and budgets (None: none)
        self.tokens = math.inf
        self.micros: int | None = None
        # what is left of its requests buckets (inf: none) and concurrency caps (None: none)
        self.requests = math.inf
        self.slots: int | None = None
        self.seen_at = 0.0

    def far_for_grant(self, tokens: int, worst_case: Decimal) -> bool:
        """Whether it holds FAR_FROM_LIMITS requests and slots, and GRANT_FAR_FROM_LIMITS
        times a request's tokens and worst case."""
        if self.requests < FAR_FROM_LIMITS or tokens * GRANT_FAR_FROM_LIMITS > self.tokens:
            return False
        if self.slots is not None and self.slots < FAR_FROM_LIMITS:
            return False
        return self.micros is None or worst_case * MICROS_GRANT_FAR <= self.micros


class _Grant:
    """An admission made ahead for the next request of one template that fits it."""

    __slots__ = ("admission", "expires_at", "kept", "request", "tokens", "worst_case")

    def __init__(
        self,
        request: AdmissionRequest,
        admission: Admission,
        tokens: float,
        worst_case: Decimal,
    ) -> None:
        self.request = request
        self.admission = admission
        # what it reserved: a request whose reservation fits under both adopts it
        self.tokens = tokens
        self.worst_case = worst_case
        # loop time after which it is given back (`_sweep`); whether it was kept (made)
        self.expires_at = math.inf
        self.kept = False


class Admitter:
    def __init__(
        self,
        store: LimitStore,
        key_prefix: str,
        metrics: GatewayMetrics,
        budget_use: BudgetUse,
        counter: PromptCounter,
        shared: bool = False,
        grants: bool = False,
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
        # admissions made ahead (GRANT_SECONDS): only on a shared store, where admission
        # is a round trip worth taking off the path
        self._grants_on = grants and shared
        self._grants: dict[AdmissionTemplate, _Grant] = {}
        self._asking: dict[AdmissionTemplate, asyncio.Future[None]] = {}
        # one timer gives back the grants whose life ran out, not one timer per grant
        self._sweeper: asyncio.TimerHandle | None = None
        # grant ids: unique to this process (a random prefix) without a random draw each
        self._grant_prefix = f"grant-{secrets.token_hex(6)}-"
        self._grants_made = 0
        # requests of each template here from admission to settlement: a grant is asked
        # for only by a request alone (see `_ask_grant`)
        self._in_flight: dict[AdmissionTemplate, int] = {}
        # templates with a request waiting for the grant being asked for
        self._awaited: set[AdmissionTemplate] = set()
        # templates whose last request here took longer than half a grant's life: a grant
        # asked at their admission would lapse before the next request came; theirs are
        # asked when they settle
        self._slow: set[AdmissionTemplate] = set()
        self._draining = False

    async def admit(self, flow: Flow) -> None:
        assert flow.request is not None and flow.caller is not None and flow.candidates
        template = self._template(flow)
        if not template.limits_anything:
            return  # the common case of an unlimited key: no planning, no store call
        caller = flow.caller
        grants = self._grants_on
        if grants:
            # counted from here, its admission's round trip included: a grant is asked
            # for only when none of the template's requests is here (see `_ask_grant`)
            self._in_flight[template] = self._in_flight.get(template, 0) + 1
        try:
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
            flow.admission_template = template
            if self._asking and template not in self._grants and template not in self._awaited:
                asking = self._asking.get(template)
                if asking is not None:
                    # a grant asked for before this request came is answered sooner than
                    # an admission of its own would be: it waits for that one (one waiter
                    # per ask; a grant serves one request)
                    self._awaited.add(template)
                    try:
                        await asyncio.shield(asking)
                    finally:
                        self._awaited.discard(template)
            grant = self._grants.pop(template, None) if self._grants else None
            if grant is not None and self._adopt(flow, grant, *reservation):
                admission = grant.admission  # admitted ahead: no store round trip
            else:
                if grant is not None:
                    # sized for a smaller request: given back, and this one's settlement
                    # asks for one its size (the latest request is the best guess at the next)
                    self._release(grant)
                request, admission = await self._admit(flow, template, queue_ms, *reservation)
                if bounded and admission.refused_kind in ("tokens", "budget"):
                    # reserved by the bound, and the headroom went since it was seen: decided
                    # again on the count, so a bound refuses nothing a count would admit
                    prompt_tokens = await self._count(flow)
                    reservation = self._reservation(flow, template, prompt_tokens)
                    request, admission = await self._admit(flow, template, queue_ms, *reservation)
                flow.admission_request, flow.admission = request, admission
                remembers = template.needs_prompt_tokens or self._grants_on
                if remembers and admission.allowed and not admission.degraded:
                    self._remember_headroom(template, admission)
            flow.admission_need = reservation
            if admission.allowed:
                self._unsettled += 1
                if (
                    self._grants_on
                    and self._in_flight.get(template) == 1
                    and template not in self._slow
                ):
                    # alone here: the next request's grant is asked for now, a whole upstream
                    # call ahead of it (asked when this one settles, the client's next request
                    # would come before its answer: it would wait for the grant instead)
                    self._ask_grant(flow, template)
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
        except BaseException:
            admitted = flow.admission
            if grants and (admitted is None or not admitted.allowed):
                # refused or failed before an admission: it will not be settled (an
                # admitted one is, and `settle_later` counts it out)
                self._leave(template)
            raise

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

    def _adopt(self, flow: Flow, grant: _Grant, tokens: int, worst_case: Decimal) -> bool:
        """Serve the request under the grant, if it fits (the grant is out of `_grants`)."""
        if tokens > grant.tokens or worst_case > grant.worst_case:
            return False
        if grant.expires_at <= self._tasks.current().get_loop().time():
            return False  # its life ran out before the sweep came: given back
        flow.admission_request, flow.admission = grant.request, grant.admission
        self._metrics.admission_grant("used")
        return True

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
        requests = admission.requests
        seen.requests = math.inf if requests is None else requests.remaining
        seen.slots = admission.slots_free
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
            self._slow = set()
            self._release_grants()  # made under the old policy's limits
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
        if settlement:
            self._queue(settlement)
        template = flow.admission_template
        if self._grants_on and template is not None:
            finished = flow.finished if flow.finished is not None else time.perf_counter()
            if finished - flow.started > GRANT_SECONDS / 2:
                self._slow.add(template)
            elif self._slow:
                self._slow.discard(template)
            if not self._leave(template):
                self._ask_grant(flow, template)

    def _leave(self, template: AdmissionTemplate) -> int:
        """One request of the template is done here: how many are left."""
        left = self._in_flight.pop(template, 1) - 1
        if left > 0:
            self._in_flight[template] = left
        return left

    def _queue(self, settlement: Settlement) -> None:
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

    def _ask_grant(self, flow: Flow, template: AdmissionTemplate) -> None:
        """Ask the store for a grant for the template's next request, off the path, if
        the key's limits were far off when last seen: when a request admitted here is
        the template's only one (a whole upstream call ahead of the next, unless its
        requests take longer than half a grant's life), and when the last one settles.

        Only a request alone: a client waiting on each answer before it asks again (an
        agent's loop, a user's chat) is the one whose every request would wait for
        Redis, and a grant per quiet key cannot pile up. Where a key has requests in
        flight, its traffic is concurrent and waits for admission side by side; a grant
        asked there would sit idle in a burst, holding room that other replicas'
        requests near the limit need."""
        if template in self._grants or template in self._asking or self._draining:
            return
        admission, need = flow.admission, flow.admission_need
        assert admission is not None and need is not None
        if admission.degraded:
            return
        seen = self._headroom.get(template)
        if seen is None or time.monotonic() - seen.seen_at > GRANT_HEADROOM_SECONDS:
            return
        if not seen.far_for_grant(*need):
            return
        self._asking[template] = self._start(self._make_grant(template, flow.view, need))

    async def _make_grant(
        self, template: AdmissionTemplate, view: object, need: tuple[int, Decimal]
    ) -> None:
        try:
            await self._grant(template, view, need)
        finally:
            self._asking.pop(template, None)

    async def _grant(
        self, template: AdmissionTemplate, view: object, need: tuple[int, Decimal]
    ) -> None:
        """Twice what the request that asks needed (what it was served under may be a
        grant already: twice that would double at every turn)."""
        tokens, worst_case = need[0] * 2, need[1] * 2
        self._grants_made += 1
        request = template.build(
            f"{self._grant_prefix}{self._grants_made}",
            expected_tokens=tokens,
            worst_case_cost_usd=worst_case,
            now=time.time(),
        )
        # its life counts from the ask: its lease was taken then, not when the answer came
        asked_at = self._tasks.current().get_loop().time()
        try:
            admission = await self._store.admit(request)
        except Exception:
            log.exception("asking the limit store for an admission ahead failed")
            return
        if not admission.allowed:
            self._headroom.pop(template, None)  # near a limit: the next requests count
            return
        if admission.degraded:
            return  # admitted without the store: holds nothing
        # a template without a tokens bucket fits a request of any size
        takes_tokens = any(bucket.kind == "tokens" for bucket in request.buckets)
        grant = _Grant(request, admission, tokens if takes_tokens else math.inf, worst_case)
        lifetime = self._grant_lifetime(request)
        current = view is self._templates_view and not self._draining
        if current:
            self._remember_headroom(template, admission)
            # no longer far: kept only for a request already waiting for it (given back,
            # it would come back after the requests it held room from were refused)
            far = self._headroom[template].far_for_grant(*need)
            current = far or template in self._awaited
        loop = self._tasks.current().get_loop()
        grant.expires_at = asked_at + lifetime
        if not current or grant.expires_at <= loop.time() or template in self._grants:
            self._release(grant)
            return
        grant.kept = True
        self._grants[template] = grant
        self._metrics.admission_grant("made")
        sweeper = self._sweeper
        if sweeper is None or grant.expires_at < sweeper.when():
            # (a shorter life: a short lease TTL, a budget period about to end)
            if sweeper is not None:
                sweeper.cancel()
            self._sweeper = loop.call_at(grant.expires_at, self._sweep, loop)

    @staticmethod
    def _grant_lifetime(request: AdmissionRequest) -> float:
        """GRANT_SECONDS, less where a lease would need renewing sooner (its holder's
        first renewal comes up to half a TTL after adoption) or a budget's calendar
        period ends first (its spend would count in the period gone)."""
        lifetime = GRANT_SECONDS
        for lease in request.leases:
            lifetime = min(lifetime, lease.ttl_seconds / 4)
        for budget in request.budgets:
            if budget.period_end:
                lifetime = min(lifetime, budget.period_end - time.time() - 0.1)
        return lifetime

    def _sweep(self, loop: asyncio.AbstractEventLoop) -> None:
        """Give back the grants whose life ran out; wake again for the next to."""
        self._sweeper = None
        now, soonest = loop.time(), math.inf
        for template, grant in list(self._grants.items()):
            if grant.expires_at <= now:
                del self._grants[template]
                self._release(grant)
            elif grant.expires_at < soonest:
                soonest = grant.expires_at
        if soonest != math.inf:
            self._sweeper = loop.call_at(soonest, self._sweep, loop)

    def _release(self, grant: _Grant) -> None:
        """Settle an unused grant at zero: its buckets refunded (the requests bucket too:
        no request was served), its budgets' hold dropped, its slots freed."""
        settlement = settlement_for(
            grant.request,
            grant.admission,
            actual_tokens=0,
            actual_cost_usd=Decimal(0),
            release_leases=True,
            served=False,
        )
        if settlement:
            self._queue(settlement)
        if grant.kept:  # made, not given back on its own answer
            self._metrics.admission_grant("returned")

    def _release_grants(self) -> None:
        grants, self._grants = self._grants, {}
        for grant in grants.values():
            self._release(grant)

    def _start(self, work: Coroutine[Any, Any, None]) -> asyncio.Future[None]:
        try:
            loop = self._tasks.current().get_loop()
        except RuntimeError:  # called outside a task (a test, a loop callback)
            return asyncio.ensure_future(work)
        return loop.create_task(work)

    def _start_settling(self) -> asyncio.Future[None]:
        return self._start(self._settle_queued())

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
        """Release every grant and wait for every queued settlement (at shutdown)."""
        self._keeper.stop()
        self._draining = True
        asking = list(self._asking.values())
        if asking:
            # a grant answered now is released at once (`_draining`)
            await asyncio.shield(asyncio.gather(*asking, return_exceptions=True))
        self._release_grants()
        if self._sweeper is not None:
            self._sweeper.cancel()
            self._sweeper = None
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
