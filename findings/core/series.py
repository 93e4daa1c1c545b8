"""One run's throughput per time window, from its per-request records. Pure.

What the block bootstrap of findings/derive/stats.py resamples. It lives in
the core because the store computes it once, when it writes a run with
per-request records, and keeps it in the run file (``series``, D109): a
render then needs no sidecar. ``SERIES_KEY`` names the computation; a stored
series made under another key is ignored and computed again from the
records.
"""

from __future__ import annotations

import itertools
import math
from typing import Any, Mapping

WINDOWS = 10
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




#: What a stored series was computed with: the windows, the waves a run
#: needs and the algorithm's version. Change any, and stored series are
#: recomputed from the records (the store keeps them under this key).
SERIES_KEY = f"w{WINDOWS}-m{MIN_WAVES}-v1"
