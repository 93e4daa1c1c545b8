"""Load: a closed loop (exactly C requests in flight until the prompts run
out) or an open loop (each conversation sent at its offset of a schedule,
findings.load, whatever is in flight, up to an optional cap).

A request's clock starts immediately before it is written (transport), not
when it was queued. Warm-up requests run first and are not recorded. A
monitor task samples the event loop's lag, so that a client that is itself
the bottleneck shows up in the point's metrics. The server's ``/metrics``
counters are scraped after the warm-up and after the last request, so that
their deltas cover the point's requests and nothing else.
"""

from __future__ import annotations

import asyncio
import gc
import time
from dataclasses import dataclass
from typing import Awaitable, Callable

from findings.bench.protocol import Parser, build
from findings.bench.records import PointOutcome, RequestRecord
from findings.bench.transport import StreamTransport, until
from findings.bench.workload import Prompt

LAG_INTERVAL_S = 0.01
#: Connections an open loop opens before its first send (at most its cap);
#: more are opened as the load needs them.
PREWARM_OPEN = 32


@dataclass(frozen=True)
class PointPlan:
    api: str
    concurrency: int
    prompts: tuple[Prompt, ...]
    warmup: tuple[Prompt, ...]
    output_len: int
    model: str
    rid_prefix: str
    ignore_eos: bool = True
    #: An open loop: each prompt's send offset (seconds from the point's
    #: start), sorted; None: a closed loop of ``concurrency``. In an open loop
    #: ``concurrency`` caps what is in flight (a send waits for a free slot).
    offsets: tuple[float, ...] | None = None
    #: Passed on to the outcome for its metrics: a profile's phase ends, the SLO.
    phase_ends: tuple[float, ...] = ()
    slo: tuple[float | None, float | None] | None = None


#: An open loop starts each request this long before it is due: the request
#: is built and a connection taken (about 0.5 ms of aiohttp's work), and the
#: body is written at the due time (transport ``due``), so bursts closer
#: than that work are still sent on time.
LEAD_S = 0.02


async def _lag_monitor(samples: list[float], stop: asyncio.Event) -> None:
    clock = time.perf_counter
    while not stop.is_set():
        t = clock()
        await asyncio.sleep(LAG_INTERVAL_S)
        samples.append(max(0.0, (clock() - t - LAG_INTERVAL_S) * 1000.0))


#: A record's ``index`` is the conversation's index times this, plus the turn
#: less one: records sort by conversation, then turn.
TURN_STRIDE = 1000


def planned_requests(prompts: tuple[Prompt, ...]) -> int:
    """Requests a point plans: every turn of every conversation."""
    return sum(p.turns for p in prompts)


async def _one(transport: StreamTransport, plan: PointPlan, prompt: Prompt, rid: str, turn: int = 1,
               replies: tuple[str, ...] = (), due: float | None = None) -> RequestRecord:
    rec = RequestRecord(index=prompt.index * TURN_STRIDE + turn - 1, input_len=prompt.input_len, turn=turn,
                        category=prompt.category)
    out_len = prompt.output_len if prompt.output_len is not None else plan.output_len
    req = build(plan.api, prompt, out_len, plan.model, rid, ignore_eos=plan.ignore_eos, turn=turn, replies=replies)
    if due is not None:
        rec.scheduled = due
    await transport.send(req, rec, Parser(plan.api, rec, keep_text=turn < prompt.turns), due)
    if rec.prompt_tokens is not None:
        rec.input_len = rec.prompt_tokens  # the server's count, not the client's estimate
    return rec


async def _conversation(transport: StreamTransport, plan: PointPlan, prompt: Prompt,
                        rid: str, due: float | None = None) -> list[RequestRecord]:
    """Every turn of one conversation, each sent once the previous reply has
    arrived, with that reply in the history. After a failed turn the later
    ones are not sent: they are recorded as failed (``skipped``), so that the
    point's counts stay honest."""
    out: list[RequestRecord] = []
    replies: list[str] = []
    for turn in range(1, prompt.turns + 1):
        if out and not out[-1].ok:
            for later in range(turn, prompt.turns + 1):
                out.append(RequestRecord(index=prompt.index * TURN_STRIDE + later - 1, input_len=0, turn=later,
                                         category=prompt.category, error="not sent: an earlier turn failed",
                                         error_type="skipped"))
            break
        rec = await _one(transport, plan, prompt, rid if turn == 1 else f"{rid}t{turn}", turn, tuple(replies),
                         due if turn == 1 else None)
        if rec.reply is not None:
            replies.append("".join(rec.reply))
            rec.reply = None
        out.append(rec)
    return out


#: How a closed loop's slot takes its next conversation: None when none is
#: left. In one process, from a list; across worker processes, from a counter
#: they share (findings/bench/workers), so that the C slots of every worker
#: drain one queue and C requests stay in flight until it is empty.
Take = Callable[[], Prompt | None]


def list_taker(prompts: tuple[Prompt, ...]) -> Take:
    queue = list(reversed(prompts))
    return lambda: queue.pop() if queue else None


async def _closed_loop(transport: StreamTransport, plan: PointPlan, prompts: tuple[Prompt, ...], tag: str,
                       on_done: Callable[[RequestRecord], None] | None, take: Take | None = None
                       ) -> list[RequestRecord]:
    """C slots; each takes the next prompt (conversation) and runs it to
    its end: C conversations in flight, as AIPerf's multi-turn sessions."""
    next_prompt = take if take is not None else list_taker(prompts)
    done: list[RequestRecord] = []

    async def slot() -> None:
        while (prompt := next_prompt()) is not None:
            rid = f"{plan.rid_prefix}-{tag}{prompt.index}"
            for rec in await _conversation(transport, plan, prompt, rid):
                done.append(rec)
                if on_done is not None:
                    on_done(rec)

    await asyncio.gather(*(slot() for _ in range(min(plan.concurrency, len(prompts)))))
    return done


async def _open_loop(transport: StreamTransport, plan: PointPlan, start: float,
                     on_done: Callable[[RequestRecord], None] | None) -> list[RequestRecord]:
    """Each conversation's first turn written at ``start`` + its offset,
    whatever is in flight; a send that finds ``concurrency`` requests in
    flight waits for one to end (vLLM's --max-concurrency). Each first turn
    keeps when it was due (``scheduled``), when a slot under the cap was free
    (``admitted``) and when its body was written (``sent``): the client's
    lateness is ``sent`` less the later of the two, and a lateness that grows
    silently lowers the offered load."""
    assert plan.offsets is not None
    slots = asyncio.Semaphore(plan.concurrency)
    done: list[RequestRecord] = []

    async def one(prompt: Prompt, due: float) -> None:
        async with slots:
            admitted = time.perf_counter()
            recs = await _conversation(transport, plan, prompt, f"{plan.rid_prefix}-{prompt.index}", due)
        recs[0].admitted = admitted
        for rec in recs:
            done.append(rec)
            if on_done is not None:
                on_done(rec)

    tasks = []
    for prompt, offset in zip(plan.prompts, plan.offsets):
        due = start + offset
        await until(due - LEAD_S)
        tasks.append(asyncio.create_task(one(prompt, due)))
    await asyncio.gather(*tasks)
    return done


Scrape = Callable[[], Awaitable[dict[str, float] | None]]
Sample = Callable[[], Awaitable[float | None]]


async def gauge_sampler(sample: Sample, every_s: float, samples: list[float], stop: asyncio.Event,
                   times: list[float]) -> None:
    """Read the gauge half an interval in (not at the start, when the point's
    requests are not yet in), then every ``every_s`` seconds until ``stop``."""
    try:
        await asyncio.wait_for(stop.wait(), every_s / 2)
        return
    except asyncio.TimeoutError:
        pass
    while not stop.is_set():
        t = time.perf_counter()
        value = await sample()
        if value is not None:
            samples.append(value)
            times.append(t)
        try:
            await asyncio.wait_for(stop.wait(), every_s)
        except asyncio.TimeoutError:
            pass


async def prepare(transport: StreamTransport, plan: PointPlan) -> None:
    """Before a point's window: its warm-up requests (not recorded), then its
    connections opened."""
    if plan.warmup:
        await _closed_loop(transport, plan, plan.warmup, "w", None)
    await transport.prewarm(plan.concurrency if plan.offsets is None else min(plan.concurrency, PREWARM_OPEN))


async def run_point(transport: StreamTransport, plan: PointPlan,
                    on_done: Callable[[RequestRecord], None] | None = None,
                    scrape: Scrape | None = None, sample: Sample | None = None,
                    sample_every_s: float = 1.0) -> PointOutcome:
    """One point. ``scrape``: the server's counters, read after the warm-up and
    after the last request; ``sample``: its running-requests gauge, read
    every ``sample_every_s`` during the point (only when the first scrape
    found counters). Each read costs the server a /metrics render: on a
    CPU-bound server that is time taken from the point (docs/decisions.md D84)."""
    await prepare(transport, plan)
    return await measure(transport, plan, on_done, scrape, sample, sample_every_s)


async def measure(transport: StreamTransport, plan: PointPlan,
                  on_done: Callable[[RequestRecord], None] | None = None,
                  scrape: Scrape | None = None, sample: Sample | None = None,
                  sample_every_s: float = 1.0, start: float | None = None, take: Take | None = None,
                  prompts: tuple[Prompt, ...] | None = None) -> PointOutcome:
    """A point's window, once ``prepare`` has run: ``run_point`` without the
    warm-up. ``start``: the perf_counter time the window opens (a worker
    process waits for the time its parent gave every worker; an open loop's
    offsets count from it); ``take``: a closed loop's shared queue (of
    ``prompts``, default the plan's)."""
    before = await scrape() if scrape is not None else None
    if start is not None:
        await until(start)
    window_start = time.perf_counter() if start is None else start
    samples: list[float] = []
    stop = asyncio.Event()
    monitor = asyncio.create_task(_lag_monitor(samples, stop))
    running: list[float] = []
    running_at: list[float] = []
    sampler = (asyncio.create_task(gauge_sampler(sample, sample_every_s, running, stop, running_at))
               if sample is not None and before is not None else None)
    cpu0 = time.process_time()
    # No cyclic garbage collection inside the window: a full collection over
    # the point's records holds the event loop for milliseconds, late for
    # every send and read in flight. Reference counting still frees all but
    # cycles; those are collected once the point ends.
    collecting = gc.isenabled()
    gc.disable()
    try:
        if plan.offsets is None:
            records = await _closed_loop(transport, plan, prompts if prompts is not None else plan.prompts, "",
                                         on_done, take)
        else:
            records = await _open_loop(transport, plan, window_start, on_done)
        # Before the monitor's last sleep (up to LAG_INTERVAL_S) ends.
        window_end = time.perf_counter()
        cpu = time.process_time() - cpu0
    finally:
        if collecting:
            gc.enable()
        stop.set()
        await monitor
        if sampler is not None:
            await sampler
    after = await scrape() if scrape is not None else None
    records.sort(key=lambda r: r.index)
    started = min((r.sent for r in records if r.sent), default=time.perf_counter())
    finished = max((r.end for r in records if r.end is not None), default=time.perf_counter())
    return PointOutcome(records=tuple(records), started=started, finished=finished,
                        planned=planned_requests(plan.prompts), lag_samples_ms=tuple(samples), cpu_s=cpu,
                        metrics_before=before, metrics_after=after,
                        metrics_window=(window_start, window_end) if before and after else None,
                        running_samples=tuple(running), running_times=tuple(running_at),
                        running_interval_s=sample_every_s if sampler is not None else None,
                        schedule_start=window_start if plan.offsets is not None else None,
                        phase_ends=plan.phase_ends, slo=plan.slo, window=(window_start, window_end))
