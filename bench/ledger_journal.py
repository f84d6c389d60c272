"""What the ledger's write-ahead journal costs per record: `Ledger.record()` with a spill
directory (the journal's line written, and released once the batch is in Redis) against
without one, on the same records, in alternating rounds.

    .venv/bin/python bench/ledger_journal.py [--records 20000] [--rounds 6] [--dir PATH]

CPU is this process's (`time.process_time`: user and system, so the `writev()` counts),
per record, for `record()` (which encodes the record's JSON once, for the journal and
for the Redis write) plus the release a written batch makes; the Redis write itself is
left out (no Redis here: the batches are taken as if written). `--dir` is where the
journal goes (default: a new directory under the system's temporary directory); put it
on the disk a deployment's spill directory lives on.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from redis.asyncio import Redis

from gateway.metering.ledger import Ledger
from tests.metering.support import make_record


def per_record_us(ledger: Ledger, records: list, batch: int) -> float:  # type: ignore[type-arg]
    started = time.process_time()
    for start in range(0, len(records), batch):
        chunk = records[start : start + batch]
        for record in chunk:
            ledger.record(record)
        # what a written batch does to the queue and the journal
        for _ in chunk:
            ledger._queue.popleft()
        ledger._release(len(chunk))
    return (time.process_time() - started) / len(records) * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument("--records", type=int, default=20_000)
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--dir", type=Path, default=None)
    args = parser.parse_args()
    directory = args.dir or Path(tempfile.mkdtemp(prefix="gw-journal-bench-"))
    records = [make_record(n, prefix="bench") for n in range(args.records)]
    batch = 128
    redis = Redis()  # never connected: nothing here reaches Redis
    journaled = Ledger(redis, spill_dir=directory, queue_size=args.records)
    plain = Ledger(redis, queue_size=args.records)
    rows: dict[str, list[float]] = {"journal": [], "no journal": []}
    for number in range(args.rounds):
        order = ("journal", "no journal") if number % 2 == 0 else ("no journal", "journal")
        for side in order:
            ledger = journaled if side == "journal" else plain
            rows[side].append(per_record_us(ledger, records, batch))
    print(f"{args.records} records a round, {args.rounds} rounds, journal in {directory}")
    print(f"{'ledger':12} {'median us/record':>17}   rounds")
    for side, values in rows.items():
        spread = ", ".join(f"{v:.2f}" for v in values)
        print(f"{side:12} {statistics.median(values):17.2f}   {spread}")
    differences = [a - b for a, b in zip(rows["journal"], rows["no journal"], strict=True)]
    print(f"journal adds {statistics.median(differences):.2f} us per record (median of rounds)")


if __name__ == "__main__":
    main()
