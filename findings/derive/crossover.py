"""Where a candidate's ratio to the baseline crosses 1, between measured C.

A threshold policy names a measured C (analysis.policy); the switch it
stands for lies somewhere between the last C on one side and the first on
the other. Authors who publish such ladders interpolate the crossing; so
does this, with its uncertainty (docs/decisions.md D90):

- **The estimate**: the first crossing of ratio - 1 through 0, going from
  the winning side towards the losses, interpolated linearly on log C
  between the two measured C around it.
- **The range**: the same crossing of the comparison's lower and upper
  bounds (the larger of the noise band and the bootstrap interval: a win
  is exactly "lower bound above 1", a loss "upper bound below 1"). For
  ``on-below`` the lower bound's curve drops below 1 first (the low end),
  the upper bound's last (the high end, at the first loss at the latest);
  for ``on-above`` the other way round. So the range always holds the
  estimate, and it always lies between the last win and the first loss.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

METHOD = "log-linear"


@dataclass(frozen=True)
class Level:
    """One measured C: the ratio and its bounds, and its verdict."""

    concurrency: int
    ratio: float
    low: float
    high: float
    verdict: str  # "win" | "tie" | "loss"


@dataclass(frozen=True)
class Crossover:
    estimate: float
    low: float
    high: float
    #: The measured C the estimate lies between (equal when it is one of them).
    between: tuple[int, int]
    method: str = METHOD

    def to_json(self) -> dict[str, object]:
        return {"estimate": round(self.estimate, 1), "low": round(self.low, 1), "high": round(self.high, 1),
                "method": self.method}


def _crossing(levels: Sequence[Level], start: int, value: str, falling: bool) -> tuple[float, tuple[int, int]] | None:
    """The first C at or after ``levels[start]`` where ``value - 1`` changes
    sign (falls through 0 when ``falling``, else rises), interpolated on log C."""
    def y(lv: Level) -> float:
        v: float = getattr(lv, value) - 1.0
        return v if falling else -v
    for i in range(start, len(levels)):
        here = y(levels[i])
        if here <= 0:
            if i == start:
                return float(levels[i].concurrency), (levels[i].concurrency, levels[i].concurrency)
            prev = y(levels[i - 1])
            x0, x1 = math.log(levels[i - 1].concurrency), math.log(levels[i].concurrency)
            x = x0 + prev / (prev - here) * (x1 - x0) if prev != here else x1
            return math.exp(x), (levels[i - 1].concurrency, levels[i].concurrency)
    return None


def estimate(levels: Sequence[Level], policy: str) -> Crossover | None:
    """The crossover of an ``on-below`` or ``on-above`` candidate from its
    levels sorted by C (comparisons without a verdict left out); None for
    other policies."""
    if policy not in ("on-below", "on-above"):
        return None
    # on-above is on-below mirrored: losses then wins instead of wins then losses
    falling = policy == "on-below"
    before, after = ("win", "loss") if falling else ("loss", "win")
    verdicts = [lv.verdict for lv in levels]
    later = [i for i, v in enumerate(verdicts) if v == after]
    earlier = [i for i, v in enumerate(verdicts) if v == before and (not later or i < later[0])]
    if not earlier or not later:
        return None
    start = earlier[-1]
    low_curve, high_curve = ("low", "high") if falling else ("high", "low")
    est = _crossing(levels, start, "ratio", falling)
    lo = _crossing(levels, start, low_curve, falling)
    hi = _crossing(levels, start, high_curve, falling)
    if est is None or lo is None or hi is None:
        return None
    return Crossover(estimate=est[0], low=min(lo[0], est[0]), high=max(hi[0], est[0]), between=est[1])
