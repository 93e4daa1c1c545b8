"""NVIDIA AIPerf ``profile_export_aiperf.json`` (and genai-perf's ``*_genai_perf.json``).

One file is one point. Each metric is an object ``{"unit": ..., "avg": ...,
"p50": ..., "p99": ..., "std": ..., "min": ..., "max": ...}`` (percentiles
only for per-request metrics), top-level (AIPerf 0.6, 0.13, genai-perf) or
under ``records`` (AIPerf 0.1). Values are in the ``unit`` given, which is
authoritative: time metrics are converted to milliseconds here, whatever unit
the file uses. Field names, as read from the AIPerf and genai-perf wheels, are
cited in tests/fixtures/aiperf/README.md.

Names follow the store's (sglang.bench_serving's) vocabulary:

- ``output_token_throughput.avg`` -> ``output_throughput_tok_s`` (required);
- ``time_to_first_token`` (``ttft`` in 0.1.x) -> ``{stat}_ttft_ms``;
- ``inter_token_latency`` -> ``{stat}_tpot_ms``: AIPerf and genai-perf define
  it per request as (latency - TTFT) / (output tokens - 1), which is what
  sglang and vLLM call TPOT;
- ``inter_chunk_latency`` (the gaps between streamed chunks, all requests
  pooled) -> ``{stat}_itl_ms``, which is what sglang and vLLM call ITL;
- ``request_latency`` -> ``{stat}_e2e_latency_ms``;
- where ``{stat}`` is ``mean`` (avg), ``median`` (p50), ``p90``, ``p95``,
  ``p99``, ``std``, ``min`` or ``max`` (the lower percentiles are dropped).

The load is read from ``input_config`` (the profiling ``phases`` in AIPerf
0.13, ``loadgen`` in 0.1 and 0.6, ``perf_analyzer.stimulus`` or the top level
in genai-perf), D97: a request rate makes an open-loop point at that rate
(burstiness from the phase type: poisson 1, constant inf, gamma its
smoothness), capped by a concurrency where one is recorded; without a rate
the point is a closed loop at the recorded concurrency, or else at
``--concurrency``.

Failures: ``request_count`` counts successes and ``error_request_count``
failures. AIPerf writes the latter only when a request failed (an
``ERROR_ONLY`` metric), so in an AIPerf export its absence means none
failed; genai-perf records no failures at all, so its count is unknown.

When every request fails, AIPerf 0.13 writes no summary at all: it exits 1
and leaves only the per-request records, ``profile_export.jsonl`` (one JSON
object per request, each failed one with an ``error``). ``read`` takes that
file too (``read_records``) and stores the run as a point where every
request failed: no throughput, flagged, shown. A records file where some
requests succeeded is refused: AIPerf then wrote its own summary next to it.
"""

from __future__ import annotations

import json
import math
from typing import Any, Mapping

from findings.core.errors import InputError
from findings.importers.common import (Source, check_given_used, line_hash, load_axis, make_run, record_hash,
                                       run_id)
from findings.importers.vllm_bench import field, finite_number, workload_value
from findings.core.model import THROUGHPUT, Campaign, Point, Run, Scalar
from findings.store.schema import point_id

NAME = "aiperf"
VERSION = "1"

#: Milliseconds per unit, for the time units AIPerf (MetricTimeUnit) and
#: genai-perf write.
MS_PER = {"ns": 1e-6, "us": 1e-3, "ms": 1.0, "sec": 1000.0, "s": 1000.0}
#: Latency distributions -> the stem of our names, ``{stat}_{stem}_ms``.
LATENCIES = {
    "time_to_first_token": "ttft", "ttft": "ttft",
    "inter_token_latency": "tpot",
    "inter_chunk_latency": "itl",
    "request_latency": "e2e_latency",
    "time_to_second_token": "ttst", "ttst": "ttst",
}
#: Statistic keys kept -> our prefixes (p1 ... p75 are not kept: no view uses them).
STATS = {"avg": "mean", "p50": "median", "p90": "p90", "p95": "p95", "p99": "p99", "std": "std", "min": "min", "max": "max"}
#: Run-level values (``avg``) -> our names.
SCALARS = {
    "output_token_throughput": THROUGHPUT,
    "request_throughput": "request_throughput",
    "request_count": "completed",
    "error_request_count": "failed",
    "request_goodput": "request_goodput",
    "goodput": "request_goodput",
}
#: Acceptance length (tokens per verify step, bonus token included), best first.
ACCEPT = ("spec_decode_token_weighted_acceptance_length", "spec_decode_acceptance_length")
#: Metric objects not kept: wall-clock timestamps, not measurements.
SKIP = frozenset({"min_request_timestamp", "max_response_timestamp"})
TOKENS_PER_S = frozenset({"tokens/sec", "tokens/s"})
#: Our names that only the mappings above may set (an unknown tag of the same name is skipped).
RESERVED = frozenset(SCALARS.values()) | {"duration", "planned", "accept_length"}


def _is_metric(value: Any) -> bool:
    return isinstance(value, dict) and isinstance(value.get("unit"), str)


def metric_objects(doc: Mapping[str, Any]) -> dict[str, tuple[str, Mapping[str, Any]]]:
    """tag -> (JSON path, metric object): top-level, or under ``records`` (0.1.x)."""
    out: dict[str, tuple[str, Mapping[str, Any]]] = {}
    records = doc.get("records")
    if isinstance(records, dict):
        out.update({k: (f"records.{field(k)}", v) for k, v in records.items() if _is_metric(v)})
    out.update({k: (field(k), v) for k, v in doc.items() if _is_metric(v)})
    return out


def _stats(path: str, where: str, obj: Mapping[str, Any]) -> dict[str, float]:
    out: dict[str, float] = {}
    for stat in STATS:
        if stat in obj:
            num = finite_number(path, None, f"{where}.{stat}", obj[stat])
            if num is not None:
                out[stat] = num
    return out


def _factor(path: str, where: str, unit: str) -> float:
    if unit not in MS_PER:
        raise InputError(path, None, f"{where}.unit", f"expected a time unit ({', '.join(MS_PER)}), got {unit!r}")
    return MS_PER[unit]


def _all_failed(path: str, objs: Mapping[str, tuple[str, Mapping[str, Any]]]) -> dict[str, float] | None:
    """A summary in which every answered request errored (AIPerf 0.8.0 writes
    ``error_request_count`` and ``error_isl`` and no throughput, latency or
    ``request_count``: those metrics come from the successful records, and
    there were none): a failed point, its counts only. Requests cancelled in
    flight are in no record, so ``planned`` counts the answered ones (the
    point's note says the run was cancelled). None: not such a summary."""
    if "error_request_count" not in objs or "request_count" in objs:
        return None
    where, obj = objs["error_request_count"]
    failed = _stats(path, where, obj).get("avg")
    if failed is None or failed <= 0 or not float(failed).is_integer():
        raise InputError(path, None, f"{where}.avg", f"expected a count > 0, got {failed!r}")
    return {"planned": failed, "completed": 0.0, "failed": failed}


def _metrics(path: str, doc: Mapping[str, Any]) -> dict[str, float]:
    objs = metric_objects(doc)
    if "output_token_throughput" not in objs:
        failed = _all_failed(path, objs)
        if failed is None:
            raise InputError(path, None, "output_token_throughput",
                             "missing (AIPerf writes it only for endpoints that produce tokens)")
        return failed
    metrics: dict[str, float] = {}

    def put(name: str, value: float, where: str) -> None:
        if not math.isfinite(value):
            raise InputError(path, None, where, "out of range once converted to our units")
        metrics[name] = value

    for tag, (where, obj) in objs.items():
        if tag in SKIP:
            continue
        unit = str(obj["unit"])
        stats = _stats(path, where, obj)
        if tag in LATENCIES:
            k = _factor(path, where, unit)
            for stat, value in stats.items():
                put(f"{STATS[stat]}_{LATENCIES[tag]}_ms", value * k, f"{where}.{stat}")
        elif tag in SCALARS:
            if tag == "output_token_throughput" and unit not in TOKENS_PER_S:
                raise InputError(path, None, f"{where}.unit", f"expected tokens/sec, got {unit!r}")
            if "avg" in stats:
                metrics[SCALARS[tag]] = stats["avg"]
        elif tag == "benchmark_duration":
            if "avg" in stats:
                put("duration", stats["avg"] * _factor(path, where, unit) / 1000.0, f"{where}.avg")
        elif tag not in RESERVED:
            suffix, k = ("_ms", MS_PER[unit]) if unit in MS_PER else ("", 1.0)
            if set(stats) - {"avg"}:
                for stat, value in stats.items():
                    put(f"{STATS[stat]}_{tag}{suffix}", value * k, f"{where}.{stat}")
            elif "avg" in stats:
                put(f"{tag}{suffix}", stats["avg"] * k, f"{where}.avg")
    where = objs["output_token_throughput"][0]
    if THROUGHPUT not in metrics:
        raise InputError(path, None, f"{where}.avg", "missing (an aggregate or collated export? "
                         "import a run's own profile_export_aiperf.json)")
    if metrics[THROUGHPUT] < 0:
        raise InputError(path, None, f"{where}.avg", "expected a number >= 0")
    for tag in ACCEPT:
        accept = metrics.get(f"mean_{tag}", metrics.get(tag))
        if tag in objs and accept is not None:
            metrics["accept_length"] = accept
            break
    for key, tag in (("completed", "request_count"), ("failed", "error_request_count")):
        if key in metrics and (metrics[key] < 0 or not metrics[key].is_integer()):
            raise InputError(path, None, f"{objs[tag][0]}.avg", f"expected a count >= 0, got {metrics[key]!r}")
    total = metrics.get("completed_request_count")  # 0.13: successes + errors
    if "failed" not in metrics and "completed" in metrics and total is not None:
        if total < metrics["completed"] or not total.is_integer():
            raise InputError(path, None, f"{objs['completed_request_count'][0]}.avg",
                             f"expected a count >= request_count ({metrics['completed']:g}), got {total!r}")
        metrics["failed"] = total - metrics["completed"]
    if "failed" not in metrics and "completed" in metrics and _is_aiperf(doc):
        metrics["failed"] = 0.0  # ERROR_ONLY: AIPerf writes error_request_count only when a request failed
    if "completed" in metrics and "failed" in metrics:
        put("planned", metrics["completed"] + metrics["failed"], f"{objs['request_count'][0]}.avg")
    return metrics


def _is_aiperf(doc: Mapping[str, Any]) -> bool:
    """AIPerf (any version), not genai-perf: by the command line it records
    (``run_info.cli_command`` in 0.13, ``input_config.cli_command`` before;
    ``aiperf profile ...`` or ``genai-perf profile ...``), else by the keys
    only AIPerf writes."""
    for command in (_get(doc, "run_info", "cli_command"), _get(doc, "input_config", "cli_command")):
        if isinstance(command, str) and command.split():
            tool = command.split()[0].rsplit("/", 1)[-1]
            if tool in ("aiperf", "genai-perf"):
                return tool == "aiperf"
    return "aiperf_version" in doc or "records" in doc or "schema_version" in doc


def _get(obj: Any, *keys: str) -> Any:
    for key in keys:
        if not isinstance(obj, dict):
            return None
        obj = obj.get(key)
    return obj


def _phases(cfg: Mapping[str, Any]) -> list[tuple[str, Mapping[str, Any]]]:
    """The profiling phases of an AIPerf >= 0.13 ``BenchmarkConfig``, with their JSON paths."""
    raw = cfg.get("phases")
    if isinstance(raw, dict):
        items = [(f"input_config.phases.{field(k)}", {"name": k, **v}) for k, v in raw.items() if isinstance(v, dict)]
    elif isinstance(raw, list):
        items = [(f"input_config.phases[{i}]", v) for i, v in enumerate(raw) if isinstance(v, dict)]
    else:
        return []
    return [(w, p) for w, p in items
            if (p.get("kind") or p.get("name")) == "profiling" and not p.get("exclude_from_results")]


#: AIPerf 0.13 rate phase types -> burstiness (vLLM's gamma shape; AIPerf's
#: ``smoothness`` is the same shape, 1.0 = Poisson, ``aiperf/config/phases.py``).
PHASE_BURSTINESS: dict[str, Scalar] = {"poisson": 1.0, "constant": "inf", "gamma": 1.0}
#: AIPerf 0.1/0.6 ``loadgen.request_rate_mode`` -> burstiness.
RATE_MODE_BURSTINESS: dict[str, Scalar] = {"poisson": 1.0, "constant": "inf"}


def _load(cfg: Mapping[str, Any]) -> tuple[list[tuple[str, Any]], dict[str, Any], Any]:
    """Candidate concurrency values (JSON path, value), the load's workload
    parameters (``request_rate`` among them) and the burstiness (None: unknown)."""
    phases = _phases(cfg)
    if phases:
        found = []
        for where, p in phases:
            c = p.get("concurrency")
            if c is None and p.get("type") == "concurrency":
                c = 1  # ConcurrencyPhase's default; exclude_unset drops it from the file
            found.append((f"{where}.concurrency", c))
        p = phases[0][1]
        kind = p.get("type")
        burst = p.get("smoothness") if kind == "gamma" and p.get("smoothness") is not None else \
            PHASE_BURSTINESS.get(kind) if isinstance(kind, str) else None
        return found, {"load_type": kind, "request_rate": p.get("rate"), "request_count": p.get("requests")}, burst
    loadgen = cfg.get("loadgen")
    if isinstance(loadgen, dict):  # AIPerf UserConfig (0.1.1, 0.6.0)
        mode = loadgen.get("request_rate_mode")
        return ([("input_config.loadgen.concurrency", loadgen.get("concurrency"))],
                {"request_rate": loadgen.get("request_rate"), "request_count": loadgen.get("request_count")},
                RATE_MODE_BURSTINESS.get(mode) if isinstance(mode, str) else None)
    stimulus = _get(cfg, "perf_analyzer", "stimulus")
    if isinstance(stimulus, dict):  # genai-perf 0.0.14+ config
        return ([("input_config.perf_analyzer.stimulus.concurrency", stimulus.get("concurrency"))],
                {"request_rate": stimulus.get("request_rate")}, None)
    return ([("input_config.concurrency", cfg.get("concurrency"))],  # genai-perf argparse namespace
            {"request_rate": cfg.get("request_rate"), "request_count": cfg.get("request_count")}, None)


def _concurrency(path: str, found: list[tuple[str, Any]]) -> int | None:
    """The one concurrency the profiling phases record, None when none does."""
    values: dict[int, str] = {}
    for where, c in found:
        if c is None:
            continue
        if isinstance(c, bool) or not isinstance(c, int) or c < 1:
            raise InputError(path, None, where, f"expected an integer >= 1, got {c!r}")
        values.setdefault(c, where)
    if len(values) > 1:
        (a, wa), (b, wb) = sorted(values.items())[:2]
        raise InputError(path, None, wb, f"{b} differs from {a} in '{wa}'; import each phase's own "
                         "phases/<name>/profile_export_aiperf.json")
    return next(iter(values)) if values else None


def _model(cfg: Mapping[str, Any]) -> str | None:
    """The one model benchmarked, where the config names exactly one."""
    models = cfg.get("models")
    if isinstance(models, dict):
        items = models.get("items")
        models = [m.get("name") if isinstance(m, dict) else m for m in items] if isinstance(items, list) else None
    for names in (models, _get(cfg, "endpoint", "model_names"), cfg.get("model_names"), cfg.get("model")):
        if isinstance(names, str):
            names = [names]
        if isinstance(names, list) and len(names) == 1 and isinstance(names[0], str):
            return names[0]
    return None


def _extra_inputs(raw: Any) -> dict[str, Any]:
    """``--extra-inputs`` as a dict, in the shapes the exports hold: a dict
    (AIPerf 0.13 ``endpoint.extra``, ``input.extra_inputs_parsed``), a list of
    ``[key, value]`` pairs or of ``"key:value"`` strings (AIPerf 0.1 - 0.8
    ``input.extra``, genai-perf's ``extra_inputs``)."""
    if isinstance(raw, dict):
        return raw
    out: dict[str, Any] = {}
    if isinstance(raw, list):
        for item in raw:
            if isinstance(item, list) and len(item) == 2 and isinstance(item[0], str):
                out[item[0]] = item[1]
            elif isinstance(item, str) and ":" in item:
                key, _, value = item.partition(":")
                out[key.strip()] = value.strip()
    return out


def _prompts(cfg: Mapping[str, Any]) -> dict[str, Scalar]:
    """The prompt set and ``ignore_eos``, where the config records them, so
    that the caveat on random or made-up prompts holds (D62, issue 37):

    - AIPerf 0.13: ``datasets[].type`` synthetic | file | public, and the
      public dataset's name; ``endpoint.extra`` from ``--extra-inputs``;
    - AIPerf 0.1 - 0.8 (``UserConfig``, exported with ``exclude_unset``):
      ``input.public_dataset`` (``--public-dataset``), ``input.file``
      (``--input-file``), and ``input.extra_inputs_parsed`` or ``input.extra``;
    - genai-perf: ``input.file`` (0.0.14+ config) or ``input_file`` and
      ``input_dataset`` (the argparse namespace), ``input.extra`` or
      ``extra_inputs``."""
    out: dict[str, Scalar] = {}
    datasets = cfg.get("datasets")
    if isinstance(datasets, list) and datasets and isinstance(datasets[0], dict):
        kind, name = datasets[0].get("type"), datasets[0].get("dataset")
        if isinstance(kind, str):
            out["dataset"] = f"{kind}:{name}" if kind == "public" and isinstance(name, str) else kind
    raw_input = cfg.get("input")
    inp: Mapping[str, Any] = raw_input if isinstance(raw_input, dict) else {}
    if "dataset" not in out:
        public = inp.get("public_dataset") or cfg.get("input_dataset")
        file = inp.get("file") or cfg.get("input_file")
        if isinstance(public, str) and public:
            out["dataset"] = f"public:{public}"
        elif isinstance(file, str) and file:
            out["dataset"] = "file"
    for raw in (_get(cfg, "endpoint", "extra"), inp.get("extra_inputs_parsed"), inp.get("extra"),
                cfg.get("extra_inputs")):
        flag = _extra_inputs(raw).get("ignore_eos")
        if isinstance(flag, str) and flag.strip().lower() in ("true", "false"):
            flag = flag.strip().lower() == "true"
        if isinstance(flag, bool):
            out["ignore_eos"] = flag
            break
    return out


def _error_summary(path: str, summary: Any) -> str:
    """``error_summary`` as one line: "2x HTTP 500 Internal Server Error; 2x ClientPayloadError"."""
    if not isinstance(summary, list):
        return ""
    parts = []
    for i, item in enumerate(summary):
        if not isinstance(item, dict) or not isinstance(item.get("error_details"), dict):
            raise InputError(path, None, f"error_summary[{i}]", "expected an object with error_details")
        d, count = item["error_details"], item.get("count")
        code = d.get("code")
        what = " ".join(str(x) for x in ((f"HTTP {code}" if isinstance(code, int) else None), d.get("type"))
                        if x) or "error"
        parts.append(f"{count}x {' '.join(what.split())}" if isinstance(count, int) else " ".join(what.split()))
    return "; ".join(parts)


def is_records(doc: Mapping[str, Any]) -> bool:
    """One line of AIPerf's per-request export (``profile_export.jsonl``)."""
    meta = doc.get("metadata")
    return isinstance(meta, dict) and "x_request_id" in meta and ("metrics" in doc or "error" in doc)


def read_records(src: Source, text: str, config: str, campaign: str, workload: str, date: str,
                 order: int | None, concurrency: int | None, environment: Mapping[str, Scalar] | None,
                 skip_lines: frozenset[str], source: str) -> Run:
    """AIPerf's per-request ``profile_export.jsonl`` of a run where every request failed."""
    h = line_hash(text)
    if h in skip_lines:
        raise InputError(src.path, None, None, "this result was already ingested; nothing to add")
    sent = failed = 0
    kinds: dict[str, int] = {}
    first_line = None
    for line, raw in enumerate(text.splitlines(), start=1):
        if not raw.strip():
            continue
        try:
            rec = json.loads(raw)
        except (ValueError, RecursionError):
            raise InputError(src.path, line, None, "not valid JSON") from None
        if not isinstance(rec, dict) or not is_records(rec):
            raise InputError(src.path, line, "metadata", "expected an AIPerf per-request record")
        meta = rec["metadata"]
        if meta.get("benchmark_phase", "profiling") != "profiling":
            continue  # warm-up records are not the measurement
        first_line = first_line or line
        sent += 1
        err = rec.get("error")
        if err is not None:
            failed += 1
            code = err.get("code") if isinstance(err, dict) else None
            kind = f"http_{code}" if isinstance(code, int) else "other"
            kinds[kind] = kinds.get(kind, 0) + 1
    if sent == 0:
        raise InputError(src.path, None, None, "no profiling records")
    if failed < sent:
        raise InputError(src.path, None, None,
                         f"{sent - failed} of {sent} requests succeeded, so AIPerf wrote its summary "
                         "profile_export_aiperf.json next to this file: import that (a records file is "
                         "read only for a run where every request failed)")
    if concurrency is None:
        raise InputError(src.path, None, None, "AIPerf's records do not name the concurrency; pass --concurrency N, "
                                               "the run's --concurrency (a --request-rate run cannot be placed "
                                               "from its records)")
    metrics = {"planned": float(sent), "completed": 0.0, "failed": float(failed),
               **{f"errors_{k}": float(v) for k, v in sorted(kinds.items())}}
    rid = run_id(NAME, src.sha256)
    point = Point(
        id=point_id(rid, 0), run_id=rid, campaign=campaign, config=config, workload=workload,
        concurrency=concurrency, metrics=metrics, source=source, source_file=src.path, source_line=first_line,
        note="AIPerf wrote no summary: every request failed (read from its per-request records)",
        workload_params={"tool": "aiperf"},
    )
    return make_run(
        src, NAME, VERSION, source, environment=dict(environment or {}),
        campaigns=(Campaign(name=campaign, date=date, order=order),),
        configs={config: {}}, points=[point], hashes={h},
    )


#: genai-perf's CSV export (``profile_export_genai_perf.csv``, 0.0.8 to 0.0.16):
#: a row's metric name -> (the JSON export's tag, its unit there).
CSV_ROWS = {
    "time to first token": ("time_to_first_token", "ms"),
    "time to second token": ("time_to_second_token", "ms"),
    "request latency": ("request_latency", "ms"),
    "inter token latency": ("inter_token_latency", "ms"),
    "output sequence length": ("output_sequence_length", "tokens"),
    "input sequence length": ("input_sequence_length", "tokens"),
    "output token throughput": ("output_token_throughput", "tokens/sec"),
    "output token throughput per user": ("output_token_throughput_per_user", "tokens/sec/user"),
    "output token throughput per request": ("output_token_throughput_per_request", "tokens/sec"),
    "request throughput": ("request_throughput", "requests/sec"),
    "request count": ("request_count", "requests"),
    "request goodput": ("request_goodput", "requests/sec"),
}


def is_csv_export(text: str) -> bool:
    """genai-perf's CSV export: its first line is the statistics table's header."""
    first = text.lstrip("\ufeff").split("\n", 1)[0].strip().lower()
    return first.startswith("metric,") and ",avg" in first


def parse_csv(src: Source, text: str) -> dict[str, Any]:
    """genai-perf's CSV export as the JSON export's metric objects: two tables
    (``Metric,avg,min,max,p99,...`` then ``Metric,Value``), CRLF, numbers
    as ``f"{v:,.2f}"`` (quoted from 1,000 on), ``N/A`` for a missing statistic.
    Rows of telemetry (GPU power, ...) and unknown rows are refused by name
    only when malformed; unknown names are kept under their own slug."""
    import csv
    import io
    import re

    doc: dict[str, Any] = {}
    header: list[str] | None = None
    try:
        rows = list(csv.reader(io.StringIO(text.lstrip("\ufeff"), newline="")))
    except csv.Error as exc:
        raise InputError(src.path, None, None, f"not a readable CSV: {exc}") from None
    for line, row in enumerate(rows, start=1):
        if not row or not any(cell.strip() for cell in row):
            header = None
            continue
        if row[0].strip().lower() == "metric":
            header = [c.strip().lower() for c in row]
            continue
        if header is None:
            raise InputError(src.path, line, None, "a row before its table's header (Metric,...)")
        if len(row) != len(header):
            raise InputError(src.path, line, None, f"{len(row)} cells under a header of {len(header)}")
        m = re.fullmatch(r"\s*(.*?)\s*(?:\(([^()]*)\))?\s*", row[0])
        name, unit = (m.group(1), m.group(2)) if m else (row[0], None)
        tag, json_unit = CSV_ROWS.get(name.lower(), (re.sub(r"[^a-z0-9]+", "_", name.lower()).strip("_"), unit or ""))
        obj: dict[str, Any] = {"unit": json_unit}
        for key, cell in zip(header[1:], row[1:]):
            cell = cell.strip()
            if cell.upper() in ("N/A", ""):
                continue
            try:
                value = float(cell.replace(",", ""))
            except ValueError:
                raise InputError(src.path, line, f"{name}.{key}", f"expected a number, got {cell!r}") from None
            obj["avg" if key == "value" else key] = value
        if tag in doc:
            raise InputError(src.path, line, name, "listed twice")
        doc[tag] = obj
    if not doc:
        raise InputError(src.path, None, None, "no metric rows")
    return doc


def parse(src: Source) -> dict[str, Any]:
    text = src.text()
    if not text.strip():
        raise InputError(src.path, None, None, "the file is empty")
    if is_csv_export(text):
        return parse_csv(src, text)
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as exc:
        raise InputError(src.path, exc.lineno, None, f"not valid JSON: {exc.msg} at column {exc.colno}") from None
    except (ValueError, RecursionError) as exc:  # int too long, nested too deeply
        why = "nested too deeply" if isinstance(exc, RecursionError) else str(exc).split(";")[0]
        raise InputError(src.path, None, None, f"not valid JSON: {why}") from None
    if not isinstance(doc, dict):
        raise InputError(src.path, None, None, f"expected a JSON object, got {type(doc).__name__}")
    return doc


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
    """Parse and validate the whole file; raise InputError on the first fault."""
    text = src.text()
    first = next((raw for raw in text.splitlines() if raw.strip()), "")
    try:
        head = json.loads(first) if first.lstrip().startswith("{") else None
    except (ValueError, RecursionError):
        head = None
    if isinstance(head, dict) and is_records(head):
        return read_records(src, text, config, campaign, workload, date, order, concurrency, environment,
                            skip_lines, source)
    doc = parse(src)
    h, rh = line_hash(text), record_hash(doc)
    if h in skip_lines or rh in skip_lines:
        raise InputError(src.path, None, None, "this result was already ingested; nothing to add")
    cfg = doc.get("input_config")
    if cfg is None:
        cfg = {}
    if not isinstance(cfg, dict):
        raise InputError(src.path, None, "input_config", "expected an object")
    metrics = _metrics(src.path, doc)
    found, load, burst = _load(cfg)
    axis = load_axis(src.path, None, rate=load.get("request_rate"), burstiness=burst,
                     cap=_concurrency(src.path, found), given=concurrency,
                     rate_key="input_config request_rate", cap_key=found[0][0] if found else "input_config")
    check_given_used(src.path, concurrency, [axis])
    params: dict[str, Scalar] = {"tool": "aiperf" if _is_aiperf(doc) else "genai-perf", **_prompts(cfg)}
    for key, value in load.items():
        if isinstance(value, (str, int, float, bool)):
            params[key] = workload_value(src.path, None, key, value)
    params.update(axis.params)
    notes = []
    if doc.get("was_cancelled") is True:
        notes.append("AIPerf reports the run was cancelled")
    if doc.get("is_complete") is False:
        reason = doc.get("incomplete_reason")
        notes.append("AIPerf reports the run incomplete" + (f": {' '.join(reason.split())}"
                                                          if isinstance(reason, str) and reason.strip() else ""))
    errors = _error_summary(src.path, doc.get("error_summary"))
    if errors:
        notes.append("errors: " + errors)
    env = dict(environment or {})
    version = doc.get("aiperf_version")
    if isinstance(version, str):
        env.setdefault("aiperf_version", version)
    model = _model(cfg)
    rid = run_id(NAME, src.sha256)
    point = Point(
        id=point_id(rid, 0),
        run_id=rid,
        campaign=campaign,
        config=config,
        workload=workload,
        concurrency=axis.concurrency,
        metrics=metrics,
        source=source,
        source_file=src.path,
        source_line=None,
        note="; ".join(notes) or None,
        workload_params=params,
    )
    return make_run(
        src, NAME, VERSION, source, environment=env,
        campaigns=(Campaign(name=campaign, date=date, order=order),),
        configs={config: {"model_path": model} if model else {}}, points=[point], hashes={h, rh},
    )
