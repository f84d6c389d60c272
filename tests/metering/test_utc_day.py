"""The cached UTC day of a record is the day datetime gives, at every instant."""

from __future__ import annotations

from datetime import UTC, datetime

from hypothesis import given
from hypothesis import strategies as st

from gateway.metering.ledger_record import utc_day


@given(st.floats(min_value=0, max_value=4_102_444_800, allow_nan=False))
def test_utc_day_matches_datetime(when: float) -> None:
    assert utc_day(when) == datetime.fromtimestamp(when, UTC).date().isoformat()


def test_the_last_instant_of_a_day_and_the_first_of_the_next() -> None:
    assert utc_day(1_767_225_599.999) == "2025-12-31"
    assert utc_day(1_767_225_600.0) == "2026-01-01"


def test_the_day_kept_for_the_next_record_ends_where_the_day_ends() -> None:
    midnight = 1_767_225_600.0
    for before in (0.0, 0.5, 0.9999996, 0.9999994, 1.0, 1.5, 3600.0):
        for asked_first in (midnight - 43_200, midnight + 43_200, midnight - before):
            utc_day(asked_first)  # the day the fast path now answers for
            for when in (midnight - before, midnight + before, midnight - 86_400 + before):
                expected = datetime.fromtimestamp(when, UTC).date().isoformat()
                assert utc_day(when) == expected, (asked_first, when)
