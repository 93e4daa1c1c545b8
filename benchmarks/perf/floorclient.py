"""The least a load client can do per streamed event: a yardstick for the
efficiency section of ``make perf`` (docs/decisions.md D159).

It drives SGLang's native ``POST /generate`` with ``stream: true`` as
``findings bench`` does (the same body: 32 prompt ids, exactly N output
tokens), exactly C requests in flight, on uvloop where installed (as
``findings bench``, D135), and does nothing with what comes back but wait
for its end:

- ``--mode aiohttp``: one aiohttp ``ClientSession`` (keep-alive, no
  connection limit), each response read with ``iter_any()`` and dropped:
  what any client built on aiohttp's streaming reader pays per event, with
  no parsing, timing or record at all;
- ``--mode protocol``: an asyncio ``Protocol`` per connection, the request
  written by hand and the response bytes dropped as they come, a response
  ended by its length or the chunked terminator: the event loop and the socket reads
  alone, the floor of any client on this loop.

Neither checks what it read, so neither is a client: they bound what a
client on that stack can reach, in tokens per client CPU-second.

    python benchmarks/perf/floorclient.py URL --mode aiohttp --concurrency 64 --num-prompts 1000 --out FILE.json
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import sys
import time
from typing import Any
from urllib.parse import urlsplit

import aiohttp
from refclient import load_options, write_result  # a sibling script: the same load options and output

uvloop: Any
try:
    import uvloop
except ImportError:  # the loop findings bench runs on where uvloop is missing
    uvloop = None

#: The chunked encoding's last chunk and the blank line after it: a response's end.
END = b"\r\n0\r\n\r\n"


def body(rng: random.Random, input_len: int, output_len: int, rid: str) -> bytes:
    return json.dumps({"input_ids": [rng.randrange(1000, 30000) for _ in range(input_len)], "rid": rid,
                       "stream": True, "sampling_params": {"max_new_tokens": output_len,
                                                           "min_new_tokens": output_len, "ignore_eos": True,
                                                           "temperature": 0.0}}).encode()


async def run_aiohttp(a: argparse.Namespace, bodies: list[bytes]) -> tuple[int, int]:
    """(responses after the warm-up read to their end with status 200, bytes read in all)."""
    done = read = 0
    headers = {"Content-Type": "application/json"}
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0),
                                     timeout=aiohttp.ClientTimeout(total=None)) as session:
        async def one(b: bytes) -> None:
            nonlocal done, read
            async with session.post(a.url + "/generate", data=b, headers=headers) as resp:
                async for chunk in resp.content.iter_any():
                    read += len(chunk)
                done += resp.status == 200

        for b in bodies[:a.warmup]:
            await one(b)
        warm, left = done, bodies[a.warmup:][::-1]

        async def slot() -> None:
            while left:
                await one(left.pop())

        await asyncio.gather(*(slot() for _ in range(min(a.concurrency, len(left)))))
    return done - warm, read


class _Conn(asyncio.Protocol):
    """One keep-alive connection: a response's bytes dropped as they come,
    its end found by its Content-Length, else by the chunked terminator."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.waiter: asyncio.Future[None] | None = None
        self.head = b""  # a response's bytes until its head is whole
        self.left: int | None = None  # body bytes still to come (Content-Length), or None: chunked
        self.tail = b""  # the last bytes of a chunked body, for its terminator
        self.started = False
        self.read = 0
        self.ok = 0

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        self.read += len(data)
        if not self.started:  # the head, then what follows it
            self.head += data
            j = self.head.find(b"\r\n\r\n")
            if j < 0:
                return
            head, data = self.head[:j].lower(), self.head[j + 4:]
            self.started, self.head = True, b""
            self.ok += head.startswith(b"http/1.1 200")
            k = head.find(b"\r\ncontent-length:")
            self.left = int(head[k + 17:].split(b"\r\n", 1)[0]) if k >= 0 else None
            if self.left is None and b"chunked" not in head:
                self._end(ConnectionError("a response neither sized nor chunked"))
                return
        if self.left is not None:
            self.left -= len(data)
            if self.left <= 0:
                self._end()
            return
        self.tail = (self.tail + data)[-len(END):]
        if self.tail == END:
            self._end()

    def _end(self, error: Exception | None = None) -> None:
        self.started, self.tail, self.left = False, b"", None
        if self.waiter is not None and not self.waiter.done():
            if error is None:
                self.waiter.set_result(None)
            else:
                self.waiter.set_exception(error)

    def connection_lost(self, exc: Exception | None) -> None:
        if self.waiter is not None and not self.waiter.done():
            self.waiter.set_exception(ConnectionError(f"connection lost mid-response: {exc}"))


async def run_protocol(a: argparse.Namespace, bodies: list[bytes]) -> tuple[int, int]:
    """(responses after the warm-up read to their end with status 200, bytes read in all)."""
    loop = asyncio.get_running_loop()
    where = urlsplit(a.url)
    host, port = where.hostname or "127.0.0.1", where.port or 80
    head = (f"POST /generate HTTP/1.1\r\nHost: {host}:{port}\r\nContent-Type: application/json\r\n"
            "Content-Length: {}\r\n\r\n")
    conns: list[_Conn] = []

    async def one(conn: _Conn, b: bytes) -> None:
        conn.waiter = loop.create_future()
        assert conn.transport is not None
        conn.transport.write(head.format(len(b)).encode() + b)
        await conn.waiter

    async def connect() -> _Conn:
        _, conn = await loop.create_connection(_Conn, host, port)
        conns.append(conn)
        return conn

    first = await connect()
    for b in bodies[:a.warmup]:
        await one(first, b)
    warm, left = first.ok, bodies[a.warmup:][::-1]

    async def slot(conn: _Conn | None) -> None:
        conn = conn or await connect()
        while left:
            await one(conn, left.pop())

    n = min(a.concurrency, len(left))
    await asyncio.gather(*(slot(first if i == 0 else None) for i in range(n)))
    for conn in conns:
        assert conn.transport is not None
        conn.transport.close()
    return sum(c.ok for c in conns) - warm, sum(c.read for c in conns)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    load_options(p)
    p.add_argument("--mode", choices=("aiohttp", "protocol"), required=True)
    a = p.parse_args()
    rng = random.Random(a.seed)
    bodies = [body(rng, a.input_len, a.output_len, f"floor-{i}") for i in range(a.warmup + a.num_prompts)]
    fn = run_aiohttp if a.mode == "aiohttp" else run_protocol
    t0 = time.perf_counter()
    completed, read = (uvloop.run if uvloop is not None else asyncio.run)(fn(a, bodies))
    write_result({"client": f"floor-{a.mode}", "concurrency": a.concurrency, "num_prompts": a.num_prompts,
                  "output_len": a.output_len, "completed": completed, "bytes": read,
                  "duration_s": time.perf_counter() - t0, "loop": "uvloop" if uvloop is not None else "asyncio"},
                 a.out)
    return 0 if completed == a.num_prompts else 1


if __name__ == "__main__":
    sys.exit(main())
