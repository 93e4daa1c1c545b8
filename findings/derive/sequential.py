"""Sequential repeats: when to stop repeating a point (``findings bench
--until-decided``). Pure, stdlib only.

The decision is the document's rule (analysis.Comparison.verdict): a win
is a ratio of means beyond 1 + band whose interval lies above 1; a loss the
mirror image. Added for stopping: a *settled tie*, whose whole interval lies
inside the band, so that more repeats cannot make it a win or a loss.

Looking after every repeat and stopping at the first decision inflates false
wins: with a 95% interval at each of 9 looks, an A/A pair (two runs of one
config) is called a win or a loss far more often than 5% of the time (the
simulation in tests/test_sequential.py measures it). The interval used here
is therefore:

- Student's t interval of the difference of the mean log throughputs
  (equal repeats on both sides: the two configs alternate), exact for
  log-normal noise at any number of repeats, where the document's
  percentile bootstrap of two or three repeats is far too narrow;
- at a level split over the planned looks (Bonferroni: each of L looks at
  error (1 - confidence) / L), so that the chance of any false decision over
  the whole sequence stays at most 1 - confidence: the simplest
  alpha-spending function, conservative but valid whatever the stopping.

docs/decisions.md D73 says why not the document's bootstrap and why not a
tighter (Pocock, O'Brien-Fleming) boundary.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from typing import Sequence

WIN, TIE, LOSS = "win", "tie", "loss"


def _betacf(a: float, b: float, x: float) -> float:
    """Continued fraction of the incomplete beta function (Lentz)."""
    tiny = 1e-300
    qab, qap, qam = a + b, a + 1.0, a - 1.0
    c, d = 1.0, 1.0 - qab * x / qap
    d = 1.0 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 300):
        m2 = 2 * m
        aa = m * (b - m) * x / ((qam + m2) * (a + m2))
        d = 1.0 + aa * d
        d = 1.0 / (d if abs(d) > tiny else tiny)
        c = 1.0 + aa / c if abs(1.0 + aa / c) > tiny else tiny
        h *= d * c
        aa = -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2))
        d = 1.0 + aa * d
        d = 1.0 / (d if abs(d) > tiny else tiny)
        c = 1.0 + aa / c if abs(1.0 + aa / c) > tiny else tiny
        delta = d * c
        h *= delta
        if abs(delta - 1.0) < 1e-14:
            break
    return h


def betainc(a: float, b: float, x: float) -> float:
    """The regularized incomplete beta function I_x(a, b)."""
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    lbeta = math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x)
    if x < (a + 1.0) / (a + b + 2.0):
        return math.exp(lbeta) * _betacf(a, b, x) / a
    return 1.0 - math.exp(lbeta) * _betacf(b, a, 1.0 - x) / b


def t_cdf(t: float, df: float) -> float:
    x = df / (df + t * t)
    tail = 0.5 * betainc(df / 2.0, 0.5, x)
    return 1.0 - tail if t > 0 else tail


@functools.lru_cache(maxsize=4096)
def t_ppf(p: float, df: int) -> float:
    """The p-quantile of Student's t with ``df`` degrees of freedom (bisection)."""
    if p == 0.5:
        return 0.0
    if p < 0.5:
        return -t_ppf(1.0 - p, df)
    lo, hi = 0.0, 1.0
    while t_cdf(hi, df) < p:
        hi *= 2.0
    for _ in range(200):
        mid = (lo + hi) / 2.0
        if t_cdf(mid, df) < p:
            lo = mid
        else:
            hi = mid
        if hi - lo < 1e-12 * max(1.0, hi):
            break
    return (lo + hi) / 2.0


@dataclass(frozen=True)
class Decision:
    verdict: str | None  # WIN, LOSS, TIE (settled), or None: keep repeating
    ratio: float  # mean(a) / mean(b)
    lo: float  # the interval of the ratio
    hi: float
    level: float  # the confidence of that interval (after the split over looks)
    repeats: int


def decide(a: Sequence[float], b: Sequence[float], band: float, confidence: float, looks: int) -> Decision:
    """``a`` (the candidate's repeats) against ``b`` (the baseline's), as many
    of each, at one of ``looks`` planned looks."""
    n = min(len(a), len(b))
    a, b = list(a)[:n], list(b)[:n]
    ratio = (sum(a) / n) / (sum(b) / n) if n and sum(b) > 0 else float("nan")
    level = 1.0 - (1.0 - confidence) / max(1, looks)
    if n < 2 or min(a) <= 0 or min(b) <= 0:
        return Decision(None, ratio, 0.0, math.inf, level, n)
    la, lb = [math.log(x) for x in a], [math.log(x) for x in b]
    ma, mb = sum(la) / n, sum(lb) / n
    var = (sum((x - ma) ** 2 for x in la) + sum((x - mb) ** 2 for x in lb)) / (2 * n - 2)
    se = math.sqrt(var * 2.0 / n)
    half = t_ppf(1.0 - (1.0 - level) / 2.0, 2 * n - 2) * se
    lo, hi = math.exp(ma - mb - half), math.exp(ma - mb + half)
    verdict = None
    if ratio - 1.0 > band and lo > 1.0:
        verdict = WIN
    elif 1.0 - ratio > band and hi < 1.0:
        verdict = LOSS
    elif lo >= 1.0 - band and hi <= 1.0 + band:
        verdict = TIE
    return Decision(verdict, ratio, lo, hi, level, n)
