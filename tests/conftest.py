from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.support.dev_gateway import DevGateway, dev_gateway
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


@pytest.fixture(scope="session")
def shared_dev_gateway() -> Iterator[DevGateway]:
    """One `gateway dev` (the shipped dev config, free ports) for every test that only
    talks to it: the README's features and the real clients (issue 18)."""
    with dev_gateway() as running:
        yield running
