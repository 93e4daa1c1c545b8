"""Which importer reads a file: decided by content, never by its name.

Rules, first match wins (docs/importers.md):

1. A JSON document (one object, possibly pretty-printed) or JSON lines
   (one object per line; the first object decides):
   - **aiperf** when a metric object ``{"unit": ..., "avg"|"p50"|...}`` sits
     under one of AIPerf's/genai-perf's metric tags (top level, or under
     ``records`` as AIPerf 0.1 writes);
   - else, for an object with ``output_throughput``: **vllm-bench** when it has
     a key only vLLM writes (``VLLM_ONLY``) and none only sglang writes,
     **sglang-bench** when it is the other way round; both or neither is refused
     as ambiguous.
2. A CSV whose header has every required column of the long table
   (``campaign, workload, config, concurrency, output_throughput_tok_s``):
   **table**. A header with ``config`` but not the others is a configs table,
   which is refused with a hint (it goes with ``--configs``).
3. Anything else is refused.
"""

from __future__ import annotations

import csv
import io
import json
from typing import Any

from findings.errors import InputError
from findings.importers import table
from findings.importers.aiperf import LATENCIES, SCALARS, metric_objects
from findings.importers.common import Source

FORMATS = ("table", "sglang-bench", "vllm-bench", "aiperf")

#: Tags whose metric objects mark an AIPerf / genai-perf export.
AIPERF_TAGS = frozenset(LATENCIES) | frozenset(SCALARS)
#: Keys that ``vllm bench serve`` / benchmark_serving.py write and sglang.bench_serving never does.
VLLM_ONLY = frozenset({
    "model_id", "tokenizer_id", "num_prompts", "burstiness", "endpoint_type", "total_token_throughput",
    "mean_e2el_ms", "median_e2el_ms", "p99_e2el_ms", "request_goodput:", "spec_decode_acceptance_length",
})
#: Keys that sglang.bench_serving writes and vLLM never does.
SGLANG_ONLY = frozenset({
    "dataset_name", "total_output_tokens_retokenized", "input_throughput", "mean_e2e_latency_ms",
    "median_e2e_latency_ms", "concurrency", "accept_length", "random_input_len", "server_info",
    "sharegpt_output_len",
})
STAT_KEYS = ("avg", "p50", "p99", "mean")


def _refuse(src: Source, why: str) -> InputError:
    return InputError(src.path, None, None,
                      f"cannot tell the format ({why}); name it: {' | '.join(FORMATS)}")


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


def _json_format(src: Source, doc: dict[str, Any]) -> str:
    objs = metric_objects(doc)
    if any(tag in AIPERF_TAGS and any(k in obj for k in STAT_KEYS) for tag, (_, obj) in objs.items()):
        return "aiperf"
    if "output_throughput" not in doc:
        raise _refuse(src, "a JSON object with neither AIPerf metric objects nor 'output_throughput'")
    vllm = sorted(VLLM_ONLY & doc.keys())
    sglang = sorted(SGLANG_ONLY & doc.keys())
    if vllm and not sglang:
        return "vllm-bench"
    if sglang and not vllm:
        return "sglang-bench"
    if vllm:
        raise _refuse(src, f"it has vLLM keys ({', '.join(vllm[:3])}) and sglang keys ({', '.join(sglang[:3])})")
    raise _refuse(src, "a benchmark result with no key that only vLLM or only sglang writes")


def detect(src: Source) -> str:
    """The name of the importer for ``src``: one of FORMATS."""
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
    try:
        header = [h.strip() for h in next(csv.reader(io.StringIO(text, newline="")))]
    except (csv.Error, StopIteration):
        header = []
    if len(header) > 1:
        missing = [c for c in table.REQUIRED if c not in header]
        if not missing:
            return "table"
        if "config" in header and "campaign" not in header:
            raise _refuse(src, "a configs table: give it to 'ingest table --configs'")
        raise _refuse(src, f"a CSV without the table's columns {', '.join(missing)}")
    raise _refuse(src, "neither JSON, JSON lines nor a CSV table")
