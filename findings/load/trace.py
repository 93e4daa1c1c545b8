"""Mooncake-format request traces (JSONL), validated at the file boundary.

One JSON object per line, as the Mooncake FAST'25 traces, AIPerf's
``mooncake_trace`` loader and Dynamo's data generator write them:

- ``timestamp``: the arrival, in milliseconds since the trace's start;
- ``input_length``: prompt tokens;
- ``output_length``: tokens to generate;
- ``hash_ids``: one id per block of ``block_size`` prompt tokens (512 in the
  Mooncake traces); two requests that share the first k ids share their
  first k blocks, which is what a prefix cache can reuse.

Other keys are kept out of the model and ignored. ``offsets`` turns arrivals
into send offsets in seconds, scaled by ``time_scale`` (0.5: every gap
halved, twice the rate).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from findings.core import diskio, jsonfast
from findings.core.errors import InputError

#: Prompt tokens per hash id in the Mooncake traces.
MOONCAKE_BLOCK = 512


@dataclass(frozen=True)
class TraceRequest:
    timestamp_ms: float
    input_length: int
    output_length: int
    hash_ids: tuple[int, ...]


@dataclass(frozen=True)
class Trace:
    path: str
    requests: tuple[TraceRequest, ...]  # in arrival order (stable for equal timestamps)
    block_size: int


def _int(path: str, line: int, obj: dict[str, Any], key: str, minimum: int) -> int:
    v = obj.get(key)
    if v is None:
        raise InputError(path, line, key, "missing")
    if isinstance(v, bool) or not isinstance(v, int) or v < minimum:
        raise InputError(path, line, key, f"expected an integer >= {minimum}, got {v!r}")
    return v


def parse(path: str, data: bytes, block_size: int = MOONCAKE_BLOCK) -> Trace:
    """A trace from a file's bytes; one ``InputError`` (file, line, field) for
    the first thing wrong with it."""
    if block_size < 1:
        raise ValueError(f"block_size must be >= 1, not {block_size}")
    out: list[TraceRequest] = []
    for n, raw in enumerate(data.splitlines(), start=1):
        if not raw.strip():
            continue
        try:
            obj = jsonfast.loads(raw)
        except ValueError as exc:
            raise InputError(path, n, None, f"not JSON: {exc}") from None
        if not isinstance(obj, dict):
            raise InputError(path, n, None, f"expected a JSON object, got {type(obj).__name__}")
        ts = obj.get("timestamp")
        if ts is None:
            raise InputError(path, n, "timestamp", "missing (milliseconds since the trace's start)")
        if isinstance(ts, bool) or not isinstance(ts, (int, float)) or not math.isfinite(ts) or ts < 0:
            raise InputError(path, n, "timestamp", f"expected milliseconds >= 0, got {ts!r}")
        inp = _int(path, n, obj, "input_length", 1)
        outp = _int(path, n, obj, "output_length", 1)
        ids = obj.get("hash_ids", [])
        if not isinstance(ids, list) or not all(isinstance(i, int) and not isinstance(i, bool) and i >= 0
                                                for i in ids):
            raise InputError(path, n, "hash_ids", "expected a list of integers >= 0")
        if ids and not (len(ids) - 1) * block_size < inp <= len(ids) * block_size:
            raise InputError(path, n, "hash_ids", f"{len(ids)} blocks of {block_size} tokens cannot hold "
                             f"input_length {inp}")
        out.append(TraceRequest(float(ts), inp, outp, tuple(ids)))
    if not out:
        raise InputError(path, None, None, "no requests (an empty trace)")
    out.sort(key=lambda r: r.timestamp_ms)
    return Trace(path=path, requests=tuple(out), block_size=block_size)


def load(path: str | Path, block_size: int = MOONCAKE_BLOCK) -> Trace:
    p = Path(path)
    return parse(str(p), diskio.read_input(p, "trace file"), block_size)


def offsets(requests: Sequence[TraceRequest], time_scale: float = 1.0) -> tuple[float, ...]:
    """Send offsets in seconds from the first arrival, each gap times ``time_scale``."""
    if not (time_scale > 0 and math.isfinite(time_scale)):
        raise ValueError(f"time_scale must be a finite number > 0, not {time_scale!r}")
    if not requests:
        return ()
    t0 = requests[0].timestamp_ms
    return tuple((r.timestamp_ms - t0) / 1000.0 * time_scale for r in requests)


def shared_blocks(requests: Sequence[TraceRequest]) -> int:
    """Blocks a perfect prefix cache would reuse: for each request, the length
    of its longest prefix of hash ids already seen as a prefix before it."""
    seen: set[tuple[int, ...]] = set()
    reused = 0
    for r in requests:
        k = 0
        while k < len(r.hash_ids) and r.hash_ids[:k + 1] in seen:
            k += 1
        reused += k
        seen.update(r.hash_ids[:i] for i in range(1, len(r.hash_ids) + 1))
    return reused
