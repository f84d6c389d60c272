"""The real-client tests share the session's `gateway dev` (tests/conftest.py)."""

from __future__ import annotations

import pytest

from tests.support.dev_gateway import DevGateway


@pytest.fixture(scope="session")
def dev(shared_dev_gateway: DevGateway) -> DevGateway:
    return shared_dev_gateway
