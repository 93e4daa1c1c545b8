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

#: What a responder asks of the connection after answering one request.
KEEP = "keep"  # read the next request
DROP_NEXT = "drop-next"  # drop the connection, unanswered, when the next request arrives on it
CLOSE = "close"  # close the connection now

Responder = Callable[[str, str, bytes, asyncio.StreamWriter], Awaitable[str]]


def connections(respond: Responder) -> Handler:
    """A connection handler: requests one after another on a kept-alive
    connection, each answered by ``respond(method, path, body, writer)``."""
    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        drop = False
        try:
            while True:
                method, path, body = await read_request(reader)
                if drop:
                    return
                action = await respond(method, path, body, writer)
                await writer.drain()
                if action == CLOSE:
                    return
                drop = action == DROP_NEXT
        except (asyncio.IncompleteReadError, ConnectionError, ValueError):
            pass
        finally:
            writer.close()

    return handle


def serve(handle: Handler, label: str) -> None:
    """Listen on a free loopback port, print "<label> listening on URL", serve forever."""
    async def main() -> None:
        server = await asyncio.start_server(handle, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        print(f"{label} listening on http://127.0.0.1:{port}", flush=True)
        async with server:
            await server.serve_forever()

    asyncio.run(main())
