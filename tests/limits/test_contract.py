"""The limit store contract, proven on both stores (in-memory and real Redis)."""

from __future__ import annotations

import asyncio
import time
from decimal import Decimal

import pytest

from gateway.limits import LimitStore, Settlement, TokenAdjustment, holding, settlement_for
from gateway.limits.leases import LeaseKeeper
from tests.limits.builders import (
    admission,
    day_budget,
    lease,
    requests_bucket,
    rolling_budget,
    tokens_bucket,
)
from tests.limits.conftest import StoreRunner


def test_requests_bucket_admits_its_capacity_then_refuses_with_retry_after(
    run_store: StoreRunner,
) -> None:
    async def scenario(store: LimitStore) -> None:
        bucket = requests_bucket(capacity=5, per_second=0.5)
        answers = [await store.admit(admission(buckets=(bucket,))) for _ in range(7)]
        assert [a.allowed for a in answers] == [True] * 5 + [False] * 2
        refused = answers[-1]
        assert refused.refused_kind == "requests"
        assert refused.refused_scope == "key"
        assert not refused.never_fits
        # one request's worth at 0.5/s: just under 2 s (a little has refilled meanwhile)
        assert refused.retry_after_seconds is not None
        assert 1.5 < refused.retry_after_seconds <= 2.0

    run_store(scenario)


def test_admission_is_all_or_nothing_across_buckets(run_store: StoreRunner) -> None:
    async def scenario(store: LimitStore) -> None:
        roomy = requests_bucket("roomy", capacity=10)
        tight = requests_bucket("tight", capacity=1)
        assert (await store.admit(admission(buckets=(roomy, tight)))).allowed
        for _ in range(5):
            refused = await store.admit(admission(buckets=(roomy, tight)))
            assert not refused.allowed
            assert refused.refused_scope == "tight"
        # the five refusals took nothing from the roomy bucket: 9 remain
        answers = [await store.admit(admission(buckets=(roomy,))) for _ in range(10)]
        assert [a.allowed for a in answers] == [True] * 9 + [False]

    run_store(scenario)


def test_request_larger_than_capacity_never_fits_and_takes_nothing(
    run_store: StoreRunner,
) -> None:
    async def scenario(store: LimitStore) -> None:
        small = tokens_bucket(capacity=1000, amount=1001)
        refused = await store.admit(admission(buckets=(small, requests_bucket(capacity=1))))
        assert not refused.allowed
        assert refused.never_fits
        assert refused.retry_after_seconds is None
        assert refused.refusal is not None
        assert (refused.refusal.limit, refused.refusal.requested) == (1000, 1001)
        # the requests bucket was not charged for the refused request
        assert (await store.admit(admission(buckets=(requests_bucket(capacity=1),)))).allowed

    run_store(scenario)


def test_bucket_refills_continuously(run_store: StoreRunner) -> None:
    async def scenario(store: LimitStore) -> None:
        bucket = requests_bucket(capacity=1, per_second=20.0)
        assert (await store.admit(admission(buckets=(bucket,)))).allowed
        refused = await store.admit(admission(buckets=(bucket,)))
        assert not refused.allowed
        assert refused.retry_after_seconds is not None
        await asyncio.sleep(refused.retry_after_seconds + 0.02)
        assert (await store.admit(admission(buckets=(bucket,)))).allowed

    run_store(scenario)


def test_admission_reports_the_tightest_bucket_of_each_kind(run_store: StoreRunner) -> None:
    async def scenario(store: LimitStore) -> None:
        key_requests = requests_bucket("key", capacity=100)
        tenant_requests = requests_bucket("tenant", capacity=3)
        key_tokens = tokens_bucket("key", capacity=500, amount=200)
        tenant_tokens = tokens_bucket("tenant", capacity=10_000, amount=200)
        answer = await store.admit(
            admission(buckets=(key_requests, tenant_requests, key_tokens, tenant_tokens))
        )
        assert answer.allowed
        assert answer.requests is not None and answer.tokens is not None
        assert (answer.requests.scope, answer.requests.limit) == ("tenant", 3)
        assert answer.requests.remaining == pytest.approx(2, abs=0.01)
        assert (answer.tokens.scope, answer.tokens.limit) == ("key", 500)
        assert answer.tokens.remaining == pytest.approx(300, abs=0.01)
        # 200 tokens missing at 0.001/s
        assert answer.tokens.reset_seconds == pytest.approx(200_000, rel=0.01)

    run_store(scenario)


def test_settlement_refunds_unused_tokens_once(run_store: StoreRunner) -> None:
    async def scenario(store: LimitStore) -> None:
        reserve = admission(buckets=(tokens_bucket(capacity=1000, amount=800),))
        admitted = await store.admit(reserve)
        assert admitted.allowed
        assert not (await store.admit(admission(buckets=(tokens_bucket(amount=800),)))).allowed
        settled = settlement_for(reserve, admitted, actual_tokens=100, actual_cost_usd=Decimal(0))
        assert await store.settle(settled)
        assert not await store.settle(settled)  # a retried settlement changes nothing
        after = await store.admit(admission(buckets=(tokens_bucket(amount=800),)))
        assert after.allowed
        assert after.tokens is not None
        assert after.tokens.remaining == pytest.approx(100, abs=0.5)

    run_store(scenario)


def test_settlement_charges_tokens_used_beyond_the_reservation(run_store: StoreRunner) -> None:
    async def scenario(store: LimitStore) -> None:
        reserve = admission(buckets=(tokens_bucket(capacity=1000, amount=100),))
        admitted = await store.admit(reserve)
        await store.settle(
            settlement_for(reserve, admitted, actual_tokens=600, actual_cost_usd=Decimal(0))
        )
        probe = await store.admit(admission(buckets=(tokens_bucket(amount=401),)))
        assert not probe.allowed
        assert probe.tokens is not None
        assert probe.tokens.remaining == pytest.approx(400, abs=0.5)

    run_store(scenario)


def test_charges_beyond_the_bucket_are_owed_but_capped_at_one_bucket(
    run_store: StoreRunner,
) -> None:
    async def scenario(store: LimitStore) -> None:
        bucket = tokens_bucket(capacity=1000, per_second=100.0, amount=1000)
        await store.settle(Settlement("huge", tokens=(TokenAdjustment(bucket, 50_000),)))
        refused = await store.admit(admission(buckets=(tokens_bucket(amount=1, per_second=100.0),)))
        assert not refused.allowed
        # from -1000 to +1 at 100/s
        assert refused.retry_after_seconds == pytest.approx(10.01, abs=0.1)

    run_store(scenario)


def test_concurrency_leases_cap_in_flight_requests_until_released(
    run_store: StoreRunner,
) -> None:
    async def scenario(store: LimitStore) -> None:
        first = await store.admit(admission(leases=(lease(limit=2),)))
        second = await store.admit(admission(leases=(lease(limit=2),)))
        third = await store.admit(admission(leases=(lease(limit=2),)))
        assert first.allowed and second.allowed and not third.allowed
        assert third.refused_kind == "concurrency"
        assert third.retry_after_seconds is not None and third.retry_after_seconds <= 1
        await store.release(first.leases)
        assert (await store.admit(admission(leases=(lease(limit=2),)))).allowed

    run_store(scenario)


def test_admission_reports_the_fewest_free_slots_of_its_concurrency_caps(
    run_store: StoreRunner,
) -> None:
    """What an admission ahead is judged by (pipeline/admit.py): how far the request's
    concurrency caps are from full after it, the tightest cap reported."""

    async def scenario(store: LimitStore) -> None:
        roomy, tight = lease("roomy", limit=10), lease("tight", limit=3)
        first = await store.admit(admission(leases=(roomy, tight)))
        assert first.allowed and first.slots_free == 2
        second = await store.admit(admission(leases=(roomy,)))
        assert second.slots_free == 8
        third = await store.admit(admission(leases=(tight,)))
        assert third.slots_free == 1
        fourth = await store.admit(admission(leases=(tight,)))
        full = await store.admit(admission(leases=(roomy, tight)))
        assert fourth.slots_free == 0
        assert not full.allowed and full.slots_free == 0  # as it found them
        assert (await store.admit(admission())).slots_free is None

    run_store(scenario)


def test_a_requests_bucket_takes_a_refund_like_a_tokens_bucket(run_store: StoreRunner) -> None:
    """An admission ahead that no request used is settled at zero: the request it took
    from the requests bucket goes back."""

    async def scenario(store: LimitStore) -> None:
        bucket = requests_bucket("refunded", capacity=3)
        request = admission(buckets=(bucket,))
        taken = await store.admit(request)
        assert taken.allowed and taken.requests is not None
        assert taken.requests.remaining == pytest.approx(2, abs=0.01)
        refund = Settlement(request.request_id, tokens=(TokenAdjustment(bucket, -1),))
        assert await store.settle(refund)
        answers = [await store.admit(admission(buckets=(bucket,))) for _ in range(4)]
        assert [a.allowed for a in answers] == [True, True, True, False]

    run_store(scenario)


def test_settlement_frees_the_leases_in_the_same_step_and_only_once(
    run_store: StoreRunner,
) -> None:
    async def scenario(store: LimitStore) -> None:
        spec = lease("settled", limit=1)
        bucket = tokens_bucket(name="settled-tokens", capacity=1000, amount=100)
        request = admission(buckets=(bucket,), leases=(spec,))
        first = await store.admit(request)
        assert first.allowed
        assert not (await store.admit(admission(leases=(spec,)))).allowed
        settlement = settlement_for(
            request, first, actual_tokens=40, actual_cost_usd=Decimal(0), release_leases=True
        )
        assert settlement.leases == first.leases
        assert await store.settle(settlement)
        second_request = admission(buckets=(bucket,), leases=(spec,))
        second = await store.admit(second_request)
        assert second.allowed
        # settling the first request again refunds nothing and frees nobody's slot
        assert not await store.settle(settlement)
        assert not (await store.admit(admission(leases=(spec,)))).allowed
        # 1000 - 100 + 60 refunded - 100 taken by the second request
        assert second.tokens is not None
        assert second.tokens.remaining == pytest.approx(860, abs=0.5)

    run_store(scenario)


def test_many_settlements_at_once_each_apply_once(run_store: StoreRunner) -> None:
    async def scenario(store: LimitStore) -> None:
        spec = lease("many", limit=3)
        bucket = tokens_bucket(name="many-tokens", capacity=1000, amount=100)
        requests = [admission(buckets=(bucket,), leases=(spec,)) for _ in range(3)]
        answers = [await store.admit(r) for r in requests]
        assert all(a.allowed for a in answers)
        assert not (await store.admit(admission(leases=(spec,)))).allowed
        settlements = [
            settlement_for(r, a, actual_tokens=10, actual_cost_usd=Decimal(0), release_leases=True)
            for r, a in zip(requests, answers, strict=True)
        ]
        assert await store.settle_many(settlements) == [True, True, True]
        assert await store.settle_many(settlements) == [False, False, False]
        after = await store.admit(admission(buckets=(bucket,), leases=(spec,)))
        assert after.allowed and after.tokens is not None
        # 1000 - 3 x 100 + 3 x 90 refunded once - 100 for this request
        assert after.tokens.remaining == pytest.approx(870, abs=0.5)

    run_store(scenario)


def test_admitting_the_same_request_twice_holds_one_lease(run_store: StoreRunner) -> None:
    async def scenario(store: LimitStore) -> None:
        again = admission(leases=(lease(limit=2),), request_id="same")
        assert (await store.admit(again)).allowed
        assert (await store.admit(again)).allowed
        assert (await store.admit(admission(leases=(lease(limit=2),)))).allowed

    run_store(scenario)


def test_hundred_cancelled_requests_give_their_slots_back(run_store: StoreRunner) -> None:
    async def scenario(store: LimitStore) -> None:
        spec = lease("pool", limit=100)
        held = [await store.admit(admission(leases=(spec,))) for _ in range(100)]
        assert all(answer.allowed for answer in held)
        assert not (await store.admit(admission(leases=(spec,)))).allowed
        # each request's cleanup (a finally block on a cancelled stream) releases its lease
        await asyncio.gather(*(store.release(answer.leases) for answer in held))
        again = [await store.admit(admission(leases=(spec,))) for _ in range(100)]
        assert all(answer.allowed for answer in again)

    run_store(scenario)


def test_expired_leases_are_reclaimed(run_store: StoreRunner) -> None:
    async def scenario(store: LimitStore) -> None:
        spec = lease("crashy", limit=3, ttl_seconds=0.2)
        for _ in range(3):
            assert (await store.admit(admission(leases=(spec,)))).allowed
        assert not (await store.admit(admission(leases=(spec,)))).allowed
        # the holders crashed without releasing; their leases lapse
        await asyncio.sleep(0.3)
        answers = [await store.admit(admission(leases=(spec,))) for _ in range(3)]
        assert all(answer.allowed for answer in answers)

    run_store(scenario)


def test_renewed_leases_outlive_their_first_expiry(run_store: StoreRunner) -> None:
    async def scenario(store: LimitStore) -> None:
        # expires at 0.6 s, renewed at 0.3 s until 0.9 s: looked at 0.15 s past the first
        # expiry and 0.2 s past the renewed one (margins a loaded CI worker keeps)
        spec = lease("stream", limit=1, ttl_seconds=0.6)
        held = await store.admit(admission(leases=(spec,)))
        await asyncio.sleep(0.3)
        assert await store.renew(held.leases) == 1
        await asyncio.sleep(0.45)
        assert not (await store.admit(admission(leases=(spec,)))).allowed
        await asyncio.sleep(0.35)
        # lapsed: the next admission reclaims the slot, and the late renewal cannot steal it
        assert (await store.admit(admission(leases=(spec,)))).allowed
        assert await store.renew(held.leases) == 0

    run_store(scenario)


def test_a_lapsed_lease_nobody_reclaimed_cannot_be_renewed(run_store: StoreRunner) -> None:
    async def scenario(store: LimitStore) -> None:
        spec = lease("roomy", limit=5, ttl_seconds=0.2)
        held = await store.admit(admission(leases=(spec,)))
        # the set is far from full, so no admission needs to reclaim the lapsed lease...
        await asyncio.sleep(0.3)
        assert (await store.admit(admission(leases=(spec,)))).allowed
        # ...yet it is gone: a late renewal does not bring it back
        assert await store.renew(held.leases) == 0

    run_store(scenario)


def test_budget_reservations_never_exceed_the_limit(run_store: StoreRunner) -> None:
    async def scenario(store: LimitStore) -> None:
        budget = rolling_budget(limit_usd="1", amount_usd="0.3")
        answers = [await store.admit(admission(budgets=(budget,))) for _ in range(4)]
        assert [a.allowed for a in answers] == [True, True, True, False]
        refused = answers[-1]
        assert refused.refused_kind == "budget"
        assert not refused.never_fits
        assert refused.budgets[0].used_micros == 900_000
        assert answers[2].budgets[0].used_fraction == pytest.approx(0.9)

    run_store(scenario)


def test_settlement_replaces_the_reservation_with_the_real_cost(run_store: StoreRunner) -> None:
    async def scenario(store: LimitStore) -> None:
        budget = rolling_budget(limit_usd="1", amount_usd="0.5")
        for _ in range(2):
            reserve = admission(budgets=(budget,))
            admitted = await store.admit(reserve)
            assert admitted.allowed
            await store.settle(
                settlement_for(
                    reserve, admitted, actual_tokens=0, actual_cost_usd=Decimal("0.1234567")
                )
            )
        probe = await store.admit(admission(budgets=(rolling_budget("1", "0.5"),)))
        assert probe.allowed
        # two real costs, each rounded up to the micro-dollar, plus the new reservation
        assert probe.budgets[0].used_micros == 2 * 123_457 + 500_000

    run_store(scenario)


def test_budget_smaller_than_one_request_never_fits(run_store: StoreRunner) -> None:
    async def scenario(store: LimitStore) -> None:
        refused = await store.admit(admission(budgets=(rolling_budget("0.10", "0.25"),)))
        assert refused.never_fits
        assert refused.refused_kind == "budget"

    run_store(scenario)


def test_spent_day_budget_retries_when_the_day_ends(run_store: StoreRunner) -> None:
    async def scenario(store: LimitStore) -> None:
        end = int(time.time()) + 5000
        assert (await store.admit(admission(budgets=(day_budget("1", "0.6", end),)))).allowed
        refused = await store.admit(admission(budgets=(day_budget("1", "0.6", end),)))
        assert refused.refused_kind == "budget"
        assert refused.retry_after_seconds == pytest.approx(5000, abs=3)

    run_store(scenario)


def test_spent_budget_is_reported_before_an_empty_bucket(run_store: StoreRunner) -> None:
    async def scenario(store: LimitStore) -> None:
        bucket = requests_bucket(capacity=1)
        budget = rolling_budget("1", "0.6")
        assert (await store.admit(admission(buckets=(bucket,), budgets=(budget,)))).allowed
        refused = await store.admit(admission(buckets=(bucket,), budgets=(budget,)))
        assert refused.refused_kind == "budget"

    run_store(scenario)


def test_request_without_limits_is_admitted(run_store: StoreRunner) -> None:
    async def scenario(store: LimitStore) -> None:
        answer = await store.admit(admission())
        assert answer.allowed and answer.requests is None and answer.leases == ()

    run_store(scenario)


def test_store_answers_ping(run_store: StoreRunner) -> None:
    async def scenario(store: LimitStore) -> None:
        assert await store.ping()

    run_store(scenario)


def test_cancelled_streams_give_their_slots_back(run_store: StoreRunner) -> None:
    async def scenario(store: LimitStore) -> None:
        spec = lease("streams", limit=100, ttl_seconds=30)
        streaming = asyncio.Event()
        started = 0

        async def stream() -> None:
            nonlocal started
            answer = await store.admit(admission(leases=(spec,)))
            assert answer.allowed
            async with holding(store, answer.leases):
                started += 1
                if started == 100:
                    streaming.set()
                await asyncio.sleep(3600)  # a stream the client abandons midway

        tasks = [asyncio.create_task(stream()) for _ in range(100)]
        await asyncio.wait_for(streaming.wait(), 10)
        assert not (await store.admit(admission(leases=(spec,)))).allowed
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        again = [await store.admit(admission(leases=(spec,))) for _ in range(100)]
        assert all(answer.allowed for answer in again)

    run_store(scenario)


def test_a_lease_keeper_renews_every_held_set_past_its_ttl_and_stops_when_let_go(
    run_store: StoreRunner,
) -> None:
    async def scenario(store: LimitStore) -> None:
        keeper = LeaseKeeper(store)
        # TTLs a loaded CI worker's stalls do not outlast between renewals (at 0.15 s a
        # 100 ms stall let the short one lapse)
        short, longer = lease("short", limit=1, ttl_seconds=0.45), lease("longer", 1, 1.2)
        first = await store.admit(admission(leases=(short,)))
        second = await store.admit(admission(leases=(longer,)))
        async with keeper.holding(first.leases), keeper.holding(second.leases):
            assert keeper.held == 2
            await asyncio.sleep(1.5)
            assert not (await store.admit(admission(leases=(short,)))).allowed
            assert not (await store.admit(admission(leases=(longer,)))).allowed
        assert keeper.held == 0
        # let go without a release (the settlement frees them): the shorter lapses first
        await asyncio.sleep(0.6)
        assert (await store.admit(admission(leases=(short,)))).allowed
        keeper.stop()

    run_store(scenario)


def test_held_leases_are_renewed_past_their_ttl(run_store: StoreRunner) -> None:
    async def scenario(store: LimitStore) -> None:
        # renewed every 0.2 s (a third of the TTL); held twice the TTL: without renewal it
        # lapses, and a loaded CI worker would have to stall 0.4 s to miss one
        spec = lease("long", limit=1, ttl_seconds=0.6)
        held = await store.admit(admission(leases=(spec,)))
        async with holding(store, held.leases):
            await asyncio.sleep(1.2)
            assert not (await store.admit(admission(leases=(spec,)))).allowed
        assert (await store.admit(admission(leases=(spec,)))).allowed

    run_store(scenario)
