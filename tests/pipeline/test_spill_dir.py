"""Where a gateway keeps its ledger journal and spill files."""

from __future__ import annotations

import tempfile
from pathlib import Path

from gateway.pipeline.stores import spill_dir
from gateway.settings.server import StoreSettings


def redis_store(url: str, **settings: object) -> StoreSettings:
    return StoreSettings.model_validate({"kind": "redis", "redis_url": url, **settings})


def test_the_configured_spill_dir_is_used_as_given() -> None:
    store = redis_store("redis://cache:6379/0", spill_dir="/var/lib/gateway/spill")
    assert spill_dir(store) == Path("/var/lib/gateway/spill")


def test_without_one_each_ledger_gets_its_own_directory_under_the_temp_dir() -> None:
    """Gateways on one host that write to different ledgers must never replay each other's
    files: the default is named for the Redis address, database and key prefix."""
    base = Path(tempfile.gettempdir()) / "gateway-ledger"
    one = spill_dir(redis_store("redis://cache:6379/0"))
    assert one.parent == base
    others = {
        spill_dir(redis_store("redis://cache:6380/0")),
        spill_dir(redis_store("redis://cache:6379/1")),
        spill_dir(redis_store("redis://other:6379/0")),
        spill_dir(redis_store("redis://cache:6379/0", key_prefix="staging")),
    }
    assert one not in others and len(others) == 4
    # the same ledger reached with another password is the same directory, and no
    # password is in its name
    rotated = spill_dir(redis_store("redis://:new-secret@cache:6379/0"))
    assert spill_dir(redis_store("redis://:old-secret@cache:6379/0")) == rotated == one
