"""Raw HTTP/1.1 on asyncio streams, for the test servers that must misbehave
in ways a web framework would not allow (tests/badserver.py,
tests/llamacpp_double.py): drop a kept-alive connection unanswered, break a
stream mid-way. Real sockets, real bytes."""

from __future__ import annotations

import asyncio
from typing import Awaitable, Callable


def response(status: str, body: bytes, ctype: str = "application/json",
             keep_alive: str = "Connection: keep-alive") -> bytes:
    return (f"HTTP/1.1 {status}\r\nContent-Type: {ctype}\r\nContent-Length: {len(body)}\r\n"
            f"{keep_alive}\r\n\r\n").encode() + body


def chunk(data: bytes) -> bytes:
    """One chunk of a chunked body (``chunk(b"")`` ends the body)."""
    return f"{len(data):x}\r\n".encode() + data + b"\r\n"


async def read_request(reader: asyncio.StreamReader) -> tuple[str, str, bytes]:
    """Method, path and body of the next request on the connection."""
    head = await reader.readuntil(b"\r\n\r\n")
    lines = head.decode().split("\r\n")
    method, path, _ = lines[0].split(" ", 2)
    length = 0
    for line in lines[1:]:
        if line.lower().startswith("content-length:"):
            length = int(line.split(":", 1)[1])
    body = await reader.readexactly(length) if length else b""
    return method, path, body


Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


def serve(handle: Handler, label: str) -> None:
    """Listen on a free loopback port, print "<label> listening on URL", serve forever."""
    async def main() -> None:
        server = await asyncio.start_server(handle, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        print(f"{label} listening on http://127.0.0.1:{port}", flush=True)
        async with server:
            await server.serve_forever()

    asyncio.run(main())
