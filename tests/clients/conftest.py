"""One `gateway dev` (the shipped dev config) shared by every real-client test."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.support.dev_gateway import DevGateway, dev_gateway


@pytest.fixture(scope="package")
def dev() -> Iterator[DevGateway]:
    with dev_gateway() as running:
        yield running
