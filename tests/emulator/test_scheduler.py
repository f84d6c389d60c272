"""The scheduler on a virtual clock: batching, prefix caching, eviction, preemption."""

from __future__ import annotations

import itertools
from collections.abc import Callable

import pytest

from gateway.emulator.profiles import H100, GpuProfile
from gateway.emulator.scheduler import (
    PromptTooLong,
    Scheduler,
    SchedulerConfig,
    Sequence,
    StepResult,
)
from gateway.emulator.tokenizer import ApproxTokenizer

PAGE = 16
_rids = itertools.count(1)


def make_scheduler(
    *,
    max_running: int = 64,
    kv_tokens: int = 400_000,
    chunk: int = 8192,
    static: bool = False,
    profile: GpuProfile = H100,
) -> Scheduler:
    config = SchedulerConfig(
        max_running_requests=max_running,
        kv_cache_tokens=kv_tokens,
        chunked_prefill_size=chunk,
        page_size=PAGE,
        static_batching=static,
    )
    return Scheduler(config, profile)


def text_of(tokens: int, tag: str) -> str:
    """Text the approx tokenizer counts as exactly `tokens` tokens (4 bytes each)."""
    unit = f"[{tag}]"
    return (unit * (tokens * 4 // len(unit) + 1))[: tokens * 4]


def make_seq(prompt: str, output: int, arrival: float = 0.0) -> Sequence:
    tokens = ApproxTokenizer().tokenize(prompt, PAGE)
    return Sequence(
        rid=next(_rids),
        prompt_tokens=tokens.count,
        page_keys=tokens.page_keys,
        output_target=output,
        arrival=arrival,
    )


def run(
    scheduler: Scheduler,
    clock: float = 0.0,
    until: Callable[[], bool] | None = None,
    on_step: Callable[[StepResult], None] | None = None,
) -> float:
    """Step until idle (or `until()`); returns the virtual clock at the end."""
    steps = 0
    while scheduler.has_work and not (until and until()):
        result = scheduler.step(clock)
        clock = result.ended
        if on_step:
            on_step(result)
        steps += 1
        assert steps < 200_000, "scheduler made no progress"
    return clock


def throughput(scheduler: Scheduler, seqs: list[Sequence]) -> float:
    for seq in seqs:
        scheduler.submit(seq)
    elapsed = run(scheduler)
    assert all(seq.finished for seq in seqs)
    return sum(seq.output_tokens for seq in seqs) / elapsed


def workload(count: int, prompt_tokens: int, outputs: Callable[[int], int]) -> list[Sequence]:
    return [make_seq(text_of(prompt_tokens, f"r{i}"), outputs(i)) for i in range(count)]


# -- continuous batching -------------------------------------------------------------


def test_a_finished_slot_is_refilled_at_the_next_step() -> None:
    scheduler = make_scheduler(max_running=2)
    short, long, waiting = (make_seq(text_of(64, t), n) for t, n in (("a", 3), ("b", 20), ("c", 5)))
    for seq in (short, long, waiting):
        scheduler.submit(seq)
    steps: list[StepResult] = []
    run(scheduler, on_step=steps.append)

    finished_at = next(i for i, s in enumerate(steps) if short in s.finished)
    admitted_at = next(i for i, s in enumerate(steps) if waiting in s.admitted)
    assert admitted_at == finished_at + 1
    assert long not in steps[admitted_at].finished


def test_static_batching_waits_for_the_whole_batch_before_admitting() -> None:
    scheduler = make_scheduler(max_running=2, static=True)
    short, long, waiting = (make_seq(text_of(64, t), n) for t, n in (("a", 3), ("b", 20), ("c", 5)))
    for seq in (short, long, waiting):
        scheduler.submit(seq)
    steps: list[StepResult] = []
    run(scheduler, on_step=steps.append)

    long_done = next(i for i, s in enumerate(steps) if long in s.finished)
    admitted_at = next(i for i, s in enumerate(steps) if waiting in s.admitted)
    assert admitted_at == long_done + 1


def test_continuous_batching_outruns_static_batching_on_mixed_lengths() -> None:
    def outputs(i: int) -> int:
        return 8 + (i * 37) % 249

    continuous = throughput(make_scheduler(max_running=32), workload(256, 512, outputs))
    static = throughput(make_scheduler(max_running=32, static=True), workload(256, 512, outputs))
    assert continuous > 1.3 * static


def test_throughput_rises_with_batch_size_until_the_batch_limit_binds() -> None:
    results = [
        throughput(make_scheduler(max_running=size), workload(128, 256, lambda i: 64))
        for size in (1, 4, 16, 64, 128)
    ]
    assert results == sorted(results)
    assert results[1] > 3 * results[0]
    # the workload has 128 requests: a limit above that changes nothing
    assert throughput(make_scheduler(max_running=512), workload(128, 256, lambda i: 64)) == (
        pytest.approx(results[-1])
    )


def test_throughput_stops_rising_when_the_kv_cache_binds() -> None:
    # each request needs 256 + 64 tokens of KV: 3,200 tokens hold about ten of them
    small = 3_200

    def run_with(max_running: int, kv_tokens: int) -> float:
        scheduler = make_scheduler(max_running=max_running, kv_tokens=kv_tokens)
        return throughput(scheduler, workload(128, 256, lambda i: 64))

    bound_16 = run_with(16, small)
    bound_64 = run_with(64, small)
    free_64 = run_with(64, 400_000)
    assert bound_64 == pytest.approx(bound_16, rel=0.1)
    assert free_64 > 2 * bound_64


# -- chunked prefill and prefix caching ----------------------------------------------


def test_chunked_prefill_spreads_a_long_prompt_over_budgeted_steps() -> None:
    scheduler = make_scheduler(chunk=8192)
    seq = make_seq(text_of(20_000, "long"), 4)
    scheduler.submit(seq)
    steps: list[StepResult] = []
    run(scheduler, until=lambda: seq.output_tokens > 0, on_step=steps.append)
    assert [s.prefill_tokens for s in steps] == [8192, 8192, 20_000 - 2 * 8192]


def test_a_cached_prefix_cuts_ttft_by_its_prefill_time() -> None:
    scheduler = make_scheduler()
    system = text_of(4000, "system")
    first = make_seq(system + text_of(96, "user-1"), 8)
    scheduler.submit(first)
    clock = run(scheduler)

    second = make_seq(system + text_of(96, "user-2"), 8, arrival=clock)
    scheduler.submit(second)
    run(scheduler, clock)

    assert first.cached_tokens == 0
    assert second.cached_tokens == 4000 // PAGE * PAGE
    assert first.first_token_at is not None and second.first_token_at is not None
    ttft_cold = first.first_token_at - first.arrival
    ttft_warm = second.first_token_at - second.arrival
    assert ttft_cold - ttft_warm == pytest.approx(second.cached_tokens * H100.prefill_per_token)


def test_a_fully_cached_prompt_still_computes_its_last_page() -> None:
    scheduler = make_scheduler()
    prompt = text_of(512, "same")
    first = make_seq(prompt, 4)
    scheduler.submit(first)
    clock = run(scheduler)
    again = make_seq(prompt, 4, arrival=clock)
    scheduler.submit(again)
    run(scheduler, clock)
    assert again.cached_tokens == 512 - PAGE


def test_the_least_recently_used_prefix_is_evicted_first() -> None:
    # room for about two 1,600-token system prompts beside one running request
    scheduler = make_scheduler(kv_tokens=4_000)
    systems = {name: text_of(1600, name) for name in ("one", "two", "three")}
    clock = 0.0
    seen: dict[str, int] = {}
    for step_no, name in enumerate(("one", "two", "one", "three", "one", "two")):
        seq = make_seq(systems[name] + text_of(32, f"q{step_no}"), 4, arrival=clock)
        scheduler.submit(seq)
        clock = run(scheduler, clock)
        seen[f"{step_no}:{name}"] = seq.cached_tokens
    assert seen["2:one"] == 1600
    # "one" was used more recently than "two" when "three" needed room: pages of "two"
    # went (from its tail, as much as needed) and "one" stayed whole
    assert seen["4:one"] == 1600
    assert 0 < seen["5:two"] < 1600


def test_stats_count_queried_and_hit_prompt_tokens() -> None:
    scheduler = make_scheduler()
    system = text_of(1024, "shared")
    for i in range(4):
        scheduler.submit(make_seq(system + text_of(64, f"u{i}"), 2))
        run(scheduler)
    stats = scheduler.stats
    assert stats.cache_queried_tokens_total == 4 * (1024 + 64)
    assert stats.cache_hit_tokens_total == 3 * 1024
    assert scheduler.stats.recent_cache_hit_rate() == pytest.approx(3 * 1024 / (4 * 1088))


# -- memory pressure -----------------------------------------------------------------


def test_the_newest_request_is_preempted_when_the_cache_is_full() -> None:
    scheduler = make_scheduler(kv_tokens=600)
    older = make_seq(text_of(100, "old"), 300)
    newer = make_seq(text_of(100, "new"), 300)
    scheduler.submit(older)
    scheduler.submit(newer)
    preempted: list[Sequence] = []
    run(scheduler, on_step=lambda s: preempted.extend(s.preempted))

    assert preempted and set(preempted) == {newer}
    assert older.preemptions == 0
    assert newer.preemptions >= 1
    assert scheduler.stats.preemptions_total == len(preempted)
    assert older.output_tokens == 300 and newer.output_tokens == 300
    assert scheduler.used_tokens <= 600


def test_kv_use_never_exceeds_the_cache_under_load() -> None:
    scheduler = make_scheduler(kv_tokens=5_000, max_running=32)
    for seq in workload(64, 300, lambda i: 50 + i * 7 % 120):
        scheduler.submit(seq)
    peaks: list[int] = []
    run(scheduler, on_step=lambda s: peaks.append(scheduler.used_tokens))
    assert max(peaks) <= 5_000
    assert scheduler.token_usage == 0.0


def test_a_prompt_larger_than_the_cache_is_refused() -> None:
    scheduler = make_scheduler(kv_tokens=1_000)
    with pytest.raises(PromptTooLong):
        scheduler.submit(make_seq(text_of(1_000, "huge"), 4))


def test_an_output_that_cannot_fit_is_cut_to_length() -> None:
    scheduler = make_scheduler(kv_tokens=1_000)
    seq = make_seq(text_of(900, "big"), 500)
    scheduler.submit(seq)
    run(scheduler)
    assert seq.output_tokens == 100
    assert seq.finish_reason == "length"


def test_aborting_a_running_request_frees_its_kv() -> None:
    scheduler = make_scheduler()
    seq = make_seq(text_of(1000, "gone"), 100)
    scheduler.submit(seq)
    clock = scheduler.step(0.0).ended
    scheduler.step(clock)
    assert scheduler.token_usage > 0
    scheduler.abort(seq)
    assert not scheduler.has_work
    assert scheduler.token_usage == 0.0
    assert scheduler.used_tokens == scheduler.cache.tokens
