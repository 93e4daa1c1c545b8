"""HTTP transports. The only module that imports aiohttp and httpx (orjson through findings.core.jsonfast).

- ``AiohttpTransport``: the streaming hot path. One shared ClientSession, a
  connector with no connection limit (limit=0), keep-alive reuse, and orjson
  on the raw bytes of each ``data:`` line. Measured against httpx in
  docs/decisions.md (D17).
- ``HttpxTransport``: the same interface on httpx.AsyncClient, with limits
  raised above the concurrency; selectable with ``--transport httpx``.
- ``Control``: httpx for the control plane (/server_info, /model_info,
  /health, /metrics, /flush_cache), synchronous: it is never on a hot path.

A point's own /metrics reads (the counters before and after, the running
gauge during it) go through the streaming transport's ``get_text``, on the
event loop: a synchronous client in a worker thread contends for the GIL
with the loop that reads the streams (docs/decisions.md D84).
"""

from __future__ import annotations

import asyncio
import time
from typing import Any, Protocol

import aiohttp
import httpx

from findings.core import jsonfast
from findings.bench.protocol import Parser, Request
from findings.bench.records import RequestRecord

TRANSPORTS = ("aiohttp", "httpx")
#: A cheap GET that every SGLang, vLLM and llama.cpp server answers (unlike
#: SGLang's /health, which runs a one-token generate).
PREWARM_PATH = "/v1/models"
#: A /metrics read during a point: as long as Control's.
CONTROL_TIMEOUT_S = 10.0
CONTROL_TIMEOUT = aiohttp.ClientTimeout(total=CONTROL_TIMEOUT_S)


class StreamTransport(Protocol):
    async def start(self) -> None: ...

    async def close(self) -> None: ...

    async def prewarm(self, connections: int) -> None:
        """Open ``connections`` keep-alive connections before a point, so that
        no request of the point pays for a TCP handshake."""
        ...

    async def send(self, req: Request, rec: RequestRecord, parser: Parser, due: float | None = None) -> None:
        """Send one streaming request; fill ``rec`` through ``parser``. Never raises
        for server or network faults: they become ``rec.error``/``error_type``.
        ``due``: the perf_counter time the body must reach the socket (an open
        loop's schedule): everything before the write is done first, the write
        waits for it."""
        ...

    async def get_text(self, path: str) -> str | None:
        """GET ``path``'s body; None on any error or a status other than 200."""
        ...


#: Waits for a due time sleep until this long before it, then yield to the
#: event loop until it has come: the selector's timeout is rounded up to whole
#: milliseconds, so a plain sleep would be up to 1 ms late.
SPIN_S = 0.0015


async def until(when: float) -> None:
    """Return at perf_counter ``when`` (at once if it has passed)."""
    clock = time.perf_counter
    left = when - clock()
    if left > SPIN_S:
        await asyncio.sleep(left - SPIN_S)
    while clock() < when:
        await asyncio.sleep(0)


class _DuePayload(aiohttp.payload.BytesPayload):
    """A request body written at its due time: aiohttp buffers the headers
    and writes them with the first body bytes, so the request reaches the
    socket in one write at ``due``, after the request was built and a
    connection taken beforehand."""

    def __init__(self, value: bytes, due: float) -> None:
        super().__init__(value, content_type="application/json")
        self._due = due

    async def write(self, writer: Any) -> None:
        await until(self._due)
        await super().write(writer)

    async def write_with_length(self, writer: Any, content_length: int | None) -> None:
        await until(self._due)
        await super().write_with_length(writer, content_length)


def _headers(api_key: str | None) -> dict[str, str]:
    h = {"Content-Type": "application/json", "Accept": "text/event-stream"}
    if api_key:
        h["Authorization"] = f"Bearer {api_key}"
    return h


def _status_kind(status: int) -> str:
    if status in (500, 503):
        return f"http_{status}"
    return "http_4xx" if 400 <= status < 500 else "http_5xx"


def _data(line: bytes, parser: Parser, now: float) -> bool:
    """Handle one SSE line; True at [DONE]."""
    line = line.strip()
    if not line or line.startswith(b":"):
        return False
    if not line.startswith(b"data:"):
        if line.startswith((b"event:", b"id:", b"retry:")):
            return False
        parser.error("sse", f"malformed SSE line: {line[:80]!r}")
        return True
    payload = line[5:].strip()
    if payload == b"[DONE]":
        return True
    try:
        obj = jsonfast.loads(payload)
    except jsonfast.JSONDecodeError:
        parser.error("sse", f"malformed SSE data: {payload[:80]!r}")
        return True
    parser.feed(obj, now)
    return bool(parser.rec.error)


#: Idle kept-alive connections are closed by us after this long: under the
#: 5 s idle timeout of uvicorn (SGLang, vLLM), so a connection we reuse was
#: never closed by the server for idleness. A server that closed one anyway
#: closes them on purpose (llama.cpp's, after each stream): see ``no_reuse``.
KEEPALIVE_S = 4.0

#: How long to wait for the end of a body after its [DONE] event.
DRAIN_S = 1.0


async def _drain(content: aiohttp.StreamReader) -> None:
    while await content.readany():
        pass


class AiohttpTransport:
    def __init__(self, base_url: str, read_timeout_s: float = 60.0, api_key: str | None = None) -> None:
        self.base_url = base_url.rstrip("/")
        self.read_timeout_s = read_timeout_s
        self.headers = _headers(api_key)
        self.session: aiohttp.ClientSession | None = None
        self.fresh: aiohttp.ClientSession | None = None  # one connection per request, for retries
        #: Set at the first kept-alive connection the server had closed: from
        #: then on every request gets a fresh connection (llama.cpp's server
        #: closes each one after a streamed response), instead of paying a
        #: failed write and a retry for every other request.
        self.no_reuse = False

    async def start(self) -> None:
        connector = aiohttp.TCPConnector(limit=0, limit_per_host=0, force_close=False,
                                         enable_cleanup_closed=True, keepalive_timeout=KEEPALIVE_S)
        # The request's clock starts when aiohttp hands the body to the socket.
        # On Python < 3.12 aiohttp writes the body from a task that first runs
        # one event-loop turn after post() was called; in a busy client that
        # turn is tens of milliseconds that the server never saw.
        trace = aiohttp.TraceConfig()

        async def body_sent(session: aiohttp.ClientSession, ctx: Any, params: Any) -> None:
            rec = ctx.trace_request_ctx
            if isinstance(rec, RequestRecord) and not rec.body_written:
                rec.body_written = True
                rec.sent_wall = time.time()
                rec.sent = time.perf_counter()

        trace.on_request_chunk_sent.append(body_sent)
        timeout = aiohttp.ClientTimeout(total=None, sock_connect=30, sock_read=self.read_timeout_s)
        self.session = aiohttp.ClientSession(connector=connector, timeout=timeout, headers=self.headers,
                                             json_serialize=lambda o: jsonfast.dumps(o).decode(),
                                             trace_configs=[trace])

    async def close(self) -> None:
        if self.session is not None:
            await self.session.close()
        if self.fresh is not None:
            await self.fresh.close()

    async def prewarm(self, connections: int) -> None:
        assert self.session is not None
        session = self.session

        async def one() -> None:
            try:
                async with session.get(self.base_url + PREWARM_PATH) as resp:
                    await resp.read()
            except (aiohttp.ClientError, asyncio.TimeoutError):
                pass

        await asyncio.gather(*(one() for _ in range(connections)))

    async def get_text(self, path: str) -> str | None:
        assert self.session is not None
        session = self._fresh() if self.no_reuse else self.session
        try:
            async with session.get(self.base_url + path, timeout=CONTROL_TIMEOUT) as resp:
                return await resp.text() if resp.status == 200 else None
        except (aiohttp.ClientError, asyncio.TimeoutError):
            return None

    async def _post(self, url: str, body: bytes | _DuePayload, rec: RequestRecord) -> aiohttp.ClientResponse:
        """POST, and once more on a fresh connection when a kept-alive one
        turns out closed before any response came (servers close idle
        connections, llama.cpp's after each streamed response). aiohttp
        retries that only for idempotent methods. The retry restarts the
        clock and is counted (``reconnects``); later requests of this
        transport then always get a fresh connection (``no_reuse``)."""
        assert self.session is not None
        if self.no_reuse:
            return await self._fresh().post(url, data=body, trace_request_ctx=rec)
        try:
            return await self.session.post(url, data=body, trace_request_ctx=rec)
        except (aiohttp.ServerDisconnectedError, aiohttp.ClientOSError) as exc:
            if isinstance(exc, aiohttp.ClientConnectorError):
                raise
            rec.reconnects += 1
            self.no_reuse = True
            rec.body_written = False
            rec.sent_wall = time.time()
            rec.sent = time.perf_counter()
            # A fresh connection for certain: the pool may hold more closed ones.
            return await self._fresh().post(url, data=body if isinstance(body, bytes) else body._value,
                                            trace_request_ctx=rec)

    def _fresh(self) -> aiohttp.ClientSession:
        if self.fresh is None:
            assert self.session is not None
            self.fresh = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0, force_close=True),
                                               timeout=self.session.timeout, headers=self.headers,
                                               trace_configs=self.session.trace_configs)
        return self.fresh

    async def send(self, req: Request, rec: RequestRecord, parser: Parser, due: float | None = None) -> None:
        assert self.session is not None
        raw = jsonfast.dumps(req.body)
        body: bytes | _DuePayload = raw if due is None else _DuePayload(raw, due)
        clock = time.perf_counter
        rec.sent_wall = time.time()
        rec.sent = clock()
        try:
            async with await self._post(self.base_url + req.path, body, rec) as resp:
                if resp.status != 200:
                    text = (await resp.text())[:300]
                    parser.error(_status_kind(resp.status), f"HTTP {resp.status}: {text}")
                    rec.end = clock()
                    return
                buf = b""
                done = False
                async for chunk in resp.content.iter_any():
                    now = clock()
                    buf += chunk
                    *lines, buf = buf.split(b"\n")
                    for line in lines:
                        if _data(line, parser, now):
                            parser.finish(now)
                            done = True
                            break
                    if done:
                        break
                else:
                    parser.finish(clock())
                if done and not parser.rec.error and not resp.content.is_eof():
                    # Read the end of the body (the chunked terminator follows
                    # [DONE] at once): a response left unread makes aiohttp
                    # close the connection instead of reusing it, and every
                    # next request would pay a TCP handshake inside its TTFT.
                    # The request is complete already: a server that keeps
                    # the stream open costs the connection, not the request.
                    try:
                        await asyncio.wait_for(_drain(resp.content), DRAIN_S)
                    except (asyncio.TimeoutError, aiohttp.ClientError, ConnectionError):
                        pass
        except aiohttp.ClientConnectorError as exc:
            parser.error("connect", f"cannot connect: {exc}")
        except (aiohttp.ServerDisconnectedError, aiohttp.ClientPayloadError, ConnectionResetError,
                aiohttp.ClientOSError) as exc:
            parser.error("reset", f"connection lost mid-request: {type(exc).__name__}: {exc}")
        except (asyncio.TimeoutError, aiohttp.ServerTimeoutError):
            parser.error("timeout", f"no data for {self.read_timeout_s:g} s (read timeout)")
        except aiohttp.ClientError as exc:
            parser.error("reset", f"{type(exc).__name__}: {exc}")
        if rec.end is None:
            rec.end = clock()


class HttpxTransport:
    def __init__(self, base_url: str, read_timeout_s: float = 60.0, api_key: str | None = None,
                 max_connections: int = 1000) -> None:
        self.base_url = base_url.rstrip("/")
        self.read_timeout_s = read_timeout_s
        self.headers = _headers(api_key)
        self.max_connections = max_connections
        self.client: httpx.AsyncClient | None = None

    async def start(self) -> None:
        limits = httpx.Limits(max_connections=self.max_connections,
                              max_keepalive_connections=self.max_connections)
        self.client = httpx.AsyncClient(base_url=self.base_url, headers=self.headers, limits=limits,
                                        timeout=httpx.Timeout(30.0, read=self.read_timeout_s))

    async def close(self) -> None:
        if self.client is not None:
            await self.client.aclose()

    async def prewarm(self, connections: int) -> None:
        assert self.client is not None
        client = self.client

        async def one() -> None:
            try:
                await client.get(PREWARM_PATH)
            except httpx.HTTPError:
                pass

        await asyncio.gather(*(one() for _ in range(connections)))

    async def get_text(self, path: str) -> str | None:
        assert self.client is not None
        try:
            r = await self.client.get(path, timeout=CONTROL_TIMEOUT_S)
        except httpx.HTTPError:
            return None
        return r.text if r.status_code == 200 else None

    async def send(self, req: Request, rec: RequestRecord, parser: Parser, due: float | None = None) -> None:
        assert self.client is not None
        body = jsonfast.dumps(req.body)
        if due is not None:  # httpx builds and writes in one call: wait first
            await until(due)
        clock = time.perf_counter
        rec.sent_wall = time.time()
        rec.sent = clock()
        try:
            async with self.client.stream("POST", req.path, content=body) as resp:
                if resp.status_code != 200:
                    text = (await resp.aread()).decode(errors="replace")[:300]
                    parser.error(_status_kind(resp.status_code), f"HTTP {resp.status_code}: {text}")
                    rec.end = clock()
                    return
                async for line in resp.aiter_lines():
                    now = clock()
                    if _data(line.encode(), parser, now):
                        parser.finish(now)
                        return
                parser.finish(clock())
        except httpx.ConnectError as exc:
            parser.error("connect", f"cannot connect: {exc}")
        except httpx.ReadTimeout:
            parser.error("timeout", f"no data for {self.read_timeout_s:g} s (read timeout)")
        except (httpx.RemoteProtocolError, httpx.ReadError) as exc:
            parser.error("reset", f"connection lost mid-request: {type(exc).__name__}: {exc}")
        except httpx.HTTPError as exc:
            parser.error("reset", f"{type(exc).__name__}: {exc}")
        if rec.end is None:
            rec.end = clock()


def make_transport(name: str, base_url: str, concurrency: int, read_timeout_s: float,
                   api_key: str | None = None) -> StreamTransport:
    if name == "aiohttp":
        return AiohttpTransport(base_url, read_timeout_s, api_key)
    if name == "httpx":
        return HttpxTransport(base_url, read_timeout_s, api_key, max_connections=max(concurrency * 2, 100))
    raise ValueError(f"unknown transport {name!r}; choose one of {', '.join(TRANSPORTS)}")


class ControlError(Exception):
    pass


class Control:
    """Synchronous control-plane calls with httpx."""

    def __init__(self, base_url: str, api_key: str | None = None, timeout_s: float = 10.0) -> None:
        self.base_url = base_url.rstrip("/")
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self.client = httpx.Client(base_url=self.base_url, headers=headers, timeout=timeout_s)

    def close(self) -> None:
        self.client.close()

    def get_json(self, *paths: str) -> dict[str, Any] | None:
        """The first path that answers 200 with a JSON object, else None."""
        for path in paths:
            doc = self.get_any(path)
            if isinstance(doc, dict):
                return doc
        return None

    def get_any(self, path: str) -> Any:
        """The JSON document at ``path`` (any type) if it answers 200, else None."""
        try:
            r = self.client.get(path)
        except httpx.HTTPError:
            return None
        if r.status_code != 200:
            return None
        try:
            return r.json()
        except ValueError:
            return None

    def healthy(self) -> bool:
        try:
            return self.client.get("/health").status_code == 200
        except httpx.HTTPError:
            return False

    def models(self) -> list[str]:
        doc = self.get_json("/v1/models")
        data = doc.get("data") if doc else None
        if not isinstance(data, list):
            return []
        return [m["id"] for m in data if isinstance(m, dict) and isinstance(m.get("id"), str)]

    def metrics_text(self) -> str | None:
        try:
            r = self.client.get("/metrics")
        except httpx.HTTPError:
            return None
        return r.text if r.status_code == 200 else None

    def flush_cache(self) -> bool:
        try:
            return self.client.post("/flush_cache").status_code == 200
        except httpx.HTTPError:
            return False
