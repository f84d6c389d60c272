"""The open-files warning is for a connection cap the operator wrote and cannot have, not
for the default ceiling (10,000) under an ordinary `ulimit -n`."""

from __future__ import annotations

import logging

import pytest

from gateway.api.server_limits import RESERVED_FDS, ConnectionGuard
from gateway.settings.server import ConnectionLimits

OPEN_FILES = 4096
FITS = (OPEN_FILES - RESERVED_FDS) // 2


def warnings_for(limits: ConnectionLimits, caplog: pytest.LogCaptureFixture) -> list[str]:
    caplog.clear()
    with caplog.at_level(logging.DEBUG, logger="gateway.server"):
        guard = ConnectionGuard(lambda: limits, None, open_files=OPEN_FILES)
    assert guard.max_connections(limits) == min(limits.max_connections, FITS)
    return [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]


def test_the_default_cap_is_held_under_the_limit_without_a_warning(
    caplog: pytest.LogCaptureFixture,
) -> None:
    assert warnings_for(ConnectionLimits(), caplog) == []


def test_a_written_cap_above_the_limit_is_warned_about(caplog: pytest.LogCaptureFixture) -> None:
    warned = warnings_for(ConnectionLimits(max_connections=8000), caplog)
    assert len(warned) == 1 and f"allows {FITS} client connections" in warned[0]


def test_a_written_cap_that_fits_is_not_warned_about(caplog: pytest.LogCaptureFixture) -> None:
    assert warnings_for(ConnectionLimits(max_connections=FITS), caplog) == []
