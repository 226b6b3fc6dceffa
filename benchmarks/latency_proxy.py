"""A TCP proxy on 127.0.0.1 that delays every byte from the client by a fixed time: network latency.

Benchmark helper, not part of smlaunch. Each chunk the client sends is forwarded to the target
``delay_ms`` after it arrived (a delay line: chunks keep their order and stream back to back, so
bandwidth is not cut, only latency added). Every HTTP request therefore waits ``delay_ms`` before
the server sees it, as a request from a training host to S3 typically waits; a round trip inside
one request (``Expect: 100-continue``) pays it again, as it does on a real network. Replies are not
delayed, so a request/response pair costs ``delay_ms`` of round trip in all.

Bounded: listens on 127.0.0.1 only, and stops by itself after ``--max-seconds`` or as soon as its
standard input closes (the process that started it exited), whichever comes first.

Usage: ``python benchmarks/latency_proxy.py --target-port P [--delay-ms 20] [--max-seconds 1800]``;
prints ``listening <port>`` once it accepts connections.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import threading
import time


async def _pump(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, delay: float) -> None:
    """Copy ``reader`` to ``writer``, each chunk ``delay`` seconds after it arrived."""
    queue: asyncio.Queue[tuple[float, bytes]] = asyncio.Queue()

    async def deliver() -> None:
        while True:
            due, data = await queue.get()
            if not data:
                break
            wait = due - time.monotonic()
            if wait > 0:
                await asyncio.sleep(wait)
            writer.write(data)
            await writer.drain()

    sender = asyncio.create_task(deliver())
    try:
        while data := await reader.read(256 * 1024):
            queue.put_nowait((time.monotonic() + delay, data))
    except ConnectionError:
        pass
    queue.put_nowait((0.0, b""))
    try:
        await sender
    except ConnectionError:
        pass
    finally:
        writer.close()


async def _serve(target_port: int, delay: float, max_seconds: float) -> None:
    async def handle(client_reader: asyncio.StreamReader, client_writer: asyncio.StreamWriter) -> None:
        try:
            server_reader, server_writer = await asyncio.open_connection("127.0.0.1", target_port)
        except OSError:
            client_writer.close()
            return
        await asyncio.gather(
            _pump(client_reader, server_writer, delay),
            _pump(server_reader, client_writer, 0.0),
            return_exceptions=True,
        )

    server = await asyncio.start_server(handle, "127.0.0.1", 0, backlog=256)
    port = server.sockets[0].getsockname()[1]
    print(f"listening {port}", flush=True)
    loop = asyncio.get_running_loop()
    stdin_closed = asyncio.Event()

    def watch_stdin() -> None:
        sys.stdin.buffer.read()  # returns at EOF: the parent closed the pipe or exited
        loop.call_soon_threadsafe(stdin_closed.set)

    threading.Thread(target=watch_stdin, daemon=True).start()
    try:
        await asyncio.wait_for(stdin_closed.wait(), timeout=max_seconds)
    except TimeoutError:
        pass
    server.close()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--target-port", type=int, required=True)
    parser.add_argument("--delay-ms", type=float, default=20.0)
    parser.add_argument("--max-seconds", type=float, default=1800.0)
    args = parser.parse_args(argv)
    asyncio.run(_serve(args.target_port, args.delay_ms / 1000, args.max_seconds))


if __name__ == "__main__":
    main()
