"""bench/stream_rig.c, the paced upstream and client of bench/streams.py: compiled and run
straight at each other, it must count every stream's events and see them paced."""

from __future__ import annotations

import argparse
import math
import shutil

import pytest

from bench.processes import Service, free_port
from bench.streams import Row, StreamsResult, build_rig, measure_c

pytestmark = pytest.mark.skipif(
    shutil.which("cc") is None and shutil.which("gcc") is None, reason="no C compiler"
)


def run_rig(events: int, ramp_seconds: float) -> StreamsResult:
    """Twenty streams of `events` content events 10 ms apart, opened within
    `ramp_seconds`, straight from the rig's upstream to its client."""
    rig = build_rig()
    port = free_port()
    upstream = Service(
        "stream-rig-upstream", [str(rig), "upstream", str(port), str(events), "10"],
        f"http://127.0.0.1:{port}/",
    ).start()  # fmt: skip
    try:
        args = argparse.Namespace(streams=20, ramp_seconds=ramp_seconds, stall_ms=2000)
        row = Row("direct", StreamsResult(20))
        measure_c(rig, row, port, None, args, auth=False)
    finally:
        upstream.stop()
    return row.result


def test_the_c_rig_counts_every_event_of_every_paced_stream() -> None:
    result = run_rig(events=5, ramp_seconds=0.2)
    assert (result.finished, result.failed, result.stalled) == (20, 0, 0)
    # five content events, the stop event and [DONE] (no usage asked for)
    assert result.chunks == 20 * 7
    # a content event every 10 ms: no gap shorter than the pacing's own (reads of two
    # events at once happen only at the tail), none near the stall bound
    assert 0.005 < result.gap(50) < 0.1
    assert result.worst_gap < 1.0
    assert result.quantiles is not None and result.first(50) < 1.0
    # the last stream opened (0.2 s) after the first finished (~0.07 s): never all open
    assert math.isnan(result.open_gap_p99())


def test_the_c_rig_reports_the_gaps_while_every_stream_is_open() -> None:
    """Streams of twenty events 10 ms apart, all opened within 20 ms: the gaps between the
    last one's head and the first one's end are the pacing's own."""
    result = run_rig(events=20, ramp_seconds=0.02)
    assert (result.finished, result.stalled) == (20, 0)
    assert result.all_open_at < 0.15
    assert 0.005 < result.open_gap_p99() < 0.1
