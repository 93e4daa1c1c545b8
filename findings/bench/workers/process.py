"""One point measured by N worker processes (``findings bench --workers N``).

Each worker is a separate OS process (multiprocessing's ``spawn``: a fresh
interpreter, nothing of the parent's event loop inherited) with its own
event loop and connection pool. The parent:

1. starts the N workers, each with its plan (findings/bench/workers/split.py);
   each runs its part of the warm-up, opens its connections and says ready;
2. reads the server's counters, then gives every worker the same start time
   (``time.perf_counter``: CLOCK_MONOTONIC, one clock for every process of
   the machine), a little ahead, so that all start together;
3. samples the server's running gauge while the workers measure;
4. takes each worker's raw records and figures, reads the counters again and
   merges one point.

A worker that dies or fails fails the point (``WorkerDied``, with the
reason): nothing of it is stored. Whatever ends the point (a worker's death,
Ctrl-C, SIGTERM in the parent) stops every worker before the parent goes on:
SIGTERM to each (the workers ignore SIGINT and SIGHUP, which their parent
handles), SIGKILL after ``STOP_WAIT_S``. A worker whose parent dies is killed
by the kernel (Linux ``PR_SET_PDEATHSIG``).
"""

from __future__ import annotations

import asyncio
import contextlib
import multiprocessing
import os
import signal
import sys
import time
from dataclasses import dataclass
from multiprocessing.connection import Connection
from typing import Any, Callable

from findings.bench import eventloop
from findings.bench.client import PointPlan, Sample, Scrape, Take, gauge_sampler, measure, prepare
from findings.bench.records import PointOutcome, RequestRecord, WorkerStats
from findings.bench.transport import make_transport
from findings.bench.workers.split import merge, split
from findings.bench.workload import Prompt
from findings.core import aside
from findings.core.errors import FindingsError

#: The workers start this long after the parent sends the start time.
GO_AFTER_S = 0.05
#: A worker tells its parent how many requests it finished this often.
TICK_S = 0.25
#: How long a stopped worker has to exit before it is killed.
STOP_WAIT_S = 5.0


class WorkerDied(FindingsError):
    """A worker process died or failed during a point: the point fails."""


@dataclass(frozen=True)
class WorkerJob:
    """What one worker process needs (pickled to it at its start)."""

    index: int
    workers: int
    parent: int  # the parent's pid
    url: str
    transport: str
    read_timeout_s: float
    api_key: str | None
    plan: PointPlan
    #: A closed loop's shared queue: the index of the next prompt to take
    #: (a multiprocessing.Value; None in an open loop).
    counter: Any = None


#: The cores this process may run on.
cpus = aside.cores


# --------------------------------------------------------------------- the worker's side

def shared_taker(counter: Any, prompts: tuple[Prompt, ...]) -> Take:
    """A closed loop's next conversation from the queue every worker shares."""
    def take() -> Prompt | None:
        with counter.get_lock():
            i = int(counter.value)
            if i >= len(prompts):
                return None
            counter.value = i + 1
        return prompts[i]
    return take


async def _ticks(conn: Connection, done: list[int]) -> None:
    sent = [0, 0]
    while True:
        await asyncio.sleep(TICK_S)
        if done != sent:
            conn.send(("tick", done[0] - sent[0], done[1] - sent[1]))
            sent = list(done)


async def _work(conn: Connection, job: WorkerJob) -> None:
    plan = job.plan
    transport = make_transport(job.transport, job.url, plan.concurrency, job.read_timeout_s, job.api_key)
    await transport.start()
    try:
        await prepare(transport, plan)
        conn.send(("ready", os.getpid()))
        msg = conn.recv()  # blocking: nothing else runs here until the start time is known
        if msg[0] != "go":
            return
        done = [0, 0]  # finished, of which failed

        def on_done(rec: RequestRecord) -> None:
            rec.worker = job.index
            done[0] += 1
            done[1] += 0 if rec.ok else 1

        ticker = asyncio.create_task(_ticks(conn, done))
        take = shared_taker(job.counter, plan.prompts) if plan.offsets is None else None
        try:
            outcome = await measure(transport, plan, on_done, start=float(msg[1]), take=take)
        finally:
            ticker.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await ticker
        for rec in outcome.records:
            rec.worker = job.index
        t0, t1 = outcome.window or (0.0, 0.0)
        stats = WorkerStats(index=job.index, pid=os.getpid(), concurrency=plan.concurrency,
                            requests=len(outcome.records), cpu_s=outcome.cpu_s or 0.0, window_s=t1 - t0,
                            lag_samples_ms=outcome.lag_samples_ms)
        conn.send(("result", stats, outcome))
    finally:
        await transport.close()


def worker_main(conn: Connection, job: WorkerJob) -> None:
    """A worker process's entry point."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent stops us (SIGTERM) on Ctrl-C
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    aside.die_with(job.parent)  # Linux: the kernel kills this process when its parent dies
    try:
        eventloop.run(_work(conn, job))
    except BaseException as exc:  # noqa: BLE001 (told to the parent, which fails the point)
        with contextlib.suppress(OSError, ValueError):
            conn.send(("error", f"{type(exc).__name__}: {exc}"))
        sys.exit(1)
    finally:
        conn.close()


# --------------------------------------------------------------------- the parent's side

@dataclass
class _Worker:
    index: int
    of: int
    proc: Any  # multiprocessing's SpawnProcess
    conn: Connection

    def died(self, what: str = "died") -> str:
        self.proc.join(1.0)
        code = self.proc.exitcode
        how = ("still running" if code is None else
               f"killed by {signal.Signals(-code).name}" if code < 0 else f"exit code {code}")
        return f"worker {self.index + 1} of {self.of} (pid {self.proc.pid}) {what} ({how})"


async def _message(w: _Worker) -> tuple[Any, ...]:
    """The worker's next message; WorkerDied if it exits first."""
    loop = asyncio.get_running_loop()
    while True:
        if w.conn.poll():
            try:
                msg: tuple[Any, ...] = w.conn.recv()
            except (EOFError, OSError):
                raise WorkerDied(w.died() + " during the point; the point was not stored") from None
            if msg[0] == "error":
                raise WorkerDied(f"{w.died('failed')}: {msg[1]}; the point was not stored")
            return msg
        if not w.proc.is_alive() and not w.conn.poll():
            raise WorkerDied(w.died() + " during the point; the point was not stored")
        woke = loop.create_future()

        def wake() -> None:
            if not woke.done():
                woke.set_result(None)

        loop.add_reader(w.conn.fileno(), wake)
        loop.add_reader(w.proc.sentinel, wake)
        try:
            await woke
        finally:
            loop.remove_reader(w.conn.fileno())
            loop.remove_reader(w.proc.sentinel)
            # uvloop (libuv's poll) leaves a watched fd non-blocking, and a
            # Connection's recv on one fails with EAGAIN mid-message (D135).
            os.set_blocking(w.conn.fileno(), True)


async def _result(w: _Worker, on_tick: Callable[[int, int], None] | None) -> tuple[WorkerStats, PointOutcome]:
    while True:
        msg = await _message(w)
        if msg[0] == "tick":
            if on_tick is not None:
                on_tick(int(msg[1]), int(msg[2]))
        elif msg[0] == "result":
            return msg[1], msg[2]


def stop_all(workers: list[_Worker]) -> None:
    """SIGTERM to every worker still running, SIGKILL to any left after STOP_WAIT_S."""
    for w in workers:
        if w.proc.is_alive():
            w.proc.terminate()
    deadline = time.monotonic() + STOP_WAIT_S
    for w in workers:
        w.proc.join(max(0.0, deadline - time.monotonic()))
        if w.proc.is_alive():
            w.proc.kill()
            w.proc.join(STOP_WAIT_S)
        w.conn.close()


async def run_point_workers(n: int, plan: PointPlan, url: str, transport: str, read_timeout_s: float,
                            api_key: str | None, on_tick: Callable[[int, int], None] | None = None,
                            scrape: Scrape | None = None, sample: Sample | None = None,
                            sample_every_s: float = 1.0) -> tuple[PointOutcome, float]:
    """One point from ``n`` worker processes; (the merged outcome, the
    parent's CPU seconds over it: starting, watching and merging)."""
    ctx = multiprocessing.get_context("spawn")
    counter = ctx.Value("q", 0) if plan.offsets is None else None
    cpu0 = time.process_time()
    workers: list[_Worker] = []
    tasks: list[asyncio.Task[tuple[WorkerStats, PointOutcome]]] = []
    stop = asyncio.Event()
    sampler: asyncio.Task[None] | None = None
    running: list[float] = []
    running_at: list[float] = []
    try:
        for i, part in enumerate(split(plan, n)):
            here, there = ctx.Pipe()
            job = WorkerJob(index=i, workers=n, parent=os.getpid(), url=url, transport=transport,
                            read_timeout_s=read_timeout_s, api_key=api_key, plan=part, counter=counter)
            proc = ctx.Process(target=worker_main, args=(there, job), name=f"findings-bench-worker-{i + 1}",
                               daemon=True)
            proc.start()
            there.close()
            workers.append(_Worker(i, n, proc, here))
        for w in workers:
            msg = await _message(w)
            if msg[0] != "ready":
                raise WorkerDied(f"worker {w.index + 1} of {n}: unexpected message {msg[0]!r}")
        before = await scrape() if scrape is not None else None
        start = time.perf_counter() + GO_AFTER_S
        for w in workers:
            w.conn.send(("go", start))
        if sample is not None and before is not None:
            sampler = asyncio.create_task(gauge_sampler(sample, sample_every_s, running, stop, running_at))
        tasks = [asyncio.create_task(_result(w, on_tick)) for w in workers]
        finished, _ = await asyncio.wait(tasks, return_when=asyncio.FIRST_EXCEPTION)
        for t in finished:
            exc = t.exception()
            if exc is not None:
                raise exc
        parts = [t.result() for t in tasks]
    finally:
        for t in tasks:
            t.cancel()
        stop.set()
        if sampler is not None:
            sampler.cancel()
        stop_all(workers)
        pending: list[asyncio.Task[Any]] = [*tasks, *([sampler] if sampler is not None else [])]
        for t in pending:
            with contextlib.suppress(BaseException):
                await t
    end = max((o.window[1] for _, o in parts if o.window is not None), default=time.perf_counter())
    after = await scrape() if scrape is not None else None
    merged = merge(plan, parts, start, end, before, after, tuple(running), tuple(running_at),
                   sample_every_s if sampler is not None else None)
    return merged, time.process_time() - cpu0
