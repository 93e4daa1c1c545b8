"""Arrival schedules: the send offsets (seconds from a point's start) of an
open-loop point. Pure: numbers in, a sorted tuple of offsets out.

- **Poisson** at rate R: gaps drawn from the exponential of mean 1/R.
- **Gamma burstiness** B, as vLLM's ``bench serve --burstiness`` defines it:
  gaps from the gamma distribution of shape B and scale 1/(R·B), so the mean
  gap is 1/R for every B. B = 1 is Poisson; B < 1 is burstier, B > 1 more
  even. ``math.inf`` is constant spacing (vLLM's limit as B grows).
- **Profiles**: a rate that changes over time, as phases of constant rate
  (a quiet hour, a busy one, ...). The same renewal process runs in
  "operational time" u = Λ(t), the expected number of arrivals by t, and each
  arrival is mapped back through Λ⁻¹ (time rescaling): for B = 1 that is
  exactly the non-homogeneous Poisson process of those rates, and a phase of
  rate 0 gets no arrivals.

Unlike vLLM, the offsets are never rescaled so that the last one lands at
exactly N/R: a rescaled schedule is no longer the process it claims to be,
and the achieved rate is something to measure, not to force
(docs/decisions.md D86). Like vLLM, the first request waits one gap.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

#: Operational-time gaps are drawn in chunks of this many while filling a profile.
CHUNK = 4096


@dataclass(frozen=True)
class Phase:
    """A stretch of a load profile at one rate (requests per second)."""

    duration_s: float
    rate: float


def _check(burstiness: float) -> None:
    if not burstiness > 0:
        raise ValueError(f"burstiness must be > 0 (math.inf: constant spacing), not {burstiness!r}")


def unit_gaps(n: int, burstiness: float, rng: np.random.Generator) -> np.ndarray:
    """``n`` gaps of mean 1: gamma of shape B and scale 1/B (ones for B = inf)."""
    _check(burstiness)
    if math.isinf(burstiness):
        return np.ones(n)
    return rng.gamma(shape=burstiness, scale=1.0 / burstiness, size=n)


def at_rate(n: int, rate: float, burstiness: float = 1.0, seed: int = 0) -> tuple[float, ...]:
    """The send offsets of ``n`` requests at ``rate`` requests/s."""
    if n < 1:
        raise ValueError(f"need at least one request, not {n}")
    if not (rate > 0 and math.isfinite(rate)):
        raise ValueError(f"rate must be a finite number > 0 requests/s, not {rate!r}")
    gaps = unit_gaps(n, burstiness, np.random.default_rng(seed))
    return tuple(float(x) for x in np.cumsum(gaps) / rate)


def _breakpoints(phases: Sequence[Phase]) -> tuple[np.ndarray, np.ndarray]:
    if not phases:
        raise ValueError("a profile needs at least one phase")
    for i, p in enumerate(phases):
        if not (p.duration_s > 0 and math.isfinite(p.duration_s)):
            raise ValueError(f"phase {i + 1}: duration must be a finite number of seconds > 0, not {p.duration_s!r}")
        if not (p.rate >= 0 and math.isfinite(p.rate)):
            raise ValueError(f"phase {i + 1}: rate must be a finite number >= 0 requests/s, not {p.rate!r}")
    t = np.concatenate([[0.0], np.cumsum([p.duration_s for p in phases])])
    u = np.concatenate([[0.0], np.cumsum([p.duration_s * p.rate for p in phases])])
    if u[-1] <= 0:
        raise ValueError("a profile whose every phase has rate 0 sends nothing")
    return t, u


def expected_requests(phases: Sequence[Phase]) -> float:
    """Λ(T): the expected number of requests over the whole profile."""
    return float(_breakpoints(phases)[1][-1])


def over_profile(phases: Sequence[Phase], burstiness: float = 1.0, seed: int = 0) -> tuple[float, ...]:
    """The send offsets of a profile: every arrival of the rescaled renewal
    process before the profile's end (their number is random, mean Λ(T))."""
    t, u = _breakpoints(phases)
    rng = np.random.default_rng(seed)
    total = u[-1]
    ops: list[np.ndarray] = []
    last = 0.0
    while last <= total:
        chunk = last + np.cumsum(unit_gaps(CHUNK, burstiness, rng))
        ops.append(chunk)
        last = float(chunk[-1])
    op = np.concatenate(ops)
    op = op[op <= total]
    # The phase of each arrival: the first breakpoint at or above it, less one.
    # A phase of rate 0 spans no operational time, so it is never chosen.
    j = np.searchsorted(u, op, side="left") - 1
    j = np.clip(j, 0, len(phases) - 1)
    rates = np.array([p.rate for p in phases])[j]
    return tuple(float(x) for x in t[j] + (op - u[j]) / rates)


def phase_of(offsets: Sequence[float], phases: Sequence[Phase]) -> tuple[int, ...]:
    """Which phase (0-based) each offset falls in; the last phase keeps its end."""
    t, _ = _breakpoints(phases)
    j = np.searchsorted(t, np.asarray(offsets, dtype=float), side="right") - 1
    return tuple(int(x) for x in np.clip(j, 0, len(phases) - 1))
