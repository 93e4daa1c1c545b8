"""``vllm bench serve --save-result`` JSON (and ``benchmarks/benchmark_serving.py``).

One JSON object is one point where its load puts it (D97): ``request_rate``
``"inf"`` is a closed loop at ``max_concurrency`` (``null`` when the run had
no ``--max-concurrency``: give ``--concurrency``); a finite rate is an
open-loop point at that rate, with its ``burstiness`` and any
``max_concurrency`` cap. A ``--ramp-up-strategy`` run is refused (no one
rate). ``--append-result``
appends further objects, one per line; each line is then a point, and
``--skip-existing`` ingests only the new ones. Formats, as read from the vLLM
wheels and repository (see tests/fixtures/vllm_bench/README.md):

- 0.33: ``latencies`` and ``queue_times`` (kept without ``--save-detailed``);
  0.26: ``rtfx``; 0.16: the ``spec_decode_*`` keys (when the server exposes
  speculative-decoding counters) and ``start_times``; 0.13: ``failed``;
  0.11: ``backend`` beside ``endpoint_type``, ``max_output_tokens_per_s``,
  ``max_concurrent_requests`` (each the first release checked that has it);
- 0.9.0-0.10.2: ``endpoint_type`` (no ``backend``), ``label``, no ``failed``;
  0.9.0 also ``best_of`` and the misspelt ``request_goodput:``;
- ``benchmarks/benchmark_serving.py`` (before ``vllm bench``): ``backend``,
  no ``label``. In 0.9.0 and in the old script the per-request lists are
  always written, ``--save-detailed`` or not.

``request_rate`` is a number or the string ``"inf"``; ``burstiness`` may be
``Infinity``. Every numeric top-level key is a metric under vLLM's own name
(``mean_e2el_ms``, not sglang's ``mean_e2e_latency_ms``), except
``output_throughput`` (stored as ``output_throughput_tok_s``),
``spec_decode_acceptance_length`` (stored as ``accept_length``) and the keys
that describe the load sent (``WORKLOAD_KEYS``).

Failures: ``completed`` counts successes. ``failed`` is the file's own
(0.11.1+), else the non-empty ``errors`` entries (detailed files), else
``num_prompts`` minus ``completed`` (every request sent is one of the
two); ``planned`` is completed + failed. A file with ``completed`` 0 is a
run where every request failed: a point without throughput or latencies. A
file with latency statistics only (vllm-ascend's February 2025 copy of the
script: no ``duration``, ``completed`` or ``output_throughput``) is a point
whose throughput and counts are unknown: stored, shown, never judged.
"""

from __future__ import annotations

import json
import math
from typing import Any, Mapping

from findings.core.errors import InputError
from findings.importers.common import (Load, Source, check_given_used, line_hash, load_axis, make_run, record_hash,
                                       run_id, split_workloads)
from findings.core.model import THROUGHPUT, Campaign, Point, Run, Scalar
from findings.store.schema import point_id
from findings.derive.validity import only_counts

NAME = "vllm-bench"
VERSION = "1"

#: Top-level keys that describe the load sent: kept in ``workload_params``.
WORKLOAD_KEYS = (
    "backend", "endpoint_type", "label", "tokenizer_id", "num_prompts", "request_rate", "burstiness",
    "ramp_up_strategy", "ramp_up_start_rps", "ramp_up_end_rps", "best_of",
)
#: Top-level keys used elsewhere or not kept (``date`` is the client's local
#: time of writing; the campaign's ``--date`` is what counts).
HANDLED_KEYS = ("date", "model_id", "max_concurrency", "output_throughput")
#: Metrics stored under another name.
RENAMED = {"spec_decode_acceptance_length": "accept_length", "request_goodput:": "request_goodput"}
#: Per-request lists -> ``requests`` columns (times in seconds, as vLLM writes them).
DETAIL_COLUMNS = {
    "input_lens": "input_len", "output_lens": "output_len", "ttfts": "ttft_s", "itls": "itl_s",
    "errors": "error", "latencies": "e2e_s", "start_times": "sent_s",
}
#: Our names that no vLLM key may set directly.
OURS = (THROUGHPUT, "accept_length", "planned")
#: The lists that only ``--save-detailed`` keeps (``latencies`` is written
#: without it from 0.10.2 on, and alone makes no per-request record).
DETAILED = ("input_lens", "output_lens", "ttfts", "itls", "errors")


def field(key: str) -> str:
    """A JSON key as a field name for a one-line message (control characters escaped)."""
    return key if key.isprintable() else json.dumps(key)


def finite_number(path: str, line: int | None, key: str, value: Any) -> float | None:
    """A metric value: a finite number, or None for null/NaN."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise InputError(path, line, key, f"expected a number, got {type(value).__name__}")
    try:
        number = float(value)
    except OverflowError:
        raise InputError(path, line, key, "expected a finite number, got a number too large") from None
    if math.isnan(number):
        return None
    if math.isinf(number):
        raise InputError(path, line, key, "expected a finite number, got Infinity")
    return number


def workload_value(path: str, line: int | None, key: str, value: Any) -> Scalar:
    """A workload parameter: a scalar; Infinity is kept as ``"inf"``."""
    if isinstance(value, float) and math.isinf(value):
        return "inf" if value > 0 else "-inf"
    if isinstance(value, float) and math.isnan(value):
        return None
    if value is None or isinstance(value, (str, int, float, bool)):
        return value
    raise InputError(path, line, key, f"expected a scalar, got {type(value).__name__}")


def is_finite(x: Any) -> bool:
    if isinstance(x, bool) or not isinstance(x, (int, float)):
        return False
    try:
        return math.isfinite(x)
    except OverflowError:
        return False


def _why(exc: BaseException) -> str:
    return "nested too deeply" if isinstance(exc, RecursionError) else str(exc).split(";")[0]


def parse_json(src: Source, text: str) -> list[tuple[int, str, dict[str, Any]]]:
    """The objects of a file holding one JSON document, or one object per line.

    Returns (line, raw text, object) per record; a single document counts as
    one record on its first non-empty line.
    """
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as exc:
        whole = exc
    except (ValueError, RecursionError) as exc:  # int too long, nested too deeply
        raise InputError(src.path, None, None, f"not valid JSON: {_why(exc)}") from None
    else:
        if not isinstance(doc, dict):
            raise InputError(src.path, None, None, f"expected a JSON object, got {type(doc).__name__}")
        first = next(i for i, raw in enumerate(text.splitlines(), start=1) if raw.strip())
        return [(first, text, doc)]
    out: list[tuple[int, str, dict[str, Any]]] = []
    for line, raw in enumerate(text.splitlines(), start=1):
        if not raw.strip():
            continue
        try:
            obj = json.loads(raw)
        except json.JSONDecodeError as exc:
            if not out:  # not one object per line: report the document's own fault
                raise InputError(src.path, whole.lineno, None,
                                 f"not valid JSON: {whole.msg} at column {whole.colno}") from None
            raise InputError(src.path, line, None, f"not valid JSON: {exc.msg} at column {exc.colno}") from None
        except (ValueError, RecursionError) as exc:
            raise InputError(src.path, line, None, f"not valid JSON: {_why(exc)}") from None
        if not isinstance(obj, dict):
            raise InputError(src.path, line, None, f"expected a JSON object, got {type(obj).__name__}")
        out.append((line, raw, obj))
    return out


def _numbers(path: str, line: int, key: str, value: list[Any]) -> list[Any]:
    if not all(is_finite(x) for x in value):
        raise InputError(path, line, key, "expected a list of finite numbers")
    return value


def _details(path: str, line: int, doc: Mapping[str, Any]) -> dict[str, object] | None:
    if not any(k in doc and doc[k] is not None for k in DETAILED):
        return None
    out: dict[str, object] = {}
    n: int | None = None
    first = ""
    for key, column in DETAIL_COLUMNS.items():
        value = doc.get(key)
        if value is None:
            continue
        if not isinstance(value, list):
            raise InputError(path, line, key, "expected a list")
        if n is not None and len(value) != n:
            raise InputError(path, line, key, f"has {len(value)} entries, expected {n} as in '{first}'")
        if n is None:
            n, first = len(value), key
        if key == "itls":
            for i, row in enumerate(value):
                if not isinstance(row, list) or not all(is_finite(x) for x in row):
                    raise InputError(path, line, f"itls[{i}]", "expected a list of finite numbers")
            out[column] = value
        elif key == "errors":
            if not all(isinstance(x, str) or x is None for x in value):
                raise InputError(path, line, key, "expected a list of strings")
            out[column] = [x or "" for x in value]
        elif key == "start_times":
            _numbers(path, line, key, value)
            t0 = min(value, default=0.0)
            sent = [round(t - t0, 6) for t in value]
            if not all(math.isfinite(t) for t in sent):
                raise InputError(path, line, key, "times too far apart")
            out[column] = sent
        else:
            out[column] = _numbers(path, line, key, value)
    return out


def _load(path: str, line: int, doc: Mapping[str, Any], given: int | None) -> Load:
    """The load of one result (D97): ``request_rate`` (``"inf"`` or a number),
    ``burstiness`` (vLLM's gamma shape, 1.0 by default) and ``max_concurrency``."""
    ramp = doc.get("ramp_up_strategy")
    if ramp is not None:
        raise InputError(path, line, "ramp_up_strategy",
                         f"{ramp!r}: the rate changed during the run (from {doc.get('ramp_up_start_rps')!r} to "
                         f"{doc.get('ramp_up_end_rps')!r} req/s), so it is no one point on the rate axis; "
                         "findings does not import ramp-up runs")
    return load_axis(path, line, rate=doc.get("request_rate"), burstiness=doc.get("burstiness"),
                     cap=doc.get("max_concurrency"), given=given, burstiness_default=1.0)


def _count(path: str, line: int, key: str, value: Any) -> float | None:
    num = finite_number(path, line, key, value)
    if num is not None and (num < 0 or not num.is_integer()):
        raise InputError(path, line, key, f"expected a count >= 0, got {value!r}")
    return num


def _metrics(path: str, line: int, doc: Mapping[str, Any]) -> dict[str, float]:
    completed = _count(path, line, "completed", doc.get("completed"))
    # vllm-ascend's copy of benchmark_serving.py (February 2025) wrote only the
    # latency statistics: no duration, completed or output_throughput. Such a
    # point is stored with its throughput and counts unknown (never zero).
    latency_only = ("output_throughput" not in doc and "completed" not in doc and "duration" not in doc
                    and any(k.endswith(("_ttft_ms", "_tpot_ms", "_itl_ms")) for k in doc))
    if "output_throughput" not in doc and completed != 0 and not latency_only:
        raise InputError(path, line, "output_throughput",
                         "missing (a pooling/embedding run measures no output tokens)")
    tput = finite_number(path, line, "output_throughput", doc.get("output_throughput"))
    if (tput is None or tput < 0) and completed != 0 and not latency_only:
        raise InputError(path, line, "output_throughput", "expected a number >= 0")
    metrics: dict[str, float] = {THROUGHPUT: tput} if tput is not None else {}
    for key, value in doc.items():
        if key in WORKLOAD_KEYS or key in HANDLED_KEYS or key in DETAIL_COLUMNS or key in OURS:
            continue
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            num = finite_number(path, line, field(key), value)
            if num is not None:
                metrics[RENAMED.get(key, key)] = num
        elif key in ("completed", "failed", "spec_decode_acceptance_length") and value is not None:
            raise InputError(path, line, key, f"expected a number, got {type(value).__name__}")
    _count(path, line, "failed", doc.get("failed"))
    errors = doc.get("errors")
    sent = doc.get("num_prompts")
    sent = sent if isinstance(sent, int) and not isinstance(sent, bool) and sent >= 0 else None
    if "failed" not in metrics and isinstance(errors, list) and all(isinstance(e, str) or e is None for e in errors):
        metrics["failed"] = float(sum(1 for e in errors if e))  # before 0.11.1: count the error strings
    elif "failed" not in metrics and completed is not None and sent is not None and sent >= completed:
        metrics["failed"] = float(sent - completed)  # before 0.11.1, no details: sent minus successes
    if "completed" in metrics and "failed" in metrics:
        metrics["planned"] = metrics["completed"] + metrics["failed"]
        if not math.isfinite(metrics["planned"]):
            raise InputError(path, line, "completed", "too large a count")
    if completed == 0:
        metrics = only_counts(metrics)
    return metrics


def _params(path: str, line: int, doc: Mapping[str, Any]) -> dict[str, Scalar]:
    """What was sent, plus ``--metadata KEY=VALUE`` strings (any other string key)."""
    params: dict[str, Scalar] = {}
    for key, value in doc.items():
        if key in HANDLED_KEYS or key in DETAIL_COLUMNS:
            continue
        if key in WORKLOAD_KEYS or isinstance(value, (str, bool)):
            v = workload_value(path, line, field(key), value)
            if v is not None:
                params[key] = v
    return params


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
    """Parse and validate every result object; raise InputError on the first fault."""
    text = src.text()
    if not text.strip():
        raise InputError(src.path, None, None, "the file is empty: no result")
    rid = run_id(NAME, src.sha256)
    points: list[Point] = []
    hashes: set[str] = set()
    facts: dict[str, Scalar] = {}
    facts_line = 0
    loads: list[Load] = []
    for line, raw, doc in parse_json(src, text):
        h, rh = line_hash(raw), record_hash(doc)
        if h in skip_lines or rh in skip_lines:
            continue
        if h in hashes or rh in hashes:
            raise InputError(src.path, line, None, "this result repeats an earlier one exactly")
        load = _load(src.path, line, doc, concurrency)
        loads.append(load)
        metrics = _metrics(src.path, line, doc)
        model = doc.get("model_id")
        if model is not None:
            if not isinstance(model, str):
                raise InputError(src.path, line, "model_id", f"expected a string, got {type(model).__name__}")
            if "model_path" in facts and facts["model_path"] != model:
                raise InputError(src.path, line, "model_id",
                                 f"{model!r} differs from {facts['model_path']!r} on line {facts_line}; "
                                 "one file holds one config")
            if "model_path" not in facts:
                facts["model_path"], facts_line = model, line
        params = _params(src.path, line, doc)
        params.update(load.params)
        requests = _details(src.path, line, doc)
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
                workload_params=params,
                requests=requests,
            )
        )
    if not points:
        raise InputError(src.path, None, None, "every result was already ingested; nothing to add")
    check_given_used(src.path, concurrency, loads)
    points, _ = split_workloads(points, NAME, workload, src.path)
    return make_run(
        src, NAME, VERSION, source, environment=dict(environment or {}),
        campaigns=(Campaign(name=campaign, date=date, order=order),),
        configs={config: facts}, points=points, hashes=hashes,
    )
