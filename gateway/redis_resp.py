"""Redis commands packed as RESP (arrays of bulk strings) for a connection's
`send_packed_command`: what redis-py's packer makes for the argument types the gateway
sends (str as UTF-8, bytes, int), without its per-argument checks. The limits store and
the ledger both send thousands of arguments a second through it."""

from __future__ import annotations

from collections.abc import Iterable, Sequence


def pack_header(count: int) -> bytes:
    """The start of a RESP command of `count` arguments; `pack_args` packs them (a caller
    sending many alike commands keeps their constant part packed)."""
    return b"*%d\r\n" % count


def pack_args(args: Iterable[str | bytes | int]) -> bytes:
    # the pieces joined once: a `%` format per argument costs more than the join
    out: list[bytes] = []
    extend = out.extend
    for arg in args:
        data = arg if isinstance(arg, bytes) else str(arg).encode()
        extend((b"$", str(len(data)).encode(), b"\r\n", data, b"\r\n"))
    return b"".join(out)


def pack_command(args: Sequence[str | bytes | int]) -> bytes:
    return pack_header(len(args)) + pack_args(args)


def pack_commands(commands: Sequence[Sequence[str | bytes | int]]) -> bytes:
    return b"".join([pack_command(command) for command in commands])
