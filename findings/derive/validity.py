"""Validity gates: points that must not feed a verdict. Pure.

A flagged point stays in the store and in its campaign's table, marked with
the reason; the analysis leaves it out, and the conclusion says so.

Request accounting (``counts``) is read from what each point records:
``planned`` (requests sent or meant to be sent), ``completed`` (successes)
and ``failed``. A count the source did not record is None, never zero: an
imported point whose file cannot tell how many requests failed has
``failed`` None, and is reported as "failures unknown", not as "0 failed".
"""


from __future__ import annotations

from dataclasses import dataclass
from operator import attrgetter
from typing import Mapping

from findings.core.model import Dataset, Point, Scalar, packed_tables
from findings.derive import stats


@dataclass(frozen=True)
class Gates:
    #: Flag a point when more than this fraction of its requests failed.
    max_failed_fraction: float = 0.05
    #: Flag a point when the client's event loop lagged more than this (p99):
    #: the client, not the server, was the bottleneck.
    max_client_lag_ms: float = 25.0
    #: Flag a point when the client process was busy for more than this
    #: fraction of the point's wall time: a single-threaded client with no
    #: idle time reads every response late (docs/performance.md).
    max_client_cpu: float = 0.9
    #: Flag an open-loop point whose sends were later (p99) against their
    #: schedule than both this and a tenth of the schedule's mean gap: a late
    #: send silently lowers the offered load and reshapes its bursts.
    max_send_lateness_ms: float = 10.0
    #: Flag an open-loop point that sent less than this share of its
    #: schedule's rate (its achieved rate against the offered one).
    min_achieved_share: float = 0.98


NO_SPEC = {"", "none", "null", "off", "false", "no"}

#: Metrics that say the server reported speculative acceptance: SGLang's
#: accept length, llama.cpp's accepted share of drafts.
ACCEPT_KEYS = ("accept_length", "accept_length_metrics", "draft_acceptance", "draft_acceptance_metrics")


def speculative(facts: Mapping[str, Scalar]) -> bool | None:
    """True/False from the config's facts, None when they do not say."""
    algo = facts.get("speculative_algorithm")
    if algo is None:
        return None
    return str(algo).strip().lower() not in NO_SPEC


@dataclass(frozen=True)
class Counts:
    """A point's requests: None where its source does not record the count."""

    planned: int | None
    completed: int | None
    failed: int | None

    @property
    def all_failed(self) -> bool:
        """Requests were sent and none completed."""
        return self.completed == 0 and (self.failed is None or self.failed > 0) and self.planned != 0

    @property
    def failures_unknown(self) -> bool:
        return self.failed is None and not self.all_failed

    def describe(self) -> str:
        """For the appendix: "3 of 64 failed", "none of 64 failed", "unknown"."""
        if self.failed is None:
            if self.all_failed:
                return "all failed" + (f" ({self.planned} sent)" if self.planned else "")
            return "unknown" + (f" ({self.completed} completed)" if self.completed is not None else "")
        sent = self.planned if self.planned is not None else (
            self.completed + self.failed if self.completed is not None else None)
        of = f" of {sent}" if sent is not None else ""
        if self.failed == 0:
            return f"none{of} failed"
        if sent is not None and self.failed >= sent:
            return f"all {sent} failed"
        return f"{self.failed}{of} failed"


#: What a point where every request failed keeps: the counts and how long it
#: ran. Its throughput and latencies measure nothing (zeros or NaN in the
#: tools' files), so they are not stored.
ALL_FAILED_KEEP = frozenset({"planned", "completed", "failed", "duration"})


def only_counts(metrics: Mapping[str, float]) -> dict[str, float]:
    """The metrics an all-failed point keeps: counts, duration, error types."""
    return {k: v for k, v in metrics.items() if k in ALL_FAILED_KEEP or k.startswith("errors_")}


def records_counted(p: Point) -> Mapping[str, object] | None:
    """The part of a point's per-request records that ``counts`` reads: the
    ``error`` column of a point that stored no ``failed`` count (what the
    render cache keeps of the records, findings/document/cache.py)."""
    if "failed" in p.metrics or not isinstance(p.requests, Mapping) or "error" not in p.requests:
        return None
    return {"error": p.requests["error"]}


def counts(p: Point) -> Counts:
    """The point's request counts, from its metrics; an imported point that
    kept per-request records but no ``failed`` count (stored before the
    importers counted them) is counted from those records' errors."""
    m = p.metrics
    f_ = m.get("failed")
    if f_ is not None:
        return _counted(m.get("planned"), m.get("completed"), f_)
    p_, c_ = m.get("planned"), m.get("completed")
    planned = int(p_) if p_ is not None else None
    completed = int(c_) if c_ is not None else None
    failed = None
    records = records_counted(p)
    if records is not None:
        errors = records["error"]
        if isinstance(errors, list) and all(isinstance(e, str) for e in errors):
            failed = sum(1 for e in errors if e)
            if planned is None:
                planned = len(errors)
            if completed is None:
                completed = planned - failed
    return Counts(planned=planned, completed=completed, failed=failed)


def _counted(p_: float | None, c_: float | None, f_: float) -> Counts:
    """The counts of a point that recorded its failures."""
    return Counts(planned=int(p_) if p_ is not None else None, completed=int(c_) if c_ is not None else None,
                  failed=int(f_))


def reasons(p: Point, facts: Mapping[str, Scalar], gates: Gates, n: Counts | None = None) -> tuple[str, ...]:
    """Why the point fails a gate (empty: it passes). ``n``: its ``counts``, if known."""
    return _reasons(p, speculative(facts), gates, counts(p) if n is None else n)


def _count_reasons(n: Counts, gates: Gates) -> tuple[str, ...]:
    """The gates that read only a point's request counts."""
    out = []
    if n.all_failed:
        sent = n.planned if n.planned is not None else n.failed
        out.append(f"all {sent} requests failed" if sent else "all requests failed")
    elif n.failed is not None:
        sent = n.planned if n.planned is not None else (
            n.completed + n.failed if n.completed is not None else None)
        if sent and n.failed / sent > gates.max_failed_fraction:
            out.append(f"{n.failed / sent:.0%} of requests failed ({n.failed} of {sent}; limit "
                       f"{gates.max_failed_fraction:.0%})")
        if n.planned and n.completed is not None and n.completed + n.failed < n.planned:
            out.append(f"finished {n.completed + n.failed} of {n.planned} planned requests")
    return tuple(out)


def client_bound(m: Mapping[str, float], gates: Gates) -> tuple[str, ...]:
    """The gates that say the client, not the server, was the limit (its
    loop lag, its CPU, its lateness against an open loop's schedule, the
    share of the schedule it sent), each reason saying "client-bound": part
    of ``reasons``, and what the bench warns of after a point."""
    out: list[str] = []
    lag = m.get("client_loop_lag_p99_ms")
    if lag is not None and lag > gates.max_client_lag_ms:
        out.append(f"client event-loop lag p99 {lag:.1f} ms > {gates.max_client_lag_ms:g} ms: client-bound")
    cpu = m.get("client_cpu_fraction")
    if cpu is not None and cpu > gates.max_client_cpu:
        out.append(f"client process busy {cpu:.0%} of the time (limit {gates.max_client_cpu:.0%}): client-bound")
    late = m.get("send_lateness_p99_ms")
    offered = m.get("offered_rate_req_s")
    if late is not None:
        limit = max(gates.max_send_lateness_ms, 100.0 / offered if offered else 0.0)
        if late > limit:
            out.append(f"sends late against the schedule, p99 {late:.1f} ms > {limit:.3g} ms: client-bound "
                       f"(the offered load was lower, and its bursts other, than planned)")
    achieved = m.get("achieved_rate_req_s")
    if achieved is not None and offered and achieved < gates.min_achieved_share * offered:
        out.append(f"sent {achieved:.3g} requests/s of the schedule's {offered:.3g} "
                   f"({achieved / offered:.0%}, limit {gates.min_achieved_share:.0%}): client-bound")
    return tuple(out)


def _reasons(p: Point, spec: bool | None, gates: Gates, n: Counts) -> tuple[str, ...]:
    """``reasons``, with the config's ``speculative(facts)`` known."""
    m = p.metrics
    out = [*_count_reasons(n, gates), *client_bound(m, gates)]
    has_accept = any(k in m for k in ACCEPT_KEYS)
    # A schedule that stops drafting at this batch size (vLLM's per-batch-size
    # K = 0) reports its counters with zero drafts: no acceptance, and no contradiction.
    drafted_nothing = m.get("draft_tokens_metrics") == 0
    if spec is False and has_accept:
        out.append("reports speculative acceptance, but the config runs no speculation")
    if (spec is True and not has_accept and not drafted_nothing and p.by_runner
            and (n.completed or 0) > 0):
        out.append("a speculative config that reported no acceptance")
    return tuple(out)


def flagged(data: Dataset, gates: Gates) -> dict[str, tuple[str, ...]]:
    """Point id -> reasons, for every point that fails a gate."""
    return assess(data, gates)[0]


def assess(data: Dataset, gates: Gates) -> tuple[dict[str, tuple[str, ...]], dict[str, Counts]]:
    """``flagged`` and every point's ``counts``, in one pass (each point counted once).

    In columns (issue 38): the stored points whose metrics share one layout
    form a table of doubles (core.model.packed_tables). From it, at C speed,
    come their counts (one object per distinct recorded (planned,
    completed, failed)) and the rows a gate on a metric's value may flag.
    Only those rows, the points whose counts fail a gate, those whose
    config's speculation may contradict what they report, and points not
    stored (metrics in a dict) are judged one by one (``_reasons``, which
    words the reasons)."""
    points = data.points
    configs = list(map(attrgetter("config"), points))
    # config -> speculative(its facts): once per config, not per point
    spec = {c: speculative(data.configs.get(c, {})) for c in dict.fromkeys(configs)}
    specs = list(map(spec.__getitem__, configs))
    tables, judge = packed_tables(list(map(attrgetter("metrics"), points)))
    slots: list[Counts | None] = [None] * len(points)
    # Counts are frozen, and most points share theirs: one object per distinct
    # recorded (planned, completed, failed), not one per point (D131).
    shared: dict[tuple[float | None, float | None, float], Counts] = {}
    for index, where, packed in tables:
        # What it reports may contradict its config: acceptance without
        # speculation, or (perhaps: _reasons says) none with it.
        contradicts = not any(k in index for k in ACCEPT_KEYS)
        judge.extend(i for i in where if specs[i] is contradicts)
        above = [(index[k], limit) for k, limit in (("client_loop_lag_p99_ms", gates.max_client_lag_ms),
                                                     ("client_cpu_fraction", gates.max_client_cpu),
                                                     # its limit is at least this (a slow schedule widens it)
                                                     ("send_lateness_p99_ms", gates.max_send_lateness_ms))
                 if k in index]
        short = ([(index["achieved_rate_req_s"], index["offered_rate_req_s"], gates.min_achieved_share)]
                 if "achieved_rate_req_s" in index and "offered_rate_req_s" in index else [])
        cols = [c for c in ("planned", "completed", "failed") if c in index] if "failed" in index else []
        rows, recorded, inverse = stats.table_rows(packed, len(index), above, short, [index[c] for c in cols])
        judge.extend(where[r] for r in rows)
        if not cols:  # no failed count: counted from the records, point by point
            for i in where:
                slots[i] = counts(points[i])
            continue
        made = []
        for row in recorded:
            got = dict(zip(cols, row))
            key = (got.get("planned"), got.get("completed"), got["failed"])
            n = shared.get(key)
            if n is None:
                n = shared[key] = _counted(*key)
            made.append(n)
        failing = {k for k, n in enumerate(made) if _count_reasons(n, gates)}
        if failing:
            judge.extend(i for i, k in zip(where, inverse) if k in failing)
        for i, n in zip(where, map(made.__getitem__, inverse)):
            slots[i] = n
    for i in judge:
        if slots[i] is None:
            slots[i] = counts(points[i])
    every: dict[str, Counts] = dict(zip(map(attrgetter("id"), points), slots))  # type: ignore[arg-type]
    out = {}
    for i in sorted(set(judge)):
        p = points[i]
        why = _reasons(p, specs[i], gates, slots[i])  # type: ignore[arg-type]
        if why:
            out[p.id] = why
    return out, every
