from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.support.redis_server import RedisServer


@pytest.fixture(scope="session")
def redis_server() -> Iterator[RedisServer]:
    """A redis-server for the whole session; tests that kill it use `fresh_redis`."""
    server = RedisServer()
    server.start()
    yield server
    server.stop()


@pytest.fixture
def fresh_redis() -> Iterator[RedisServer]:
    server = RedisServer()
    server.start()
    yield server
    server.stop()
