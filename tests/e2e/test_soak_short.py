"""The soak bench's short version (bench/soak.py): the same mixed load (chat, streams,
Messages, cache hits, client disconnects, errors, key churn through the admin API)
through a real `gateway serve` with Redis, for ~40 s. It asserts what must hold however
busy the machine is: every request got the answer its kind should, and descriptors,
Redis keys and memory stay bounded. No timing assertions (the long run's table is
docs/performance.md's)."""

from __future__ import annotations

from bench.soak import MIX, run_soak


def test_a_short_soak_keeps_descriptors_redis_keys_and_memory_bounded() -> None:
    report = run_soak(duration=40, warmup=15, samples=8, churn_interval=1.0)

    assert not report.failures, report.failures
    # every kind of the mix ran, and every churned key was served, then refused
    assert set(MIX) <= {outcome.rsplit(" ", 1)[0] for outcome in report.outcomes}
    assert report.churned >= 5
    assert report.outcomes["churned key 200"] == report.churned
    assert report.outcomes["revoked key 401"] == report.churned

    first, last = report.samples[0], report.samples[-1]
    start, later = report.after_warmup()
    assert later, "no sample after the warm-up"
    # descriptors: the connections in flight come and go; once the load stops, what is
    # left is the idle pools (32 clients' keep-alive connections at most, here closed)
    assert report.growth("fds") <= 64
    assert last.fds <= first.fds + 40
    # Redis: what has no TTL does not grow with the traffic (admin records, the ledger
    # stream, counters); what does grow is one settled marker at most a request (ten
    # minutes' worth at any rate); the ledger marks what it wrote by a bit, in a bitmap
    # key per process and million requests, not a key per request
    assert max(s.persistent_keys for s in later) <= start.persistent_keys + 2
    assert last.redis_keys <= last.requests + 100
    ledger_markers = {
        family: count
        for family, count in report.key_families.items()
        if family.startswith("gw:{ledger}:seen:")
    }
    assert sum(ledger_markers.values()) <= 4, ledger_markers
    assert set(report.persistent_families) <= {
        "gw:{admin}:keys",
        "gw:{admin}:revoked",
        "gw:{admin}:tenants",
        "gw:{admin}:version",
        "gw:{admin}:audit",
        "gw:{ledger}:stream",
    }
    # memory: a generous bound (the long run's target is 5%)
    assert report.rss_growth < 0.25
