"""Multiprocess metric values written in batches: what a scrape of the files sees, when."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, values
from prometheus_client.multiprocess import MultiProcessCollector

from gateway.observability.multiprocess_values import FLUSH_SECONDS, buffered_value_class
from tests.observability.test_metrics import parse, value


@pytest.fixture
def buffered(tmp_path: Path) -> Iterator[tuple[Path, object]]:
    value_class, shared = buffered_value_class(str(tmp_path))
    before = values.ValueClass
    values.ValueClass = value_class
    try:
        yield tmp_path, shared
    finally:
        values.ValueClass = before
        shared.close()  # type: ignore[attr-defined]


def files_say(directory: Path) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    """What a scrape of another worker reads: the merged files."""
    from prometheus_client import generate_latest

    registry = CollectorRegistry()
    MultiProcessCollector(registry, path=str(directory))  # type: ignore[no-untyped-call]
    return parse(generate_latest(registry).decode())


def test_updates_on_an_event_loop_reach_the_files_within_the_flush_interval(buffered):
    directory, _ = buffered
    requests = Counter("t_requests", "doc", ["route"], registry=None)
    latency = Histogram("t_latency", "doc", ["route"], buckets=(0.1, 1.0), registry=None)

    async def serve() -> tuple[float, float, float]:
        for _ in range(5):
            requests.labels("auto").inc()
            latency.labels("auto").observe(0.5)
        unwritten = value(files_say(directory), "t_requests_total", route="auto")
        await asyncio.sleep(FLUSH_SECONDS * 2)
        written = files_say(directory)
        return (
            unwritten,
            value(written, "t_requests_total", route="auto"),
            value(written, "t_latency_bucket", route="auto", le="1.0"),
        )

    unwritten, written, bucket = asyncio.run(serve())
    assert unwritten == 0, "an update on the loop is not written to the file at once"
    assert written == 5
    assert bucket == 5


def test_updates_without_an_event_loop_are_written_at_once(buffered):
    directory, _ = buffered
    gauge = Gauge("t_state", "doc", ["d"], registry=None, multiprocess_mode="livemax")
    gauge.labels("a").set(2)
    assert value(files_say(directory), "t_state", d="a") == 2


def test_a_flush_writes_every_pending_update(buffered):
    directory, shared = buffered
    requests = Counter("t_flushed", "doc", registry=None)

    async def serve() -> float:
        requests.inc(3)
        shared.flush()
        return value(files_say(directory), "t_flushed_total")

    assert asyncio.run(serve()) == 3


WORKER = textwrap.dedent(
    """
    import asyncio
    from gateway.observability.metrics import GatewayMetrics

    async def main():
        metrics = GatewayMetrics.from_environment()
        for _ in range(7):
            metrics.request_started("auto")
            metrics.request_finished("auto", "m", "p", 200, 0.5, 0.1, 0.4, stream=False)
        # the process ends before the flush interval: its exit writes the values

    asyncio.run(main())
    """
)


def test_a_worker_that_exits_before_a_flush_leaves_its_values_in_the_files(tmp_path: Path):
    env = {**os.environ, "PROMETHEUS_MULTIPROC_DIR": str(tmp_path)}
    subprocess.run([sys.executable, "-c", WORKER], env=env, check=True, timeout=60)
    ok = {"route": "auto", "model": "m", "provider": "p", "status_class": "2xx", "code": "200"}
    assert value(files_say(tmp_path), "gateway_requests_total", **ok) == 7
