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


@functools.lru_cache(maxsize=65536)
def ratio_ci(a: tuple[float, ...], b: tuple[float, ...], level: float, resamples: int,
             seed_text: str) -> tuple[float, float]:
    """Percentile bootstrap CI of mean(a) / mean(b), resampling each side."""
    rng = random.Random(zlib.crc32(seed_text.encode()))
    na, nb = len(a), len(b)
    ratios = []
    for _ in range(resamples):
        sa = sum(a[rng.randrange(na)] for _ in range(na))
        sb = sum(b[rng.randrange(nb)] for _ in range(nb))
        if sb > 0:
            ratios.append((sa / na) / (sb / nb))
    if not ratios:
        return (math.nan, math.nan)
    ratios.sort()
    alpha = (1.0 - level) / 2.0
    return (percentile(ratios, alpha), percentile(ratios, 1.0 - alpha))
