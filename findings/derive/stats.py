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

import contextlib
import functools
import marshal
import math
import random
import zlib
from array import array
from typing import Any, Iterable, Iterator, Mapping, NamedTuple, Sequence

# The time-window series of one run moved to findings/core/series.py (the
# store writes it with the run, D109); its names stay importable from here.
from findings.core.series import (MIN_WAVES, WINDOWS, _window_series, _window_series_vectorised,  # noqa: E402,F401
                                  window_series)


def percentile(sorted_values: Sequence[float], q: float) -> float:
    pos = (len(sorted_values) - 1) * q
    lo = math.floor(pos)
    hi = min(lo + 1, len(sorted_values) - 1)
    return sorted_values[lo] + (sorted_values[hi] - sorted_values[lo]) * (pos - lo)


def ratio_ci(a: tuple[float, ...], b: tuple[float, ...], level: float, resamples: int,
             seed_text: str) -> tuple[float, float]:
    """Percentile bootstrap CI of mean(a) / mean(b), resampling each side:
    within ``intervals``, the one known for these very inputs where there is
    one (its samples, level, resamples and seed: the content of the cells
    compared), else computed; each asked for is recorded there."""
    if _ASKED is None:
        return _bootstrap(a, b, level, resamples, seed_text)
    try:
        # marshal's bytes tell 0.0 from -0.0 and 1 from 1.0, which == does not.
        # Version 2: from version 3 on, an object met twice is written as a
        # reference to the first, so the bytes would tell shared floats from
        # equal ones (cells kept in slices share theirs: D174).
        key = marshal.dumps((a, b, level, resamples, seed_text), 2)
    except ValueError:  # not of plain numbers: computed, not kept
        return _bootstrap(a, b, level, resamples, seed_text)
    found = _KNOWN.get(key)
    if found is None:
        found = _bootstrap(a, b, level, resamples, seed_text)
    _ASKED[key] = found
    return found


#: An interval's inputs (``ratio_ci``'s arguments, marshalled) -> the interval.
Intervals = dict[bytes, tuple[float, float]]
#: Within ``intervals``: those known before, and those asked for since (None: outside).
_KNOWN: Mapping[bytes, tuple[float, float]] = {}
_ASKED: Intervals | None = None


@contextlib.contextmanager
def intervals(known: Mapping[bytes, tuple[float, float]] | None = None) -> Iterator[Intervals]:
    """Within it, ``ratio_ci`` takes an interval from ``known`` where its
    inputs are there (the render cache's, kept from the commands before:
    D171), and records every interval asked for in the dict this yields,
    which a later command can be given as ``known``. The intervals are the
    same bits either way: only how often the bootstrap runs changes."""
    global _KNOWN, _ASKED
    saved = _KNOWN, _ASKED
    asked: Intervals = {}
    _KNOWN, _ASKED = known or {}, asked
    try:
        yield asked
    finally:
        _KNOWN, _ASKED = saved


@functools.lru_cache(maxsize=65536)
def _bootstrap(a: tuple[float, ...], b: tuple[float, ...], level: float, resamples: int,
               seed_text: str) -> tuple[float, float]:
    """``ratio_ci``, computed (once per process for the same inputs)."""
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


def group_runs(codes: Sequence[Sequence[int]]) -> tuple[Sequence[int], list[int]]:
    """Rows grouped by their codes (one list per column, most significant
    first, each row's code in each): the row numbers in the order of their
    codes (rows with equal codes in their own order: a stable sort), and
    where each group starts in it, then its length. At C speed: the cells
    of a million points (findings/derive/analysis.py, issue 38). The row
    numbers are an ``array("q")``, not a list: a million of them as ints
    took 38 MiB, 8 MB as an array (D177)."""
    import numpy as np

    if not codes or not len(codes[0]):
        return array("q"), [0]
    keys = [np.asarray(c, dtype=np.int64) for c in codes]
    order = np.lexsort(keys[::-1])  # the last key is the primary one; stable
    change = np.zeros(len(order), dtype=bool)
    change[0] = True
    for k in keys:
        ranked = k[order]
        change[1:] |= ranked[1:] != ranked[:-1]
    starts = np.flatnonzero(change).tolist()
    return _as_array(order), starts + [len(order)]


def by_rank(ranks: Iterable[int], count: int) -> tuple[Sequence[int], dict[int, tuple[int, int]]]:
    """``group_runs`` of one column of ``count`` ranks (ints from 0): the row
    numbers grouped by rank, stably, and each rank present -> (lo, hi),
    where its rows are in them. At C speed, with no list of a million made
    (the document's labels, report.Labels, D177)."""
    import numpy as np

    column = np.fromiter(ranks, dtype=np.int64, count=count)
    if not count:
        return array("q"), {}
    order = np.argsort(column, kind="stable")
    counts = np.bincount(column)
    del column
    ends = np.cumsum(counts)
    spans = {rank: (int(end - n), int(end)) for rank, (n, end) in enumerate(zip(counts.tolist(), ends.tolist()))
             if n}
    return _as_array(order), spans


def _as_array(order: Any) -> array[int]:
    """A numpy array of row numbers as an ``array("q")``, copied once."""
    import numpy as np

    out = array("q")
    out.frombytes(np.ascontiguousarray(order, dtype=np.int64).data.cast("B"))
    return out


def codes(column: Sequence[Any]) -> tuple[list[int], int]:
    """Each value's place among the column's distinct values, in their sort
    order (a column coded for ``group_runs`` and ``step_pairs``), and how
    many distinct values there are."""
    code = {v: i for i, v in enumerate(sorted(set(column)))}
    return list(map(code.__getitem__, column)), len(code)


class Steps(NamedTuple):
    """Rows of (series, step, key) paired with the previous step of their
    series at the same key (``step_pairs``). Positions are places in
    ``order``; every list is as long as ``order`` but ``starts`` and ``beyond``."""

    order: list[int]  # the kept rows, by (series, step, key)
    starts: list[int]  # where each (series, step) group starts in order, then len(order)
    series: list[int]  # each group's series
    partner: list[int]  # the position of the row's partner in the group before, or -1
    ratio: list[float]  # value / the partner's value (0.0 without a partner)
    band: list[float]  # max(floor, the two spreads) (0.0 without a partner)
    beyond: list[bool]  # abs(ratio - 1) > band (False without a partner)
    moved: list[bool]  # per group: any of its rows beyond
    #: Per group, of its rows with a partner: how many; how many beyond with
    #: a ratio under 1, and over 1; how many with a ratio under 1; whether
    #: any ratio is ``far`` or more either way; how many beyond have n >= 2
    #: on both sides (where a bootstrap may take the move back).
    paired: list[int]
    down: list[int]
    up: list[int]
    below: list[int]
    far: list[bool]
    repeated: list[int]


def step_pairs(series: Sequence[int], steps: Sequence[int], keys: Sequence[int], values: Sequence[float],
               lo: Sequence[float], hi: Sequence[float], n: Sequence[int], floor: float,
               far: float = math.inf) -> Steps | None:
    """Each series' rows step after step, every row set against its series'
    previous step at the same key, at C speed (the moves between campaigns,
    findings/derive/regressions.py: series a (workload, config), step a
    campaign's rank, key a C, value a cell's mean). Rows with a value of 0
    or less are left out. A row's spread is ``(hi - lo) / value`` with
    ``n >= 2``, else 0, and its band against its partner is the larger of
    ``floor`` and the two spreads.

    The same floats as Python's arithmetic on each pair: None (the caller
    pairs them in Python) when a value, lo or hi is not finite (where
    Python's max and numpy's differ) or a (series, step, key) repeats."""
    import numpy as np

    v = np.asarray(values, dtype=np.float64)
    low, high = np.asarray(lo, dtype=np.float64), np.asarray(hi, dtype=np.float64)
    if not (np.isfinite(v).all() and np.isfinite(low).all() and np.isfinite(high).all()):
        return None
    keep = np.flatnonzero(v > 0)
    s = np.asarray(series, dtype=np.int64)[keep]
    st = np.asarray(steps, dtype=np.int64)[keep]
    k = np.asarray(keys, dtype=np.int64)[keep]
    order = np.lexsort((k, st, s))
    s, st, k = s[order], st[order], k[order]
    rows = keep[order]
    size = len(rows)
    if size == 0:
        return Steps([], [0], [], [], [], [], [], [], [], [], [], [], [], [])
    first = np.ones(size, dtype=bool)
    first[1:] = (s[1:] != s[:-1]) | (st[1:] != st[:-1])
    if (~first[1:] & (k[1:] == k[:-1])).any():
        return None  # a (series, step, key) twice
    group = np.cumsum(first) - 1
    starts = np.flatnonzero(first)
    mean = v[rows]
    count = np.asarray(n, dtype=np.int64)[rows]
    spread = np.zeros(size)
    wide = count >= 2
    spread[wide] = (high[rows][wide] - low[rows][wide]) / mean[wide]
    # A row's partner: the row before it by (series, key, group), when it is
    # in the same series, at the same key, one group (one step of the series) before.
    by_key = np.lexsort((group, k, s))
    a, b = by_key[:-1], by_key[1:]
    paired = (s[a] == s[b]) & (k[a] == k[b]) & (group[a] + 1 == group[b])
    partner = np.full(size, -1, dtype=np.int64)
    partner[b[paired]] = a[paired]
    has = partner >= 0
    ratio = np.zeros(size)
    band = np.zeros(size)
    old = partner[has]
    ratio[has] = mean[has] / mean[old]
    band[has] = np.maximum(np.maximum(floor, spread[old]), spread[has])
    beyond = np.zeros(size, dtype=bool)
    beyond[has] = np.abs(ratio[has] - 1) > band[has]
    groups = len(starts)
    moved = np.zeros(groups, dtype=bool)
    moved[group[beyond]] = True
    under = has & (ratio < 1)

    def per_group(rows_: Any) -> Any:
        return np.bincount(group[rows_], minlength=groups)

    distant = np.zeros(size, dtype=bool)
    distant[has] = (ratio[has] >= far) | (1 / ratio[has] >= far)
    both = beyond & (count >= 2)
    both[both] &= count[partner[both]] >= 2
    return Steps(rows.tolist(), starts.tolist() + [size], s[starts].tolist(), partner.tolist(), ratio.tolist(),
                 band.tolist(), beyond.tolist(), moved.tolist(), per_group(has).tolist(),
                 per_group(beyond & under).tolist(), per_group(beyond & (ratio > 1)).tolist(), per_group(under).tolist(),
                 (per_group(distant) > 0).tolist(), per_group(both).tolist())
