"""A ConfigMap volume as kubelet projects it (pkg/volume/util/atomic_writer.go).

The files a pod sees are symlinks, `<key> -> ..data/<key>`; `..data` is itself a symlink
to a timestamped directory `..YYYY_MM_DD_HH_MM_SS.<random>` holding the real files. An
update never writes a visible file: kubelet writes a new timestamped directory, points a
`..data_tmp` symlink at it, renames that over `..data` (the one atomic step), adds the
visible symlinks of new keys, and removes the old directory.
"""

from __future__ import annotations

import os
import tempfile
import time
from pathlib import Path

DATA = "..data"
DATA_TMP = "..data_tmp"


class ConfigMapVolume:
    def __init__(self, directory: Path) -> None:
        self.directory = directory
        directory.mkdir(parents=True, exist_ok=True)

    def current_payload_dir(self) -> Path | None:
        data = self.directory / DATA
        return self.directory / os.readlink(data) if data.is_symlink() else None

    def project(self, payload: dict[str, bytes], mtimes_ns: dict[str, int] | None = None) -> Path:
        """Write `payload` (key -> content) the way kubelet's AtomicWriter.Write does.

        `mtimes_ns` (key -> time) stamps new files with those modification times before
        the swap, as a filesystem with a coarse clock does for two writes in one tick.
        """
        old = self.current_payload_dir()
        stamp = time.strftime("..%Y_%m_%d_%H_%M_%S.", time.gmtime())
        fresh = Path(tempfile.mkdtemp(prefix=stamp, dir=self.directory))
        fresh.chmod(0o755)
        for key, content in payload.items():
            (fresh / key).write_bytes(content)
            (fresh / key).chmod(0o644)
            if mtimes_ns and key in mtimes_ns:
                os.utime(fresh / key, ns=(mtimes_ns[key], mtimes_ns[key]))
        tmp_link = self.directory / DATA_TMP
        tmp_link.symlink_to(fresh.name)
        tmp_link.rename(self.directory / DATA)
        for key in payload:
            visible = self.directory / key
            if not visible.is_symlink():
                visible.symlink_to(Path(DATA) / key)
        for entry in self.directory.iterdir():
            if entry.is_symlink() and not entry.name.startswith("..") and entry.name not in payload:
                entry.unlink()
        if old is not None:
            for child in old.iterdir():
                child.unlink()
            old.rmdir()
        return fresh
