"""An open-loop workload's load: the matrix keys, validated, and each point's
send schedule. Pure but for reading a trace file (at the boundary, once).

```toml
[workloads.chat-open]
prompts = "random-ids"
input_len = 256
output_len = 128
request_rate = [1, 2, 4, 8]     # requests/s: one point per rate (the load axis)
burstiness = 1.0                # vLLM's gamma shape: 1 Poisson, < 1 burstier, inf constant spacing
duration_s = 60                 # at least rate x this many requests per point (and num_prompts)
max_concurrency = 64            # optional cap on requests in flight (vLLM's --max-concurrency)
slo_ttft_ms = 500               # optional SLO: goodput counts requests that meet every limit given
slo_tpot_ms = 50
# profile = [[120, 0.5], [240, 6], [120, 0.5]]   # or phases of (seconds, rate): a day of load
# trace = "traces/day.jsonl"    # or a Mooncake JSONL trace; time_scale = 0.5 halves every gap
```
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

from findings.core import diskio
from findings.core.errors import InputError
from findings.load import arrivals, trace

#: Requests in flight when no ``max_concurrency`` is given: the client's own
#: limit (its connection pool), recorded as the point's concurrency.
DEFAULT_CAP = 512
#: Share of requests that must meet the SLO for a rate to count as sustained.
DEFAULT_ATTAINMENT = 0.9

KEYS = {"request_rate", "burstiness", "duration_s", "max_concurrency", "profile", "trace", "time_scale",
        "block_size", "slo_ttft_ms", "slo_tpot_ms", "slo_attainment", "rate_search"}


@dataclass(frozen=True)
class Slo:
    """Per-request limits (vLLM's ``--goodput``): a request meets the SLO when
    its TTFT and its TPOT are each at or under the limits given."""

    ttft_ms: float | None = None
    tpot_ms: float | None = None
    attainment: float = DEFAULT_ATTAINMENT

    @property
    def set(self) -> bool:
        return self.ttft_ms is not None or self.tpot_ms is not None


@dataclass(frozen=True)
class LoadSpec:
    """How an open-loop workload sends: at each of ``rates``, over a profile
    of ``phases``, or as a ``trace`` replays."""

    mode: str  # "rate" | "profile" | "trace"
    rates: tuple[float, ...] = ()
    burstiness: float = 1.0
    duration_s: float | None = None
    max_concurrency: int | None = None
    phases: tuple[arrivals.Phase, ...] = ()
    trace: trace.Trace | None = None
    trace_sha256: str | None = None
    time_scale: float = 1.0
    slo: Slo = Slo()
    #: After the listed rates, this many more points per config, each at the
    #: middle of the bracket around its max sustainable rate (a bisection).
    rate_search: int = 0

    @property
    def cap(self) -> int:
        return self.max_concurrency or DEFAULT_CAP

    @property
    def axis(self) -> tuple[float | None, ...]:
        """The points of one sweep: one per rate; one (None) for a profile or trace."""
        return self.rates if self.mode == "rate" else (None,)

    def requests(self, rate: float | None, num_prompts: int) -> int:
        """Requests at one rate: ``num_prompts``, or rate x ``duration_s`` if more."""
        if rate is None or self.duration_s is None:
            return num_prompts
        return max(num_prompts, math.ceil(rate * self.duration_s))

    def offsets(self, rate: float | None, n: int, seed: int) -> tuple[float, ...]:
        """Send offsets (seconds from the point's start). A profile's count is
        its own (random, mean Λ(T)); a trace's is its length."""
        if self.mode == "rate":
            assert rate is not None
            return arrivals.at_rate(n, rate, self.burstiness, seed)
        if self.mode == "profile":
            return arrivals.over_profile(self.phases, self.burstiness, seed)
        assert self.trace is not None
        return trace.offsets(self.trace.requests, self.time_scale)

    def phase_ends(self) -> tuple[float, ...]:
        """A profile's phase boundaries (seconds from the start), the last its end."""
        out, t = [], 0.0
        for p in self.phases:
            t += p.duration_s
            out.append(t)
        return tuple(out)

    def params(self, rate: float | None) -> dict[str, str | int | float | bool]:
        """What a point records of its load (workload_params)."""
        out: dict[str, str | int | float | bool] = {"load": self.mode, "burstiness": _burst(self.burstiness)}
        if rate is not None:
            out["request_rate"] = rate
        if self.mode == "profile":
            out["profile"] = describe_phases(self.phases)
        if self.trace is not None:
            out["trace_file"] = Path(self.trace.path).name
            out["trace_requests"] = len(self.trace.requests)
            out["trace_block_size"] = self.trace.block_size
            if self.trace_sha256:
                out["trace_sha256"] = self.trace_sha256
            out["time_scale"] = self.time_scale
        if self.max_concurrency is not None:
            out["max_concurrency"] = self.max_concurrency
        if self.slo.ttft_ms is not None:
            out["slo_ttft_ms"] = self.slo.ttft_ms
        if self.slo.tpot_ms is not None:
            out["slo_tpot_ms"] = self.slo.tpot_ms
        if self.slo.set:
            out["slo_attainment"] = self.slo.attainment
        return out


def _burst(b: float) -> str | float:
    return "inf" if math.isinf(b) else b


def next_search_rate(attainment: Mapping[float, float], target: float) -> float | None:
    """The middle of the bracket around the max sustainable rate: between the
    highest rate sustained with every lower one, and the lowest rate above it
    that was not (None: no such bracket, or it is narrower than 2%)."""
    lo = hi = None
    for r in sorted(attainment):
        if attainment[r] >= target and hi is None:
            lo = r
        elif attainment[r] < target:
            hi = r
            break
    if lo is None or hi is None or (hi - lo) / hi < 0.02:
        return None
    return float(f"{(lo + hi) / 2:.4g}")


def describe_phases(phases: tuple[arrivals.Phase, ...]) -> str:
    """``60s@0.5,120s@4,60s@0.5``: each phase's seconds and requests/s."""
    return ",".join(f"{p.duration_s:g}s@{p.rate:g}" for p in phases)


def parse_phases(text: str) -> tuple[arrivals.Phase, ...]:
    """The inverse of describe_phases (a stored point's profile)."""
    out = []
    for part in text.split(","):
        secs, _, rate = part.partition("s@")
        out.append(arrivals.Phase(float(secs), float(rate)))
    return tuple(out)


def _number(path: str, where: str, v: Any, *, low: float, strict: bool = True, inf: bool = False) -> float:
    ok = isinstance(v, (int, float)) and not isinstance(v, bool) and (v > low if strict else v >= low)
    if ok and not inf and not math.isfinite(v):
        ok = False
    if not ok or (isinstance(v, float) and math.isnan(v)):
        what = f"a number {'>' if strict else '>='} {low:g}" + (" (inf allowed)" if inf else "")
        raise InputError(path, None, where, f"expected {what}, got {v!r}")
    return float(v)


def parse(path: str, where: str, t: Mapping[str, Any], base: Path | None = None) -> LoadSpec | None:
    """The load keys of one workload table; None when it has none (a closed loop)."""
    if not KEYS & set(t):
        return None
    modes = [k for k in ("request_rate", "profile", "trace") if k in t]
    if len(modes) != 1:
        raise InputError(path, None, where, "an open-loop workload needs exactly one of request_rate, "
                         "profile or trace" + (f" (got {', '.join(modes)})" if modes else ""))
    mode = {"request_rate": "rate", "profile": "profile", "trace": "trace"}[modes[0]]
    burst = _number(path, f"{where}.burstiness", t.get("burstiness", 1.0), low=0, inf=True)
    cap = t.get("max_concurrency")
    if cap is not None and (isinstance(cap, bool) or not isinstance(cap, int) or cap < 1):
        raise InputError(path, None, f"{where}.max_concurrency", f"expected an integer >= 1, got {cap!r}")
    slo = Slo(
        ttft_ms=_number(path, f"{where}.slo_ttft_ms", t["slo_ttft_ms"], low=0) if "slo_ttft_ms" in t else None,
        tpot_ms=_number(path, f"{where}.slo_tpot_ms", t["slo_tpot_ms"], low=0) if "slo_tpot_ms" in t else None,
        attainment=_number(path, f"{where}.slo_attainment", t.get("slo_attainment", DEFAULT_ATTAINMENT), low=0),
    )
    if slo.attainment > 1:
        raise InputError(path, None, f"{where}.slo_attainment", "expected a share in (0, 1]")
    common: dict[str, Any] = {"burstiness": burst, "max_concurrency": cap, "slo": slo}
    if mode != "rate" and "duration_s" in t:
        raise InputError(path, None, f"{where}.duration_s", "only with request_rate (a profile has its "
                         "own durations, a trace its own arrivals)")
    for key in ("time_scale", "block_size"):
        if key in t and mode != "trace":
            raise InputError(path, None, f"{where}.{key}", "only with trace")
    search = t.get("rate_search", 0)
    if isinstance(search, bool) or not isinstance(search, int) or search < 0:
        raise InputError(path, None, f"{where}.rate_search", f"expected an integer >= 0, got {search!r}")
    if search and (mode != "rate" or not slo.set):
        raise InputError(path, None, f"{where}.rate_search", "searches the max sustainable rate: needs "
                         "request_rate and an SLO (slo_ttft_ms or slo_tpot_ms)")
    if mode == "rate":
        v = t["request_rate"]
        values = v if isinstance(v, list) else [v]
        if not values:
            raise InputError(path, None, f"{where}.request_rate", "expected a rate or a list of rates")
        rates = tuple(sorted({_number(path, f"{where}.request_rate", x, low=0) for x in values}))
        dur = _number(path, f"{where}.duration_s", t["duration_s"], low=0) if "duration_s" in t else None
        return LoadSpec(mode="rate", rates=rates, duration_s=dur, rate_search=search, **common)
    if mode == "profile":
        raw = t["profile"]
        if not isinstance(raw, list) or not raw:
            raise InputError(path, None, f"{where}.profile", "expected a list of [seconds, requests/s] phases")
        phases = []
        for i, ph in enumerate(raw):
            w = f"{where}.profile[{i}]"
            if not isinstance(ph, list) or len(ph) != 2:
                raise InputError(path, None, w, f"expected [seconds, requests/s], got {ph!r}")
            phases.append(arrivals.Phase(_number(path, w, ph[0], low=0), _number(path, w, ph[1], low=0,
                                                                                  strict=False)))
        if not any(p.rate > 0 for p in phases):
            raise InputError(path, None, f"{where}.profile", "every phase has rate 0: nothing would be sent")
        return LoadSpec(mode="profile", phases=tuple(phases), **common)
    file = t["trace"]
    if not isinstance(file, str) or not file.strip():
        raise InputError(path, None, f"{where}.trace", "expected a file path")
    block = t.get("block_size", trace.MOONCAKE_BLOCK)
    if isinstance(block, bool) or not isinstance(block, int) or block < 1:
        raise InputError(path, None, f"{where}.block_size", f"expected an integer >= 1, got {block!r}")
    p = Path(file).expanduser()
    if not p.is_absolute() and base is not None:
        p = base / p
    data = diskio.read_input(p, "trace file")
    tr = trace.parse(str(p), data, block)
    sha = hashlib.sha256(data).hexdigest()
    scale = _number(path, f"{where}.time_scale", t.get("time_scale", 1.0), low=0)
    return LoadSpec(mode="trace", trace=tr, trace_sha256=sha, time_scale=scale, **common)


#: A phase's metrics are stored as ``phase.{i}.{name}`` (i from 1).
PHASE_PREFIX = "phase."


def phase_key(i: int, name: str) -> str:
    return f"{PHASE_PREFIX}{i}.{name}"
