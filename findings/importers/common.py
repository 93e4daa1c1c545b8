"""What every importer shares: hashing, run ids, the environment file."""

from __future__ import annotations

import datetime as _dt
import hashlib
import json
import math
import tomllib
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Mapping

from findings.core.version import __version__
from findings.core.errors import InputError
from findings.core.model import Campaign, Input, Point, Run, Scalar
from findings.derive import likeness
from findings.store.identity import definition
from findings.store.schema import RECORD_HASH_PREFIX, SCHEMA_VERSION, valid_name


@dataclass(frozen=True)
class Source:
    """A file being imported: its path as given, its bytes and its hash."""

    path: str
    data: bytes

    @property
    def sha256(self) -> str:
        return hashlib.sha256(self.data).hexdigest()

    def text(self) -> str:
        try:
            return self.data.decode("utf-8-sig")
        except UnicodeDecodeError as exc:
            raise InputError(self.path, None, None, f"not UTF-8 text ({exc.reason} at byte {exc.start})") from exc


def read_source(path: str) -> Source:
    try:
        return Source(path=path, data=Path(path).read_bytes())
    except OSError as exc:
        raise InputError(path, None, None, f"cannot read: {exc.strerror or exc}") from exc


def line_hash(text: str) -> str:
    """Identity of one record's bytes, to refuse the same record ingested twice."""
    return hashlib.sha256(text.strip().encode()).hexdigest()[:20]


def _canonical(value: Any) -> Any:
    if isinstance(value, dict):
        return {str(k): _canonical(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_canonical(v) for v in value]
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        try:  # 1 and 1.0, or 17 digits and the shortest repr, are one number
            return repr(float(value))
        except OverflowError:  # an integer too large for a float (refused later, by the field's own check)
            return str(value)
    return value


def record_hash(record: Any) -> str:
    """Identity of one record's parsed content (D99): the same for a
    re-formatted copy (indented, keys reordered, numbers written otherwise)."""
    text = json.dumps(_canonical(record), sort_keys=True, separators=(",", ":"), ensure_ascii=True)
    return RECORD_HASH_PREFIX + hashlib.sha256(text.encode()).hexdigest()[:20]


def run_id(importer: str, sha256: str) -> str:
    return f"{importer}-{sha256[:12]}"


def now_utc() -> str:
    """When a run is written, to the microsecond: the store's "latest-written"
    definition of a workload is the run with the greatest ``created_at``, and
    two imports within one second must not tie (a tie fell to the run ids'
    order: the wrong definition, now and then)."""
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="microseconds").replace("+00:00", "Z")


def tool_version() -> str:
    return __version__


def read_environment(path: str | None) -> Mapping[str, Scalar]:
    """Hardware and software facts from a flat TOML file (``key = value``)."""
    if path is None:
        return {}
    src = read_source(path)
    try:
        doc = tomllib.loads(src.text())
    except tomllib.TOMLDecodeError as exc:
        raise InputError(path, getattr(exc, "lineno", None), None, f"not valid TOML: {exc}") from exc
    except RecursionError:
        raise InputError(path, None, None, "not valid TOML: nested too deeply") from None
    table = doc.get("environment", doc)
    if not isinstance(table, dict):
        raise InputError(path, None, "environment", "expected a table of facts")
    out: dict[str, Scalar] = {}
    for k, v in table.items():
        if isinstance(v, float) and not math.isfinite(v):
            raise InputError(path, None, k, "expected a finite number")
        if not isinstance(v, (str, int, float, bool)):
            raise InputError(path, None, k, "expected a string, number or boolean")
        out[k] = v
    return out


def make_run(src: Source, importer: str, version: str, source: str, *,
             environment: Mapping[str, Scalar], campaigns: tuple[Campaign, ...],
             configs: Mapping[str, Mapping[str, Scalar]], points: list[Point],
             hashes: set[str], extra_inputs: tuple[Input, ...] = ()) -> Run:
    """The Run an importer returns: provenance filled in the same way for all.

    A point whose config the findings emulator served (its facts say
    ``emulated``, or its model is ``findings-emulator/<profile>``) is
    ``simulated``, whoever's client measured it (D108): it is analysed apart
    from real points and never goes into a real home store."""
    emulated = {p.config for p in points if likeness.emulated(configs.get(p.config, {}))}
    if emulated and emulated != {p.config for p in points}:
        raise InputError(src.path, None, None,
                         f"configs {', '.join(sorted(emulated))} were served by the findings emulator and the "
                         f"others by a real server: simulated and real results are never one run; import "
                         f"them from separate files")
    if emulated:
        source = "simulated"
        points = [p._replace(source=source) for p in points]
    return Run(
        schema_version=SCHEMA_VERSION,
        run_id=run_id(importer, src.sha256),
        source=source,
        importer=importer,
        importer_version=version,
        tool_version=tool_version(),
        created_at=now_utc(),
        source_file=src.path,
        source_sha256=src.sha256,
        environment=dict(environment),
        campaigns=campaigns,
        configs=configs,
        points=tuple(points),
        line_hashes=frozenset(hashes),
        extra_inputs=extra_inputs,
    )


# --- The load axis a file records (D97) -------------------------------------------------------------------------

def parse_rate(path: str, line: int | None, key: str, value: Any) -> float | None:
    """What a file's ``request_rate`` is: None (not recorded), ``math.inf``
    (every request at once, or as fast as the concurrency allows) or a rate
    in requests/s."""
    if value is None:
        return None
    if isinstance(value, str) and value.strip().lower() in ("inf", "infinity", "+inf"):
        return math.inf
    number = _positive(value)
    if number is None:
        raise InputError(path, line, key, f"expected a rate > 0 (requests/s) or inf, got {_show(value)}")
    return number


def parse_burstiness(path: str, line: int | None, key: str, value: Any) -> Scalar:
    """vLLM's gamma shape (AIPerf's smoothness): a number > 0, ``"inf"`` for constant spacing."""
    if value is None:
        return None
    if isinstance(value, str) and value.strip().lower() in ("inf", "infinity", "+inf"):
        return "inf"
    number = _positive(value)
    if number is None:
        raise InputError(path, line, key, f"expected a number > 0 or inf, got {_show(value)}")
    return "inf" if math.isinf(number) else number


def _positive(value: Any) -> float | None:
    """A JSON number > 0 as a float (inf kept), None for anything else: a
    non-number, NaN, <= 0, or an integer too large for a float."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    try:
        number = float(value)
    except OverflowError:
        return None
    return number if number > 0 else None  # NaN > 0 is False


def _show(value: Any) -> str:
    """A value for a one-line message, cut short (a fuzzed file may hold a 400-digit integer)."""
    try:
        text = repr(value)
    except ValueError:  # an int past Python's digit limit for str()
        return "an integer too large to print"
    return text if len(text) <= 40 else text[:37] + "..."


@dataclass(frozen=True)
class Load:
    """Where one record sits on the load axis: a closed loop at ``concurrency``,
    or an open loop (``params["load"] == "rate"``) at ``params["request_rate"]``
    with the point's concurrency the cap (findings.load.spec's representation)."""

    concurrency: int
    params: Mapping[str, Scalar]
    #: ``--concurrency`` was what placed this point (the file left it out).
    filled: bool = False

    @property
    def rate(self) -> float | None:
        r = self.params.get("request_rate")
        return float(r) if self.params.get("load") == "rate" and isinstance(r, (int, float)) else None


def load_axis(path: str, line: int | None, *, rate: Any, burstiness: Any, cap: Any, given: int | None,
              rate_key: str = "request_rate", cap_key: str = "max_concurrency",
              burstiness_default: Scalar = None) -> Load:
    """The load one record measured, from the file; ``given`` (``--concurrency``)
    fills in only a closed loop's concurrency that the file leaves out, and a
    value that contradicts the file is refused (never silently ignored)."""
    r = parse_rate(path, line, rate_key, rate)
    if cap is not None and (isinstance(cap, bool) or not isinstance(cap, int) or cap < 1):
        raise InputError(path, line, cap_key, f"expected an integer >= 1, got {cap!r}")
    if given is not None and cap is not None and given != cap:
        raise InputError(path, line, cap_key, f"the file says {cap}, --concurrency says {given}; "
                                              "drop --concurrency (it only fills in what a file leaves out)")
    if r is None or math.isinf(r):
        if cap is not None:
            return Load(cap, {})
        if given is not None:
            return Load(given, {}, filled=True)
        if r is not None:
            raise InputError(path, line, cap_key, "missing or null (request_rate inf: every request sent at once); "
                                                  "pass --concurrency N, the requests that were in flight "
                                                  "(num_prompts when all were sent at once)")
        raise InputError(path, line, cap_key, "missing or null, and no request rate: the file does not record its "
                                              "load; pass --concurrency N, the concurrency the run used (a "
                                              "request-rate run cannot be placed from this file)")
    from findings.load.spec import DEFAULT_CAP  # lazily: findings.load imports numpy (arrivals)
    params: dict[str, Scalar] = {"load": "rate", "request_rate": r}
    b = parse_burstiness(path, line, "burstiness", burstiness)
    if b is None:
        b = burstiness_default
    if b is not None:
        params["burstiness"] = b
    if cap is not None:
        params["max_concurrency"] = cap
    return Load(cap if cap is not None else DEFAULT_CAP, params)


def check_given_used(path: str, given: int | None, loads: list[Load]) -> None:
    """Refuse a ``--concurrency`` that placed no point and agrees with none:
    the file records every point's load, so it could only mislead (a rate
    sweep is not a concurrency)."""
    if given is None:
        return
    for ld in loads:
        if ld.filled or (ld.concurrency if ld.rate is None else ld.params.get("max_concurrency")) == given:
            return
    rates = sorted({r for ld in loads if (r := ld.rate) is not None})
    if rates:
        shown = f"rate {rates[0]:g}" if len(rates) == 1 else f"rates {rates[0]:g} to {rates[-1]:g}"
        what = f"request {shown} req/s with no concurrency cap (open-loop points on the rate axis)"
    else:
        what = "each point's concurrency"
    raise InputError(path, None, None, f"--concurrency {given} does not apply: the file records {what}; "
                                       "drop --concurrency")


# --- Several workloads in one file (D98) -----------------------------------------------------------------------

#: The longest value written whole into a split workload's name.
_TOKEN_MAX = 24
#: How a differing definition key shows in a workload's name.
_SHORT = {"input_len": "in", "output_len": "out"}


def _token(key: str, value: Scalar) -> str:
    name = key.split(":", 1)[-1]
    if name in _SHORT:
        return f"{_SHORT[name]}{value}"
    if name == "ignore_eos":
        return "ignore-eos" if value is True else "eos"
    if value is None:
        return f"no-{name}"
    text = str(value)
    token = "".join(ch if ch.isalnum() or ch in "._" else "-" for ch in text).strip("-") or name
    if len(token) > _TOKEN_MAX:  # a long value: its start and a hash of all of it, still one per value
        token = token[:12] + "-" + hashlib.sha256(text.encode()).hexdigest()[:8]
    return token


def split_workloads(points: list[Point], importer: str, workload: str,
                    path: str = "") -> tuple[list[Point], tuple[str, ...]]:
    """One workload per definition: a file whose records give ``workload``
    several definitions (sglang.bench_serving appends every run to one file)
    is split, each part named ``workload`` plus what differs
    (``w-in1000-out1000``). Returns the points and the workload names, in
    the order of the file."""
    defs = [definition(importer, p.workload_params) for p in points]
    order = list(_SHORT)
    keys = sorted({k for d in defs for k in d}, key=lambda k: (order.index(n) if (n := k.split(":", 1)[-1]) in order
                                                               else len(order), k))
    differ = [k for k in keys if len({repr(d.get(k)) for d in defs}) > 1]
    if not differ:
        return points, (workload,)
    out, names = [], []
    for p, d in zip(points, defs):
        name = "-".join([workload, *(_token(k, d.get(k)) for k in differ)])
        if not valid_name(name):
            raise InputError(path, p.source_line, None,
                             f"the file gives workload {workload!r} several definitions, and the name for one of "
                             f"them, {name[:60]!r}..., is longer than a store name may be (200 characters); "
                             "pass a shorter --workload")
        out.append(p._replace(workload=name))
        if name not in names:
            names.append(name)
    return out, tuple(names)


# --- An SLO given on ingest: goodput from the file's per-request times (D102) -----------------------------------

@dataclass(frozen=True)
class SloOption:
    """``--slo-ttft-ms``, ``--slo-tpot-ms``, ``--slo-attainment`` (vLLM's ``--goodput``:
    a request meets the SLO when it succeeded and each limit given holds)."""

    ttft_ms: float | None = None
    tpot_ms: float | None = None
    attainment: float | None = None
    #: The SLO came from findings.toml, not the command line (D108): it
    #: applies where it can (open-loop points with per-request times) and is
    #: skipped, with a count in the summary, where it cannot.
    from_settings: bool = False

    @property
    def set(self) -> bool:
        return self.ttft_ms is not None or self.tpot_ms is not None

    def describe(self) -> str:
        parts = [f"TTFT ≤ {self.ttft_ms:g} ms" if self.ttft_ms is not None else "",
                 f"TPOT ≤ {self.tpot_ms:g} ms" if self.tpot_ms is not None else ""]
        return " and ".join(p for p in parts if p)


def _request_meets(ttft_s: Any, itl: Any, e2e_s: Any, out: Any, error: Any, slo: SloOption) -> bool:
    if error:
        return False
    if slo.ttft_ms is not None and (not isinstance(ttft_s, (int, float)) or ttft_s * 1000 > slo.ttft_ms):
        return False
    if slo.tpot_ms is not None and isinstance(out, (int, float)) and out > 1:
        if isinstance(e2e_s, (int, float)) and isinstance(ttft_s, (int, float)):
            decode = e2e_s - ttft_s
        elif isinstance(itl, list):
            decode = sum(itl)
        else:
            return False
        if decode / (out - 1) * 1000 > slo.tpot_ms:
            return False
    return True


def apply_slo(run: Run, slo: SloOption) -> Run:
    """Goodput under ``slo`` for each open-loop point, from its per-request
    records, as findings bench computes it for its own open loops
    (bench/metrics.py ``open_loop``): ``slo_met``, ``slo_attainment`` (of all
    requests sent, failures included), ``goodput_req_s`` (met / the run's
    duration), and the SLO in ``workload_params``. Refuses a point that has
    no per-request records, and an SLO for a file with no open-loop point."""
    from findings.load.spec import DEFAULT_ATTAINMENT  # lazily, as load_axis

    if not slo.set:
        if slo.attainment is not None:
            raise InputError(run.source_file or run.run_id, None, None,
                             "--slo-attainment needs an SLO: give --slo-ttft-ms and/or --slo-tpot-ms")
        return run
    lenient = slo.from_settings
    if not any(p.workload_params.get("load") == "rate" for p in run.points):
        if lenient:
            return run  # findings.toml's SLO has nothing to judge in a closed-loop file
        raise InputError(run.source_file or run.run_id, None, None,
                         "an SLO judges open-loop points, and the file has none (no finite request_rate): "
                         "drop --slo-ttft-ms/--slo-tpot-ms")
    points = []
    for p in run.points:
        if p.workload_params.get("load") != "rate":
            points.append(p)
            continue
        req = p.requests or {}
        ttft, errors = req.get("ttft_s"), req.get("error")
        outs, itls, e2e = req.get("output_len"), req.get("itl_s"), req.get("e2e_s")
        duration = p.metrics.get("duration")
        if not isinstance(ttft, list) or not isinstance(outs, list) or not duration:
            if lenient:  # counted by slo_applied(); the summary says how many were left without
                points.append(p)
                continue
            raise InputError(p.source_file or run.run_id, p.source_line, None,
                             "an SLO needs per-request times and a duration, and this record has none "
                             "(sglang.bench_serving writes them with --output-details, vllm bench serve with "
                             "--save-detailed; an AIPerf or genai-perf summary never does)")
        n = len(ttft)
        met = sum(1 for i in range(n) if _request_meets(
            ttft[i], itls[i] if isinstance(itls, list) else None, e2e[i] if isinstance(e2e, list) else None,
            outs[i], errors[i] if isinstance(errors, list) else "", slo))
        metrics = {**p.metrics, "slo_met": float(met), "slo_attainment": met / n if n else 0.0,
                   "goodput_req_s": met / duration}
        params: dict[str, Scalar] = dict(p.workload_params)
        if slo.ttft_ms is not None:
            params["slo_ttft_ms"] = slo.ttft_ms
        if slo.tpot_ms is not None:
            params["slo_tpot_ms"] = slo.tpot_ms
        params["slo_attainment"] = slo.attainment if slo.attainment is not None else DEFAULT_ATTAINMENT
        points.append(p._replace(metrics=metrics, workload_params=params))
    return replace(run, points=tuple(points))


def slo_applied(run: Run) -> tuple[int, int]:
    """(open-loop points judged under an SLO, open-loop points without one)."""
    rate = [p for p in run.points if p.workload_params.get("load") == "rate"]
    judged = sum(1 for p in rate if "slo_met" in p.metrics)
    return judged, len(rate) - judged
