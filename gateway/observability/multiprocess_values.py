"""Metric values for several worker processes, written to the workers' files in batches.

prometheus-client's multiprocess mode keeps every value in a per-process mmap file that the
scraped worker merges. Its value class writes the file on every `inc`/`set`/`observe`, and
first calls `os.getpid()` (a system call) under a global lock to notice a fork: about 19
such writes per request, which made a second worker cost ~25% more CPU per request than
the first (measured: 1 worker 308-320 us/request, 2 workers on the same core 430-508).

:func:`buffered_value_class` makes a value class with the same file format, names and
merge rules, so `MultiProcessCollector` reads it unchanged, whose updates made on an
event loop only change the value in memory and mark it dirty; one callback per
`FLUSH_SECONDS` writes the dirty values to the files. Updates made where no event loop
runs (start-up, other threads, a script) are written at once. So another worker's series
reach a scrape at most `FLUSH_SECONDS` late (a Prometheus scrape interval is 15 s or
more); the scraped worker's own are written before each exposition (:meth:`flush`), and
every worker writes its values when it stops (`GatewayRuntime.stop`, and at exit).

The gateway's workers are spawned, not forked; a fork is still handled as
prometheus-client does: the child starts its own files, from zero.
"""

from __future__ import annotations

import asyncio
import atexit
import os
import threading
from typing import Any

from prometheus_client.mmap_dict import MmapedDict, mmap_key

FLUSH_SECONDS = 0.25


class BufferedValues:
    """The files, the dirty values and the flush schedule of one process."""

    def __init__(self, directory: str, flush_seconds: float = FLUSH_SECONDS) -> None:
        self.directory = directory
        self.flush_seconds = flush_seconds
        self.lock = threading.Lock()
        self.pid = os.getpid()
        self.files: dict[str, MmapedDict] = {}
        self.values: list[Any] = []
        self.dirty: list[Any] = []
        self.flush_pending = False

    def file(self, prefix: str) -> MmapedDict:
        found = self.files.get(prefix)
        if found is None:
            path = os.path.join(self.directory, f"{prefix}_{self.pid}.db")
            found = self.files[prefix] = MmapedDict(path)  # type: ignore[no-untyped-call]
        return found

    def mark_dirty(self, value: Any) -> None:
        """Called under `lock` for a value that was clean."""
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            value.write()  # no event loop here to batch on: write through
            return
        value.dirty = True
        self.dirty.append(value)
        if not self.flush_pending:
            self.flush_pending = True
            loop.call_later(self.flush_seconds, self.flush)

    def flush(self) -> None:
        with self.lock:
            self.flush_pending = False
            dirty, self.dirty = self.dirty, []
            for value in dirty:
                value.dirty = False
                value.write()

    def after_fork(self) -> None:
        """In a forked child: its own files, every value back to what they hold (zero)."""
        self.lock = threading.Lock()
        self.pid = os.getpid()
        self.files = {}
        self.dirty = []
        self.flush_pending = False
        for value in self.values:
            value.dirty = False
            value.reset()

    def close(self) -> None:
        self.flush()
        with self.lock:
            for file in self.files.values():
                file.close()  # type: ignore[no-untyped-call]
            self.files.clear()


_INSTALLED: dict[str, tuple[type, BufferedValues]] = {}


def install(directory: str) -> BufferedValues:
    """Make `directory`'s buffered value class the one new metric children use (once per
    process and directory); returns its flusher."""
    from prometheus_client import values

    installed = _INSTALLED.get(directory)
    if installed is None:
        installed = _INSTALLED[directory] = buffered_value_class(directory)
    values.ValueClass = installed[0]
    return installed[1]


def buffered_value_class(directory: str) -> tuple[type, BufferedValues]:
    """A value class for `prometheus_client.values.ValueClass`, and its flusher."""
    shared = BufferedValues(directory)
    atexit.register(shared.flush)
    os.register_at_fork(after_in_child=shared.after_fork)

    class BufferedMmapValue:
        _multiprocess = True
        __slots__ = ("_file", "_key", "_params", "_timestamp", "_value", "dirty")

        def __init__(
            self,
            typ: str,
            metric_name: str,
            name: str,
            labelnames: list[str],
            labelvalues: list[str],
            help_text: str,
            multiprocess_mode: str = "",
            **kwargs: Any,
        ) -> None:
            mode = multiprocess_mode
            self._params = typ, metric_name, name, labelnames, labelvalues, help_text, mode
            self.dirty = False
            with shared.lock:
                self.reset()
                shared.values.append(self)

        def reset(self) -> None:
            typ, metric_name, name, labelnames, labelvalues, help_text, mode = self._params
            self._file = shared.file(f"{typ}_{mode}" if typ == "gauge" else typ)
            self._key = mmap_key(metric_name, name, labelnames, labelvalues, help_text)
            # a new series is in the file (at zero) from the moment it exists, as before
            self._value, self._timestamp = self._file.read_value(self._key)  # type: ignore[no-untyped-call]

        def write(self) -> None:
            self._file.write_value(self._key, self._value, self._timestamp)  # type: ignore[no-untyped-call]

        def inc(self, amount: float) -> None:
            with shared.lock:
                self._value += amount
                self._timestamp = 0.0
                if not self.dirty:
                    shared.mark_dirty(self)

        def set(self, value: float, timestamp: float | None = None) -> None:
            with shared.lock:
                self._value = value
                self._timestamp = timestamp or 0.0
                if not self.dirty:
                    shared.mark_dirty(self)

        def set_exemplar(self, exemplar: object) -> None:
            return  # prometheus-client has no exemplars in multiprocess mode either

        def get(self) -> float:
            with shared.lock:
                return float(self._value)

        def get_exemplar(self) -> None:
            return None

    return BufferedMmapValue, shared
