"""Raw per-request records, as measured. Everything else is derived from them."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class RequestRecord:
    """One request. Times are ``time.perf_counter()`` seconds; ``sent`` is
    taken immediately before the request is written to the connection."""

    index: int
    input_len: int
    sent: float = 0.0
    sent_wall: float = 0.0  # time.time() at ``sent``, to compare with server clocks
    first_token: float | None = None
    end: float | None = None
    #: Per event that added tokens: (perf_counter time, cumulative completion tokens).
    events: list[tuple[float, int]] = field(default_factory=list)
    output_tokens: int = 0
    prompt_tokens: int | None = None
    error: str = ""
    error_type: str = ""  # http_500, http_503, http_4xx, connect, reset, timeout, sse, server_error, incomplete
    spec_verify_ct: int | None = None
    spec_accept_length: float | None = None
    server_arrival_wall: float | None = None  # ground truth from the emulator
    server_first_event_wall: float | None = None
    #: The emulator's write time of each entry of ``events`` (ground truth), when it sends them.
    server_event_walls: list[float] = field(default_factory=list)
    finish_reason: str | None = None
    body_written: bool = False  # the transport saw the body go to the socket (and restarted ``sent``)
    #: Per-response speculation counts: llama.cpp's ``timings.draft_n`` and
    #: ``draft_n_accepted``; vLLM's ``metrics.speculative_decoding``
    #: ``num_draft_tokens`` and ``num_accepted_draft_tokens``.
    draft_n: int | None = None
    draft_accepted: int | None = None
    #: vLLM's verify steps that drafted (``num_spec_steps``), with
    #: ``--per-request-spec-decode-metrics``: its accept length is
    #: 1 + accepted / steps, as its counters define it.
    spec_steps: int | None = None
    #: Prompt tokens the server reused from its cache (SGLang ``meta_info.cached_tokens``,
    #: OpenAI ``usage.prompt_tokens_details.cached_tokens``, llama.cpp ``timings.cache_n``).
    cached_tokens: int | None = None
    #: The server's own per-response figures, where it sends them (llama.cpp ``timings``):
    #: tokens generated, prompt tokens evaluated, and the milliseconds of each phase.
    server_output_tokens: int | None = None
    server_prompt_eval: int | None = None
    server_prompt_ms: float | None = None
    server_decode_ms: float | None = None
    reconnects: int = 0  # times the request was sent again because a kept-alive connection was closed
    #: Prompt sets: which turn of its conversation this request was (1 = the
    #: first), and the conversation's category (None: the set names none).
    turn: int = 1
    category: str | None = None
    #: The reply's text, kept only while a later turn needs it (never stored).
    reply: list[str] | None = None
    #: An open loop's first turns: when the send was due on the schedule, and
    #: when a slot under the cap was free (perf_counter seconds; the body's
    #: write is ``sent``); None in a closed loop.
    scheduled: float | None = None
    admitted: float | None = None
    #: Which worker process sent it (findings/bench/workers; 0 in one process).
    worker: int = 0

    @property
    def ok(self) -> bool:
        return not self.error and self.end is not None


@dataclass(frozen=True)
class PointOutcome:
    """A measured point: raw records plus what the client saw around them."""

    records: tuple[RequestRecord, ...]
    started: float  # perf_counter at the first send
    finished: float  # perf_counter when the last request ended
    planned: int
    lag_samples_ms: tuple[float, ...]
    cpu_s: float | None = None  # CPU time of the client process over the point (all its threads)
    #: /metrics counters, scraped after the warm-up and after the last request,
    #: so that their deltas cover exactly the point's requests.
    metrics_before: dict[str, float] | None = None
    metrics_after: dict[str, float] | None = None
    #: perf_counter times bounding the counters' window: when the first scrape's
    #: answer arrived and when the second scrape was sent.
    metrics_window: tuple[float, float] | None = None
    interrupted: bool = False
    #: The server's running-requests gauge, sampled during the point (its
    #: batch size, which is what the engines' speculation schedules switch on).
    running_samples: tuple[float, ...] = ()
    #: Seconds between those samples (None: not sampled).
    running_interval_s: float | None = None
    #: perf_counter time of each of ``running_samples``.
    running_times: tuple[float, ...] = ()
    #: An open loop: the perf_counter time its schedule's offsets count from.
    schedule_start: float | None = None
    #: A profile's phase ends (seconds from ``schedule_start``), and the
    #: workload's SLO (TTFT ms, TPOT ms; None: none), for the point's metrics.
    phase_ends: tuple[float, ...] = ()
    slo: tuple[float | None, float | None] | None = None
    #: perf_counter times bounding the measuring window (after the warm-up).
    window: tuple[float, float] | None = None
    #: A point measured by several worker processes: each one's figures
    #: (empty: measured in this process, whose are ``cpu_s`` and ``lag_samples_ms``).
    workers: tuple[WorkerStats, ...] = ()


@dataclass(frozen=True)
class WorkerStats:
    """One worker process's side of a point: its share of the load, the CPU
    it used and its event loop's lag over its window."""

    index: int
    pid: int
    concurrency: int  # its slots (closed loop) or its share of the cap (open loop)
    requests: int  # records it returned
    cpu_s: float
    window_s: float
    lag_samples_ms: tuple[float, ...]

    @property
    def cpu_fraction(self) -> float:
        return self.cpu_s / self.window_s if self.window_s > 0 else 0.0
