"""Stage 9, evaluate (gateway/evaluation does the evaluating): after planning, a request
of an opted-in tenant carries its evaluation plan, and when it is sampled the respond
stage records its answer; after settle, once the client has the whole answer, it is
noted (feedback can name it) and, sampled, queued for evaluation; when the route's
reference served it on a route that keeps a quality target, the job names the cheaper
models a shadow call may measure instead of a tie with itself. Nothing here delays or
changes the answer: queueing is a `put_nowait`, and a full queue drops.

Notes are kept only when the policy declares feedback metrics (nothing else reads them):
a sampled request's note is written with its journal entry (the same round trip, as soon
as the answer is complete), the others in batches; feedback that finds no note waits a
batch's length for it before answering 404.

The reference and judge calls the evaluator makes come back here (`complete`): planned,
their worst-case cost reserved against the daily cap, admitted (the charged tenant's
limits and budgets), dispatched (breakers, retries, fallbacks) and priced like a client's
request, recorded in the ledger with kind `evaluation`, and never sampled themselves.
"""

from __future__ import annotations

import asyncio
import logging
import time
from decimal import Decimal
from typing import TYPE_CHECKING, Any

import msgspec

from gateway.admin.client_keys import Caller
from gateway.cache.recording import AnswerRecording
from gateway.errors import Conflict, GatewayError, InvalidRequest, NotFound
from gateway.evaluation.answers import (
    conversation_of,
    last_user_turn,
    reference_messages,
    sha256,
    streamed_answer_text,
    whole_answer_text,
)
from gateway.evaluation.daily_cap import DailyCap
from gateway.evaluation.evaluator import (
    NOTE_FLUSH_SECONDS,
    CallAnswer,
    CallFailed,
    EvaluationJob,
    Evaluator,
)
from gateway.evaluation.feedback import FeedbackRefused, feedback_label, read_feedback
from gateway.evaluation.journal import RedisJobJournal
from gateway.evaluation.labels import RequestNote
from gateway.evaluation.plans import PlanBook
from gateway.evaluation.quality import QualityRow, measured, quality_rows
from gateway.evaluation.redis_store import RedisLabelStore
from gateway.evaluation.shadow import shadow_candidates
from gateway.evaluation.store import LabelStore, MemoryLabelStore
from gateway.metering.cost import request_worst_case
from gateway.pipeline.flow import Flow
from gateway.pipeline.plan import plan_request
from gateway.pipeline.respond import call_for
from gateway.pipeline.settle import record_spend
from gateway.routing.kinds import request_kind
from gateway.routing.measured import MeasuredQuality
from gateway.settings.tenants import KeySettings
from gateway.wire.apis import OPENAI_CHAT, OPENAI_EMBEDDINGS

if TYPE_CHECKING:
    from gateway.pipeline.runtime import GatewayRuntime

log = logging.getLogger("gateway.evaluation")

# an answer longer than this is not kept for evaluation (a judge prompt must hold it)
MAX_ANSWER_BYTES = 256 * 1024
# the key the evaluation calls are made under: the charged tenant's limits and budgets
# apply, no client key's; its id is what the ledger records
EVALUATION_KEY = KeySettings(id="evaluation", hash="sha256:" + "0" * 64)
# the measured-quality gauges are computed from at most this many recent labels
QUALITY_WINDOW = 5000
# feedback naming a request with no note yet looks again for this long (the note may be
# in another replica's next batch), this often
NOTE_WAIT_SECONDS = 3 * NOTE_FLUSH_SECONDS
NOTE_POLL_SECONDS = 0.05


class EvaluationStage:
    def __init__(self, runtime: GatewayRuntime) -> None:
        self._runtime = runtime
        self._book = PlanBook(runtime.view.policy)
        config = runtime.settings.config.evaluation
        self.evaluator = Evaluator(
            MemoryLabelStore(config.max_labels),
            self.complete,
            runtime.metrics.evaluation,
            queue_size=config.queue_size,
            workers=config.workers,
        )
        self._chat = runtime.codecs["/v1/chat/completions"]

    def _plans(self) -> PlanBook:
        policy = self._runtime.view.policy
        if self._book.policy is not policy:
            self._book = PlanBook(policy)
        return self._book

    @property
    def active(self) -> bool:
        """Some tenant has opted in (otherwise the stage is not called at all)."""
        return self._plans().any_tenant

    @property
    def store(self) -> LabelStore:
        return self.evaluator.store

    async def start(self) -> None:
        runtime = self._runtime
        config = runtime.settings.config
        queue = config.evaluation
        if runtime.stores.redis is not None:
            self.evaluator.store = RedisLabelStore(
                runtime.stores.redis,
                config.store.key_prefix,
                ttl_seconds=queue.label_ttl_days * 86_400,
                max_labels=queue.max_labels,
            )
            # a job holds the conversation: journalled by default only where content may
            # be kept (docs/evaluation.md, "What is kept")
            if queue.journal if queue.journal is not None else config.server.log_content:
                self.evaluator.journal = RedisJobJournal(
                    runtime.stores.redis,
                    config.store.key_prefix,
                    lease_seconds=queue.journal_lease_seconds,
                    max_attempts=queue.max_attempts,
                    max_jobs=queue.journal_max_jobs,
                    note_ttl_seconds=queue.label_ttl_days * 86_400,
                )
        await self.evaluator.start()

    async def stop(self) -> None:
        await self.evaluator.stop()

    def sample(self, flow: Flow) -> None:
        """After planning: the request's plan, and its answer recorded when sampled."""
        assert flow.caller is not None
        book = self._plans()
        plan = book.plan(flow.caller.tenant_id, flow.route)
        if plan is None or flow.api == OPENAI_EMBEDDINGS:
            return
        flow.evaluation_plan = plan
        if plan.sampled(book.draw()):
            flow.evaluation_recording = AnswerRecording(MAX_ANSWER_BYTES)

    def after(self, flow: Flow) -> None:
        """After settle (the client has its answer): note it, and queue it if sampled."""
        plan = flow.evaluation_plan
        if plan is None or flow.status != 200 or flow.served_by is None or flow.caller is None:
            return
        try:
            self._after(flow)
        except Exception:
            log.exception("evaluation of request %s not queued", flow.request_id)

    def _after(self, flow: Flow) -> None:
        plan, caller, served = flow.evaluation_plan, flow.caller, flow.served_by
        assert plan is not None and caller is not None and served is not None
        # feedback is the notes' only reader
        wanted = bool(flow.view.policy.feedback_metrics)
        if not wanted and flow.evaluation_recording is None:
            return
        conversation = conversation_of((flow.raw or {}).get("messages") or [])
        prompt = last_user_turn(conversation)
        keep = self._runtime.settings.config.server.log_content
        note = RequestNote(
            request_id=flow.request_id,
            tenant=caller.tenant_id,
            route=flow.route,
            served_model=served.model,
            kind=request_kind(prompt),
            time=time.time(),
            prompt=prompt if keep else "",
            prompt_sha256=sha256(prompt),
            prompt_chars=len(prompt),
            turns=sum(1 for role, _ in conversation if role == "user"),
            served_cost_usd="" if flow.cost is None else str(flow.cost),
        )
        job = self._job(flow, conversation, note)
        if job is not None and self.evaluator.submit(job, note=wanted):
            return
        if wanted:
            self.evaluator.note(note)

    def _job(
        self, flow: Flow, conversation: list[tuple[str, str]], note: RequestNote
    ) -> EvaluationJob | None:
        """The sampled request's evaluation job (None: not sampled, or dropped, counted)."""
        plan, caller, served = flow.evaluation_plan, flow.caller, flow.served_by
        assert plan is not None and caller is not None and served is not None
        recording = flow.evaluation_recording
        if recording is None:
            return None
        events = self._runtime.metrics.evaluation
        if flow.cache_status == "hit":
            events.dropped("cache_hit")
            return None
        if recording.too_large:
            events.dropped("too_large")
            return None
        if recording.native and flow.api != OPENAI_CHAT:
            events.dropped("other_api")
            return None
        answer = (
            whole_answer_text(recording.body)
            if recording.body
            else streamed_answer_text(recording.payloads)
        )
        if answer is None or not conversation:
            events.dropped("unreadable_answer")
            return None
        return EvaluationJob(
            request_id=flow.request_id,
            tenant=caller.tenant_id,
            charge_to=plan.charge_to or caller.tenant_id,
            route=flow.route,
            served_model=served.model,
            kind=note.kind,
            reference=plan.reference,
            judge=plan.judge,
            daily_usd=plan.daily_usd,
            max_tokens=plan.max_tokens,
            sample_rate=plan.sample_rate,
            conversation=conversation,
            messages=reference_messages(conversation),
            answer=answer,
            note=note,
            served_cost_usd=note.served_cost_usd,
            shadow_candidates=self._shadow_candidates(flow, served.model, note.kind),
        )

    def _shadow_candidates(self, flow: Flow, served: str, kind: str) -> tuple[str, ...]:
        """A request its route's reference served, on a route that keeps a quality
        target: the cheaper models to measure on it (gateway/evaluation/shadow.py)."""
        plan = flow.evaluation_plan
        policy = flow.view.policy
        route = policy.routes.get(flow.route)
        if plan is None or route is None or route.quality_target is None:
            return ()
        reference = policy.canonical_model(plan.reference) or plan.reference
        if served != reference:
            return ()
        models = [policy.canonical_model(name) or name for name in route.models]
        prices = {
            name: model.prices.input + model.prices.output
            for name in models
            if (model := policy.models.get(name)) is not None
        }
        return shadow_candidates(
            flow.route,
            kind,
            reference,
            models,
            prices,
            self._runtime.live_stats.snapshot().measured_quality,
        )

    async def complete(
        self,
        tenant: str,
        model: str,
        messages: list[dict[str, str]],
        max_tokens: int,
        temperature: float | None,
        evaluated: str,
        cap: DailyCap,
    ) -> CallAnswer:
        """One reference or judge call through the pipeline (see the module docstring)."""
        runtime = self._runtime
        view = runtime.view
        settings = view.policy.tenants.get(tenant)
        if settings is None:
            raise CallFailed("unknown_tenant", f"tenant {tenant} is not in the policy")
        body: dict[str, Any] = {"model": model, "messages": messages, "max_tokens": max_tokens}
        if temperature is not None:
            body["temperature"] = temperature
        decoded = self._chat.decode(msgspec.json.encode(body), {})
        request_id, record_id = runtime.request_ids.new_pair({})
        flow = Flow(
            request_id=request_id,
            record_id=record_id,
            started=time.perf_counter(),
            created=int(time.time()),
            view=view,
            api=OPENAI_CHAT,
            ledger_kind="evaluation",
        )
        flow.caller = Caller(tenant, settings, EVALUATION_KEY)
        flow.request, flow.raw, flow.native = (
            decoded.request,
            decoded.chat_body,
            decoded.native_body,
        )
        try:
            await plan_request(
                flow,
                {},
                runtime.budget_use.state_of(tenant),
                runtime.live_stats.snapshot(),
                runtime.scoring,
            )
            if not await cap.reserve(await self._worst_case(flow)):
                raise CallFailed("daily_cap", f"{model}'s worst case does not fit today's cap")
            await runtime.admitter.admit(flow)
            async with runtime.admitter.holding(flow):
                translated = await runtime.dispatcher.complete(flow, call_for(flow))
            flow.usage = translated.usage
            flow.status = 200
            runtime.pricer.price(flow)
        except GatewayError as error:
            flow.status = error.status
            if error.status == 429:
                # the charged tenant's limits or budget said no: counted apart
                raise CallFailed("limited", error.message) from None
            raise
        finally:
            flow.finished = time.perf_counter()
            if flow.admission is not None:
                runtime.admitter.settle_later(flow)
            record_spend(runtime.ledger, flow)
        cost = flow.cost if flow.cost is not None else Decimal(0)
        if flow.served_by is not None and flow.served_by.model != model:
            raise CallFailed(
                "fallback", f"{model} did not answer: {flow.served_by.model} did", cost
            )
        text = whole_answer_text(translated.body)
        if text is None:
            raise CallFailed("unreadable_answer", f"{model} answered no text", cost)
        log.debug("evaluation call for %s: %s cost %s", evaluated, model, cost)
        return CallAnswer(text, cost)

    async def _worst_case(self, flow: Flow) -> Decimal:
        """The most the planned call can cost: the dearest of its candidates' worst cases
        (retries on another deployment, a fallback), priced as admission prices them."""
        assert flow.request is not None
        runtime = self._runtime
        worst = Decimal(0)
        tokens: dict[str, int] = {}
        for candidate in flow.candidates:
            model = candidate.settings
            if model.tokenizer not in tokens:
                tokens[model.tokenizer] = await runtime.prompt_counter.count(
                    flow.request, model.tokenizer
                )
            cost = request_worst_case(
                flow.request,
                model,
                model.prices_on(candidate.deployment),
                prompt_tokens=tokens[model.tokenizer],
            )
            worst = max(worst, cost)
        return worst

    async def _note(self, tenant: str, request_id: str) -> RequestNote | None:
        """The request's note, waiting up to NOTE_WAIT_SECONDS for one written in another
        replica's batch."""
        deadline = time.monotonic() + NOTE_WAIT_SECONDS
        while True:
            note = await self.evaluator.request_note(tenant, request_id)
            if note is not None or time.monotonic() >= deadline:
                return note
            await asyncio.sleep(NOTE_POLL_SECONDS)

    async def feedback(self, tenant: str, body: Any) -> dict[str, object]:
        """POST /v1/feedback: a label from the application (module gateway.evaluation.feedback)."""
        try:
            request_id, metric, value = read_feedback(
                body, self._runtime.view.policy.feedback_metrics
            )
        except FeedbackRefused as refused:
            raise InvalidRequest(
                str(refused), param=refused.param, code="invalid_feedback"
            ) from None
        note = await self._note(tenant, request_id)
        if note is None:
            raise NotFound(
                f"No answered request '{request_id}' of yours is known to the gateway (feedback is"
                " kept for tenants with `evaluation:`, for label_ttl_days).",
                param="request_id",
                code="request_not_found",
            )
        label = feedback_label(note, metric, value, time.time())
        if not await self.store.add(label):
            raise Conflict(
                f"Request '{request_id}' already has a '{metric}' label: each request is"
                " labelled once per metric.",
                param="metric",
                code="label_exists",
            )
        self._runtime.metrics.evaluation.labelled("feedback")
        return {"object": "feedback", "request_id": request_id, "metric": metric, "value": value}

    async def labels_json(self, limit: int) -> bytes:
        """The newest labels, for GET /admin/evaluation/labels."""
        labels = await self.store.recent(max(1, min(limit, 1_000_000)))
        return msgspec.json.encode({"object": "list", "data": labels})

    async def quality_rows(self) -> list[QualityRow]:
        """Measured quality from the recent labels (the console's page)."""
        return quality_rows(await self.store.recent(QUALITY_WINDOW))

    async def measured(self, window: int = QUALITY_WINDOW) -> list[MeasuredQuality]:
        """Measured quality per route x served model x kind (and the `all` wholes) from
        the newest `window` labels: what quality targets and the `measured` strategy read."""
        return measured(await self.store.recent(window))

    async def refresh(self) -> list[MeasuredQuality]:
        """The measured-quality gauges, from the store's recent labels; returns what it
        measured (what quality targets and the `measured` strategy route on)."""
        rows = quality_rows(await self.store.recent(QUALITY_WINDOW))
        self._runtime.metrics.evaluation.measured(
            (
                row.quality.route,
                row.quality.model,
                row.quality.kind,
                row.reference_model,
                row.quality.ratio,
                row.quality.low,
                row.quality.high,
                row.quality.samples,
                row.evaluation_usd,
                row.saved_usd,
            )
            for row in rows
        )
        return [row.quality for row in rows]
