"""An ASGI app served by real uvicorn, with the gateway's HTTP protocol, in a thread of
the test process: for tests of the protocol itself against raw sockets."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import uvicorn

from gateway.api.server_limits import GatewayHttpProtocol


@contextmanager
def serving(app: Any, loop: str, log_level: str = "error") -> Iterator[tuple[str, int]]:
    """`app` on a free port on `loop` ("asyncio" or "uvloop"); yields its address."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    config = uvicorn.Config(
        app, http=GatewayHttpProtocol, lifespan="off", log_level=log_level, loop=loop
    )
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not server.started and time.monotonic() < deadline:
        time.sleep(0.01)
    try:
        yield sock.getsockname()
    finally:
        server.should_exit = True
        thread.join(timeout=10)
