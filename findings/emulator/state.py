"""The emulator's state and scheduler loop: wall-clock time over the pure engine.

No HTTP here (findings/emulator/server.py serves it): this module keeps the
requests, drives the engine's steps against a monotonic schedule, counts
what SGLang's ``/metrics`` and ``/server_info`` report, and builds the
``meta_info`` of responses.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import sys
import time
import uuid
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from findings.core.diskio import cause
from findings.emulator import faults
from findings.emulator.engine import PAGE_SIZE, Engine, Seq, Step, StepResult, count_prompt_tokens, seed_for
from findings.emulator.faults import Fate, Faults
from findings.emulator.metrics import E2E_BUCKETS, ITL_BUCKETS, TTFT_BUCKETS, Histogram
from findings.core.engine_rules import SglangSpec
from findings.emulator.model import PROFILES, Profile, accept_p, mean_accept_length, profile_from_flags
from findings.emulator.protocol import SeqSpec
from findings.core.errors import FindingsError

VERSION = "0.5.23-emulated"
#: How far (wall seconds) the scheduler may fall behind its deadline and still catch up.
MAX_DEBT_S = 0.1
#: The scheduler sleeps until this long before a step's deadline, then yields
#: to the event loop until the deadline: the selector rounds sleeps up to
#: whole milliseconds, which alone would make every step up to 1 ms late.
SPIN_S = 0.0012
#: Step lateness samples kept for /server_info (since the last /flush_cache).
LATENESS_SAMPLES = 200_000


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
    #: Token ids at or past this are refused (HTTP 400), as a real model's
    #: embedding fails on them; /model_info reports it (no --model-path).
    vocab_size: int = 32000
    #: A model folder (its config.json's vocab_size is the vocabulary);
    #: /model_info names it as model_path, as SGLang names the model it serves.
    model_path: str | None = None
    #: Tokens per page of the prefix cache (``--prefix-page-size``): prompts share
    #: cached tokens in whole pages (engine.Engine says how).
    prefix_page_size: int = PAGE_SIZE
    #: SGLang's speculative flags, normalized (engine_rules.sglang_normalize):
    #: the profile is built from them (model.profile_from_flags) instead of ``profile``.
    spec: SglangSpec | None = None


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


# ---------------------------------------------------------------------------
# The emulator state and scheduler loop


def model_vocab(folder: str) -> int:
    """A model folder's vocabulary size (config.json ``vocab_size``)."""
    try:
        doc = json.loads((Path(folder) / "config.json").read_text(encoding="utf-8"))
        n = doc["vocab_size"]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise FindingsError(f"--model-path {folder}: no config.json with a vocab_size ({exc})") from None
    if type(n) is not int or n < 2:
        raise FindingsError(f"--model-path {folder}: config.json vocab_size must be an integer >= 2")
    return n


class Emulator:
    def __init__(self, options: EmulatorOptions) -> None:
        if options.spec is None and options.profile not in PROFILES:
            raise ValueError(f"unknown profile {options.profile!r}; choose from {', '.join(PROFILES)}")
        if options.speed <= 0:
            raise ValueError("speed must be > 0")
        if options.prefix_page_size < 1:
            raise ValueError("prefix_page_size must be >= 1")
        faults.validate(options.faults)
        self.options = options
        self.profile: Profile = (PROFILES[options.profile] if options.spec is None
                                 else profile_from_flags(options.spec))
        self.model_name = f"findings-emulator/{self.profile.name}"
        self.vocab_size = options.vocab_size if options.model_path is None else model_vocab(options.model_path)
        self.engine = Engine(self.profile, options.max_running_requests, page_size=options.prefix_page_size)
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
        #: sglang:cached_tokens_total: cached prompt tokens of the finished requests.
        self.cached_tokens = 0
        #: sglang:cache_hit_rate: as SGLang 0.5.23 sets it on each prefill batch
        #: (MetricsReporter.report_prefill_stats), the last prefill step's cached
        #: prompt tokens / its prompt tokens (cached + computed); steps with only
        #: internal requests leave it as it is; a flush does not reset it (nor does SGLang's).
        self.cache_hit_rate = 0.0
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

    def log_truth(self, rid: str, arrival: float, events: list[float], text: str,
                  messages_sha1: tuple[str, ...] = ()) -> None:
        """One ground-truth line per finished request: the server's own clock,
        and (chat) the sha1 of each message it was sent."""
        if self.gt_log is None:
            return
        line: dict[str, Any] = {"rid": rid, "arrival": arrival, "events": events,
                                "text_sha1": hashlib.sha1(text.encode()).hexdigest()}
        if messages_sha1:
            line["messages_sha1"] = list(messages_sha1)
        try:
            if self._gt_file is None:
                self._gt_file = open(self.gt_log, "a", encoding="utf-8")  # noqa: SIM115 (open for the process's life)
            self._gt_file.write(json.dumps(line, separators=(",", ":")) + "\n")
            self._gt_file.flush()
        except OSError as exc:  # say it once, keep serving; the log ends here
            print(f"findings-emulator: {self.gt_log}: cannot write the ground-truth log: {cause(exc)}; "
                  f"it stops here, serving goes on", file=sys.stderr, flush=True)
            self.gt_log = None

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
        n = self.arrivals
        self.arrivals += 1
        return faults.fate(self.options.faults, self.options.seed, n)

    def check_ids(self, specs: list[SeqSpec]) -> str | None:
        """Why a request's token ids cannot be embedded (None: they can), as
        SGLang's embedding fails on an id past the vocabulary."""
        for spec in specs:
            if isinstance(spec.prompt, list):
                bad = [t for t in spec.prompt if not 0 <= t < self.vocab_size]
                if bad:
                    return (f"index out of range: token id {bad[0]} is not in the vocabulary "
                            f"of {self.vocab_size} tokens")
        return None

    # -- submission -----------------------------------------------------------
    def submit(self, specs: list[SeqSpec], internal: bool = False, arrival: float | None = None) -> Group:
        now = arrival if arrival is not None else time.time()
        seqs = []
        for spec in specs:
            sid = self.next_sid
            self.next_sid += 1
            rid = spec.rid or uuid.uuid4().hex
            prompt_tokens = count_prompt_tokens(spec.prompt)
            if spec.rid:
                seed = seed_for(self.options.seed, spec.rid)
            else:
                key = spec.prompt if isinstance(spec.prompt, str) else ",".join(map(str, spec.prompt))
                seed = seed_for(self.options.seed, key)
            seq = Seq(
                sid=sid, rid=rid, prompt_tokens=prompt_tokens, max_new_tokens=spec.max_new_tokens,
                min_new_tokens=spec.min_new_tokens, stop=spec.stop, stop_token_ids=spec.stop_token_ids,
                seed=seed, internal=internal, page_keys=self.engine.page_keys(spec.prompt),
                accept_p=accept_p(self.profile, spec.prompt) if self.profile.speculative else None,
                messages_sha1=tuple(hashlib.sha1(m.encode()).hexdigest() for m in spec.messages),
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

    def prefill_alone(self, prompt: str | list[int], prompt_tokens: int) -> int:
        """The firehose fast path's prefill, which runs no engine step: look the
        prompt up in the prefix cache and put its pages in, as a prefill step of
        its own would; it sets the hit-rate gauge. Returns its cached tokens (the
        caller counts them in cached_tokens_total when the request finishes)."""
        keys = self.engine.page_keys(prompt)
        cached = self.engine.match(keys, prompt_tokens)
        self.engine.insert(keys)
        self.cache_hit_rate = cached / prompt_tokens if prompt_tokens else 0.0
        return cached

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
        if step.kind == "prefill":
            counted = [s for s in step.seqs if not s.internal and not s.aborted]
            total = sum(s.prompt_tokens for s in counted)
            if total:
                self.cache_hit_rate = sum(s.cached_tokens for s in counted) / total
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
                    self.cached_tokens += seq.cached_tokens  # SGLang counts it as a request finishes
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

        def metric(name: str, kind: str, value: float, help_: str, extra: str = "") -> None:
            lines.extend([f"# HELP {name} {help_}", f"# TYPE {name} {kind}",
                          f"{name}{{{labels}{extra}}} {float(value)}"])

        metric("sglang:generation_tokens_total", "counter", self.generation_tokens, "Number of generation tokens processed.")
        metric("sglang:prompt_tokens_total", "counter", self.prompt_tokens, "Number of prefill tokens processed.")
        metric("sglang:num_requests_total", "counter", self.num_requests, "Number of requests received.")
        # SGLang 0.5.23 labels it by where the tokens were found; the emulator's cache is all "device".
        metric("sglang:cached_tokens_total", "counter", self.cached_tokens,
               "Number of cached prompt tokens by source (device/host/storage).", ',cache_source="device"')
        metric("sglang:spec_verify_calls_total", "counter", self.verify_calls, "Number of speculative verify calls.")
        metric("sglang:num_running_reqs", "gauge", sum(not s.internal for s in self.engine.running), "The number of running requests.")
        metric("sglang:num_queue_reqs", "gauge", sum(not s.internal for s in self.engine.waiting), "The number of requests in the waiting queue.")
        metric("sglang:gen_throughput", "gauge", rate, "The generation throughput (token/s).")
        metric("sglang:cache_hit_rate", "gauge", self.cache_hit_rate, "The prefix cache hit rate.")
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
