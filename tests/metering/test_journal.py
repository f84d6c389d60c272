"""The ledger's write-ahead journal: a queued record is on disk before `record()` returns,
a killed writer's records are replayed by its successor once each, the files a live
process writes are never claimed, and the journal stays one segment deep once written."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

from gateway.metering.aggregates import LedgerKeys
from gateway.metering.journal import LedgerJournal
from gateway.metering.ledger import Ledger, LedgerRecord
from gateway.metering.spill import SpillFiles, create_locked
from tests.metering.support import client, make_record
from tests.support.gateway_process import REPO
from tests.support.redis_server import RedisServer


def journal_lines(directory: Path) -> list[LedgerRecord]:
    return [
        record
        for path in sorted(directory.glob("ledger-journal-*.jsonl"))
        for record in SpillFiles.read(path)
    ]


def lines_per_file(directory: Path) -> list[int]:
    return [len(SpillFiles.read(path)) for path in sorted(directory.iterdir())]


async def stream_ids(redis_port: int, keys: LedgerKeys) -> list[str]:
    redis = client(redis_port)
    try:
        entries = await redis.xrange(keys.stream)
    finally:
        await redis.aclose()
    return [LedgerRecord.from_json(fields[b"record"]).request_id for _, fields in entries]


def test_a_queued_record_is_in_the_journal_until_its_batch_is_written(
    redis_server: RedisServer, tmp_path: Path
) -> None:
    keys = LedgerKeys("t-journal")
    records = [make_record(n, prefix="journal") for n in range(5)]

    async def scenario() -> None:
        redis = client(redis_server.port)
        ledger = Ledger(redis, keys=keys, spill_dir=tmp_path, flush_interval=60)
        for record in records:
            ledger.record(record)
            # on disk as soon as record() returns, before any write to Redis
            assert journal_lines(tmp_path)[-1] == record
        assert journal_lines(tmp_path) == records
        await ledger.flush()
        await ledger.close()
        assert ledger.records_written == 5
        await redis.aclose()

    asyncio.run(scenario())
    assert list(tmp_path.iterdir()) == []  # written, so the journal is gone


KILLED_WRITER = textwrap.dedent(
    """
    import asyncio, sys, time
    from pathlib import Path
    from gateway.metering.aggregates import LedgerKeys
    from gateway.metering.ledger import Ledger
    from tests.metering.support import client, make_record

    async def main() -> None:
        port, prefix, directory, count = sys.argv[1:]
        ledger = Ledger(
            client(int(port)), keys=LedgerKeys(prefix), spill_dir=Path(directory),
            flush_interval=3600, batch_size=10_000,
        )
        await ledger.start()
        for n in range(int(count)):
            ledger.record(make_record(n, prefix="killed"))
        print("recorded", flush=True)
        await asyncio.sleep(3600)

    asyncio.run(main())
    """
)


def test_a_writer_killed_with_records_queued_leaves_them_to_its_successor(
    redis_server: RedisServer, tmp_path: Path
) -> None:
    """kill -9 of a process whose records are all still in memory: none are lost, none
    written twice, and the journal is gone once the successor has replayed it."""
    prefix, count = "t-killed", 300
    keys = LedgerKeys(prefix)
    writer = subprocess.Popen(
        [
            sys.executable,
            "-c",
            KILLED_WRITER,
            str(redis_server.port),
            prefix,
            str(tmp_path),
            f"{count}",
        ],
        cwd=REPO,
        stdout=subprocess.PIPE,
    )
    try:
        assert writer.stdout is not None
        assert writer.stdout.readline() == b"recorded\n"
    finally:
        writer.send_signal(signal.SIGKILL)
        writer.wait()

    async def scenario() -> None:
        assert await stream_ids(redis_server.port, keys) == []  # nothing reached Redis
        successor = Ledger(client(redis_server.port), keys=keys, spill_dir=tmp_path)
        await successor.start()
        deadline = time.monotonic() + 20
        while successor.records_replayed < count:
            assert time.monotonic() < deadline, f"{successor.records_replayed} replayed"
            await asyncio.sleep(0.05)
        await successor.close()
        ids = await stream_ids(redis_server.port, keys)
        assert sorted(ids) == sorted(f"killed-{n}" for n in range(count))

    asyncio.run(scenario())
    assert list(tmp_path.iterdir()) == []


def test_the_journal_of_a_live_process_is_never_claimed(tmp_path: Path) -> None:
    journal = LedgerJournal(tmp_path)
    journal.append(make_record(1).to_json_bytes())
    other = SpillFiles(tmp_path, pid=os.getpid() + 1)
    assert other.claim() is None  # locked by its writer, whatever the pids say
    journal.close()  # stops with a record unreleased: the file stays, unlocked
    claimed = other.claim()
    assert claimed is not None
    assert SpillFiles.read(claimed.path) == [make_record(1)]
    claimed.release()


def test_a_file_is_claimed_by_its_lock_not_by_whether_its_pid_runs(tmp_path: Path) -> None:
    """A container's restarted gateway may find the dead one's pid alive (its own, or
    another process's): a file nobody holds a lock on is claimed anyway."""
    for pid in (1, os.getpid()):
        path = tmp_path / f"ledger-journal-{pid}-0dead0-0.jsonl"
        os.close(create_locked(path))  # written, then its process died
        path.write_bytes(make_record(pid).to_json_bytes() + b"\n")
    files = SpillFiles(tmp_path)
    replayed = []
    while (claimed := files.claim()) is not None:
        replayed += SpillFiles.read(claimed.path)
        claimed.path.unlink()
        claimed.release()
    assert sorted(r.request_id for r in replayed) == sorted(
        make_record(pid).request_id for pid in (1, os.getpid())
    )


def test_written_records_leave_at_most_one_segment_on_disk(
    redis_server: RedisServer, tmp_path: Path
) -> None:
    keys = LedgerKeys("t-segments")

    async def scenario() -> None:
        redis = client(redis_server.port)
        ledger = Ledger(redis, keys=keys, spill_dir=tmp_path, batch_size=7, flush_interval=60)
        assert ledger._journal is not None
        ledger._journal.segment_records = 10
        for n in range(95):
            ledger.record(make_record(n, prefix="segments"))
        assert lines_per_file(tmp_path) == [10] * 9 + [5]
        await ledger.flush()
        # the current segment (5 lines, room for 5 more) is kept to append to
        assert lines_per_file(tmp_path) == [5]
        for n in range(95, 100):
            ledger.record(make_record(n, prefix="segments"))
        await ledger.flush()
        assert lines_per_file(tmp_path) == []  # full and written: removed
        await ledger.close()
        await redis.aclose()

    asyncio.run(scenario())


def test_a_journal_that_cannot_be_written_costs_durability_not_records(
    redis_server: RedisServer, tmp_path: Path
) -> None:
    keys = LedgerKeys("t-unwritable")
    not_a_directory = tmp_path / "file"
    not_a_directory.write_text("")

    async def scenario() -> None:
        redis = client(redis_server.port)
        ledger = Ledger(redis, keys=keys, spill_dir=not_a_directory / "spill")
        for n in range(3):
            ledger.record(make_record(n, prefix="unwritable"))
        assert ledger.journal_failures == 3 and ledger.queue_depth == 3
        await ledger.close()
        assert ledger.records_written == 3
        await redis.aclose()

    asyncio.run(scenario())
