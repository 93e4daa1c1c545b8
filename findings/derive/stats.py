"""Confidence intervals for the throughput ratio. Pure, stdlib only.

Two bootstraps, chosen by the data a comparison has:

- **repeats**: both cells have at least two repeated points. Resample each
  cell's repeats with replacement; the statistic is mean(a) / mean(b).
- **blocks of one run**: both cells are single points with per-request
  records (our runner's). Each run is cut into ``WINDOWS`` equal time
  windows and the output tokens delivered in each window give a throughput
  series. Windows are resampled as whole blocks, so the correlation between
  requests that ran at the same time stays inside a block instead of being
  mistaken for independent evidence.

Resampling is seeded from the point ids, so a render is deterministic.
"""

from __future__ import annotations

import functools
import math
import random
import zlib
from typing import Any, Iterable, Sequence

# The time-window series of one run moved to findings/core/series.py (the
# store writes it with the run, D109); its names stay importable from here.
from findings.core.series import (MIN_WAVES, WINDOWS, _window_series, _window_series_vectorised,  # noqa: E402,F401
                                  window_series)


def percentile(sorted_values: Sequence[float], q: float) -> float:
    pos = (len(sorted_values) - 1) * q
    lo = math.floor(pos)
    hi = min(lo + 1, len(sorted_values) - 1)
    return sorted_values[lo] + (sorted_values[hi] - sorted_values[lo]) * (pos - lo)


@functools.lru_cache(maxsize=65536)
def ratio_ci(a: tuple[float, ...], b: tuple[float, ...], level: float, resamples: int,
             seed_text: str) -> tuple[float, float]:
    """Percentile bootstrap CI of mean(a) / mean(b), resampling each side."""
    rng = random.Random(zlib.crc32(seed_text.encode()))
    na, nb = len(a), len(b)
    ratios: Sequence[float]
    if na == nb and na > 0 and all(type(x) is float for x in a + b):
        ratios = _ratios_vectorised(rng, a, b, resamples)
    else:
        ratios = sorted(_ratios(rng, a, b, resamples))
    if not len(ratios):
        return (math.nan, math.nan)
    alpha = (1.0 - level) / 2.0
    return (float(percentile(ratios, alpha)), float(percentile(ratios, 1.0 - alpha)))


def _ratios(rng: random.Random, a: tuple[float, ...], b: tuple[float, ...], resamples: int) -> list[float]:
    """The resampled ratios, one draw at a time (the reference)."""
    na, nb = len(a), len(b)
    ratios = []
    for _ in range(resamples):
        sa = sum(a[rng.randrange(na)] for _ in range(na))
        sb = sum(b[rng.randrange(nb)] for _ in range(nb))
        mb = sb / nb
        if mb > 0:  # not sb: a sum of subnormals over n can round to 0
            ratios.append((sa / na) / mb)
    return ratios


_MT: Any = None  # one numpy MT19937 for all calls (making one draws OS entropy); re-seeded each time


def _ratios_vectorised(rng: random.Random, a: tuple[float, ...], b: tuple[float, ...],
                       resamples: int) -> Any:
    """``sorted(_ratios(...))`` for two samples of the same size, with numpy.

    ``random.Random.randrange(n)`` takes the top ``n.bit_length()`` bits of
    successive 32-bit Mersenne Twister outputs and rejects values >= n. With
    the same n on both sides, the accepted values are simply the filtered
    stream, so numpy's MT19937, given the same state, yields the same
    indices in bulk. Sums are added left to right, as ``sum`` does, so every
    ratio is bit-for-bit the reference's (tests/test_rigor.py checks it).
    Returns a sorted numpy array.
    """
    import numpy as np

    global _MT
    if _MT is None:
        _MT = np.random.MT19937(0)
    state = rng.getstate()[1]
    _MT.state = {"bit_generator": "MT19937",
                 "state": {"key": np.fromiter(state, dtype=np.uint32, count=624), "pos": state[624]}}
    n = len(a)
    need = resamples * 2 * n
    bits = n.bit_length()
    chunks, got = [], 0
    while got < need:  # n / 2**bits > 1/2 of the draws are accepted
        draws = _MT.random_raw((need - got) * (1 << bits) // n + 64) >> np.uint64(32 - bits)
        accepted = draws[draws < n]
        chunks.append(accepted)
        got += len(accepted)
    idx = np.concatenate(chunks)[:need].reshape(resamples, 2, n).astype(np.intp)
    av = np.asarray(a, dtype=np.float64)[idx[:, 0, :]]
    bv = np.asarray(b, dtype=np.float64)[idx[:, 1, :]]
    sa, sb = av[:, 0].copy(), bv[:, 0].copy()
    for j in range(1, n):  # left to right, like sum(), not numpy's pairwise sum
        sa += av[:, j]
        sb += bv[:, j]
    mb = sb / n
    keep = mb > 0
    with np.errstate(over="ignore"):  # inf, as Python's float division gives
        ratios = (sa[keep] / n) / mb[keep]
    ratios.sort()
    return ratios


def ratio_bounds(a: Sequence[float], b: Sequence[float]) -> tuple[float, float] | None:
    """Bounds that every resampled ratio of means lies within: min(a)/max(b)
    and max(a)/min(b), widened by a relative 1e-9 for rounding. None unless
    a >= 0 and b > 0 (and the samples are small enough for that margin)."""
    if not a or not b or len(a) + len(b) > 100_000 or min(a) < 0 or min(b) <= 0:
        return None
    return (min(a) / max(b) * (1 - 1e-9), max(a) / min(b) * (1 + 1e-9))


def table_rows(packed: Iterable[bytes], width: int, above: Sequence[tuple[int, float]],
               short: Sequence[tuple[int, int, float]],
               distinct: Sequence[int]) -> tuple[list[int], list[tuple[float, ...]], list[int]]:
    """A table of doubles (``packed``: rows of ``width`` values in native
    order, as ``array('d')`` holds them, in chunks of whole rows), read in
    columns at C speed (the validity gates, findings/derive/validity.py):

    - the rows where any ``above`` column ``(i, limit)`` holds a value over
      its limit, or any ``short`` pair ``(i, j, share)`` holds
      ``x[i] < share * x[j]`` with ``x[j] != 0`` (NaN is over no limit and
      short of nothing, as in Python);
    - the distinct rows of the ``distinct`` columns, and each row's place
      among them (none without columns).

    Chunk by chunk: only the ``distinct`` columns of every row are held at
    once, not the whole table (issue 38: a million rows of 31 doubles are
    250 MB)."""
    import numpy as np

    hits: list[Any] = []
    kept: list[Any] = []
    cols = list(distinct)
    for chunk in packed:
        table = np.frombuffer(chunk, dtype=np.float64).reshape(-1, width)
        hit = np.zeros(len(table), dtype=bool)
        for i, limit in above:
            hit |= table[:, i] > limit
        for i, j, share in short:
            hit |= (table[:, j] != 0) & (table[:, i] < share * table[:, j])
        hits.append(hit)
        if cols:
            kept.append(table[:, cols])  # a copy: the chunk is freed
        del table
    if not hits:
        return [], [], []
    rows = np.flatnonzero(np.concatenate(hits)).tolist()
    if not cols:
        return rows, [], []
    keys = np.concatenate(kept)
    del kept
    order = np.lexsort(keys.T[::-1])
    ranked = keys[order]
    first = np.ones(len(ranked), dtype=bool)
    first[1:] = (ranked[1:] != ranked[:-1]).any(axis=1)
    inverse = np.empty(len(ranked), dtype=np.intp)
    inverse[order] = np.cumsum(first) - 1
    return rows, [tuple(row) for row in ranked[first].tolist()], inverse.tolist()


def group_runs(codes: Sequence[Sequence[int]]) -> tuple[list[int], list[int]]:
    """Rows grouped by their codes (one list per column, most significant
    first, each row's code in each): the row numbers in the order of their
    codes (rows with equal codes in their own order: a stable sort), and
    where each group starts in it, then its length. At C speed: the cells
    of a million points (findings/derive/analysis.py, issue 38)."""
    import numpy as np

    if not codes or not len(codes[0]):
        return [], [0]
    keys = [np.asarray(c, dtype=np.int64) for c in codes]
    order = np.lexsort(keys[::-1])  # the last key is the primary one; stable
    change = np.zeros(len(order), dtype=bool)
    change[0] = True
    for k in keys:
        ranked = k[order]
        change[1:] |= ranked[1:] != ranked[:-1]
    starts = np.flatnonzero(change).tolist()
    return order.tolist(), starts + [len(order)]
