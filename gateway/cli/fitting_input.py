"""What `gateway route train` and `gateway route heads` share: the numpy check, reading
JSON-lines files line by line with where each line came from, and the error that names
input they cannot fit on."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path


class InputError(ValueError):
    """Input a fitting command cannot use; says why."""


def numpy_missing(command: str) -> bool:
    """True (and says so on stderr) when numpy, the fit's one dependency beyond the
    gateway's, is not installed."""
    try:
        import numpy  # noqa: F401
    except ModuleNotFoundError:
        print(f"error: {command} needs numpy: pip install 'gateway[train]'", file=sys.stderr)
        return True
    return False


def numbered_lines(files: list[Path]) -> Iterator[tuple[str, str]]:
    """(`file:line`, line) for every non-blank line; a file that is not UTF-8 is an
    InputError, a missing one the OSError."""
    for path in files:
        try:
            text = path.read_text(encoding="utf-8")
        except UnicodeDecodeError as exc:
            raise InputError(f"{path}: not UTF-8 text ({exc.reason} at byte {exc.start})") from None
        for number, line in enumerate(text.splitlines(), start=1):
            if line.strip():
                yield f"{path}:{number}", line
