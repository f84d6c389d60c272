"""The refusals view keeps the newest records only: memory stays bounded however many
requests are refused."""

from __future__ import annotations

from gateway.observability.refusals import RecentRefusals, Refusal


def refusal(n: int) -> Refusal:
    return Refusal(time=float(n), request_id=f"req_{n}", status=429, code="rate_limited", reason="")


def test_the_ring_keeps_the_newest_records_newest_first() -> None:
    ring = RecentRefusals(capacity=3)
    for n in range(10):
        ring.add(refusal(n))
    assert [r.request_id for r in ring.newest(100)] == ["req_9", "req_8", "req_7"]
    assert [r.request_id for r in ring.newest(2)] == ["req_9", "req_8"]
    assert RecentRefusals().newest(5) == []
