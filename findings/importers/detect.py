"""Which importer reads a file: decided by content, never by its name.

Rules, first match wins (docs/importers.md):

1. A JSON document (one object, possibly pretty-printed) or JSON lines
   (one object per line; the first object decides):
   - **aiperf** when a metric object ``{"unit": ..., "avg"|"p50"|...}`` sits
     under one of AIPerf's/genai-perf's metric tags (top level, or under
     ``records`` as AIPerf 0.1 writes), or when the object is a line of
     AIPerf's per-request export (``metadata.x_request_id``);
   - else, for an object with ``output_throughput``, by the keys that only
     one tool has ever written, in any release (``VLLM_OWN``, ``SGLANG_OWN``,
     from the history of both scripts; tests/fixtures/real_tools/README.md):
     **vllm-bench** when it has vLLM's own keys and none of sglang's,
     **sglang-bench** the other way round. Keys both tools have written at
     some time (``input_throughput``: vLLM from February to September
     2024, sglang from 0.4.1) decide nothing. ``vllm bench serve --metadata
     KEY=VALUE`` can add any key with a string value, so an sglang key counts
     only with a value that is not a string (sglang writes numbers, nulls
     and objects there). Both sets present, or neither, is refused as
     ambiguous. ``backend`` never decides: sglang's client pointed at a vLLM
     server writes ``"backend": "vllm"``.
2. genai-perf's CSV export (its first row ``Metric,avg,...``): **aiperf**.
3. A CSV whose header has every required column of the long table
   (``campaign, workload, config, concurrency, output_throughput_tok_s``):
   **table**. A header with ``config`` but not the others is a configs table,
   which is refused with a hint (it goes with ``--configs``).
4. Anything else is refused.

``explain`` returns the format with the keys that decided it.
"""

from __future__ import annotations

import csv
import io
import json
from typing import Any

from findings.core.errors import InputError
from findings.importers import table
from findings.importers.aiperf import LATENCIES, SCALARS, is_csv_export, is_records, metric_objects
from findings.importers.common import Source

FORMATS = ("table", "sglang-bench", "vllm-bench", "aiperf")

#: Tags whose metric objects mark an AIPerf / genai-perf export.
AIPERF_TAGS = frozenset(LATENCIES) | frozenset(SCALARS)
#: Keys that vLLM's ``benchmark_serving.py --save-result`` (2024-02 on) or
#: ``vllm bench serve`` (0.8 - 0.33) has written, and no release of
#: sglang.bench_serving (0.1.24 - 0.5.23) ever has.
VLLM_OWN = frozenset({
    "model_id", "tokenizer_id", "num_prompts", "date", "version", "burstiness", "endpoint_type", "label",
    "best_of", "use_beam_search", "failed", "request_inthroughput", "request_goodput:", "total_token_throughput",
    "rtfx", "latencies", "queue_times", "start_times", "server_queue_times", "server_ttfts", "rps_change_events",
    "ramp_up_strategy", "ramp_up_start_rps", "ramp_up_end_rps", "total_input_sequences",
    "input_sequence_throughput",
})
VLLM_OWN_PATTERNS = (("suffix", "_e2el_ms"), ("prefix", "spec_decode_"), ("prefix", "diffusion_"),
                     ("prefix", "probe_"), ("suffix", "_client_queue_time_ms"))
#: Keys that sglang.bench_serving has written, and no vLLM script ever has
#: (except through ``--metadata``, as strings).
SGLANG_OWN = frozenset({
    "dataset_name", "sharegpt_output_len", "random_input_len", "random_output_len", "random_range_ratio", "tag",
    "server_info", "concurrency", "accept_length", "total_throughput", "total_output_tokens_retokenized",
    "total_input_text_tokens", "total_input_vision_tokens", "cache_report", "cached_tokens",
    "cached_tokens_details", "goodput_slos_ms", "slo_attainment", "slo_attainment_by_metric",
    "total_output_retokenized", "mean_e2e_latency", "median_e2e_latency", "median_ttft", "median_itl",
    "benchmark_duration",
})
SGLANG_OWN_PATTERNS = (("suffix", "_e2e_latency_ms"),)
STAT_KEYS = ("avg", "p50", "p99", "mean")


def _matches(key: str, own: frozenset[str], patterns: tuple[tuple[str, str], ...]) -> bool:
    return key in own or any(key.endswith(x) if kind == "suffix" else key.startswith(x) for kind, x in patterns)


def own_keys(doc: dict[str, Any]) -> tuple[list[str], list[str]]:
    """(vLLM's own keys, sglang's own keys) present in ``doc``, in file order."""
    vllm = [k for k in doc if _matches(k, VLLM_OWN, VLLM_OWN_PATTERNS)]
    sglang = [k for k in doc if _matches(k, SGLANG_OWN, SGLANG_OWN_PATTERNS) and not isinstance(doc[k], str)]
    return vllm, sglang


class Undetected(InputError):
    """No rule placed the file; ``why`` says what it is instead."""

    def __init__(self, path: str, why: str) -> None:
        self.why = why
        super().__init__(path, None, None, f"cannot tell the format ({why}); name it: {' | '.join(FORMATS)}")


def _refuse(src: Source, why: str) -> Undetected:
    return Undetected(src.path, why)


def _first_object(text: str) -> tuple[Any, bool]:
    """(the JSON document or the first JSON line's value, parsed?)."""
    try:
        return json.loads(text), True
    except (ValueError, RecursionError):
        pass
    for raw in text.splitlines():
        if raw.strip():
            try:
                return json.loads(raw), True
            except (ValueError, RecursionError):
                return None, False
    return None, False


def _keys(keys: list[str]) -> str:
    return ", ".join(keys[:4]) + (f" and {len(keys) - 4} more" if len(keys) > 4 else "")


def _json_format(src: Source, doc: dict[str, Any]) -> tuple[str, str]:
    objs = metric_objects(doc)
    tags = [tag for tag, (_, obj) in objs.items() if tag in AIPERF_TAGS and any(k in obj for k in STAT_KEYS)]
    if tags:
        return "aiperf", f"AIPerf metric objects: {_keys(tags)}"
    if is_records(doc):
        return "aiperf", "AIPerf per-request records (metadata.x_request_id)"
    vllm, sglang = own_keys(doc)
    if "output_throughput" not in doc:
        latencies = [k for k in doc if k.endswith(("_ttft_ms", "_tpot_ms", "_itl_ms"))]
        if vllm and latencies and not sglang:  # vllm-ascend's latency-only copy of benchmark_serving.py
            return "vllm-bench", f"keys only vLLM writes: {_keys(vllm)}, with latency statistics only"
        raise _refuse(src, "a JSON object with neither AIPerf metric objects nor 'output_throughput'")
    if vllm and not sglang:
        return "vllm-bench", f"keys only vLLM writes: {_keys(vllm)}"
    if sglang and not vllm:
        return "sglang-bench", f"keys only sglang.bench_serving writes: {_keys(sglang)}"
    if vllm:
        raise _refuse(src, f"it has keys only vLLM writes ({_keys(vllm)}) and keys only sglang writes "
                           f"({_keys(sglang)})")
    raise _refuse(src, "a benchmark result with no key that only vLLM or only sglang writes")


#: Keys of an AIPerf or genai-perf export besides its metrics (AIPerf 0.1 -
#: 0.13, ``aiperf/common/models/export_models.py``; genai-perf's ``input_config``).
AIPERF_MARKERS = frozenset({"aiperf_version", "schema_version", "benchmark_id", "input_config", "run_info",
                            "was_cancelled", "is_complete", "error_summary", "records"})


def nearest(src: Source) -> tuple[str, str] | None:
    """For a file ``explain`` cannot place: the importer whose format it is
    nearest to, and why (its own keys or columns); None when none is near.
    ``ingest auto`` then gives that importer's reason (D101)."""
    try:
        text = src.text()
    except InputError:
        return None
    doc, parsed = _first_object(text)
    if parsed and isinstance(doc, dict):
        marks = [k for k in doc if k in AIPERF_MARKERS]
        vllm, sglang = own_keys(doc)
        if marks and not vllm and not sglang:
            return "aiperf", f"AIPerf's keys {_keys(marks)}"
        if vllm and not sglang:
            return "vllm-bench", f"keys only vLLM writes: {_keys(vllm)}"
        if sglang and not vllm:
            return "sglang-bench", f"keys only sglang.bench_serving writes: {_keys(sglang)}"
        return None
    if parsed:
        return None
    try:
        header = [h.strip() for h in next(csv.reader(io.StringIO(text, newline="")))]
    except (csv.Error, StopIteration):
        return None
    found = [c for c in table.REQUIRED if c in header]
    if len(found) >= 2 and "campaign" in found:
        return "table", f"a CSV with the table's columns {', '.join(found)}"
    return None


def detect(src: Source) -> str:
    """The name of the importer for ``src``: one of FORMATS."""
    return explain(src)[0]


def explain(src: Source) -> tuple[str, str]:
    """(the importer for ``src``, what decided it)."""
    try:
        text = src.text()
    except InputError as exc:
        raise _refuse(src, exc.message) from None
    if not text.strip():
        raise _refuse(src, "the file is empty")
    doc, parsed = _first_object(text)
    if parsed:
        if isinstance(doc, dict):
            return _json_format(src, doc)
        raise _refuse(src, f"JSON, but a {type(doc).__name__}, not an object")
    if text.lstrip().startswith(("{", "[")):
        try:
            json.loads(text)
        except json.JSONDecodeError as exc:
            raise _refuse(src, f"not valid JSON: {exc.msg} at line {exc.lineno} column {exc.colno}") from None
        except (ValueError, RecursionError):
            raise _refuse(src, "not valid JSON") from None
    if is_csv_export(text):
        return "aiperf", "genai-perf's CSV export (Metric,avg,... then Metric,Value)"
    try:
        header = [h.strip() for h in next(csv.reader(io.StringIO(text, newline="")))]
    except (csv.Error, StopIteration):
        header = []
    if len(header) > 1:
        missing = [c for c in table.REQUIRED if c not in header]
        if not missing:
            return "table", f"a CSV with the columns {', '.join(table.REQUIRED)}"
        if "config" in header and "campaign" not in header:
            raise _refuse(src, "a configs table: give it to 'ingest table --configs'")
        raise _refuse(src, f"a CSV without the table's columns {', '.join(missing)}")
    raise _refuse(src, "neither JSON, JSON lines nor a CSV table")
