"""Shared fixtures, and the markers every test gets (tests/support/markers.py says how).

Under pytest-xdist every worker is its own session: the session fixtures below (one
redis-server, one `gateway dev`) are one per worker that uses them, on that worker's own
ports (tests/support/ports.py). `make test` distributes by module (`--dist loadscope`: a
module's tests run on one worker in their written order, and module-scoped servers start
once), the longest modules first (tests/support/scheduling.py). A test that kills, pauses
or reconfigures a server takes its own (`fresh_redis`); one that only reads and writes
keys shares the worker's (`redis_server`, flushed by `redis_db`).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from tests.support.dev_gateway import DevGateway, dev_gateway
from tests.support.markers import MARKERS, apply_markers
from tests.support.redis_server import RedisServer
from tests.support.scheduling import DurationRecorder, load_durations, order_longest_first

TESTS = Path(__file__).resolve().parent
MODULE_DURATIONS = TESTS / "module_durations.json"


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--record-durations",
        metavar="PATH",
        help="write each module's seconds to PATH (`make test-durations`: the order of runs)",
    )


def pytest_configure(config: pytest.Config) -> None:
    for name, meaning in MARKERS.items():
        config.addinivalue_line("markers", f"{name}: {meaning}")
    record_to = config.getoption("--record-durations")
    if record_to:
        config.pluginmanager.register(DurationRecorder(Path(record_to)), "duration-recorder")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    apply_markers(items, TESTS)
    order_longest_first(items, load_durations(MODULE_DURATIONS))


@pytest.fixture(scope="session")
def redis_server() -> Iterator[RedisServer]:
    """This worker's redis-server for the whole session; tests that kill, pause or
    reconfigure a server use `fresh_redis`."""
    server = RedisServer()
    server.start()
    yield server
    server.stop()


@pytest.fixture
def redis_db(redis_server: RedisServer) -> RedisServer:
    """The worker's shared redis-server, emptied for this test (keys and loaded scripts)."""
    with redis.Redis.from_url(redis_server.url) as client:
        client.flushall()
        client.script_flush()
    return redis_server


@pytest.fixture
def fresh_redis() -> Iterator[RedisServer]:
    """A redis-server of this test's own: to kill, pause, restart or count its clients."""
    server = RedisServer()
    server.start()
    yield server
    server.stop()


@pytest.fixture(scope="session")
def shared_dev_gateway() -> Iterator[DevGateway]:
    """One `gateway dev` (the shipped dev config, free ports) for every test that only
    talks to it: the README's features and the real clients (issue 18)."""
    with dev_gateway() as running:
        yield running
