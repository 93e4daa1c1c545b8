"""How a point's load is shared among worker processes, and how their
outcomes become one point. Pure: no processes, no I/O.

- A closed loop of C: worker i gets ``shares(C, N)[i]`` slots (the shares sum
  to C exactly) and every slot takes its next conversation from one queue
  shared by all workers, so C requests are in flight until it is empty.
- An open loop: the one seeded schedule of the point is dealt out, arrival k
  to worker k mod N (every Nth arrival), each keeping its absolute due time;
  its cap on requests in flight is shared like C.
- A conversation (every turn) is one prompt, so it stays on one worker.
- The merged point is the union of the raw per-request records; every
  percentile is computed from those samples (findings/bench/metrics.py),
  never from the workers' summaries.
"""

from __future__ import annotations

import math
from dataclasses import replace

from findings.bench.client import PointPlan, planned_requests
from findings.bench.records import PointOutcome, WorkerStats

#: At most this many worker processes, whatever is asked.
MAX_WORKERS = 64
#: The default gives a worker this many concurrent streams of a closed loop
#: (one process reads about 60k tokens/s of the emulator's firehose at C=250,
#: docs/performance.md) ...
STREAMS_PER_WORKER = 250
#: ... and this many requests/s of an open loop.
RATE_PER_WORKER = 500.0


def default_workers(concurrency: int, rate: float | None, cpus: int) -> int:
    """Worker processes when none are asked for: one per STREAMS_PER_WORKER
    streams (closed loop) or RATE_PER_WORKER requests/s (open loop), at most
    one per core less one (the parent, and often the server, need one), and
    never more than the slots to share."""
    want = math.ceil(rate / RATE_PER_WORKER) if rate else math.ceil(concurrency / STREAMS_PER_WORKER)
    return max(1, min(want, cpus - 1, concurrency, MAX_WORKERS))


def resolve_workers(asked: int | None, concurrency: int, rate: float | None, cpus: int) -> int:
    """The workers a point runs with: those asked for (at most one per slot,
    since each needs one), else the default."""
    if asked is None:
        return default_workers(concurrency, rate, cpus)
    return max(1, min(asked, concurrency, MAX_WORKERS))


def shares(total: int, n: int) -> tuple[int, ...]:
    """``total`` split into ``n`` integers that differ by at most one and sum to it."""
    base, extra = divmod(total, n)
    return tuple(base + (1 if i < extra else 0) for i in range(n))


def split(plan: PointPlan, n: int) -> tuple[PointPlan, ...]:
    """Each worker's plan. Closed loop: its slots, every prompt (taken through
    the shared queue) and its part of the warm-up. Open loop: every Nth
    arrival with its due offset, and its share of the cap."""
    slots = shares(plan.concurrency, n)
    out = []
    for i in range(n):
        warm = plan.warmup[i::n]
        if plan.offsets is None:
            out.append(replace(plan, concurrency=slots[i], warmup=warm))
        else:
            out.append(replace(plan, concurrency=slots[i], warmup=warm, prompts=plan.prompts[i::n],
                               offsets=plan.offsets[i::n]))
    return tuple(out)


def merge(plan: PointPlan, parts: list[tuple[WorkerStats, PointOutcome]], start: float, end: float,
          before: dict[str, float] | None, after: dict[str, float] | None,
          running: tuple[float, ...], running_at: tuple[float, ...], running_interval_s: float | None
          ) -> PointOutcome:
    """One point from every worker's outcome: the raw records together (each
    tagged with its worker), the parent's scrapes and gauge samples around
    them, and each worker's own figures."""
    records = sorted((r for _, o in parts for r in o.records), key=lambda r: r.index)
    started = min((r.sent for r in records if r.sent), default=start)
    finished = max((r.end for r in records if r.end is not None), default=end)
    return PointOutcome(records=tuple(records), started=started, finished=finished,
                        planned=planned_requests(plan.prompts), lag_samples_ms=(), cpu_s=None,
                        metrics_before=before, metrics_after=after,
                        metrics_window=(start, end) if before and after else None,
                        running_samples=running, running_times=running_at,
                        running_interval_s=running_interval_s,
                        schedule_start=start if plan.offsets is not None else None,
                        phase_ends=plan.phase_ends, slo=plan.slo, window=(start, end),
                        workers=tuple(sorted((w for w, _ in parts), key=lambda w: w.index)))
