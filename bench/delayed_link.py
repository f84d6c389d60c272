"""A TCP relay that holds every chunk a fixed time in each direction: a Redis in another
zone (or a managed one) for a bench on one host, where this kernel has no netem.

    python bench/delayed_link.py --listen PORT --to PORT --delay-ms 0.25

Each chunk is written `delay` after it was read, in order (timers of one delay fire in
the order they were set), so a round trip through it takes about twice the delay more.
"""

from __future__ import annotations

import argparse
import asyncio


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--listen", type=int, required=True)
    parser.add_argument("--to", type=int, required=True)
    parser.add_argument("--delay-ms", type=float, required=True)
    args = parser.parse_args()
    asyncio.run(serve(args.listen, args.to, args.delay_ms / 1000))


async def serve(listen: int, target: int, delay: float) -> None:
    async def relay(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        loop = asyncio.get_running_loop()
        while data := await reader.read(65536):
            loop.call_later(delay, writer.write, data)
        loop.call_later(delay, writer.close)

    async def accept(client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter) -> None:
        server_r, server_w = await asyncio.open_connection("127.0.0.1", target)
        await asyncio.gather(relay(client_r, server_w), relay(server_r, client_w))

    server = await asyncio.start_server(accept, "127.0.0.1", listen)
    async with server:
        await server.serve_forever()


if __name__ == "__main__":
    main()
