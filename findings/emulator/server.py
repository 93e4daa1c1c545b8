"""The SGLang-API emulator's HTTP server (aiohttp.web).

This is the only module of the emulator that imports aiohttp. The engine
(engine.py), the performance model (model.py), the faults (faults.py) and the
metrics (metrics.py) are pure; the state and scheduler loop (state.py) add
wall-clock time; this module adds sockets, streaming and the fault effects.

Every response carries ``X-Findings-Emulated: 1``; ``/server_info`` says
``"emulated": true``; the model is called ``findings-emulator/<profile>``.
docs/emulator.md describes the endpoints, the model and the options.
"""

from __future__ import annotations

import asyncio
import functools
import http
import json
import os
import signal
import socket
import sys
import time
import uuid
from dataclasses import replace
from typing import Any, AsyncIterator, Callable, Iterable

from aiohttp import web

from findings.core import jsonfast
from findings.core.diskio import cause
from findings.emulator.engine import VOCAB, Seq, count_prompt_tokens, token_id
from findings.emulator.faults import Fate, Faults
from findings.emulator.protocol import BadRequest, SeqSpec, parse_generate, parse_openai
from findings.emulator.state import Emulator, EmulatorOptions, Group
from findings.core.errors import FindingsError

__all__ = ["EmulatorOptions", "Faults", "build_app", "serve"]

EMULATED_HEADER = "X-Findings-Emulated"

EMU = web.AppKey("findings_emulator", Emulator)


# ---------------------------------------------------------------------------
# HTTP plumbing

SSE_HEADERS = {"Content-Type": "text/event-stream", "Cache-Control": "no-cache"}
DONE = b"data: [DONE]\n\n"
_WRITE_ERRORS = (ConnectionError,)


def _dumps(payload: Any) -> bytes:
    return jsonfast.dumps(payload)


def _native_error(message: str, status: int, kind: str) -> web.Response:
    body = {"error": {"message": message, "type": kind, "code": status, "retryable": False}}
    return web.json_response(body, status=status)


def _openai_error(message: str, status: int, kind: str) -> web.Response:
    body = {"object": "error", "message": message, "type": kind, "param": None, "code": status}
    return web.json_response(body, status=status)


def _fault_error(status: int) -> tuple[str, int, str]:
    """(message, status, type) of an injected error response."""
    phrase = http.HTTPStatus(status).phrase if status in http.HTTPStatus._value2member_map_ else "Error"
    return (f"Emulated {phrase.lower()} (fault injection).", status, phrase.replace(" ", "").replace("-", ""))


async def _read_json(request: web.Request) -> Any:
    try:
        return await request.json()
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise BadRequest(f"invalid JSON body: {exc}") from exc


#: id(transport) -> wall time at which the server read the first bytes of the
#: request now on that connection (HTTP/1.1: one request at a time on it).
_RECEIVED: dict[int, float] = {}


class _Stamping(asyncio.Protocol):
    """Wraps aiohttp's protocol to note when a request's first bytes are read.

    A request's ground-truth arrival is that moment, not the start of its
    handler: a burst of requests queues at the server's intake (HTTP parsing,
    handler start) and that queue is the server's time, not the client's.
    """

    def __init__(self, inner: asyncio.Protocol) -> None:
        self.inner = inner
        self.key = 0

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.key = id(transport)
        self.inner.connection_made(transport)

    def data_received(self, data: bytes) -> None:
        _RECEIVED.setdefault(self.key, time.time())
        self.inner.data_received(data)

    def eof_received(self) -> bool | None:
        return self.inner.eof_received()

    def connection_lost(self, exc: Exception | None) -> None:
        _RECEIVED.pop(self.key, None)
        self.inner.connection_lost(exc)

    def pause_writing(self) -> None:
        self.inner.pause_writing()

    def resume_writing(self) -> None:
        self.inner.resume_writing()


@web.middleware
async def _stamp_received(request: web.Request, handler: Any) -> web.StreamResponse:
    """Take every request's first-bytes time off its connection before its
    handler runs, and clear what arrived during it, so that no later request
    on the connection inherits a stamp."""
    key = id(request.transport) if request.transport is not None else None
    t = _RECEIVED.pop(key, None) if key is not None else None
    request["findings_received"] = t if t is not None else time.time()
    try:
        response: web.StreamResponse = await handler(request)
    finally:
        # Bytes read while the handler ran were this request's (its body may
        # come after its headers); the next request starts after the response.
        if key is not None:
            _RECEIVED.pop(key, None)
    return response


def _received(request: web.Request) -> float:
    """When the server read the first bytes of this request."""
    t = request.get("findings_received")
    return float(t) if isinstance(t, float) else time.time()


def _not_ready() -> web.Response:
    return web.json_response({"error": {"message": "The server is starting (emulated startup delay).",
                                         "type": "ServiceUnavailable", "code": 503}}, status=503)


class Streamer:
    """Writes one SSE response for a group, with faults and ground-truth timestamps."""

    def __init__(self, request: web.Request, emu: Emulator, group: Group, fate: Fate, where: str) -> None:
        self.request, self.emu, self.group, self.fate = request, emu, group, fate
        self.where = where  # "meta": timestamps in meta_info; "top": under "emulator"
        self.arrival = emu.tracks[group.seqs[0]].arrival
        self.resp = web.StreamResponse(status=200, headers=SSE_HEADERS)
        first = group.seqs[0]
        self.fault_at = max(1, first.max_new_tokens // 2)
        self.event_ts: list[float] = []

    async def write(self, payload: dict[str, Any]) -> None:
        if self.emu.gt_log is not None:
            self.event_ts.append(time.time())
        if self.emu.options.ground_truth:
            stamp = {"emulator_arrival_ts": self.arrival, "emulator_event_ts": time.time()}
            if self.where == "meta" and isinstance(payload.get("meta_info"), dict):
                payload["meta_info"].update(stamp)
            else:
                payload["emulator"] = stamp
        await self.resp.write(b"data: " + _dumps(payload) + b"\n\n")

    async def run(
        self,
        on_update: Callable[[int, Seq], Iterable[dict[str, Any]]],
        tail: Callable[[], Iterable[dict[str, Any]]],
    ) -> web.StreamResponse:
        """Stream until every sequence has finished; ``on_update`` builds the events."""
        emu, seqs = self.emu, self.group.seqs
        sent = [-1] * len(seqs)
        pending = set(range(len(seqs)))
        stalled = False
        try:
            await self.resp.prepare(self.request)
            while pending:
                await self.group.event.wait()
                self.group.event.clear()
                for i in sorted(pending):
                    seq = seqs[i]
                    if seq.completion_tokens == sent[i] and not seq.finished:
                        continue
                    if i == 0 and seq.completion_tokens >= self.fault_at:
                        if self.fate.error_mid:
                            emu.errors += 1
                            await self.write({"error": {"message": "Emulated internal error (fault injection).",
                                                        "type": "InternalServerError", "code": 500,
                                                        "retryable": False}})
                            await self.resp.write(DONE)
                            return self.resp
                        if self.fate.drop:
                            emu.release(self.group)
                            transport = self.request.transport
                            if transport is not None:
                                transport.abort()
                            return self.resp
                        if self.fate.stall and not stalled:
                            stalled = True
                            await asyncio.sleep(emu.options.faults.stall_s)
                    for payload in on_update(i, seq):
                        await self.write(payload)
                    sent[i] = seq.completion_tokens
                    if seq.finished:
                        pending.discard(i)
                    elif emu.profile.firehose:
                        emu.resume(seq)
            for payload in tail():
                await self.write(payload)
            await self.resp.write(DONE)
            await self.resp.write_eof()
            first = seqs[0]
            emu.log_truth(first.rid, self.arrival, self.event_ts, first.text, first.messages_sha1)
        except _WRITE_ERRORS:
            return self.resp  # the client went away
        finally:
            emu.release(self.group)
        _completed(emu)
        return self.resp


def _completed(emu: Emulator) -> None:
    emu.completed += 1
    die = emu.options.faults.die_after
    if die is not None and emu.completed >= die:
        # The last response's bytes are already in the kernel (the transport
        # writes straight to the socket); requests still in flight see a reset.
        print(f"findings-emulator: exiting abruptly after {emu.completed} completed requests (die_after)",
              file=sys.stderr, flush=True)
        os._exit(1)


async def _wait_finished(emu: Emulator, group: Group, fate: Fate) -> bool:
    """Wait for a non-streaming request; False when it hits a mid-generation error fault."""
    fault_at = max(1, group.seqs[0].max_new_tokens // 2)
    while not all(s.finished for s in group.seqs):
        if fate.error_mid and group.seqs[0].completion_tokens >= fault_at:
            return False
        await group.event.wait()
        group.event.clear()
        for seq in group.seqs:
            if emu.profile.firehose and not seq.finished:
                emu.resume(seq)
    return not fate.error_mid


async def _send_whole(request: web.Request, emu: Emulator, body: Any) -> web.StreamResponse:
    resp = web.json_response(body)
    try:
        await resp.prepare(request)
        await resp.write_eof()
    except _WRITE_ERRORS:
        return resp
    _completed(emu)
    return resp


# ---------------------------------------------------------------------------
# Handlers


@functools.lru_cache(maxsize=64)
def _firehose_parts(n: int) -> tuple[tuple[bytes, bytes], ...]:
    """Per token i: (the cumulative text after the marker, the cumulative output_ids), as JSON bytes."""
    words: list[str] = []
    ids: list[int] = []
    out = []
    for i in range(n):
        words.append(VOCAB[i % len(VOCAB)])
        ids.append(token_id(i % len(VOCAB)))
        out.append((json.dumps(" " + " ".join(words))[1:-1].encode(),
                    json.dumps(ids, separators=(",", ":")).encode()))
    return tuple(out)


async def _firehose_stream(request: web.Request, emu: Emulator, spec: SeqSpec) -> web.StreamResponse:
    """The firehose profile's /generate stream: no model, no engine, no delay.

    One event per token, written as soon as the previous write returned, with
    one yield to the event loop per event so that concurrent streams take
    turns. The bodies are SGLang's cumulative events, prebuilt per output
    length; each text starts with a marker unique to the request (``r<n>``),
    so that a client's generated text can be matched to the ground-truth log.
    The prompt still goes through the prefix cache (``Emulator.prefill_alone``),
    so ``cached_tokens`` and the cache metrics are those of the engine path.
    """
    arrival = _received(request)
    n = spec.max_new_tokens
    emu.firehose_seq += 1
    marker = f"r{emu.firehose_seq}"
    rid = spec.rid or uuid.uuid4().hex
    prompt_tokens = count_prompt_tokens(spec.prompt)
    emu.num_requests += 1
    emu.prompt_tokens += prompt_tokens
    cached = emu.prefill_alone(spec.prompt, prompt_tokens)
    head = b'data: {"text":"' + marker.encode()
    meta_head = b',"meta_info":{"id":' + json.dumps(rid).encode() + b',"finish_reason":'
    tail_fmt = ',"prompt_tokens":%d,"completion_tokens":%%d,"cached_tokens":%d' % (prompt_tokens, cached)
    gt = emu.options.ground_truth
    events: list[float] = []
    parts = _firehose_parts(n)
    resp = web.StreamResponse(status=200, headers=SSE_HEADERS)
    sleep = asyncio.sleep
    try:
        await resp.prepare(request)
        for i, (text, ids) in enumerate(parts):
            last = i == n - 1
            now = time.time()
            if emu.gt_log is not None:
                events.append(now)
            extra = ""
            if last:
                extra = ',"e2e_latency":%.6f' % (now - arrival)
            if gt:
                extra += ',"emulator_arrival_ts":%.6f,"emulator_event_ts":%.6f' % (arrival, now)
            reason = b'{"type":"length","length":%d}' % n if last else b"null"
            await resp.write(head + text + b'","output_ids":' + ids + meta_head + reason
                             + (tail_fmt % (i + 1) + extra).encode() + b"}}\n\n")
            emu.generation_tokens += 1
            if i == 0:
                emu.ttft.observe(now - arrival)
            await sleep(0)
        await resp.write(DONE)
        await resp.write_eof()
    except _WRITE_ERRORS:
        return resp
    emu.e2e.observe(time.time() - arrival)
    emu.cached_tokens += cached
    if emu.gt_log is not None:
        words = " ".join(VOCAB[i % len(VOCAB)] for i in range(n))
        emu.log_truth(rid, arrival, events, f"{marker} {words}" if n else marker)
    _completed(emu)
    return resp


async def handle_generate(request: web.Request) -> web.StreamResponse:
    emu = request.app[EMU]
    if not emu.ready:
        return _not_ready()
    try:
        specs, stream, batch = parse_generate(await _read_json(request))
    except BadRequest as exc:
        return _native_error(str(exc), 400, "BadRequestError")
    bad_ids = emu.check_ids(specs)
    if bad_ids:
        return _native_error(bad_ids, 400, "BadRequestError")
    f = emu.options.faults
    if (emu.profile.firehose and stream and not batch and specs[0].max_new_tokens > 0
            and not f.any):
        return await _firehose_stream(request, emu, specs[0])
    fate = emu.fate()
    if fate.error_before:
        emu.errors += 1
        return _native_error(*_fault_error(fate.status))
    group = emu.submit(specs, arrival=_received(request))
    gt = emu.options.ground_truth

    def event(i: int, seq: Seq) -> dict[str, Any]:
        out: dict[str, Any] = {"text": seq.text, "output_ids": list(seq.output_ids), "meta_info": emu.meta_info(seq)}
        if batch:
            out["index"] = i
        return out

    if stream:
        streamer = Streamer(request, emu, group, fate, "meta")
        return await streamer.run(lambda i, seq: [event(i, seq)], lambda: [])
    try:
        ok = await _wait_finished(emu, group, fate)
        if not ok:
            emu.errors += 1
            return _native_error("Emulated internal error (fault injection).", 500, "InternalServerError")
        results = [event(i, s) for i, s in enumerate(group.seqs)]
        if gt:
            for r in results:
                r["meta_info"].update({"emulator_arrival_ts": emu.tracks[group.seqs[0]].arrival,
                                       "emulator_event_ts": time.time()})
    finally:
        emu.release(group)
    return await _send_whole(request, emu, results if batch else results[0])


async def handle_openai(request: web.Request, chat: bool) -> web.StreamResponse:
    emu = request.app[EMU]
    if not emu.ready:
        return _not_ready()
    try:
        specs, opts = parse_openai(await _read_json(request), chat)
    except BadRequest as exc:
        return _openai_error(str(exc), 400, "BadRequestError")
    bad_ids = emu.check_ids(specs)
    if bad_ids:
        return _openai_error(bad_ids, 400, "BadRequestError")
    fate = emu.fate()
    if fate.error_before:
        emu.errors += 1
        return _openai_error(*_fault_error(fate.status))
    group = emu.submit(specs, arrival=_received(request))
    created = int(time.time())
    model = emu.model_name
    obj = "chat.completion" if chat else "text_completion"
    chunk_obj = "chat.completion.chunk" if chat else "text_completion"
    rid = group.seqs[0].rid
    spec_on = opts["spec_details"] and emu.profile.speculative

    def usage() -> dict[str, int]:
        p = sum(s.prompt_tokens for s in group.seqs)
        c = sum(s.completion_tokens for s in group.seqs)
        return {"prompt_tokens": p, "completion_tokens": c, "total_tokens": p + c}

    def chunk(choices: list[dict[str, Any]], **extra: Any) -> dict[str, Any]:
        return {"id": rid, "object": chunk_obj, "created": created, "model": model, "choices": choices, **extra}

    if opts["stream"]:
        offsets = [0] * len(group.seqs)
        started = [False] * len(group.seqs)

        def on_update(i: int, seq: Seq) -> list[dict[str, Any]]:
            delta_text = seq.text[offsets[i]:]
            offsets[i] = len(seq.text)
            finish = seq.finish_reason if seq.finished else None
            matched = finish.get("matched") if finish else None
            out: list[dict[str, Any]] = []
            cont = {"usage": usage()} if opts["continuous_usage_stats"] else {}
            if chat:
                if not started[i]:
                    started[i] = True
                    out.append(chunk([{"index": i, "delta": {"role": "assistant", "content": ""},
                                       "logprobs": None, "finish_reason": None}]))
                if delta_text:
                    out.append(chunk([{"index": i, "delta": {"content": delta_text}, "logprobs": None,
                                       "finish_reason": None, "matched_stop": None}], **cont))
                if finish:
                    out.append(chunk([{"index": i, "delta": {}, "logprobs": None,
                                       "finish_reason": finish["type"], "matched_stop": matched}]))
            else:
                out.append(chunk([{"index": i, "text": delta_text, "logprobs": None,
                                   "finish_reason": finish["type"] if finish else None,
                                   "matched_stop": matched}], **cont))
            return out

        def tail() -> list[dict[str, Any]]:
            out: list[dict[str, Any]] = []
            if spec_on:
                out.append(chunk([], sglext={"spec_tokens_details": emu.spec_details(group.seqs[0])}))
            if opts["include_usage"]:
                out.append(chunk([], usage=usage()))
            return out

        return await Streamer(request, emu, group, fate, "top").run(on_update, tail)

    try:
        ok = await _wait_finished(emu, group, fate)
        if not ok:
            emu.errors += 1
            return _openai_error("Emulated internal error (fault injection).", 500, "InternalServerError")
        choices = []
        for i, seq in enumerate(group.seqs):
            finish = seq.finish_reason or {}
            choice: dict[str, Any] = {"index": i, "logprobs": None, "finish_reason": finish.get("type"),
                                      "matched_stop": finish.get("matched")}
            if chat:
                choice["message"] = {"role": "assistant", "content": seq.text}
            else:
                choice["text"] = seq.text
            choices.append(choice)
        body: dict[str, Any] = {"id": rid, "object": obj, "created": created, "model": model,
                                "choices": choices, "usage": usage()}
        if spec_on:
            body["sglext"] = {"spec_tokens_details": emu.spec_details(group.seqs[0])}
        if emu.options.ground_truth:
            body["emulator"] = {"emulator_arrival_ts": emu.tracks[group.seqs[0]].arrival,
                                "emulator_event_ts": time.time()}
    finally:
        emu.release(group)
    return await _send_whole(request, emu, body)


async def handle_chat(request: web.Request) -> web.StreamResponse:
    return await handle_openai(request, chat=True)


async def handle_completions(request: web.Request) -> web.StreamResponse:
    return await handle_openai(request, chat=False)


async def handle_health(request: web.Request) -> web.Response:
    emu = request.app[EMU]
    if not emu.ready:
        return web.Response(status=503, text="")
    if request.path == "/health_generate":
        group = emu.submit([SeqSpec("health", None, 1, 0, (), frozenset())], internal=True)
        try:
            while not all(s.finished for s in group.seqs):
                await group.event.wait()
                group.event.clear()
        finally:
            emu.release(group)
    return web.Response(status=200, text="")


async def handle_server_info(request: web.Request) -> web.Response:
    return web.json_response(request.app[EMU].server_info())


async def handle_model_info(request: web.Request) -> web.Response:
    emu = request.app[EMU]
    doc: dict[str, Any] = {
        "model_path": emu.options.model_path or emu.model_name,
        "served_model_name": emu.model_name,
        "tokenizer_path": emu.options.model_path or emu.model_name,
        "architectures": ["FindingsEmulatorForCausalLM"],
        "is_generation": True,
        "weight_version": "default",
        "emulated": True,
    }
    if emu.options.model_path is None:
        doc["vocab_size"] = emu.vocab_size  # with a model folder, its config.json says it
    return web.json_response(doc)


async def handle_models(request: web.Request) -> web.Response:
    emu = request.app[EMU]
    return web.json_response({"object": "list", "data": [{
        "id": emu.model_name, "object": "model", "created": int(emu.started_wall), "owned_by": "sglang",
        "root": emu.model_name, "max_model_len": 32768,
    }]})


async def handle_flush_cache(request: web.Request) -> web.Response:
    emu = request.app[EMU]
    if emu.engine.busy:
        return web.Response(status=400, text="Cache not flushed. Please check if the server is idle.\n")
    emu.flush()
    return web.Response(status=200, text="Cache flushed.\nPlease check backend logs for more details. "
                                         "(When there are running or waiting requests, the operation will not be performed.)\n")


async def handle_metrics(request: web.Request) -> web.Response:
    return web.Response(text=request.app[EMU].metrics_text(), content_type="text/plain", charset="utf-8")


async def _label(request: web.Request, response: web.StreamResponse) -> None:
    response.headers[EMULATED_HEADER] = "1"


async def _scheduler(app: web.Application) -> AsyncIterator[None]:
    emu = app[EMU]
    emu.wake = asyncio.Event()  # bind to the running loop
    task = asyncio.create_task(emu.run(), name="findings-emulator-scheduler")
    yield
    task.cancel()
    try:
        await task
    except asyncio.CancelledError:
        pass


def build_app(options: EmulatorOptions) -> web.Application:
    """The aiohttp application; its scheduler loop starts with the app."""
    emu = Emulator(options)
    app = web.Application(client_max_size=64 * 1024 * 1024, middlewares=[_stamp_received])
    app[EMU] = emu
    app.on_response_prepare.append(_label)
    app.cleanup_ctx.append(_scheduler)
    r = app.router
    r.add_post("/generate", handle_generate)
    r.add_post("/v1/chat/completions", handle_chat)
    r.add_post("/v1/completions", handle_completions)
    r.add_get("/v1/models", handle_models)
    for path in ("/health", "/health_generate"):
        r.add_get(path, handle_health)
    for path in ("/server_info", "/get_server_info"):
        r.add_get(path, handle_server_info)
    for path in ("/model_info", "/get_model_info"):
        r.add_get(path, handle_model_info)
    r.add_post("/flush_cache", handle_flush_cache)
    r.add_get("/flush_cache", handle_flush_cache)
    r.add_get("/metrics", handle_metrics)
    return app


async def _serve(options: EmulatorOptions) -> None:
    app = build_app(options)
    sock = socket.socket(socket.AF_INET6 if ":" in options.host else socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((options.host, options.port))
    except OSError as exc:
        sock.close()
        raise FindingsError(f"emulator: cannot listen on {options.host}:{options.port}: {exc.strerror or exc}") from exc
    sock.listen(1024)
    sock.setblocking(False)
    runner = web.AppRunner(app, access_log=None, handle_signals=False, shutdown_timeout=0.5)
    await runner.setup()
    assert runner.server is not None
    inner = runner.server
    loop = asyncio.get_running_loop()
    listener = await loop.create_server(lambda: _Stamping(inner()), sock=sock, backlog=1024)
    port = sock.getsockname()[1]
    app[EMU].options = replace(options, port=port)
    print(f"findings-emulator: profile {app[EMU].profile.name} listening on http://{options.host}:{port} (SIMULATED)",
          flush=True)
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    try:
        await stop.wait()
    finally:
        listener.close()
        await runner.cleanup()


def serve(options: EmulatorOptions) -> None:
    """Blocking. Binds, then prints exactly one line to stdout and flushes it::

        findings-emulator: profile NAME listening on http://HOST:PORT (SIMULATED)

    with the real port (``port=0`` picks a free one). Serves until SIGTERM or
    SIGINT, then returns normally. Raises FindingsError when it cannot bind
    and ValueError for an unknown profile or a non-positive speed.
    """
    Emulator(options)  # validate before binding
    if options.ground_truth_log:
        try:
            open(options.ground_truth_log, "a", encoding="utf-8").close()
        except OSError as exc:
            raise FindingsError(f"{options.ground_truth_log}: cannot write the ground-truth log: "
                                f"{cause(exc)}") from None
    asyncio.run(_serve(options))
