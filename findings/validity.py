"""Validity gates: points that must not feed a verdict. Pure.

A flagged point stays in the store and in its campaign's table, marked with
the reason; the analysis leaves it out, and the conclusion says so.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

from findings.model import Dataset, Point, Scalar


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


NO_SPEC = {"", "none", "null", "off", "false", "no"}


def speculative(facts: Mapping[str, Scalar]) -> bool | None:
    """True/False from the config's facts, None when they do not say."""
    algo = facts.get("speculative_algorithm")
    if algo is None:
        return None
    return str(algo).strip().lower() not in NO_SPEC


def reasons(p: Point, facts: Mapping[str, Scalar], gates: Gates) -> tuple[str, ...]:
    m = p.metrics
    out = []
    planned, completed, failed = m.get("planned"), m.get("completed"), m.get("failed", 0.0)
    if completed is not None and planned:
        total = completed + failed
        if failed / planned > gates.max_failed_fraction:
            out.append(f"{failed / planned:.0%} of requests failed (limit {gates.max_failed_fraction:.0%})")
        if total < planned:
            out.append(f"finished {int(total)} of {int(planned)} planned requests")
    lag = m.get("client_loop_lag_p99_ms")
    if lag is not None and lag > gates.max_client_lag_ms:
        out.append(f"client event-loop lag p99 {lag:.1f} ms > {gates.max_client_lag_ms:g} ms: client-bound")
    cpu = m.get("client_cpu_fraction")
    if cpu is not None and cpu > gates.max_client_cpu:
        out.append(f"client process busy {cpu:.0%} of the time (limit {gates.max_client_cpu:.0%}): client-bound")
    spec = speculative(facts)
    # SGLang reports an accept length; llama.cpp the accepted share of drafts.
    has_accept = any(k in m for k in ("accept_length", "accept_length_metrics", "draft_acceptance",
                                      "draft_acceptance_metrics"))
    if spec is False and has_accept:
        out.append("reports speculative acceptance, but the config runs no speculation")
    if spec is True and not has_accept and p.source in ("runner", "simulated") and m.get("completed", 0) > 0:
        out.append("a speculative config that reported no acceptance")
    return tuple(out)


def flagged(data: Dataset, gates: Gates) -> dict[str, tuple[str, ...]]:
    """Point id -> reasons, for every point that fails a gate."""
    out = {}
    for p in data.points:
        why = reasons(p, data.configs.get(p.config, {}), gates)
        if why:
            out[p.id] = why
    return out
