"""Hot reload of the policy files: on change (polled file stamps) or SIGHUP, atomically.

A file's stamp is the identity (device, inode) and the mtime and size of what its path
leads to now, symlinks followed. Kubernetes delivers a ConfigMap update by repointing the
volume's `..data` symlink at a new directory of new files, never by writing a file: the
inode always changes even when a coarse clock gives the new file the old mtime and size.

A new policy is loaded and validated exactly as `gateway check` does; only when it is
valid does one reference swap. An invalid edit is logged with every problem and the old
policy keeps serving. Requests in flight keep the view they started with. Changes to the
server config itself (providers, store, listener) need a restart and are refused here.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
from collections.abc import Callable
from pathlib import Path

from gateway.settings import Settings, SettingsError, load_settings

log = logging.getLogger("gateway.reload")

# (st_dev, st_ino, st_mtime_ns, st_size) of the file a path leads to
FileStamp = tuple[int, int, int, int]


class PolicyReloader:
    def __init__(
        self,
        settings: Settings,
        apply: Callable[[Settings], None],
        on_result: Callable[[bool], None],
        interval_seconds: float = 1.0,
    ) -> None:
        self._settings = settings
        self._apply = apply
        self._on_result = on_result
        self._interval = interval_seconds
        self._stamps = self._read_stamps()
        self._task: asyncio.Task[None] | None = None

    def _files(self) -> list[Path]:
        return [self._settings.config_path, *self._settings.policy_paths]

    def _read_stamps(self) -> dict[Path, FileStamp]:
        stamps: dict[Path, FileStamp] = {}
        for path in self._files():
            with contextlib.suppress(OSError):
                stat = path.stat()
                stamps[path] = (stat.st_dev, stat.st_ino, stat.st_mtime_ns, stat.st_size)
        return stamps

    def start(self) -> None:
        loop = asyncio.get_running_loop()
        with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
            loop.add_signal_handler(signal.SIGHUP, self.reload)
        self._task = loop.create_task(self._watch())

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    async def _watch(self) -> None:
        while True:
            await asyncio.sleep(self._interval)
            stamps = self._read_stamps()
            if stamps != self._stamps:
                self._stamps = stamps
                self.reload()

    def reload(self) -> bool:
        """Load and validate the files again; swap the policy only if all is well."""
        try:
            fresh = load_settings(self._settings.config_path)
        except SettingsError as exc:
            log.error(
                "policy reload rejected, the previous policy keeps serving: %s",
                "; ".join(exc.problems),
            )
            self._on_result(False)
            return False
        if fresh.config != self._settings.config:
            log.error(
                "policy reload rejected: %s changed (providers, store or listener); "
                "restart the gateway to apply server config changes",
                self._settings.config_path,
            )
            self._on_result(False)
            return False
        self._settings = fresh
        self._apply(fresh)
        log.info("policy reloaded from %s", ", ".join(str(p) for p in fresh.policy_paths))
        self._on_result(True)
        return True
