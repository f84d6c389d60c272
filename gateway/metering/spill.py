"""Ledger records kept on local disk until Redis takes them: spill files and journal
segments, and how a process claims the files nobody is writing any more.

Two kinds of file hold records, one JSON record per line:

- `ledger-spill-{pid}-{token}-{n}.jsonl`: records that could not wait in memory (the queue was
  full, or the process stopped while Redis was down);
- `ledger-journal-{pid}-{token}-{n}.jsonl`: the write-ahead journal (`journal.py`), a
  copy of every record waiting in memory, so a killed process loses none.

A process holds an exclusive `flock` on every file it writes, from before the file has its
name until it closes it; the kernel drops the lock when the process dies, however it dies
(`kill -9` included). A file nobody holds a lock on is finished, and claimable: a process
locks it and renames it to `ledger-replay-{pid}-{random}.jsonl` (a rename is atomic, so
two processes never replay the same file), writes its records, deletes it, and only then
lets go of the lock. A replay that fails lets go of its lock too, so the file is claimed
again later, by whichever process looks next. Locks, not pids, say who owns a file: in a
container a restarted gateway often gets the dead one's pid back.

Replaying a record twice is harmless: the ledger writes each record id once.
"""

from __future__ import annotations

import contextlib
import fcntl
import itertools
import logging
import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import IO

import msgspec

from gateway.metering.ledger_record import LedgerRecord

log = logging.getLogger(__name__)

_SPILL = "ledger-spill"
_REPLAY = "ledger-replay"
# a file being created: locked first, then renamed to its claimable name
_CREATING = ".creating"


def create_locked(path: Path) -> int:
    """A new file at `path`, opened for appending and locked by this process, as one step
    for anyone looking for claimable files: it gets its name only once locked."""
    path.parent.mkdir(parents=True, exist_ok=True)
    creating = path.with_name(path.name + _CREATING)
    fd = os.open(creating, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        os.rename(creating, path)
    except BaseException:
        os.close(fd)
        with contextlib.suppress(OSError):
            os.unlink(creating)
        raise
    return fd


@dataclass
class Claimed:
    """A file this process has claimed to replay: renamed to its own name and locked
    until `release`."""

    path: Path
    fd: int

    def release(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1


class SpillFiles:
    def __init__(self, directory: Path, pid: int | None = None) -> None:
        self.directory = directory
        self.pid = os.getpid() if pid is None else pid
        # a restarted process may get the same pid back: the token tells its files apart
        self._name = f"{_SPILL}-{self.pid}-{os.urandom(4).hex()}"
        self._sequence = itertools.count()
        self._active: IO[bytes] | None = None
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
        """Finish the file being written (its lock goes with it), so that it can be
        claimed."""
        if self._active is not None:
            self._active.close()
        self._active = None

    def claim(self) -> Claimed | None:
        """Take one finished file to replay, or None when there is nothing to replay."""
        self.close()
        for path in sorted(self.directory.glob("ledger-*.jsonl")):
            claimed = self._try_claim(path)
            if claimed is not None:
                return claimed
        self._remove_abandoned_creations()
        return None

    def _try_claim(self, path: Path) -> Claimed | None:
        fd = _lock_if_unowned(path)
        if fd is None:
            return None
        claimed = self.directory / f"{_REPLAY}-{self.pid}-{os.urandom(6).hex()}.jsonl"
        try:
            # under our lock: the name we opened may be gone, claimed and replayed by a
            # process that took the lock between our open and our lock
            os.rename(path, claimed)
        except FileNotFoundError:
            os.close(fd)
            return None
        return Claimed(claimed, fd)

    def _remove_abandoned_creations(self) -> None:
        """Files a process died while creating (between its open and its rename): empty."""
        for path in self.directory.glob(f"ledger-*{_CREATING}"):
            fd = _lock_if_unowned(path)
            if fd is not None:
                with contextlib.suppress(OSError):
                    path.unlink()
                os.close(fd)

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
        path = self.directory / f"{self._name}-{next(self._sequence)}.jsonl"
        self._active = os.fdopen(create_locked(path), "ab")
        return self._active


def _lock_if_unowned(path: Path) -> int | None:
    """An open descriptor holding the lock on `path`, or None if a live process holds it
    (or the file is gone)."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        return None
    return fd
