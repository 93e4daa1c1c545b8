"""Closed-loop load: exactly C requests in flight until the prompts run out.

A request's clock starts immediately before it is written (transport), not
when it was queued. Warm-up requests run first and are not recorded. A
monitor task samples the event loop's lag, so that a client that is itself
the bottleneck shows up in the point's metrics. The server's ``/metrics``
counters are scraped after the warm-up and after the last request, so that
their deltas cover the point's requests and nothing else.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from typing import Awaitable, Callable

from findings.bench.protocol import Parser, build
from findings.bench.records import PointOutcome, RequestRecord
from findings.bench.transport import StreamTransport
from findings.bench.workload import Prompt

LAG_INTERVAL_S = 0.01


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
               replies: tuple[str, ...] = ()) -> RequestRecord:
    rec = RequestRecord(index=prompt.index * TURN_STRIDE + turn - 1, input_len=prompt.input_len, turn=turn,
                        category=prompt.category)
    out_len = prompt.output_len if prompt.output_len is not None else plan.output_len
    req = build(plan.api, prompt, out_len, plan.model, rid, ignore_eos=plan.ignore_eos, turn=turn, replies=replies)
    await transport.send(req, rec, Parser(plan.api, rec, keep_text=turn < prompt.turns))
    if rec.prompt_tokens is not None:
        rec.input_len = rec.prompt_tokens  # the server's count, not the client's estimate
    return rec


async def _conversation(transport: StreamTransport, plan: PointPlan, prompt: Prompt,
                        rid: str) -> list[RequestRecord]:
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
        rec = await _one(transport, plan, prompt, rid if turn == 1 else f"{rid}t{turn}", turn, tuple(replies))
        if rec.reply is not None:
            replies.append("".join(rec.reply))
            rec.reply = None
        out.append(rec)
    return out


async def _closed_loop(transport: StreamTransport, plan: PointPlan, prompts: tuple[Prompt, ...], tag: str,
                       on_done: Callable[[RequestRecord], None] | None) -> list[RequestRecord]:
    """C workers; each takes the next prompt (conversation) and runs it to
    its end: C conversations in flight, as AIPerf's multi-turn sessions."""
    queue = list(reversed(prompts))
    done: list[RequestRecord] = []

    async def worker() -> None:
        while queue:
            prompt = queue.pop()
            rid = f"{plan.rid_prefix}-{tag}{prompt.index}"
            for rec in await _conversation(transport, plan, prompt, rid):
                done.append(rec)
                if on_done is not None:
                    on_done(rec)

    await asyncio.gather(*(worker() for _ in range(min(plan.concurrency, len(prompts)))))
    return done


Scrape = Callable[[], Awaitable[dict[str, float] | None]]
Sample = Callable[[], Awaitable[float | None]]
#: How often the server's running-requests gauge is read during a point.


async def _sampler(sample: Sample, every_s: float, samples: list[float], stop: asyncio.Event) -> None:
    """Read the gauge half an interval in (not at the start, when the point's
    requests are not yet in), then every ``every_s`` seconds until ``stop``."""
    try:
        await asyncio.wait_for(stop.wait(), every_s / 2)
        return
    except asyncio.TimeoutError:
        pass
    while not stop.is_set():
        value = await sample()
        if value is not None:
            samples.append(value)
        try:
            await asyncio.wait_for(stop.wait(), every_s)
        except asyncio.TimeoutError:
            pass


async def run_point(transport: StreamTransport, plan: PointPlan,
                    on_done: Callable[[RequestRecord], None] | None = None,
                    scrape: Scrape | None = None, sample: Sample | None = None,
                    sample_every_s: float = 1.0) -> PointOutcome:
    """One point. ``scrape``: the server's counters, read after the warm-up and
    after the last request; ``sample``: its running-requests gauge, read
    every ``sample_every_s`` during the point (only when the first scrape
    found counters). Each read costs the server a /metrics render: on a
    CPU-bound server that is time taken from the point (docs/decisions.md D84)."""
    if plan.warmup:
        await _closed_loop(transport, plan, plan.warmup, "w", None)
    await transport.prewarm(plan.concurrency)
    before = await scrape() if scrape is not None else None
    window_start = time.perf_counter()
    samples: list[float] = []
    stop = asyncio.Event()
    monitor = asyncio.create_task(_lag_monitor(samples, stop))
    running: list[float] = []
    sampler = (asyncio.create_task(_sampler(sample, sample_every_s, running, stop))
               if sample is not None and before is not None else None)
    cpu0 = time.process_time()
    try:
        records = await _closed_loop(transport, plan, plan.prompts, "", on_done)
        # Before the monitor's last sleep (up to LAG_INTERVAL_S) ends.
        window_end = time.perf_counter()
        cpu = time.process_time() - cpu0
    finally:
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
                        running_samples=tuple(running),
                        running_interval_s=sample_every_s if sampler is not None else None)
