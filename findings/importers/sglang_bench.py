"""``python -m sglang.bench_serving --output-file`` JSONL.

One line is one point where the line's load puts it (D97): an infinite
``request_rate`` is a closed loop at ``max_concurrency``; a finite one is an
open-loop point at that rate (Poisson arrivals: sglang has no burstiness),
capped by ``max_concurrency`` where one was set. Several lines at the same
load are repeats; lines that give the workload different definitions (the
lengths, the dataset) are split into one workload each (D98). Formats, as read from the sglang wheels (see
tests/fixtures/sglang_bench/README.md):

- 0.5.15-0.5.23: ``tag``, ``server_info`` (full /server_info), p90/p95
  percentiles, ``total_throughput``, ``max_output_tokens_per_s``;
- 0.4.x: no ``tag``, ``server_info`` or p90/p95 (``accept_length`` top-level);
- 0.3.x: no ``max_concurrency`` at all (give ``--concurrency`` for an infinite rate).

Lines may hold ``Infinity`` (``request_rate``), ``NaN`` (0.3.x means of a run
where every request failed) and ``null``. Every numeric top-level key is kept
as a metric, so percentiles that a release lacks are simply absent.

Failures: ``completed`` counts only the successful requests. With
``--output-details`` the ``errors`` list has one entry per request sent (a
non-empty string for each failure), so ``planned`` is its length and
``failed`` its non-empty entries. Without details the file cannot tell how
many failed: ``failed`` stays absent (unknown), never zero. A line with
``completed`` 0 is a run where every request failed: it is kept as a point
without throughput or latencies (they measure nothing), which the validity
gate flags and the document shows.
"""

from __future__ import annotations

import json
import math
from typing import Any, Mapping

from findings.core import serverinfo
from findings.core.errors import InputError
from findings.importers.common import (Load, Source, check_given_used, line_hash, load_axis, make_run, record_hash,
                                       run_id, split_workloads)
from findings.core.model import THROUGHPUT, Campaign, Point, Run, Scalar
from findings.store.schema import finite, point_id
from findings.derive.validity import only_counts

NAME = "sglang-bench"
VERSION = "1"

#: Top-level keys that describe the workload sent, not a measurement.
WORKLOAD_KEYS = (
    "backend", "dataset_name", "request_rate", "burstiness", "sharegpt_output_len",
    "random_input_len", "random_output_len", "random_range_ratio", "tag",
)
#: Per-request lists written by ``--output-details`` (ttfts/itls in seconds).
DETAIL_KEYS = ("input_lens", "output_lens", "ttfts", "itls", "errors")
def _number(path: str, line: int, key: str, value: Any) -> float | None:
    """A metric value: a finite number, or None for null/NaN/absent."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise InputError(path, line, key, f"expected a number, got {type(value).__name__}")
    if isinstance(value, float) and math.isnan(value):
        return None
    if not finite(value):
        raise InputError(path, line, key, "expected a finite number, got Infinity or a number out of range")
    return float(value)


def _workload_value(path: str, line: int, key: str, value: Any) -> Scalar:
    if isinstance(value, float) and math.isinf(value):
        return "inf" if value > 0 else "-inf"
    if isinstance(value, float) and math.isnan(value):
        return None
    if value is None or isinstance(value, (str, int, float, bool)):
        return value
    raise InputError(path, line, key, f"expected a scalar, got {type(value).__name__}")


def _facts(path: str, line: int, info: Any) -> dict[str, Scalar]:
    if info is None:
        return {}
    if not isinstance(info, dict):
        raise InputError(path, line, "server_info", "expected an object or null")
    try:
        return serverinfo.facts(info)
    except serverinfo.FactError as exc:
        raise InputError(path, line, f"server_info.{exc.key}", str(exc)) from None


def _details(path: str, line: int, doc: dict[str, Any]) -> dict[str, object] | None:
    present = [k for k in DETAIL_KEYS if k in doc]
    if not present:
        return None
    out: dict[str, object] = {}
    n = None
    for key in present:
        value = doc[key]
        if not isinstance(value, list):
            raise InputError(path, line, key, "expected a list")
        if n is not None and len(value) != n:
            raise InputError(path, line, key, f"has {len(value)} entries, expected {n}")
        n = len(value)
        if key == "itls":
            for i, row in enumerate(value):
                if not isinstance(row, list) or not all(_is_num(x) for x in row):
                    raise InputError(path, line, f"itls[{i}]", "expected a list of numbers")
            out["itl_s"] = value
        elif key == "errors":
            if not all(isinstance(x, str) or x is None for x in value):
                raise InputError(path, line, key, "expected a list of strings")
            out["error"] = [x or "" for x in value]
        else:
            if not all(_is_num(x) for x in value):
                raise InputError(path, line, key, "expected a list of numbers")
            out[{"input_lens": "input_len", "output_lens": "output_len", "ttfts": "ttft_s"}[key]] = value
    return out


def _is_num(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and finite(x)


def read(
    src: Source,
    config: str,
    campaign: str,
    workload: str,
    date: str,
    order: int | None = None,
    concurrency: int | None = None,
    environment: Mapping[str, Scalar] | None = None,
    skip_lines: frozenset[str] = frozenset(),
    source: str = "import",
) -> Run:
    """Parse and validate every line; raise InputError on the first fault."""
    text = src.text()
    rid = run_id(NAME, src.sha256)
    points: list[Point] = []
    hashes: set[str] = set()
    facts: dict[str, Scalar] = {}
    facts_line: dict[str, int] = {}
    env = dict(environment or {})
    loads: list[Load] = []
    for line, raw in enumerate(text.splitlines(), start=1):
        if not raw.strip():
            continue
        h = line_hash(raw)
        if h in skip_lines:
            continue
        if h in hashes:
            raise InputError(src.path, line, None, "this line repeats an earlier line exactly")
        try:
            doc = json.loads(raw)
        except json.JSONDecodeError as exc:
            raise InputError(src.path, line, None, f"not valid JSON: {exc.msg} at column {exc.colno}") from None
        except RecursionError:
            raise InputError(src.path, line, None, "not valid JSON: nested too deeply") from None
        except ValueError as exc:  # e.g. an integer of more than 4300 digits
            raise InputError(src.path, line, None, f"not valid JSON: {exc}") from None
        if not isinstance(doc, dict):
            raise InputError(src.path, line, None, "expected a JSON object")
        rh = record_hash(doc)
        if rh in skip_lines:
            continue
        if rh in hashes:
            raise InputError(src.path, line, None, "this line repeats an earlier line's record")
        if "output_throughput" not in doc:
            raise InputError(src.path, line, "output_throughput", "missing")
        completed = _number(src.path, line, "completed", doc.get("completed"))
        if completed is not None and (completed < 0 or not completed.is_integer()):
            raise InputError(src.path, line, "completed", f"expected a count >= 0, got {doc['completed']!r}")
        tput = _number(src.path, line, "output_throughput", doc["output_throughput"])
        if (tput is None or tput < 0) and completed != 0:
            raise InputError(src.path, line, "output_throughput", "expected a number >= 0")
        # sglang writes request_rate as the float it parsed (Infinity by default)
        # and, through 0.5.23, no burstiness: its arrivals are Poisson
        # (np.random.exponential); a line that records one is read as it says.
        load = load_axis(src.path, line, rate=doc.get("request_rate"), burstiness=doc.get("burstiness"),
                         cap=doc.get("max_concurrency"), given=concurrency, burstiness_default=1.0)
        loads.append(load)
        metrics: dict[str, float] = {THROUGHPUT: tput} if tput is not None else {}
        for key, value in doc.items():
            if key in WORKLOAD_KEYS or key in DETAIL_KEYS or key in ("output_throughput", "max_concurrency"):
                continue
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                num = _number(src.path, line, key, value)
                if num is not None:
                    metrics[key] = num
            elif key == "accept_length" and value is not None:
                raise InputError(src.path, line, key, "expected a number or null")
        requests = _details(src.path, line, doc)
        errors = requests.get("error") if requests else None
        if isinstance(errors, list):
            metrics["planned"] = float(len(errors))
            metrics["failed"] = float(sum(1 for e in errors if e))
            if completed is not None and completed > len(errors):
                raise InputError(src.path, line, "completed",
                                 f"{completed:g} completed, but 'errors' lists only {len(errors)} requests")
        if completed == 0:
            metrics = only_counts(metrics)
        params = {k: _workload_value(src.path, line, k, doc[k]) for k in WORKLOAD_KEYS if k in doc}
        params.update(load.params)
        for key, value in _facts(src.path, line, doc.get("server_info")).items():
            if key in facts and facts[key] != value:
                raise InputError(
                    src.path, line, f"server_info.{key}",
                    f"{value!r} differs from {facts[key]!r} on line {facts_line[key]}; one file holds one config",
                )
            facts.setdefault(key, value)
            facts_line.setdefault(key, line)
        hashes.update((h, rh))
        points.append(
            Point(
                id=point_id(rid, len(points)),
                run_id=rid,
                campaign=campaign,
                config=config,
                workload=workload,
                concurrency=load.concurrency,
                metrics=metrics,
                source=source,
                source_file=src.path,
                source_line=line,
                workload_params={k: v for k, v in params.items() if v is not None},
                requests=requests,
            )
        )
    if not points:
        if not text.strip():
            raise InputError(src.path, None, None, "the file is empty: no result lines")
        raise InputError(src.path, None, None, "every line was already ingested; nothing to add")
    check_given_used(src.path, concurrency, loads)
    points, _ = split_workloads(points, NAME, workload, src.path)
    if "sglang_version" in facts:
        env.setdefault("sglang_version", facts["sglang_version"])
    return make_run(
        src, NAME, VERSION, source, environment=env,
        campaigns=(Campaign(name=campaign, date=date, order=order),),
        configs={config: facts}, points=points, hashes=hashes,
    )
