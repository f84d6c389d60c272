"""The evaluation queue: sampled answers wait here (bounded: a full queue drops and
counts), and worker tasks evaluate each one off the client's time:

    1 skip it if it is labelled already (a repeated enqueue, a restart, a reclaimed job)
    2 ask the reference model the same conversation (when the reference served it, ask
      a cheaper candidate instead: shadow evaluation, gateway/evaluation/shadow.py)
    3 ask the judge twice, each answer shown first once (judging.py's prompt and verdict)
    4 store the label once per request id and metric

Before each reference or judge call its worst-case cost is reserved against the charged
tenant's daily cap (one atomic step in the store) and settled with the real cost after
it: a call whose reservation does not fit is not made (`daily_cap`), so however many
workers run, the day's spend passes the cap only by what real costs exceed estimates.

With a journal (journal.py, the Redis store), a job is recorded there before it is
queued, acknowledged once finished, and kept alive while this process holds it; jobs
another process left unfinished are claimed and run here. Without one (the in-memory
store) the queue is the only copy and a stop drops what is left (`shutdown`).

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
from typing import NamedTuple, Protocol

import msgspec

from gateway.evaluation.daily_cap import DailyCap
from gateway.evaluation.journal import JobJournal
from gateway.evaluation.labels import JUDGED, Label, RequestNote, encode
from gateway.evaluation.shadow import pick
from gateway.evaluation.store import LabelStore
from gateway.routing.learned.judging import Verdict, combine, judge_messages, read_verdict

log = logging.getLogger("gateway.evaluation")

# a judge's reasoning plus its verdict fits in this many tokens
JUDGE_MAX_TOKENS = 1024
# request notes are written in batches, this often
NOTE_FLUSH_SECONDS = 0.1
MAX_PENDING_NOTES = 10_000
# stopped processes are removed from the journal's consumers once in this many rounds
FORGET_CONSUMERS_EVERY = 100


@dataclass(frozen=True)
class CallAnswer:
    text: str
    cost_usd: Decimal


class CallFailed(Exception):
    """A reference or judge call that did not answer; `reason` is a metric label, and
    `cost_usd` what the call cost all the same (an answer that could not be used)."""

    def __init__(self, reason: str, detail: str = "", cost_usd: Decimal = Decimal(0)) -> None:
        super().__init__(detail or reason)
        self.reason = reason
        self.cost_usd = cost_usd


# (tenant charged, model, chat messages, max tokens, temperature, evaluated request id,
# the daily cap the call reserves its worst case on before it is dispatched)
Complete = Callable[
    [str, str, list[dict[str, str]], int, float | None, str, DailyCap], Awaitable[CallAnswer]
]


class EvaluationEvents(Protocol):
    """What the evaluator reports (the observability room's metrics, handed in)."""

    def enqueued(self) -> None: ...

    def dropped(self, reason: str) -> None: ...

    def labelled(self, source: str) -> None: ...

    def spent(self, tenant: str, usd: Decimal) -> None: ...

    def queue_depth_now(self, depth: int) -> None: ...

    def reclaimed(self) -> None: ...


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


class Queued(NamedTuple):
    job: EvaluationJob
    # its journal entry ("": not journalled, the queue is its only copy)
    entry_id: str


_job_decoder = msgspec.json.Decoder(EvaluationJob)


def encode_job(job: EvaluationJob) -> bytes:
    return msgspec.json.encode(job)


def decode_job(data: bytes) -> EvaluationJob:
    return _job_decoder.decode(data)


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
        # set before start (the Redis store's journal), or None: the queue is the only copy
        self.journal: JobJournal | None = None
        self._complete = complete
        self._events = events
        self._queue: asyncio.Queue[Queued] = asyncio.Queue(maxsize=queue_size)
        self._worker_count = workers
        self._workers: list[asyncio.Task[None]] = []
        self._clock = clock
        self._notes: list[RequestNote] = []
        # notes not yet in the store, so feedback sent at once still finds its request
        self._pending: dict[tuple[str, str], RequestNote] = {}
        self._flusher: asyncio.Task[None] | None = None
        self._flush_wanted = asyncio.Event()
        # jobs being written to the journal (each holds a place in the queue)
        self._recording: set[asyncio.Task[None]] = set()
        # journal entries this process holds (queued or running): their leases are renewed
        self._held: set[str] = set()
        self._keeper: asyncio.Task[None] | None = None

    @property
    def queue_depth(self) -> int:
        return self._queue.qsize()

    def _free_places(self) -> int:
        return self._queue.maxsize - self._queue.qsize() - len(self._recording)

    def submit(self, job: EvaluationJob, *, note: bool = False) -> bool:
        """Queue `job` for evaluation (with a journal: recorded there first, off the
        caller's time, with the request's note when `note`); False (dropped, counted)
        when the queue is full."""
        if self._free_places() <= 0:
            self._events.dropped("queue_full")
            return False
        self._events.enqueued()
        if self.journal is None:
            self._queue.put_nowait(Queued(job, ""))
            if note:
                self.note(job.note)
            return True
        task = asyncio.ensure_future(self._record(self.journal, job, note))
        self._recording.add(task)
        task.add_done_callback(self._recording.discard)
        return True

    async def _record(self, journal: JobJournal, job: EvaluationJob, note: bool) -> None:
        entry_id = ""
        try:
            entry_id = await journal.record(
                encode_job(job), (job.tenant, job.request_id, encode(job.note)) if note else None
            )
        except Exception as exc:
            # evaluated all the same, but only this process knows of it
            log.warning("evaluation job %s not journalled (%s)", job.request_id, exc)
            self._events.dropped("journal_error")
            if note:
                self.note(job.note)
        if entry_id:
            self._held.add(entry_id)
        self._queue.put_nowait(Queued(job, entry_id))

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
        if self.journal is not None:
            self._keeper = asyncio.ensure_future(self._keep_journal(self.journal))

    async def stop(self, grace_seconds: float = 2.0) -> None:
        """Let the queue drain for a short while, then stop. What is left stays in the
        journal for another process (or this one's successor) to claim; without a
        journal it is dropped and counted."""
        if self._recording:
            await asyncio.wait(set(self._recording), timeout=grace_seconds)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._queue.join(), grace_seconds)
        tasks = [*self._workers, *(t for t in (self._flusher, self._keeper) if t is not None)]
        tasks += self._recording
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await self._write_notes()
        left = 0
        while not self._queue.empty():
            queued = self._queue.get_nowait()
            self._queue.task_done()
            if queued.entry_id:
                left += 1
            else:
                self._events.dropped("shutdown")
        if self.journal is not None and self._held:
            try:
                await self.journal.release(sorted(self._held))
            except Exception as exc:
                log.warning("evaluation jobs not released (%s): claimed after their lease", exc)
        if left:
            log.info("%d evaluation jobs left in the journal for another process", left)
        self._events.queue_depth_now(0)

    async def _keep_journal(self, journal: JobJournal) -> None:
        """Renew the leases of the jobs held here and claim those whose lease ran out,
        at start and then three times a lease."""
        rounds = 0
        task = asyncio.current_task()
        while True:
            try:
                await self.keep_and_claim(journal)
                if rounds % FORGET_CONSUMERS_EVERY == 0:
                    await journal.forget_idle_consumers()
            except Exception as exc:
                log.warning("evaluation journal not reached (%s): retrying", exc)
            if task is not None and task.cancelling():
                # cancelled mid-call and the Redis client swallowed it (redis/redis-py#2028)
                raise asyncio.CancelledError
            rounds += 1
            await asyncio.sleep(journal.lease_seconds / 3)

    async def keep_and_claim(self, journal: JobJournal) -> int:
        """One round of `_keep_journal`: the number of jobs claimed and queued."""
        if self._held:
            await journal.keep(sorted(self._held))
        claimed = await journal.claim(self._free_places())
        for _ in range(claimed.given_up):
            self._events.dropped("attempts")
        for _ in range(claimed.trimmed):
            self._events.dropped("journal_trimmed")
        if claimed.given_up or claimed.trimmed:
            log.warning(
                "evaluation jobs given up: %d after too many attempts, %d trimmed unfinished",
                claimed.given_up,
                claimed.trimmed,
            )
        queued = 0
        for found in claimed.jobs:
            if found.entry_id in self._held:
                continue  # held here already (a lease renewal that did not reach Redis)
            try:
                job = decode_job(found.job)
            except msgspec.DecodeError:
                self._events.dropped("unreadable_job")
                await journal.finish(found.entry_id)
                continue
            if self._free_places() <= 0:
                break  # claimed again by someone once its lease runs out
            self._held.add(found.entry_id)
            self._queue.put_nowait(Queued(job, found.entry_id))
            self._events.reclaimed()
            queued += 1
            log.info(
                "evaluation of %s claimed from the journal (delivery %d)",
                job.request_id,
                found.deliveries,
            )
        return queued

    async def _flush_notes(self) -> None:
        task = asyncio.current_task()
        while True:
            await self._flush_wanted.wait()
            self._flush_wanted.clear()
            await self._write_notes()
            if task is not None and task.cancelling():
                # cancelled mid-call and the Redis client swallowed it (redis/redis-py#2028)
                raise asyncio.CancelledError
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
            queued = await self._queue.get()
            self._events.queue_depth_now(self._queue.qsize())
            try:
                await self._run(queued.job)
            finally:
                # cancelled (stopping): not acknowledged, the journal keeps the job
                self._queue.task_done()
            if queued.entry_id:
                await self._finish(queued.entry_id)

    async def _run(self, job: EvaluationJob) -> None:
        try:
            await self.evaluate(job)
        except CallFailed as failure:
            self._events.dropped(failure.reason)
            log.info("evaluation of %s dropped: %s", job.request_id, failure)
        except Exception:
            self._events.dropped("error")
            log.exception("evaluating request %s failed", job.request_id)

    async def _finish(self, entry_id: str) -> None:
        journal = self.journal
        try:
            if journal is not None:
                await journal.finish(entry_id)
        except Exception as exc:
            # claimed again after its lease: the label's once-marker skips it then
            log.warning("evaluation job %s not acknowledged (%s)", entry_id, exc)
        finally:
            self._held.discard(entry_id)

    async def evaluate(self, job: EvaluationJob) -> Label | None:
        """Evaluate one job (see the module docstring); the label stored, or None."""
        if await self.store.has(job.tenant, job.request_id, JUDGED):
            self._events.dropped("already_labelled")
            return None
        day = utc_day(self._clock())
        if job.served_model == job.reference:
            if job.shadow_candidates:
                return await self._shadow(job, day)
            # the reference served it and nothing cheaper is left to measure: a tie with
            # itself, for free
            label = self._label(job, 0.5, 0.5, ("", ""), job.served_cost_usd, Decimal(0))
            return await self._store(label)
        reference = await self._call(
            job, day, "reference", job.reference, job.messages, job.max_tokens, None
        )
        verdicts, judge_cost = await self._judge_pair(job, reference.text, job.answer, day)
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
        answer = await self._call(job, day, "shadow", candidate, job.messages, job.max_tokens, None)
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
        (each call reserved against and settled to the daily cap; one order failing drops
        the evaluation: one order alone keeps its position bias)."""
        outcomes = await asyncio.gather(
            *(
                self._call(
                    job,
                    day,
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
        for outcome in outcomes:
            if isinstance(outcome, BaseException):
                raise outcome if isinstance(outcome, CallFailed) else CallFailed("judge_error")
        judged = [a for a in outcomes if isinstance(a, CallAnswer)]
        cost = sum((a.cost_usd for a in judged), Decimal(0))
        return (read_verdict(judged[0].text), read_verdict(judged[1].text)), cost

    async def _call(
        self,
        job: EvaluationJob,
        day: str,
        role: str,
        model: str,
        messages: list[dict[str, str]],
        max_tokens: int,
        temperature: float | None,
    ) -> CallAnswer:
        cap = DailyCap(self.store, job.charge_to, day, job.daily_usd)
        try:
            answer = await self._complete(
                job.charge_to, model, messages, max_tokens, temperature, job.request_id, cap
            )
        except CallFailed as failure:
            await self._settle(cap, failure.cost_usd)
            raise
        except Exception as exc:
            await self._settle(cap, Decimal(0))
            raise CallFailed(f"{role}_error", f"{role} {model}: {exc}") from exc
        await self._settle(cap, answer.cost_usd)
        return answer

    async def _settle(self, cap: DailyCap, cost_usd: Decimal) -> None:
        if cost_usd:
            self._events.spent(cap.tenant, cost_usd)
        await cap.settle(cost_usd)

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
