"""Ledger records that could not wait in memory, kept on local disk until Redis takes them.

Each process appends to its own file, `ledger-spill-{pid}-{n}.jsonl`, one JSON record per
line. To replay, a process claims a finished file by renaming it to
`ledger-replay-{pid}-{n}.jsonl` (a rename is atomic, so two processes never replay the
same file), writes its records, then deletes it. Files left by a process that died (its
pid no longer runs) are claimed by whichever process looks next. Replaying a record
twice is harmless: the ledger writes each request id once.
"""

from __future__ import annotations

import itertools
import logging
import os
from collections.abc import Iterable
from pathlib import Path
from typing import IO

import msgspec

from gateway.metering.record import LedgerRecord

log = logging.getLogger(__name__)

_SPILL = "ledger-spill"
_REPLAY = "ledger-replay"


class SpillFiles:
    def __init__(self, directory: Path, pid: int | None = None) -> None:
        self.directory = directory
        self.pid = os.getpid() if pid is None else pid
        self._sequence = itertools.count()
        self._active: IO[bytes] | None = None
        self._active_path: Path | None = None
        self._encoder = msgspec.json.Encoder()

    def append(self, records: Iterable[LedgerRecord]) -> int:
        """Append records to this process's file (flushed to the OS before returning)."""
        handle = self._active or self._open()
        count = 0
        for record in records:
            handle.write(self._encoder.encode(record) + b"\n")
            count += 1
        handle.flush()
        return count

    def close(self) -> None:
        """Finish the file being written, so that it can be claimed."""
        if self._active is not None:
            self._active.close()
        self._active = None
        self._active_path = None

    def claim(self) -> Path | None:
        """Take one finished file to replay, or None when there is nothing to replay."""
        self.close()
        for path in sorted(self.directory.glob("ledger-*.jsonl")):
            prefix, pid = _owner(path)
            if prefix == _REPLAY and pid == self.pid:
                return path  # our own earlier replay that did not finish
            if prefix not in (_SPILL, _REPLAY) or (pid != self.pid and _is_running(pid)):
                continue
            claimed = self.directory / f"{_REPLAY}-{self.pid}-{os.urandom(6).hex()}.jsonl"
            try:
                path.rename(claimed)
            except FileNotFoundError:
                continue  # another process claimed it first
            return claimed
        return None

    @staticmethod
    def read(path: Path) -> list[LedgerRecord]:
        decoder = msgspec.json.Decoder(LedgerRecord)
        records: list[LedgerRecord] = []
        with path.open("rb") as handle:
            for number, line in enumerate(handle, 1):
                if not line.strip():
                    continue
                try:
                    records.append(decoder.decode(line))
                except msgspec.DecodeError:
                    # a line cut short by a crash mid-write; the rest of the file is intact
                    log.error("ledger spill %s line %d is unreadable; skipped", path, number)
        return records

    def _open(self) -> IO[bytes]:
        self.directory.mkdir(parents=True, exist_ok=True)
        path = self.directory / f"{_SPILL}-{self.pid}-{next(self._sequence)}.jsonl"
        self._active = path.open("ab")
        self._active_path = path
        return self._active


def _owner(path: Path) -> tuple[str, int]:
    """(`ledger-spill` or `ledger-replay`, pid) from a spill file's name."""
    parts = path.stem.split("-")
    try:
        return f"{parts[0]}-{parts[1]}", int(parts[2])
    except (IndexError, ValueError):
        return "", -1


def _is_running(pid: int) -> bool:
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
