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
import itertools
import math
import random
import zlib
from typing import Any, Mapping, Sequence

WINDOWS = 10


def percentile(sorted_values: Sequence[float], q: float) -> float:
    pos = (len(sorted_values) - 1) * q
    lo = math.floor(pos)
    hi = min(lo + 1, len(sorted_values) - 1)
    return sorted_values[lo] + (sorted_values[hi] - sorted_values[lo]) * (pos - lo)


#: A run must reuse each of its C slots this many times before its time
#: windows are treated as exchangeable: a run of one or two waves is all
#: ramp-up and ramp-down, and resampling its windows would measure the ramp.
MIN_WAVES = 3


def window_series(requests: Mapping[str, Any] | None, windows: int = WINDOWS,
                  concurrency: int = 1) -> tuple[float, ...]:
    """Output tokens/s per equal time window of one run, from its raw records.

    Needs the runner's columns (sent_s, event_s, event_tokens, error); returns
    () when they are absent (e.g. imported points) or when the run is too
    short to have a steady state (fewer than MIN_WAVES x C requests)."""
    if not requests:
        return ()
    sent, ev_s, ev_n = requests.get("sent_s"), requests.get("event_s"), requests.get("event_tokens")
    if not isinstance(sent, list) or len(sent) < MIN_WAVES * concurrency:
        return ()
    errors = requests.get("error") or []
    if not isinstance(sent, list) or not isinstance(ev_s, list) or not isinstance(ev_n, list):
        return ()
    fast = _window_series_vectorised(sent, ev_s, ev_n, errors, windows)
    return fast if fast is not None else _window_series(sent, ev_s, ev_n, errors, windows)


def _window_series(sent: list[Any], ev_s: list[Any], ev_n: list[Any], errors: Any,
                   windows: int) -> tuple[float, ...]:
    """The reference: one event at a time."""
    stamps: list[tuple[float, int]] = []
    for i, (s0, times, counts) in enumerate(zip(sent, ev_s, ev_n)):
        if s0 is None or not times or (i < len(errors) and errors[i]):
            continue
        last = 0
        for t, n in zip(times, counts):
            stamps.append((float(s0) + float(t), int(n) - last))
            last = int(n)
    if len(stamps) < windows:
        return ()
    start = min(float(s) for s in sent if s is not None)
    end = max(t for t, _ in stamps)
    width = (end - start) / windows
    if width <= 0:
        return ()
    tokens = [0] * windows
    for t, n in stamps:
        tokens[min(int((t - start) / width), windows - 1)] += n
    return tuple(x / width for x in tokens)


def _window_series_vectorised(sent: list[Any], ev_s: list[Any], ev_n: list[Any], errors: Any,
                              windows: int) -> tuple[float, ...] | None:
    """``_window_series`` with numpy for well-formed records (what the runner
    writes): the same float operations, so the same bits. None for anything
    else (odd types, ragged or negative times, huge counts), which the
    reference then handles as it always has."""
    import numpy as np

    if not isinstance(errors, list):
        return None
    n = min(len(sent), len(ev_s), len(ev_n))  # zip() stops at the shortest
    sent, ev_s, ev_n = sent[:n], ev_s[:n], ev_n[:n]
    if not all(type(t) is list for t in ev_s) or not all(type(c) is list for c in ev_n):
        return None
    if any(type(s) not in (float, int) for s in sent if s is not None):
        return None
    lengths = list(map(len, ev_s))
    if lengths != list(map(len, ev_n)):
        return None
    failed = errors[:n] + [None] * (n - len(errors))
    keep = [s is not None and length > 0 and not e for s, length, e in zip(sent, lengths, failed)]
    kept_lengths = list(itertools.compress(lengths, keep))
    if sum(kept_lengths) < windows:
        return ()
    start = min(float(s) for s in sent if s is not None)
    try:  # float(t) of each time, as the reference does
        t_rel = np.fromiter(itertools.chain.from_iterable(itertools.compress(ev_s, keep)), np.float64)
    except (TypeError, ValueError, OverflowError):
        return None
    n_abs = np.array(list(itertools.chain.from_iterable(itertools.compress(ev_n, keep))))
    if n_abs.dtype != np.int64 or np.abs(n_abs).max() >= 2 ** 50:  # plain ints only
        return None
    offsets = np.array([float(s) for s in itertools.compress(sent, keep)])
    stamps = np.repeat(offsets, kept_lengths) + t_rel
    end = float(stamps.max())
    if not math.isfinite(end) or float(stamps.min()) < start:
        return None
    width = (end - start) / windows
    if width <= 0:
        return ()
    previous = np.empty_like(n_abs)
    previous[1:] = n_abs[:-1]
    previous[np.cumsum(kept_lengths) - kept_lengths] = 0  # each request starts from 0 tokens
    index = np.minimum(np.trunc((stamps - start) / width), windows - 1).astype(np.intp)
    tokens = np.bincount(index, weights=(n_abs - previous).astype(np.float64), minlength=windows)
    out: list[float] = (tokens / width).tolist()
    return tuple(out)


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
