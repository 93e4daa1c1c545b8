"""HTTP transports. The only module that imports aiohttp and httpx (orjson through findings.core.jsonfast).

- ``AiohttpTransport``: the streaming hot path. One shared ClientSession, a
  connector with no connection limit (limit=0), keep-alive reuse, and orjson
  on the raw bytes of each ``data:`` line. Measured against httpx in
  docs/decisions.md (D17).
- ``HttpxTransport``: the same interface on httpx.AsyncClient, with limits
  raised above the concurrency; selectable with ``--transport httpx``.
- ``RawTransport``: HTTP/1.1 written and parsed here on asyncio's protocols,
  each response's SSE lines handled inside ``data_received`` (no stream
  reader, no task woken per HTTP chunk); ``--transport raw`` (D125).
- ``Control``: httpx for the control plane (/server_info, /model_info,
  /health, /metrics, /flush_cache), synchronous: it is never on a hot path.

A point's own /metrics reads (the counters before and after, the running
gauge during it) go through the streaming transport's ``get_text``, on the
event loop: a synchronous client in a worker thread contends for the GIL
with the loop that reads the streams (docs/decisions.md D84).
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import heapq
import os
import ssl
import sys
import time
import weakref
from typing import Any, Callable, Protocol, cast
from urllib.parse import urlsplit

import aiohttp
import httpx

from findings.core import jsonfast
from findings.bench.protocol import Parser, Request
from findings.bench.records import RequestRecord

TRANSPORTS = ("aiohttp", "httpx", "raw")
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


#: Where no timerfd is to be had, waits for a due time sleep until this long
#: before it, then yield to the event loop until it has come: the selector's
#: timeout is rounded up to whole milliseconds, so a plain sleep would be up
#: to 1 ms late.
SPIN_S = 0.0015

_CLOCK_MONOTONIC = 1  # time.perf_counter's clock on Linux
_TFD_NONBLOCK, _TFD_CLOEXEC, _TFD_TIMER_ABSTIME = 0o4000, 0o2000000, 1


class _Timespec(ctypes.Structure):
    _fields_ = [("tv_sec", ctypes.c_long), ("tv_nsec", ctypes.c_long)]


class _Itimerspec(ctypes.Structure):
    _fields_ = [("it_interval", _Timespec), ("it_value", _Timespec)]


class _TimerFd:
    """Sub-millisecond waits on one event loop: a Linux timerfd armed at the
    earliest pending due time (CLOCK_MONOTONIC, absolute: perf_counter's
    clock) and watched by the loop's selector, which wakes the moment the
    kernel's high-resolution timer fires, where its own timeout is whole
    milliseconds (D126). No spinning: the process sleeps until then."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        libc = ctypes.CDLL(None, use_errno=True)
        self._settime = libc.timerfd_settime
        fd = libc.timerfd_create(_CLOCK_MONOTONIC, _TFD_NONBLOCK | _TFD_CLOEXEC)
        if fd < 0:
            raise OSError(ctypes.get_errno(), "timerfd_create")
        self.fd = int(fd)
        self.loop = loop
        self.heap: list[tuple[float, int, asyncio.Future[None]]] = []
        self.seq = 0
        self.armed: float | None = None
        loop.add_reader(self.fd, self._fire)
        weakref.finalize(loop, os.close, self.fd)

    def wait(self, when: float) -> asyncio.Future[None]:
        fut = self.loop.create_future()
        self.seq += 1
        heapq.heappush(self.heap, (when, self.seq, fut))
        if self.armed is None or when < self.armed:
            self._arm(when)
        return fut

    def _arm(self, when: float) -> None:
        sec = int(when)
        spec = _Itimerspec(_Timespec(0, 0), _Timespec(sec, max(1, int((when - sec) * 1e9))))
        self._settime(self.fd, _TFD_TIMER_ABSTIME, ctypes.byref(spec), None)
        self.armed = when

    def _fire(self) -> None:
        try:
            os.read(self.fd, 8)
        except (BlockingIOError, InterruptedError):
            pass
        now = time.perf_counter()
        heap = self.heap
        while heap and heap[0][0] <= now:
            fut = heapq.heappop(heap)[2]
            if not fut.done():
                fut.set_result(None)
        self.armed = None
        if heap:
            self._arm(heap[0][0])


_timerfds: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _TimerFd | None] = weakref.WeakKeyDictionary()


def _timerfd() -> _TimerFd | None:
    loop = asyncio.get_running_loop()
    if loop not in _timerfds:
        try:
            _timerfds[loop] = _TimerFd(loop) if sys.platform.startswith("linux") else None
        except (OSError, AttributeError, NotImplementedError):
            _timerfds[loop] = None
    return _timerfds[loop]


async def until(when: float) -> None:
    """Return at perf_counter ``when`` (at once if it has passed): a timerfd
    wait where the platform has one, else sleep and spin the last SPIN_S."""
    clock = time.perf_counter
    left = when - clock()
    if left <= 0:
        return
    timer = _timerfd()
    if timer is not None:
        await timer.wait(when)
        return
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


def _read_timeout(parser: Parser, seconds: float) -> None:
    """A request that got no byte for the read timeout: one kind and message in every transport."""
    parser.error("timeout", f"no data for {seconds:g} s (read timeout)")


def _status_kind(status: int) -> str:
    if status in (500, 503):
        return f"http_{status}"
    return "http_4xx" if 400 <= status < 500 else "http_5xx"


#: SGLang's native stream repeats the whole text and output ids so far in
#: every event, and ends each with its ``meta_info``: where that is all the
#: parser reads, only that object is parsed (see ``_decode``).
META_KEY = b'"meta_info":'
ERROR_KEY = b'"error"'


def _decode(payload: bytes, parser: Parser) -> Any:
    """One event's JSON. Where the parser reads only ``meta_info`` (the
    native API, no reply text kept for a later turn) and the event ends with
    it, only that object is parsed: a native event at token n carries n
    tokens of text and ids, and parsing them all made each event cost more
    than the rest of its handling. ``"meta_info":`` and ``"error"`` cannot
    occur unescaped inside a JSON string, so a match is a key; an event with
    an ``"error"`` anywhere, or whose last key is not ``meta_info``, is parsed whole."""
    if parser.meta_only:
        i = payload.rfind(META_KEY)
        if i > 0 and payload.endswith(b"}") and payload.find(ERROR_KEY, 0, i) == -1:
            try:
                meta = jsonfast.loads(payload[i + len(META_KEY):-1])
            except jsonfast.JSONDecodeError:
                meta = None
            if isinstance(meta, dict):
                return {"meta_info": meta}
    return jsonfast.loads(payload)


#: SGLang's native event, as its server writes it (``{"text": ..., "output_ids":
#: [...], "meta_info": {...}}``): what ``_native_meta`` reads in place.
_NATIVE_HEAD = b'data: {"text":"'
_NATIVE_IDS = b',"output_ids":['


def _native_meta(buf: bytes, start: int, stop: int) -> dict[str, Any] | None:
    """``_native_line``'s ``meta_info`` of one whole event ``buf[start:stop]``:
    its ``data: `` line and the blank line after it, as one HTTP chunk."""
    s = stop - 2
    if s <= start or buf.find(b"\n", start, stop) != s or buf[s + 1] != 0x0A:
        return None
    return _native_line(buf, start, s)


def _native_line(buf: bytes, start: int, end: int) -> dict[str, Any] | None:
    """The ``meta_info`` of SGLang's native event on the line ``buf[start:end]``
    (which holds no newline), read where it lies: no copy of the event, and
    no search of its text for an ``"error"`` key (``_decode``'s). It returns
    only where the event has SGLang's own layout, checked byte by byte: a
    text string whose first quote is not escaped ends it (a backslash before
    that quote, and this gives up), the output ids (no quote can occur among
    them), then ``meta_info`` as the last key; no other key fits in it.
    Anything else is None, and the event takes ``_decode``'s path."""
    if end - start <= len(_NATIVE_HEAD) or buf[end - 1] != 0x7D or not buf.startswith(_NATIVE_HEAD, start):
        return None
    q = buf.find(b'"', start + len(_NATIVE_HEAD), end)  # the text's end, unless escaped
    if q < 0 or buf[q - 1] == 0x5C or not buf.startswith(_NATIVE_IDS, q + 1):
        return None
    i = buf.find(b'"', q + 1 + len(_NATIVE_IDS), end)  # the next key, after the ids
    if i < 0 or buf[i - 2:i] != b"]," or not buf.startswith(META_KEY, i):
        return None
    try:
        meta = jsonfast.loads(buf[i + len(META_KEY):end - 1])
    except jsonfast.JSONDecodeError:
        return None
    return meta if type(meta) is dict else None


def stream_handlers(parser: Parser) -> tuple[Callable[[bytes, float], bool],
                                             Callable[[bytes, int, int, float], bool | None] | None,
                                             Callable[[], bool]]:
    """An ``_Exchange``'s ``on_line`` and ``on_event`` for one stream fed to
    ``parser`` (``on_event`` only where the parser reads ``meta_info`` alone:
    ``_native_meta``), and whether the stream has ended ([DONE] or a fault:
    ``parser.finish`` called then)."""
    ended = False

    def end(now: float) -> bool:
        nonlocal ended
        parser.finish(now)
        ended = True
        return True

    def on_line(line: bytes, now: float) -> bool:
        return end(now) if _data(line, parser, now) else False

    def on_event(buf: bytes, start: int, stop: int, now: float) -> bool | None:
        meta = _native_meta(buf, start, stop)
        if meta is None:
            return None
        parser.meta(meta, now)
        return end(now) if parser.rec.error else False  # as _data: an error ends the stream

    return on_line, on_event if parser.meta_only else None, lambda: ended


def _data(line: bytes, parser: Parser, now: float) -> bool:
    """Handle one SSE line; True at [DONE]."""
    if parser.meta_only:
        meta = _native_line(line, 0, len(line))
        if meta is not None:
            parser.meta(meta, now)
            return bool(parser.rec.error)
    if line[:7] == b"data: {" and line[-1:] == b"}":  # the usual event: straight to its JSON
        try:
            obj = _decode(line[6:], parser)
        except jsonfast.JSONDecodeError:
            parser.error("sse", f"malformed SSE data: {line[6:86]!r}")
            return True
        parser.feed(obj, now)
        return bool(parser.rec.error)
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
        obj = _decode(payload, parser)
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


class _Watch:
    """A request in flight, as the aiohttp transport's read timeout sees it
    (D158): when it last got a byte, and whether the watch expired it."""

    __slots__ = ("task", "rec", "last", "expired")

    def __init__(self, task: asyncio.Task[Any], rec: RequestRecord, now: float) -> None:
        self.task = task
        self.rec = rec
        self.last = now
        self.expired = False


#: The read timeout's watch looks at the requests in flight this often, at
#: most (a request times out between the read timeout and that much later),
#: and at least 8 times per read timeout.
WATCH_S = 1.0


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
        #: The requests in flight, for the read timeout's watch (``_watch``).
        self.watching: set[_Watch] = set()
        self.watchdog: asyncio.Task[None] | None = None

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
        # No sock_read: aiohttp would cancel and set a timer at every read
        # of the socket that brings bytes (about 0.75 µs on uvloop, 0.5 to
        # 0.7 reads per streamed event), so a watch of our own times the
        # silences (D158).
        timeout = aiohttp.ClientTimeout(total=None, sock_connect=30, sock_read=None)
        self.session = aiohttp.ClientSession(connector=connector, timeout=timeout, headers=self.headers,
                                             json_serialize=lambda o: jsonfast.dumps(o).decode(),
                                             trace_configs=[trace])
        self.watchdog = asyncio.get_running_loop().create_task(self._watch())

    async def _watch(self) -> None:
        """The read timeout: every ``WATCH_S`` at most, each request that has
        had no byte for ``read_timeout_s`` since it was sent (its body
        written, for one sent at a due time) is cancelled, and ``send``
        records it as a timeout."""
        every = min(WATCH_S, self.read_timeout_s / 8)
        while True:
            await asyncio.sleep(every)
            now = time.perf_counter()
            for w in [w for w in self.watching if now - max(w.last, w.rec.sent) >= self.read_timeout_s]:
                w.expired = True
                self.watching.discard(w)
                w.task.cancel()

    async def close(self) -> None:
        if self.watchdog is not None:
            self.watchdog.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self.watchdog
            self.watchdog = None
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
        task = asyncio.current_task()
        assert task is not None
        watch = _Watch(task, rec, rec.sent)
        self.watching.add(watch)
        try:
            async with await self._post(self.base_url + req.path, body, rec) as resp:
                watch.last = clock()
                if resp.status != 200:
                    text = (await resp.text())[:300]
                    parser.error(_status_kind(resp.status), f"HTTP {resp.status}: {text}")
                    rec.end = clock()
                    return
                # The stream's events go where the raw transport's go
                # (stream_handlers): a whole native event in one read is read
                # where it lies, with no split into lines (D158).
                on_line, on_event, done = stream_handlers(parser)
                buf = b""
                async for chunk in resp.content.iter_any():
                    watch.last = now = clock()
                    if not buf and on_event is not None:
                        took = on_event(chunk, 0, len(chunk), now)
                        if took is not None:
                            if took:
                                break
                            continue
                    lines = (buf + chunk if buf else chunk).split(b"\n")
                    buf = lines.pop()
                    for line in lines:
                        if line and line != b"\r" and on_line(line, now):  # not the blank line after each event
                            break
                    if done():
                        break
                else:
                    parser.finish(clock())
                self.watching.discard(watch)  # the drain below has a limit of its own
                if done() and not parser.rec.error and not resp.content.is_eof():
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
            _read_timeout(parser, self.read_timeout_s)
        except aiohttp.ClientError as exc:
            parser.error("reset", f"{type(exc).__name__}: {exc}")
        except asyncio.CancelledError:
            if not watch.expired or task.uncancel() > 0:
                raise  # a stop, not (or not only) the read timeout
            _read_timeout(parser, self.read_timeout_s)
        finally:
            self.watching.discard(watch)
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
            _read_timeout(parser, self.read_timeout_s)
        except (httpx.RemoteProtocolError, httpx.ReadError) as exc:
            parser.error("reset", f"connection lost mid-request: {type(exc).__name__}: {exc}")
        except httpx.HTTPError as exc:
            parser.error("reset", f"{type(exc).__name__}: {exc}")
        if rec.end is None:
            rec.end = clock()


# --------------------------------------------------------------------------- raw: HTTP/1.1 on asyncio's protocols

_HEAD, _SIZE, _DATA, _DATA_END, _TRAILER, _UNTIL_CLOSE, _COMPLETE = range(7)


class _Exchange:
    """One request's response on a connection, parsed as its bytes arrive, in
    ``data_received``: status line and headers, then a chunked, sized or
    until-close body. A stream's body goes line by line to ``on_line`` (the
    SSE handler) in the same call: no task wakes up per event, no buffer
    object per HTTP chunk. ``done`` resolves when the body is complete or
    the connection failed."""

    __slots__ = ("on_line", "on_event", "status", "state", "left", "keep_alive", "chunked", "body", "line_buf",
                 "buf", "done", "error", "got_bytes", "last_data", "clock", "stop_lines")

    def __init__(self, on_line: Callable[[bytes, float], bool] | None, clock: Callable[[], float],
                 on_event: Callable[[bytes, int, int, float], bool | None] | None = None) -> None:
        """``on_event(buf, start, stop, now)``: a whole event that came as one
        chunk, where it lies in ``buf``; True when the stream is done, None
        where it does not take it (it then goes to ``on_line``)."""
        self.on_line = on_line
        self.on_event = on_event
        self.clock = clock
        self.status = 0
        self.chunked = False
        self.state = _HEAD
        self.left = 0
        self.keep_alive = True
        self.body: list[bytes] = []
        self.line_buf = b""
        self.buf = b""
        self.done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.error: str | None = None
        self.got_bytes = False
        self.last_data = clock()
        self.stop_lines = False  # [DONE] or a fault seen: the rest of the body is read, not parsed

    def _finish(self, error: str | None = None) -> None:
        if not self.done.done():
            self.error = error
            self.done.set_result(None)

    def _content(self, piece: bytes, now: float) -> None:
        if self.status != 200 or self.on_line is None:
            self.body.append(piece)
            return
        if self.stop_lines:
            return
        if not self.line_buf and piece[-2:] == b"\n\n" and piece.find(b"\n") == len(piece) - 2:
            # One whole event in one piece (how servers write them): no split.
            if self.on_line(piece[:-2], now):
                self.stop_lines = True
            return
        lines = (self.line_buf + piece if self.line_buf else piece).split(b"\n")
        self.line_buf = lines.pop()
        on_line = self.on_line
        for line in lines:
            if not line or line == b"\r":  # the blank line after each event
                continue
            if on_line(line, now):
                self.stop_lines = True
                return

    def feed(self, data: bytes) -> None:
        now = self.clock()
        self.last_data = now
        self.got_bytes = True
        buf = self.buf + data if self.buf else data
        pos = 0
        end = len(buf)
        while pos < end:
            state = self.state
            if state == _DATA:
                take = min(self.left, end - pos)
                self._content(buf[pos:pos + take], now)
                pos += take
                self.left -= take
                if self.left == 0:
                    self.state = _DATA_END if self.chunked else _COMPLETE
            elif state == _SIZE:
                j = buf.find(b"\r\n", pos)
                if j < 0:
                    break
                try:
                    size = int(buf[pos:j], 16)
                except ValueError:
                    try:
                        size = int(buf[pos:j].split(b";", 1)[0], 16)  # a chunk extension
                    except ValueError:
                        self._finish(f"malformed chunk size {buf[pos:j][:40]!r}")
                        return
                pos = j + 2
                stop = pos + size
                if size and stop + 2 <= end and buf.startswith(b"\r\n", stop):
                    # The whole chunk is here (one SSE event, as servers write them): at once,
                    # where it lies if on_event takes it.
                    on_event = self.on_event
                    if on_event is None or self.line_buf or self.stop_lines or self.status != 200:
                        self._content(buf[pos:stop], now)
                    else:
                        took = on_event(buf, pos, stop, now)
                        if took is None:
                            self._content(buf[pos:stop], now)
                        elif took:
                            self.stop_lines = True
                    pos = stop + 2
                    continue
                self.left = size
                self.state = _DATA if size else _TRAILER
            elif state == _DATA_END:
                if end - pos < 2:
                    break
                pos += 2  # the CRLF after a chunk's data
                self.state = _SIZE
            elif state == _TRAILER:
                j = buf.find(b"\r\n", pos)
                if j < 0:
                    break
                self.state = _COMPLETE if j == pos else _TRAILER  # an empty line ends the trailers
                pos = j + 2
            elif state == _UNTIL_CLOSE:
                self._content(buf[pos:], now)
                pos = end
            elif state == _HEAD:
                j = buf.find(b"\r\n\r\n", pos)
                if j < 0:
                    break
                if not self._head(buf[pos:j]):
                    return
                pos = j + 4
            else:  # _COMPLETE: bytes past the response's end
                self.keep_alive = False
                break
            if self.state == _COMPLETE:
                self._flush(now)
                self._finish()
                if pos < end:
                    self.keep_alive = False  # more than one response's bytes: do not reuse
                self.buf = b""
                return
        self.buf = buf[pos:] if pos < end else b""

    def _flush(self, now: float) -> None:
        if self.line_buf and not self.stop_lines and self.on_line is not None and self.status == 200:
            line, self.line_buf = self.line_buf, b""
            if line.strip() and self.on_line(line, now):
                self.stop_lines = True

    def _head(self, head: bytes) -> bool:
        lines = head.split(b"\r\n")
        parts = lines[0].split(b" ", 2)
        try:
            self.status = int(parts[1])
        except (IndexError, ValueError):
            self._finish(f"malformed status line {lines[0][:80]!r}")
            return False
        headers: dict[bytes, bytes] = {}
        for line in lines[1:]:
            name, _, value = line.partition(b":")
            headers[name.strip().lower()] = value.strip()
        conn = headers.get(b"connection", b"").lower()
        self.keep_alive = parts[0] == b"HTTP/1.1" and conn != b"close" or conn == b"keep-alive"
        self.chunked = b"chunked" in headers.get(b"transfer-encoding", b"").lower()
        if self.chunked:
            self.state = _SIZE
        elif b"content-length" in headers:
            try:
                self.left = int(headers[b"content-length"])
            except ValueError:
                self._finish("malformed Content-Length")
                return False
            self.state = _DATA if self.left else _COMPLETE
        elif self.status in (204, 304) or 100 <= self.status < 200:
            self.state = _COMPLETE
        else:
            self.state = _UNTIL_CLOSE
            self.keep_alive = False
        return True

    def lost(self, exc: BaseException | None) -> None:
        if self.state == _UNTIL_CLOSE:
            self._flush(self.clock())
            self._finish()
        else:
            self._finish(f"connection lost mid-request{': ' + str(exc) if exc else ''}")


class _Connection(asyncio.Protocol):
    """One kept-alive HTTP/1.1 connection; its current exchange parses what arrives."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.exchange: _Exchange | None = None
        self.closed = False
        self.idle_since = 0.0

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's is not a subclass

    def data_received(self, data: bytes) -> None:
        ex = self.exchange
        if ex is None:  # nothing asked: the server is closing it, or out of step
            self.close()
            return
        ex.feed(data)

    def eof_received(self) -> bool | None:
        self.closed = True
        return None  # close the transport: connection_lost follows

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        if self.exchange is not None:
            self.exchange.lost(exc)

    def close(self) -> None:
        self.closed = True
        if self.transport is not None:
            self.transport.close()


class RawTransport:
    """HTTP/1.1 on asyncio's protocols (``--transport raw``): a pool of
    kept-alive connections, each response parsed in ``data_received`` and
    its SSE lines handled in the same call, where aiohttp hands every HTTP
    chunk through a stream reader to a task woken per chunk. The request is
    written in one ``write`` at its due time. Faults are classified as the
    aiohttp transport classifies them (connect, reset, timeout, http_*, sse);
    a kept-alive connection that the server had closed is retried once on a
    fresh one, counted in ``reconnects``, and from then on every request
    gets a fresh connection (``no_reuse``, as for llama.cpp's server)."""

    def __init__(self, base_url: str, read_timeout_s: float = 60.0, api_key: str | None = None) -> None:
        self.base_url = base_url.rstrip("/")
        u = urlsplit(self.base_url)
        self.host = u.hostname or "127.0.0.1"
        self.port = u.port or (443 if u.scheme == "https" else 80)
        self.ssl: ssl.SSLContext | None = ssl.create_default_context() if u.scheme == "https" else None
        self.prefix = u.path.rstrip("/")
        host = self.host if u.port is None else f"{self.host}:{u.port}"
        self.read_timeout_s = read_timeout_s
        self.fixed = "".join(f"{k}: {v}\r\n" for k, v in {"Host": host, **_headers(api_key)}.items()).encode()
        self.idle: list[_Connection] = []
        self.open: set[_Connection] = set()
        self.no_reuse = False

    async def start(self) -> None:
        pass

    async def close(self) -> None:
        for conn in list(self.open):
            conn.close()
        self.open.clear()
        self.idle.clear()
        await asyncio.sleep(0)

    async def _connect(self) -> _Connection:
        loop = asyncio.get_running_loop()
        _, conn = await asyncio.wait_for(
            loop.create_connection(_Connection, self.host, self.port, ssl=self.ssl), 30.0)
        self.open.add(conn)
        return conn

    async def _acquire(self) -> tuple[_Connection, bool]:
        now = time.monotonic()
        while self.idle and not self.no_reuse:
            conn = self.idle.pop()
            if not conn.closed and now - conn.idle_since < KEEPALIVE_S:
                return conn, True
            conn.close()
            self.open.discard(conn)
        return await self._connect(), False

    def _release(self, conn: _Connection, ex: _Exchange) -> None:
        conn.exchange = None
        if ex.error is None and ex.state == _COMPLETE and ex.keep_alive and not conn.closed and not self.no_reuse:
            conn.idle_since = time.monotonic()
            self.idle.append(conn)
        else:
            conn.close()
            self.open.discard(conn)

    def _request(self, method: str, path: str, body: bytes | None) -> bytes:
        head = f"{method} {self.prefix}{path} HTTP/1.1\r\n".encode() + self.fixed
        if body is None:
            return head + b"\r\n"
        return head + f"Content-Length: {len(body)}\r\n\r\n".encode() + body

    async def _wait(self, ex: _Exchange, timeout_s: float) -> bool:
        """Wait for the exchange; False if no byte came for ``timeout_s``."""
        while True:
            left = ex.last_data + timeout_s - ex.clock()
            if left <= 0:
                return False
            try:
                await asyncio.wait_for(asyncio.shield(ex.done), left)
                return True
            except asyncio.TimeoutError:
                continue

    async def prewarm(self, connections: int) -> None:
        await asyncio.gather(*(self.get_text(PREWARM_PATH) for _ in range(connections)))

    async def get_text(self, path: str) -> str | None:
        try:
            conn, _ = await self._acquire()
        except (OSError, asyncio.TimeoutError):
            return None
        ex = _Exchange(None, time.perf_counter)
        conn.exchange = ex
        assert conn.transport is not None
        conn.transport.write(self._request("GET", path, None))
        ok = await self._wait(ex, CONTROL_TIMEOUT_S)
        self._release(conn, ex)
        if not ok or ex.error is not None or ex.status != 200:
            return None
        return b"".join(ex.body).decode("utf-8", errors="replace")

    async def send(self, req: Request, rec: RequestRecord, parser: Parser, due: float | None = None) -> None:
        clock = time.perf_counter
        data = self._request("POST", req.path, jsonfast.dumps(req.body))
        rec.sent_wall = time.time()
        rec.sent = clock()
        on_line, on_event, done = stream_handlers(parser)
        for attempt in (1, 2):
            try:
                conn, reused = await self._acquire()
            except (OSError, asyncio.TimeoutError) as exc:
                parser.error("connect", f"cannot connect: {type(exc).__name__}: {exc}")
                break
            ex = _Exchange(on_line, clock, on_event)
            conn.exchange = ex
            if due is not None:
                await until(due)
            assert conn.transport is not None
            rec.sent_wall = time.time()
            rec.sent = clock()
            rec.body_written = True
            conn.transport.write(data)
            ok = await self._wait_stream(ex, done)
            self._release(conn, ex)
            if ex.error is not None and not ex.got_bytes and reused and attempt == 1:
                # A kept-alive connection the server had closed: once more on a fresh one.
                rec.reconnects += 1
                self.no_reuse = True
                continue
            if not ok:
                _read_timeout(parser, self.read_timeout_s)
            elif ex.status != 200 and ex.status:
                text = b"".join(ex.body).decode("utf-8", errors="replace")[:300]
                parser.error(_status_kind(ex.status), f"HTTP {ex.status}: {text}")
                rec.end = clock()
            elif ex.error is not None and not done():
                parser.error("reset", f"{ex.error}")
            elif not done():
                parser.finish(clock())
            break
        if rec.end is None:
            rec.end = clock()

    async def _wait_stream(self, ex: _Exchange, done: Callable[[], bool]) -> bool:
        """Until the response is complete (False: silent for the read
        timeout); after [DONE], at most DRAIN_S for the end of the body, as
        the aiohttp transport drains it (a connection left mid-body is closed)."""
        while True:
            if done():
                try:
                    await asyncio.wait_for(asyncio.shield(ex.done), DRAIN_S)
                except asyncio.TimeoutError:
                    ex.keep_alive = False
                    ex._finish("not drained")
                return True
            left = ex.last_data + self.read_timeout_s - ex.clock()
            if left <= 0:
                return False
            try:
                await asyncio.wait_for(asyncio.shield(ex.done), min(left, 1.0))
                return True
            except asyncio.TimeoutError:
                continue


def make_transport(name: str, base_url: str, concurrency: int, read_timeout_s: float,
                   api_key: str | None = None) -> StreamTransport:
    if name == "aiohttp":
        return AiohttpTransport(base_url, read_timeout_s, api_key)
    if name == "httpx":
        return HttpxTransport(base_url, read_timeout_s, api_key, max_connections=max(concurrency * 2, 100))
    if name == "raw":
        return RawTransport(base_url, read_timeout_s, api_key)
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
