"""The gateway's RESP packer sends what redis-py's would."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st
from redis.asyncio.connection import Connection

from gateway.redis_resp import pack_command

# ints too, and arguments longer than the packer's table of length prefixes
ARGS = st.lists(
    st.text() | st.binary() | st.integers() | st.binary(min_size=4090, max_size=4200), max_size=30
)


@given(ARGS)
def test_pack_command_is_byte_for_byte_what_redis_py_packs(args: list[str | bytes | int]) -> None:
    # (redis-py splits a first argument with spaces, "CONFIG GET"; ours is a name)
    command: list[str | bytes | int] = ["EVALSHA", *args]
    expected = b"".join(Connection().pack_command(*command))
    assert pack_command(command) == expected
