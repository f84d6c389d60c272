"""The quality loop's simulation in its quick mode (bench/quality_loop.py): real gateway
processes, a real redis-server, fake upstreams that tag their answers and a judge that
answers from the labels. Checks the structural truths, not the timings."""

from __future__ import annotations

from decimal import Decimal

from bench.quality_loop import QUICK, TARGET, Simulation, measured_rows


def test_the_quick_loop_measures_the_true_ratio_and_keeps_the_target() -> None:
    outcome = Simulation(QUICK, seed=11).run()

    # every sampled request was judged and labelled exactly once, none dropped
    ids = [label["id"] for label in outcome.labels]
    assert len(ids) == len(set(ids)) == len(outcome.sampled) == QUICK.checkpoints[-1]
    assert outcome.dropped == 0
    # each label paid for one reference answer and two judge calls, in the ledger
    assert outcome.evaluation_records == 3 * len(outcome.labels)

    rows = {row["kind"]: row for row in measured_rows(outcome)}
    overall = rows["all"]
    assert overall["labels"] == len(outcome.labels)
    # the judge answers from the labels in both orders: what the gateway measured is
    # exactly the labels' ratio on the prompts it sampled ...
    for row in rows.values():
        assert abs(row["ratio"] - row["true_sampled"]) < 1e-6, row
    # ... and its interval holds the ratio of all the traffic, sampled or not
    assert overall["low"] <= overall["true_traffic"] <= overall["high"], overall

    # the measured route never delivers below its target on prompts it never sampled
    assert [c.labels for c in outcome.checkpoints] == list(QUICK.checkpoints)
    for checkpoint in outcome.checkpoints:
        assert checkpoint.delivered >= TARGET, checkpoint
        assert all(reason.startswith("measured-") for reason in checkpoint.reasons)

    # what clients were charged (x-gateway-cost-usd) is what the ledger holds
    assert outcome.header_usd == outcome.client_usd > 0
    # evaluation costs something, and at most what a reference answer and two judge calls
    # (each under 25x a cheap answer at the simulated prices) cost per sampled request
    share = outcome.evaluation_usd / outcome.client_usd
    sampled_share = Decimal(len(outcome.sampled)) / Decimal(outcome.traffic)
    assert 0 < share < 25 * sampled_share, (share, sampled_share)
