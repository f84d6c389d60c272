"""The ledger's write-ahead journal: a copy on local disk of every record waiting in
memory for its batch to reach Redis, so that a process killed at any moment loses none.

`append` writes one record's line with one `writev()` to this process's current segment,
`ledger-journal-{pid}-{token}-{n}.jsonl` in the spill directory; the ledger calls it before
the client can see its answer end. The line is in the kernel's page cache when the call
returns, so the line outlives the process however it dies (`kill -9`, the OOM killer, a
crash); it is not flushed to the disk (no `fsync`), so a power cut or a kernel panic can
still take the last seconds of lines with it. That is the promise: no record lost when the
gateway process dies; the machine dying is Redis's AOF and the operator's to cover.

The ledger takes records out of memory in the order it put them in, and calls
`release(n)` when the `n` oldest ones are safe elsewhere (written to Redis, or in a spill
file); a segment whose lines are all released is deleted. So the journal holds about the
queue (at most `Ledger.queue_size` records) plus one segment of released lines.

Segments are locked by this process while it lives (`spill.create_locked`); the segments
of a process that died are claimed and replayed like spill files, by its successor or any
other process sharing the directory, and replaying a record already written skips it.

A segment that cannot be written (a full disk) costs durability, not service: the record
still waits in memory, the failure is counted and logged once per segment.
"""

from __future__ import annotations

import logging
import os
from collections import deque
from dataclasses import dataclass
from pathlib import Path

from gateway.metering.spill import create_locked

log = logging.getLogger(__name__)

# lines per segment: one open and one unlink per this many records, and at most this many
# released lines kept on disk
SEGMENT_RECORDS = 1024


@dataclass
class _Segment:
    path: Path
    fd: int  # -1: the segment could not be opened; its records are counted, not kept
    appended: int = 0
    unreleased: int = 0
    write_failed: bool = False


class LedgerJournal:
    def __init__(
        self, directory: Path, pid: int | None = None, segment_records: int = SEGMENT_RECORDS
    ) -> None:
        if segment_records < 1:
            raise ValueError("segment_records must be positive")
        self.directory = directory
        self.segment_records = segment_records
        pid = os.getpid() if pid is None else pid
        # a restarted process may get the same pid back: the token tells its files apart
        self._name = f"ledger-journal-{pid}-{os.urandom(4).hex()}"
        self._numbers = iter(range(1 << 62))
        self._segments: deque[_Segment] = deque()
        self.write_failures = 0

    @property
    def unreleased(self) -> int:
        return sum(segment.unreleased for segment in self._segments)

    @property
    def segment_paths(self) -> list[Path]:
        return [segment.path for segment in self._segments if segment.fd >= 0]

    def append(self, record_json: bytes) -> None:
        """Write one record's line (its JSON, then a newline). Never raises: a line that
        cannot be written is counted in `write_failures`."""
        segments = self._segments
        segment = segments[-1] if segments else None
        if segment is None or segment.appended >= self.segment_records:
            segment = self._open_segment()
        segment.appended += 1
        segment.unreleased += 1
        if segment.fd < 0:
            self.write_failures += 1
            return
        try:
            # one system call, no copy of the record to join the newline on
            os.writev(segment.fd, (record_json, b"\n"))
        except OSError as exc:
            self.write_failures += 1
            if not segment.write_failed:
                segment.write_failed = True
                log.error(
                    "ledger journal %s cannot be written (%s): records wait in memory only",
                    segment.path,
                    exc.strerror,
                )

    def release(self, count: int) -> None:
        """The `count` oldest unreleased records are safe elsewhere; delete the segments
        left with nothing unreleased (the current one once it is full)."""
        segments = self._segments
        while count > 0 and segments:
            oldest = segments[0]
            taken = min(count, oldest.unreleased)
            oldest.unreleased -= taken
            count -= taken
            if oldest.unreleased:
                break
            if len(segments) == 1 and oldest.appended < self.segment_records:
                break  # the current segment, room left in it: keep appending there
            self._remove(segments.popleft())

    def close(self) -> None:
        """Stop writing: delete the segments that hold nothing unreleased; leave the others
        (unlocked now) for a process to replay."""
        while self._segments:
            segment = self._segments.popleft()
            if segment.unreleased:
                if segment.fd >= 0:
                    os.close(segment.fd)
                    log.warning(
                        "ledger journal %s keeps %d records for replay",
                        segment.path,
                        segment.unreleased,
                    )
            else:
                self._remove(segment)

    def _open_segment(self) -> _Segment:
        path = self.directory / f"{self._name}-{next(self._numbers)}.jsonl"
        try:
            fd = create_locked(path)
        except OSError as exc:
            log.error(
                "ledger journal %s cannot be created (%s): records wait in memory only",
                path,
                exc.strerror,
            )
            fd = -1
        segment = _Segment(path, fd)
        self._segments.append(segment)
        return segment

    @staticmethod
    def _remove(segment: _Segment) -> None:
        if segment.fd < 0:
            return
        try:
            # unlinked before the lock goes: no one can claim a file of released records
            segment.path.unlink()
        except OSError as exc:
            log.error("ledger journal %s cannot be removed: %s", segment.path, exc.strerror)
        os.close(segment.fd)
