"""The SGLang-API emulator's HTTP server (aiohttp.web) and scheduler loop.

This is the only module of the emulator that imports aiohttp. The engine
(findings/emulator/engine.py) and the performance model (model.py) are pure;
this module adds wall-clock time, sockets, streaming, metrics and faults.

Every response carries ``X-Findings-Emulated: 1``; ``/server_info`` says
``"emulated": true``; the model is called ``findings-emulator/<profile>``.
docs/emulator.md describes the endpoints, the model and the options.
"""

from __future__ import annotations

import asyncio
import functools
import hashlib
import json
import os
import signal
import socket
import sys
import time
import uuid
from collections import deque
from dataclasses import dataclass, field, replace
from typing import Any, AsyncIterator, Callable, Iterable

from aiohttp import web

from findings.emulator.engine import (VOCAB, Engine, Seq, Step, StepResult, count_prompt_tokens, seed_for,
                                      token_id)
from findings.emulator.model import PROFILES, Profile, mean_accept_length
from findings.emulator.protocol import BadRequest, SeqSpec, parse_generate, parse_openai
from findings import jsonfast
from findings.errors import FindingsError

__all__ = ["EmulatorOptions", "Faults", "build_app", "serve"]

VERSION = "0.5.23-emulated"
EMULATED_HEADER = "X-Findings-Emulated"
#: How far (wall seconds) the scheduler may fall behind its deadline and still catch up.
MAX_DEBT_S = 0.1
#: The scheduler sleeps until this long before a step's deadline, then yields
#: to the event loop until the deadline: the selector rounds sleeps up to
#: whole milliseconds, which alone would make every step up to 1 ms late.
SPIN_S = 0.0012
#: Step lateness samples kept for /server_info (since the last /flush_cache).
LATENESS_SAMPLES = 200_000


@dataclass(frozen=True)
class Faults:
    """Injected failures. Each request's fate is drawn from (seed, arrival number)."""

    error_rate: float = 0.0  # half HTTP 500 before streaming, half an {"error": ...} event mid-stream
    drop_rate: float = 0.0  # streams whose TCP connection is closed abruptly mid-stream (no [DONE])
    stall_rate: float = 0.0  # streams that send nothing for stall_s seconds mid-stream
    stall_s: float = 30.0  # wall seconds (not divided by speed)
    die_after: int | None = None  # os._exit(1) after this many completed requests


@dataclass(frozen=True)
class EmulatorOptions:
    host: str = "127.0.0.1"
    port: int = 30000  # 0 = ephemeral
    profile: str = "baseline"
    seed: int = 0
    speed: float = 1.0  # all model time divided by this
    ground_truth: bool = False  # emulator timestamps in every event
    startup_delay_s: float = 0.0  # /health* (and generation) answer 503 this long after start
    max_running_requests: int | None = None  # None = profile default
    faults: Faults = Faults()
    ground_truth_log: str | None = None  # JSONL: one line per finished request (arrival, every write)


# ---------------------------------------------------------------------------
# Metrics (Prometheus text format, SGLang's names)

TTFT_BUCKETS = (0.1, 0.2, 0.4, 0.6, 0.8, 1.0, 2.0, 4.0, 6.0, 8.0, 10.0, 20.0, 40.0, 60.0, 80.0, 120.0, 160.0)
ITL_BUCKETS = (0.002, 0.004, 0.006, 0.008, 0.01, 0.015, 0.02, 0.025, 0.03, 0.035, 0.04, 0.05, 0.075,
               0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.0)  # fmt: skip
E2E_BUCKETS = (0.1, 0.2, 0.4, 0.8, 1.0, 2.0, 5.0, 10.0, 20.0, 40.0, 60.0, 80.0, 100.0, 150.0, 200.0,
               250.0, 300.0, 350.0, 500.0, 1000.0)  # fmt: skip


@dataclass
class Histogram:
    buckets: tuple[float, ...]
    counts: list[int] = field(default_factory=list)
    total: float = 0.0
    count: int = 0

    def __post_init__(self) -> None:
        self.counts = [0] * len(self.buckets)

    def observe(self, value: float) -> None:
        self.total += value
        self.count += 1
        for i, le in enumerate(self.buckets):
            if value <= le:
                self.counts[i] += 1
                break

    def lines(self, name: str, labels: str) -> list[str]:
        out = [f"# HELP {name} Histogram of {name.split(':', 1)[1]}.", f"# TYPE {name} histogram"]
        cumulative = 0
        for le, c in zip(self.buckets, self.counts):
            cumulative += c
            out.append(f'{name}_bucket{{le="{le}",{labels}}} {float(cumulative)}')
        out.append(f'{name}_bucket{{le="+Inf",{labels}}} {float(self.count)}')
        out.append(f"{name}_count{{{labels}}} {float(self.count)}")
        out.append(f"{name}_sum{{{labels}}} {self.total}")
        return out


@dataclass
class Track:
    """Wall-clock timing of one request (per sequence)."""

    arrival: float
    tokens: int = 0
    first_token: float | None = None
    last_token: float | None = None
    finished: float | None = None


@dataclass
class Group:
    """The sequences of one HTTP request, woken together."""

    seqs: list[Seq]
    event: asyncio.Event = field(default_factory=asyncio.Event)


@dataclass(frozen=True)
class Fate:
    error_before: bool = False
    error_mid: bool = False
    drop: bool = False
    stall: bool = False


# ---------------------------------------------------------------------------
# The emulator state and scheduler loop


class Emulator:
    def __init__(self, options: EmulatorOptions) -> None:
        if options.profile not in PROFILES:
            raise ValueError(f"unknown profile {options.profile!r}; choose from {', '.join(PROFILES)}")
        if options.speed <= 0:
            raise ValueError("speed must be > 0")
        self.options = options
        self.profile: Profile = PROFILES[options.profile]
        self.model_name = f"findings-emulator/{self.profile.name}"
        self.engine = Engine(self.profile, options.max_running_requests)
        self.started = time.monotonic()
        self.started_wall = time.time()
        self.wake = asyncio.Event()
        self.groups: dict[Seq, Group] = {}
        self.tracks: dict[Seq, Track] = {}
        self.arrivals = 0
        self.next_sid = 0
        self.completed = 0
        # Counters.
        self.generation_tokens = 0
        self.prompt_tokens = 0
        self.num_requests = 0
        self.verify_calls = 0
        self.errors = 0
        # Lifetime speculative average since the last /flush_cache (decode tokens / verify calls).
        self.life_spec_tokens = 0
        self.life_verify = 0
        # (wall time, generation tokens, decode-step tokens, verify calls) after each step.
        self.samples: deque[tuple[float, int, int, int]] = deque(maxlen=4096)
        self.decode_tokens = 0
        self.ttft = Histogram(TTFT_BUCKETS)
        self.itl = Histogram(ITL_BUCKETS)
        self.e2e = Histogram(E2E_BUCKETS)
        # How late each model step ran against its schedule (seconds), since the last flush.
        self.lateness: deque[float] = deque(maxlen=LATENESS_SAMPLES)
        self.firehose_seq = 0
        #: Where ground-truth lines go (opened on the first line: serve() builds
        #: a throwaway Emulator to validate the options, which must not touch it).
        self.gt_log = options.ground_truth_log
        self._gt_file: Any = None

    def log_truth(self, rid: str, arrival: float, events: list[float], text: str) -> None:
        """One ground-truth line per finished request: the server's own clock."""
        if self.gt_log is None:
            return
        line = {"rid": rid, "arrival": arrival, "events": events,
                "text_sha1": hashlib.sha1(text.encode()).hexdigest()}
        if self._gt_file is None:
            self._gt_file = open(self.gt_log, "a", encoding="utf-8")  # noqa: SIM115 (open for the process's life)
        self._gt_file.write(json.dumps(line, separators=(",", ":")) + "\n")
        self._gt_file.flush()

    def schedule_stats(self) -> dict[str, Any]:
        """Step lateness against the model's schedule since the last /flush_cache (ms)."""
        late = sorted(self.lateness)
        if not late:
            return {"steps": 0}

        def q(f: float) -> float:
            return round(late[min(len(late) - 1, int(f * (len(late) - 1) + 0.5))] * 1000, 4)

        return {"steps": len(late), "lateness_p50_ms": q(0.5), "lateness_p99_ms": q(0.99),
                "lateness_max_ms": round(late[-1] * 1000, 4)}

    # -- readiness and faults -----------------------------------------------
    @property
    def ready(self) -> bool:
        return time.monotonic() - self.started >= self.options.startup_delay_s

    def fate(self) -> Fate:
        f = self.options.faults
        n = self.arrivals
        self.arrivals += 1
        if not (f.error_rate or f.drop_rate or f.stall_rate):
            return Fate()

        def u(kind: str) -> float:
            return (seed_for("fault", kind, self.options.seed, n) % 1_000_000) / 1_000_000

        e = u("error")
        return Fate(
            error_before=e < f.error_rate / 2,
            error_mid=f.error_rate / 2 <= e < f.error_rate,
            drop=u("drop") < f.drop_rate,
            stall=u("stall") < f.stall_rate,
        )

    # -- submission -----------------------------------------------------------
    def submit(self, specs: list[SeqSpec], internal: bool = False, arrival: float | None = None) -> Group:
        now = arrival if arrival is not None else time.time()
        seqs = []
        for spec in specs:
            sid = self.next_sid
            self.next_sid += 1
            rid = spec.rid or uuid.uuid4().hex
            prompt_tokens = count_prompt_tokens(spec.prompt)
            key = spec.prompt if isinstance(spec.prompt, str) else ",".join(map(str, spec.prompt))
            seq = Seq(
                sid=sid, rid=rid, prompt_tokens=prompt_tokens, max_new_tokens=spec.max_new_tokens,
                min_new_tokens=spec.min_new_tokens, stop=spec.stop, stop_token_ids=spec.stop_token_ids,
                seed=seed_for(self.options.seed, spec.rid if spec.rid else key),
                internal=internal, prompt_key=key,
            )
            seqs.append(seq)
        group = Group(seqs)
        for seq in seqs:
            self.groups[seq] = group
            self.tracks[seq] = Track(arrival=now)
            if not internal:
                self.num_requests += 1
                self.prompt_tokens += seq.prompt_tokens
            self.engine.add(seq)
        self.wake.set()
        return group

    def release(self, group: Group) -> None:
        """Forget a request's sequences; abort the unfinished ones."""
        for seq in group.seqs:
            if not seq.finished:
                self.engine.abort(seq)
            self.groups.pop(seq, None)
            self.tracks.pop(seq, None)

    def resume(self, seq: Seq) -> None:
        """Firehose: the client has the previous token; the engine may give the next."""
        if seq.paused:
            seq.paused = False
            self.wake.set()

    # -- the scheduler loop ---------------------------------------------------
    async def run(self) -> None:
        loop = asyncio.get_running_loop()
        deadline = loop.time()
        speed = self.options.speed
        while True:
            step = self.engine.next_step()
            if step is None:
                self.wake.clear()
                await self.wake.wait()
                deadline = loop.time()
                continue
            now = loop.time()
            deadline = max(deadline, now - MAX_DEBT_S) + step.duration_ms / 1000.0 / speed
            if deadline - now > SPIN_S:
                await asyncio.sleep(deadline - now - SPIN_S)
            await asyncio.sleep(0)  # always let the streams write the last step's tokens first
            while loop.time() < deadline:
                await asyncio.sleep(0)
            self.lateness.append(loop.time() - deadline)
            self._after(step, self.engine.apply(step))

    def _after(self, step: Step, result: StepResult) -> None:
        now = time.time()
        self.generation_tokens += result.tokens
        if step.kind == "decode":
            self.decode_tokens += result.tokens
            if self.profile.speculative:
                self.verify_calls += result.verify_calls
                self.life_verify += result.verify_calls
                self.life_spec_tokens += result.tokens
        self.samples.append((now, self.generation_tokens, self.decode_tokens, self.verify_calls))
        woken: set[int] = set()
        for seq in result.updated:
            track = self.tracks.get(seq)
            if track is not None and not seq.internal:
                if track.first_token is None:
                    if seq.completion_tokens:
                        track.first_token = now
                        self.ttft.observe(now - track.arrival)
                elif track.last_token is not None and seq.completion_tokens > track.tokens:
                    self.itl.observe((now - track.last_token) / (seq.completion_tokens - track.tokens))
                if seq.completion_tokens > track.tokens:
                    track.last_token = now
                    track.tokens = seq.completion_tokens
                if seq.finished:
                    track.finished = now
                    self.e2e.observe(now - track.arrival)
            elif track is not None and seq.finished:
                track.finished = now
            if self.profile.firehose and not seq.finished:
                seq.paused = True
            group = self.groups.get(seq)
            if group is not None and id(group) not in woken:
                woken.add(id(group))
                group.event.set()

    # -- reporting --------------------------------------------------------------
    def window(self, seconds: float = 2.0) -> tuple[float, float | None]:
        """(generation tokens/s, decode tokens per verify call) over the last ``seconds``."""
        now = time.time()
        recent = [s for s in self.samples if s[0] >= now - seconds]
        if len(recent) < 2 or recent[-1][0] <= recent[0][0]:
            return 0.0, None
        first, last = recent[0], recent[-1]
        rate = (last[1] - first[1]) / (last[0] - first[0])
        verify = last[3] - first[3]
        return rate, ((last[2] - first[2]) / verify if verify else None)

    def lifetime_accept(self) -> float | None:
        if not self.life_verify:
            return None
        return self.life_spec_tokens / self.life_verify

    def flush(self) -> None:
        self.engine.flush_cache()
        self.life_spec_tokens = self.life_verify = 0
        self.lateness.clear()

    def server_info(self) -> dict[str, Any]:
        p, o = self.profile, self.options
        spec = p.speculative
        max_running = self.engine.max_running
        launch = (f"python -m sglang.launch_server --model-path {self.model_name} --tp-size 8 "
                  f"--load-format dummy --enable-metrics --max-running-requests {max_running}")
        if spec:
            launch += (f" --speculative-algorithm {p.speculative_algorithm} --speculative-draft-model-path "
                       f"findings-emulator/eagle3-draft --speculative-num-steps {p.speculative_num_steps} "
                       f"--speculative-eagle-topk {p.speculative_eagle_topk} "
                       f"--speculative-num-draft-tokens {p.speculative_num_draft_tokens}")
            if not p.overlap:
                launch += " --disable-overlap-schedule"
        rate, _ = self.window()
        state: dict[str, Any] = {"last_gen_throughput": rate}
        if spec:
            state["avg_spec_accept_length"] = self.lifetime_accept()
        return {
            "model_path": self.model_name,
            "served_model_name": self.model_name,
            "tokenizer_path": self.model_name,
            "host": o.host,
            "port": o.port,
            "tp_size": 8,
            "dp_size": 1,
            "pp_size": 1,
            "ep_size": 1,
            "dtype": "bfloat16",
            "kv_cache_dtype": "auto",
            "quantization": None,
            "load_format": "dummy",
            "attention_backend": "flashinfer",
            "max_running_requests": max_running,
            "max_prefill_tokens": p.max_prefill_tokens,
            "chunked_prefill_size": 8192,
            "cuda_graph_max_bs": max_running,
            "mem_fraction_static": 0.85,
            "schedule_policy": "fcfs",
            "random_seed": o.seed,
            "disable_overlap_schedule": not p.overlap,
            "speculative_algorithm": p.speculative_algorithm,
            "speculative_draft_model_path": "findings-emulator/eagle3-draft" if spec else None,
            "speculative_num_steps": p.speculative_num_steps,
            "speculative_eagle_topk": p.speculative_eagle_topk,
            "speculative_num_draft_tokens": p.speculative_num_draft_tokens,
            "speculative_adaptive": False,
            "enable_metrics": True,
            "skip_tokenizer_init": False,
            "launch_command": launch,
            "version": VERSION,
            "emulated": True,
            "emulator_schedule": self.schedule_stats(),
            "emulator_profile": p.name,
            "emulator_worker": p.worker,
            "emulator_speed": o.speed,
            "emulator_expected_accept_length": mean_accept_length(p) if spec else None,
            "emulator_errors_injected": self.errors,
            "internal_states": [state],
        }

    def metrics_text(self) -> str:
        labels = f'model_name="{self.model_name}"'
        rate, accept = self.window()
        lines: list[str] = []

        def metric(name: str, kind: str, value: float, help_: str) -> None:
            lines.extend([f"# HELP {name} {help_}", f"# TYPE {name} {kind}", f"{name}{{{labels}}} {float(value)}"])

        metric("sglang:generation_tokens_total", "counter", self.generation_tokens, "Number of generation tokens processed.")
        metric("sglang:prompt_tokens_total", "counter", self.prompt_tokens, "Number of prefill tokens processed.")
        metric("sglang:num_requests_total", "counter", self.num_requests, "Number of requests received.")
        metric("sglang:spec_verify_calls_total", "counter", self.verify_calls, "Number of speculative verify calls.")
        metric("sglang:num_running_reqs", "gauge", sum(not s.internal for s in self.engine.running), "The number of running requests.")
        metric("sglang:num_queue_reqs", "gauge", sum(not s.internal for s in self.engine.waiting), "The number of requests in the waiting queue.")
        metric("sglang:gen_throughput", "gauge", rate, "The generation throughput (token/s).")
        metric("sglang:spec_accept_length", "gauge", accept or 0.0, "The average acceptance length of speculative decoding.")
        metric("sglang:token_usage", "gauge", min(1.0, self.engine.kv_tokens() / self.profile.kv_capacity_tokens), "The token usage.")
        lines += self.ttft.lines("sglang:time_to_first_token_seconds", labels)
        lines += self.itl.lines("sglang:inter_token_latency_seconds", labels)
        lines += self.e2e.lines("sglang:e2e_request_latency_seconds", labels)
        return "\n".join(lines) + "\n"

    # -- response bodies ----------------------------------------------------------
    def meta_info(self, seq: Seq) -> dict[str, Any]:
        meta: dict[str, Any] = {
            "id": seq.rid,
            "finish_reason": seq.finish_reason if seq.finished else None,
            "prompt_tokens": seq.prompt_tokens,
            "completion_tokens": seq.completion_tokens,
            "cached_tokens": seq.cached_tokens,
        }
        if seq.finished:
            track = self.tracks.get(seq)
            if track is not None:
                meta["e2e_latency"] = (track.finished or time.time()) - track.arrival
            if self.profile.speculative:
                meta.update(self.spec_fields(seq))
        return meta

    def spec_fields(self, seq: Seq) -> dict[str, Any]:
        proposed = seq.verify_ct * (self.profile.speculative_num_steps or 0)
        return {
            "spec_verify_ct": seq.verify_ct,
            "spec_accept_length": seq.completion_tokens / seq.verify_ct if seq.verify_ct else 0.0,
            "spec_accept_rate": seq.correct_drafts / proposed if proposed else 0.0,
            "spec_num_correct_drafts": seq.correct_drafts,
            "spec_num_proposed_drafts": proposed,
        }

    def spec_details(self, seq: Seq) -> dict[str, Any]:
        details = self.spec_fields(seq)
        details["spec_correct_drafts_histogram"] = list(seq.histogram)
        return details


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
            emu.log_truth(first.rid, self.arrival, self.event_ts, first.text)
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
    """
    arrival = _received(request)
    n = spec.max_new_tokens
    emu.firehose_seq += 1
    marker = f"r{emu.firehose_seq}"
    rid = spec.rid or uuid.uuid4().hex
    prompt_tokens = count_prompt_tokens(spec.prompt)
    emu.num_requests += 1
    emu.prompt_tokens += prompt_tokens
    head = b'data: {"text":"' + marker.encode()
    meta_head = b',"meta_info":{"id":' + json.dumps(rid).encode() + b',"finish_reason":'
    tail_fmt = ',"prompt_tokens":%d,"completion_tokens":%%d,"cached_tokens":0' % prompt_tokens
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
    f = emu.options.faults
    if (emu.profile.firehose and stream and not batch and specs[0].max_new_tokens > 0
            and not (f.error_rate or f.drop_rate or f.stall_rate)):
        return await _firehose_stream(request, emu, specs[0])
    fate = emu.fate()
    if fate.error_before:
        emu.errors += 1
        return _native_error("Emulated internal error (fault injection).", 500, "InternalServerError")
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
    fate = emu.fate()
    if fate.error_before:
        emu.errors += 1
        return _openai_error("Emulated internal error (fault injection).", 500, "InternalServerError")
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
    return web.json_response({
        "model_path": emu.model_name,
        "served_model_name": emu.model_name,
        "tokenizer_path": emu.model_name,
        "architectures": ["FindingsEmulatorForCausalLM"],
        "is_generation": True,
        "weight_version": "default",
        "emulated": True,
    })


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
    print(f"findings-emulator: profile {options.profile} listening on http://{options.host}:{port} (SIMULATED)",
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
                                f"{exc.strerror or exc}") from None
    asyncio.run(_serve(options))
