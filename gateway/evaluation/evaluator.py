"""The evaluation queue: sampled answers wait here (bounded: a full queue drops and
counts), and worker tasks evaluate each one off the client's time:

    1 skip it if it is labelled already (a repeated enqueue, a restart)
    2 stop if the charged tenant's daily evaluation spend is at its cap
    3 ask the reference model the same conversation (when the reference served it, ask
      a cheaper candidate instead: shadow evaluation, gateway/evaluation/shadow.py)
    4 ask the judge twice, each answer shown first once (judging.py's prompt and verdict)
    5 store the label once per request id and metric

Reference and judge are called through `complete`, which the pipeline hands in: its own
dispatch, with limits, breakers and metering (records of kind `evaluation`), and never
sampled itself. Any failure of those calls drops the one evaluation (counted by reason);
nothing here can reach a client's request.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from decimal import Decimal
from typing import Protocol

import msgspec

from gateway.evaluation.labels import JUDGED, Label, RequestNote
from gateway.evaluation.shadow import pick
from gateway.evaluation.store import LabelStore
from gateway.routing.learned.judging import Verdict, combine, judge_messages, read_verdict

log = logging.getLogger("gateway.evaluation")

# a judge's reasoning plus its verdict fits in this many tokens
JUDGE_MAX_TOKENS = 1024
# request notes are written in batches, this often
NOTE_FLUSH_SECONDS = 0.1
MAX_PENDING_NOTES = 10_000


@dataclass(frozen=True)
class CallAnswer:
    text: str
    cost_usd: Decimal


class CallFailed(Exception):
    """A reference or judge call that did not answer; `reason` is a metric label."""

    def __init__(self, reason: str, detail: str = "") -> None:
        super().__init__(detail or reason)
        self.reason = reason


# (tenant charged, model, chat messages, max tokens, temperature, evaluated request id)
Complete = Callable[[str, str, list[dict[str, str]], int, float | None, str], Awaitable[CallAnswer]]


class EvaluationEvents(Protocol):
    """What the evaluator reports (the observability room's metrics, handed in)."""

    def enqueued(self) -> None: ...

    def dropped(self, reason: str) -> None: ...

    def labelled(self, source: str) -> None: ...

    def spent(self, tenant: str, usd: Decimal) -> None: ...

    def queue_depth_now(self, depth: int) -> None: ...


@dataclass(frozen=True)
class EvaluationJob:
    request_id: str
    tenant: str
    # the tenant the evaluation calls are charged to
    charge_to: str
    route: str
    served_model: str
    kind: str
    reference: str
    judge: str
    daily_usd: Decimal
    max_tokens: int
    sample_rate: float
    conversation: list[tuple[str, str]]
    messages: list[dict[str, str]]
    answer: str
    note: RequestNote
    served_cost_usd: str = ""
    # the reference served: the cheaper models one of which answers too, to be judged
    # against the reference's answer (gateway/evaluation/shadow.py); () keeps the tie
    shadow_candidates: tuple[str, ...] = ()
    enqueued_at: float = field(default_factory=time.monotonic)


def utc_day(moment: float) -> str:
    return datetime.fromtimestamp(moment, UTC).strftime("%Y-%m-%d")


class Evaluator:
    def __init__(
        self,
        store: LabelStore,
        complete: Complete,
        events: EvaluationEvents,
        *,
        queue_size: int,
        workers: int,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.store = store
        self._complete = complete
        self._events = events
        self._queue: asyncio.Queue[EvaluationJob] = asyncio.Queue(maxsize=queue_size)
        self._worker_count = workers
        self._workers: list[asyncio.Task[None]] = []
        self._clock = clock
        self._notes: list[RequestNote] = []
        # notes not yet in the store, so feedback sent at once still finds its request
        self._pending: dict[tuple[str, str], RequestNote] = {}
        self._flusher: asyncio.Task[None] | None = None
        self._flush_wanted = asyncio.Event()

    @property
    def queue_depth(self) -> int:
        return self._queue.qsize()

    def submit(self, job: EvaluationJob) -> bool:
        """Queue `job` for evaluation; False (dropped, counted) when the queue is full."""
        try:
            self._queue.put_nowait(job)
        except asyncio.QueueFull:
            self._events.dropped("queue_full")
            return False
        self._events.enqueued()
        return True

    def note(self, note: RequestNote) -> None:
        """Keep a note of an answered request (written in the next batch)."""
        if len(self._notes) >= MAX_PENDING_NOTES:
            self._events.dropped("notes_full")
            return
        self._notes.append(note)
        self._pending[note.tenant, note.request_id] = note
        self._flush_wanted.set()

    async def request_note(self, tenant: str, request_id: str) -> RequestNote | None:
        pending = self._pending.get((tenant, request_id))
        if pending is not None:
            return pending
        return await self.store.request_note(tenant, request_id)

    async def start(self) -> None:
        self._workers = [asyncio.ensure_future(self._work()) for _ in range(self._worker_count)]
        self._flusher = asyncio.ensure_future(self._flush_notes())

    async def stop(self, grace_seconds: float = 2.0) -> None:
        """Let the queue drain for a short while, then stop; what is left is counted."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._queue.join(), grace_seconds)
        for task in self._workers:
            task.cancel()
        if self._flusher is not None:
            self._flusher.cancel()
        await asyncio.gather(*self._workers, return_exceptions=True)
        if self._flusher is not None:
            await asyncio.gather(self._flusher, return_exceptions=True)
        await self._write_notes()
        while not self._queue.empty():
            self._queue.get_nowait()
            self._queue.task_done()
            self._events.dropped("shutdown")
        self._events.queue_depth_now(0)

    async def _flush_notes(self) -> None:
        while True:
            await self._flush_wanted.wait()
            self._flush_wanted.clear()
            await self._write_notes()
            await asyncio.sleep(NOTE_FLUSH_SECONDS)

    async def _write_notes(self) -> None:
        batch, self._notes = self._notes, []
        if not batch:
            return
        try:
            await self.store.note(batch)
        except Exception as exc:
            log.warning("request notes not stored (%s): feedback on them is refused", exc)
            self._events.dropped("store_error")
        for note in batch:
            self._pending.pop((note.tenant, note.request_id), None)

    async def _work(self) -> None:
        while True:
            job = await self._queue.get()
            self._events.queue_depth_now(self._queue.qsize())
            try:
                await self.evaluate(job)
            except CallFailed as failure:
                self._events.dropped(failure.reason)
                log.info("evaluation of %s dropped: %s", job.request_id, failure)
            except Exception:
                self._events.dropped("error")
                log.exception("evaluating request %s failed", job.request_id)
            finally:
                self._queue.task_done()

    async def evaluate(self, job: EvaluationJob) -> Label | None:
        """Evaluate one job (see the module docstring); the label stored, or None."""
        if await self.store.has(job.tenant, job.request_id, JUDGED):
            self._events.dropped("already_labelled")
            return None
        day = utc_day(self._clock())
        if await self.store.spend(job.charge_to, day) >= job.daily_usd:
            self._events.dropped("daily_cap")
            return None
        if job.served_model == job.reference:
            if job.shadow_candidates:
                return await self._shadow(job, day)
            # the reference served it and nothing cheaper is left to measure: a tie with
            # itself, for free
            label = self._label(job, 0.5, 0.5, ("", ""), job.served_cost_usd, Decimal(0))
            return await self._store(label)
        reference = await self._call(
            job, "reference", job.reference, job.messages, job.max_tokens, None
        )
        spent = await self._spend(job, reference.cost_usd, day)
        if spent >= job.daily_usd:
            # the reference's answer alone reached the cap: no judge calls today
            self._events.dropped("daily_cap")
            return None
        first, second = await asyncio.gather(
            self._call(
                job,
                "judge",
                job.judge,
                judge_messages(job.conversation, reference.text, job.answer),
                JUDGE_MAX_TOKENS,
                0.0,
            ),
            self._call(
                job,
                "judge",
                job.judge,
                judge_messages(job.conversation, job.answer, reference.text),
                JUDGE_MAX_TOKENS,
                0.0,
            ),
            return_exceptions=True,
        )
        judged = [a for a in (first, second) if isinstance(a, CallAnswer)]
        judge_cost = sum((a.cost_usd for a in judged), Decimal(0))
        if judge_cost:
            await self._spend(job, judge_cost, day)
        for outcome in (first, second):
            if isinstance(outcome, BaseException):
                # one order alone keeps its position bias: no label
                raise outcome if isinstance(outcome, CallFailed) else CallFailed("judge_error")
        assert isinstance(first, CallAnswer) and isinstance(second, CallAnswer)
        verdicts = (read_verdict(first.text), read_verdict(second.text))
        pair = combine(*verdicts)
        if pair is None:
            raise CallFailed("no_verdict", "the judge gave no [[A]], [[B]] or [[C]]")
        label = self._label(
            job,
            pair.weak_quality,
            pair.strong_quality,
            (verdicts[0] or "", verdicts[1] or ""),
            str(reference.cost_usd),
            reference.cost_usd + judge_cost,
        )
        return await self._store(label)

    async def _shadow(self, job: EvaluationJob, day: str) -> Label | None:
        """The reference served `job`: a cheaper candidate answers the same messages
        (its answer reaches no client) and is judged against the reference's real answer,
        both orders; the label's served model is the candidate, marked `shadow`."""
        candidate = pick(job.shadow_candidates, job.request_id)
        answer = await self._call(job, "shadow", candidate, job.messages, job.max_tokens, None)
        spent = await self._spend(job, answer.cost_usd, day)
        if spent >= job.daily_usd:
            self._events.dropped("daily_cap")
            return None
        verdicts, judge_cost = await self._judge_pair(job, job.answer, answer.text, day)
        pair = combine(*verdicts)
        if pair is None:
            raise CallFailed("no_verdict", "the judge gave no [[A]], [[B]] or [[C]]")
        label = self._label(
            job,
            pair.weak_quality,
            pair.strong_quality,
            (verdicts[0] or "", verdicts[1] or ""),
            job.served_cost_usd,
            answer.cost_usd + judge_cost,
        )
        shadowed = msgspec.structs.replace(
            label, served_model=candidate, served_cost_usd=str(answer.cost_usd), shadow=True
        )
        return await self._store(shadowed)

    async def _judge_pair(
        self, job: EvaluationJob, reference: str, served: str, day: str
    ) -> tuple[tuple[Verdict | None, Verdict | None], Decimal]:
        """The judge's verdicts on (reference, served) in both orders, and their cost
        (charged even when one order failed, which then drops the evaluation)."""
        outcomes = await asyncio.gather(
            *(
                self._call(
                    job,
                    "judge",
                    job.judge,
                    judge_messages(job.conversation, first, second),
                    JUDGE_MAX_TOKENS,
                    0.0,
                )
                for first, second in ((reference, served), (served, reference))
            ),
            return_exceptions=True,
        )
        judged = [a for a in outcomes if isinstance(a, CallAnswer)]
        cost = sum((a.cost_usd for a in judged), Decimal(0))
        if cost:
            await self._spend(job, cost, day)
        for outcome in outcomes:
            if isinstance(outcome, BaseException):
                raise outcome if isinstance(outcome, CallFailed) else CallFailed("judge_error")
        return (read_verdict(judged[0].text), read_verdict(judged[1].text)), cost

    async def _call(
        self,
        job: EvaluationJob,
        role: str,
        model: str,
        messages: list[dict[str, str]],
        max_tokens: int,
        temperature: float | None,
    ) -> CallAnswer:
        try:
            return await self._complete(
                job.charge_to, model, messages, max_tokens, temperature, job.request_id
            )
        except CallFailed:
            raise
        except Exception as exc:
            raise CallFailed(f"{role}_error", f"{role} {model}: {exc}") from exc

    async def _spend(self, job: EvaluationJob, usd: Decimal, day: str) -> Decimal:
        self._events.spent(job.charge_to, usd)
        return await self.store.add_spend(job.charge_to, day, usd)

    def _label(
        self,
        job: EvaluationJob,
        served: float,
        reference: float,
        verdicts: tuple[str, str],
        reference_cost: str,
        evaluation_cost: Decimal,
    ) -> Label:
        note = job.note
        return Label(
            request_id=job.request_id,
            metric=JUDGED,
            source="judge",
            tenant=job.tenant,
            route=job.route,
            served_model=job.served_model,
            kind=job.kind,
            time=self._clock(),
            served_quality=served,
            reference_quality=reference,
            reference_model=job.reference,
            judge_model=job.judge,
            verdicts=verdicts,
            prompt=note.prompt,
            prompt_sha256=note.prompt_sha256,
            prompt_chars=note.prompt_chars,
            turns=note.turns,
            served_cost_usd=job.served_cost_usd,
            reference_cost_usd=reference_cost,
            evaluation_cost_usd=str(evaluation_cost),
            sample_rate=job.sample_rate,
        )

    async def _store(self, label: Label) -> Label | None:
        if not await self.store.add(label):
            self._events.dropped("already_labelled")
            return None
        self._events.labelled(label.source)
        return label
