"""Redis commands packed as RESP (arrays of bulk strings) for a connection's
`send_packed_command`: what redis-py's packer makes for str and bytes arguments, with
none of its per-argument checks (a ledger batch carries thousands of arguments)."""

from __future__ import annotations


def pack_command(args: tuple[str | bytes, ...] | list[str | bytes]) -> bytes:
    """One command; `str` arguments are sent as UTF-8."""
    out = [b"*%d\r\n" % len(args)]
    append = out.append
    for arg in args:
        data = arg if isinstance(arg, bytes) else arg.encode()
        append(b"$%d\r\n%s\r\n" % (len(data), data))
    return b"".join(out)
