"""The continuous-batching scheduler: pure logic on a clock the caller supplies.

`Scheduler.step(now)` runs one forward pass of the emulated GPU and says how long it took
(`StepResult.duration`) and which sequences produced a token at its end. Nothing here
sleeps or reads a clock; the asyncio engine drives it in real time and the tests drive it
on a virtual clock.

One step, in order:

1. decode reservation: every sequence whose prompt is computed needs one KV slot for the
   token it decodes now. If memory is short, unlocked cached pages are evicted (LRU), then
   the newest running sequence is preempted: its KV is freed (its computed prompt pages
   go to the prefix cache), and it goes back to the front of the queue; when re-admitted it
   recomputes its prompt and the tokens it already produced, as vLLM and SGLang do.
2. chunked prefill: a budget of `chunked_prefill_size` tokens goes to the sequences still
   prefilling, oldest first, then to admitting waiting requests (FCFS) while the batch is
   below `max_running_requests` and the KV cache has room for the uncached part of the
   prompt. Cached prefix pages are locked, not recomputed. A step that preempted admits
   nobody (as vLLM), so a victim is not re-admitted into the squeeze it just left.
3. decode: one token for every sequence reserved in (1); a sequence whose prefill completed
   in (2) gets its first token too. Prefill and decode share the step, like vLLM V1 and
   SGLang with `--enable-mixed-chunk`.
4. finished sequences leave at once: their prompt pages enter the prefix cache, the rest
   of their KV is freed, and their slot is free for the next step (continuous batching).

With `static_batching`, requests are admitted only when the batch is empty, and then as
many as fit, regardless of the prefill budget; the batch runs until its last member ends.

Memory accounting follows SGLang: KV in use = pages held by the prefix tree + tokens owned
by running sequences; `token_usage` counts evictable (unlocked) cached pages as free. A
sequence reserves its whole uncached prompt at admission, so prefill never runs out of
memory half way; decode grows one token per step.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

from gateway.emulator.prefix_cache import PageNode, PrefixCache
from gateway.emulator.profiles import GpuProfile
from gateway.emulator.stats import ServingStats


class PromptTooLong(ValueError):
    """The prompt alone does not fit in the KV cache."""


@dataclass(frozen=True, slots=True)
class SchedulerConfig:
    max_running_requests: int
    kv_cache_tokens: int
    chunked_prefill_size: int
    page_size: int = 16
    static_batching: bool = False


@dataclass(slots=True, eq=False)
class Sequence:
    """One request inside the scheduler.

    `page_keys` are the chained hashes of the prompt's full pages (see `tokenizer.py`);
    `output_target` is how many tokens it generates before it finishes.
    """

    rid: int
    prompt_tokens: int
    page_keys: tuple[int, ...]
    output_target: int
    arrival: float
    finish_reason: str = "stop"
    output_tokens: int = 0
    cached_tokens: int = 0
    prefill_target: int = 0
    computed: int = 0
    allocated: int = 0
    pages: list[PageNode] = field(default_factory=list)
    admitted_once: bool = False
    admit_order: int = 0
    preemptions: int = 0
    first_token_at: float | None = None
    last_token_at: float = 0.0
    finished_at: float | None = None
    aborted: bool = False

    @property
    def finished(self) -> bool:
        return self.finished_at is not None

    @property
    def decoding(self) -> bool:
        """Prompt (and, after a preemption, the tokens produced before it) computed."""
        return self.computed >= self.prefill_target


@dataclass(slots=True)
class StepResult:
    started: float
    duration: float
    prefill_tokens: int = 0
    decode_seqs: int = 0
    emitted: list[Sequence] = field(default_factory=list)
    finished: list[Sequence] = field(default_factory=list)
    preempted: list[Sequence] = field(default_factory=list)
    admitted: list[Sequence] = field(default_factory=list)

    @property
    def ended(self) -> float:
        return self.started + self.duration


class Scheduler:
    def __init__(self, config: SchedulerConfig, profile: GpuProfile) -> None:
        self.config = config
        self.profile = profile
        self.cache = PrefixCache(config.page_size)
        self.stats = ServingStats()
        self.waiting: deque[Sequence] = deque()
        self.running: list[Sequence] = []
        self._private_tokens = 0
        self._admissions = 0

    # -- state the metrics read ---------------------------------------------------------

    @property
    def used_tokens(self) -> int:
        return self.cache.tokens + self._private_tokens

    @property
    def free_tokens(self) -> int:
        return self.config.kv_cache_tokens - self.used_tokens

    @property
    def token_usage(self) -> float:
        """KV in use that cannot be reclaimed, as a fraction (SGLang's token_usage)."""
        in_use = self.used_tokens - self.cache.evictable_tokens
        return in_use / self.config.kv_cache_tokens

    @property
    def num_waiting(self) -> int:
        return sum(1 for seq in self.waiting if not seq.aborted)

    @property
    def has_work(self) -> bool:
        return bool(self.running) or any(not seq.aborted for seq in self.waiting)

    # -- requests in and out ------------------------------------------------------------

    def submit(self, seq: Sequence) -> None:
        capacity = self.config.kv_cache_tokens
        if seq.prompt_tokens + 1 > capacity:
            raise PromptTooLong(
                f"prompt of {seq.prompt_tokens} tokens exceeds the KV cache of {capacity}"
            )
        if seq.prompt_tokens + seq.output_target > capacity:
            seq.output_target = capacity - seq.prompt_tokens
            seq.finish_reason = "length"
        self.stats.requests_total += 1
        self.waiting.append(seq)

    def abort(self, seq: Sequence) -> None:
        """The client went away: free what the sequence holds."""
        if seq.finished or seq.aborted:
            return
        seq.aborted = True
        if seq in self.running:
            self.running.remove(seq)
            self._release(seq)

    # -- one forward pass ---------------------------------------------------------------

    def step(self, now: float) -> StepResult:
        result = StepResult(started=now, duration=0.0)
        decoding = [seq for seq in self.running if seq.computed >= seq.prefill_target]
        decoding = self._reserve_decode_slots(decoding, result)
        prefill_done = self._prefill(result, admit=not result.preempted)

        context_tokens = 0
        for seq in decoding:
            context_tokens += seq.computed
            seq.computed += 1
        result.decode_seqs = len(decoding)
        result.duration = self.profile.step_seconds(
            result.prefill_tokens, result.decode_seqs, context_tokens
        )
        self.stats.record_step(len(decoding), result.duration)
        self._emit(decoding + prefill_done, result)
        return result

    def _reserve_decode_slots(self, decoding: list[Sequence], result: StepResult) -> list[Sequence]:
        needed = len(decoding)
        while needed > self.free_tokens:
            self.cache.evict(needed - self.free_tokens)
            if needed <= self.free_tokens or not self.running:
                break
            victim = max(self.running, key=lambda seq: seq.admit_order)
            self._preempt(victim)
            result.preempted.append(victim)
            if victim in decoding:
                decoding.remove(victim)
                needed -= 1
        for seq in decoding:
            seq.allocated += 1
        self._private_tokens += needed
        return decoding

    def _prefill(self, result: StepResult, *, admit: bool) -> list[Sequence]:
        budget = self.config.chunked_prefill_size
        done: list[Sequence] = []
        static = self.config.static_batching
        batch_was_empty = not self.running
        for seq in self.running:
            if budget == 0:
                break
            if seq.computed < seq.prefill_target:
                budget = self._prefill_chunk(seq, budget, result, done)
        if not admit or (static and not batch_was_empty):
            return done
        while self.waiting and len(self.running) < self.config.max_running_requests:
            if budget == 0 and not static:
                break
            seq = self.waiting[0]
            if seq.aborted:
                self.waiting.popleft()
                continue
            if not self._admit(seq):
                break
            self.waiting.popleft()
            self.running.append(seq)
            result.admitted.append(seq)
            if budget:
                budget = self._prefill_chunk(seq, budget, result, done)
        return done

    def _prefill_chunk(
        self, seq: Sequence, budget: int, result: StepResult, done: list[Sequence]
    ) -> int:
        take = min(budget, seq.prefill_target - seq.computed)
        seq.computed += take
        result.prefill_tokens += take
        if seq.decoding:
            done.append(seq)
        return budget - take

    def _admit(self, seq: Sequence) -> bool:
        page = self.config.page_size
        target = seq.prompt_tokens + seq.output_tokens
        pages = self.cache.match(seq.page_keys)
        # at least one token is computed to produce logits, as in vLLM and SGLang
        if len(pages) * page >= target:
            del pages[(target - 1) // page :]
        cached = len(pages) * page
        need = target - cached
        self.cache.lock(pages)
        # room for this prompt plus one decode token per sequence in the next step
        room_needed = need + len(self.running) + 1
        shortfall = room_needed - self.free_tokens
        if shortfall > 0:
            self.cache.evict(shortfall)
        if room_needed > self.free_tokens:
            self.cache.unlock(pages)
            return False
        seq.pages = pages
        seq.prefill_target = target
        seq.computed = cached
        seq.allocated = need
        self._private_tokens += need
        self._admissions += 1
        seq.admit_order = self._admissions
        if not seq.admitted_once:
            seq.admitted_once = True
            seq.cached_tokens = cached
        self.stats.record_admission(target, cached)
        return True

    def _emit(self, seqs: list[Sequence], result: StepResult) -> None:
        start, end = result.started, result.ended
        stats = self.stats
        finished: list[Sequence] = []
        # most sequences also produced a token in the previous step: one histogram update
        # covers them all (the hot loop of the emulator at large batches)
        steady = 0
        for seq in seqs:
            seq.output_tokens += 1
            if seq.last_token_at == start and seq.first_token_at is not None:
                steady += 1
            elif seq.first_token_at is None:
                seq.first_token_at = end
                stats.ttft.observe(max(0.0, end - seq.arrival))
            else:
                stats.inter_token.observe(end - seq.last_token_at)
            seq.last_token_at = end
            if seq.output_tokens >= seq.output_target:
                finished.append(seq)
        if steady:
            stats.inter_token.observe(result.duration, steady)
        stats.generation_tokens_total += len(seqs)
        result.emitted = seqs
        if finished:
            for seq in finished:
                self._finish(seq, end)
            gone = set(finished)
            self.running = [seq for seq in self.running if seq not in gone]
            result.finished = finished

    def _finish(self, seq: Sequence, end: float) -> None:
        seq.finished_at = end
        self._release(seq)
        stats = self.stats
        stats.prompt_tokens_total += seq.prompt_tokens
        stats.e2e.observe(max(0.0, end - seq.arrival))
        stats.record_finish(seq.finish_reason)

    def _preempt(self, seq: Sequence) -> None:
        self.running.remove(seq)
        self._release(seq)
        seq.computed = 0
        seq.preemptions += 1
        self.stats.preemptions_total += 1
        self.waiting.appendleft(seq)

    def _release(self, seq: Sequence) -> None:
        """Free the sequence's KV; its computed prompt pages stay as cache."""
        computed_pages = min(len(seq.page_keys), seq.computed // self.config.page_size)
        self._private_tokens -= seq.allocated
        seq.allocated = 0
        self.cache.insert(seq.page_keys[:computed_pages])
        self.cache.unlock(seq.pages)
        seq.pages = []
