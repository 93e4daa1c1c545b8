"""vllm bench serve JSON, AIPerf/genai-perf JSON, format detection and ingest_auto.

The fixtures (tests/fixtures/vllm_bench, tests/fixtures/aiperf) follow the real
writers; their READMEs cite the source. Values read back must equal the file's.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from conftest import FIXTURES, HISTORY, SGL

from findings.importers import ingest
from findings import store
from findings.core.errors import DuplicateError, InputError, SettingsError
from findings.importers import aiperf, common, detect, vllm_bench
from findings.core.model import THROUGHPUT
from findings.load.spec import DEFAULT_CAP
from findings.store.schema import records_in, run_from_dict, run_to_dict

VLLM = FIXTURES / "vllm_bench"
AIPERF = FIXTURES / "aiperf"
ARGS: dict[str, Any] = dict(config="eagle3-topk1-v2", campaign="c", workload="random-1024-512", date="2026-11-01")
#: An ingest's options: each test's store is new, and the writer makes it (--create, D94).
WRITE: dict[str, Any] = {**ARGS, "checks": ingest.Checks(create=True)}


def vread(name: str, **kw: Any):
    return vllm_bench.read(common.read_source(str(VLLM / name)), **{**ARGS, **kw})


def aread(name: str, **kw: Any):
    return aiperf.read(common.read_source(str(AIPERF / name)), **{**ARGS, **kw})


def raw(path: Path) -> Any:
    return json.loads(path.read_text())


def nothing_written(store_dir: Path) -> bool:
    return not (store_dir / "runs").exists() or not list((store_dir / "runs").glob("*.json"))


def roundtrip(run) -> None:
    back = run_from_dict(json.loads(json.dumps(run_to_dict(run), allow_nan=False)), "x.json")
    assert len(back.points) == len(run.points)


# ---------------------------------------------------------------- vllm-bench

VLLM_FIXTURES = sorted(p.name for p in VLLM.glob("*.json"))


@pytest.mark.parametrize("name", VLLM_FIXTURES)
def test_vllm_every_numeric_key_is_kept_under_its_name(name: str) -> None:
    run = vread(name)  # every file records its load (D97): no --concurrency
    roundtrip(run)
    docs = [json.loads(line) for line in (VLLM / name).read_text().splitlines() if line.strip()]
    assert len(run.points) == len(docs)
    for p, doc in zip(run.points, docs):
        if "output_throughput" in doc:
            assert p.throughput == doc["output_throughput"]
        else:  # latency statistics only (vllm-ascend's copy): throughput unknown, not zero
            assert THROUGHPUT not in p.metrics
        assert p.concurrency == (doc["max_concurrency"] or DEFAULT_CAP)
        for key, value in doc.items():
            if key in vllm_bench.WORKLOAD_KEYS or key in ("max_concurrency", "output_throughput"):
                continue
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                assert p.metrics[vllm_bench.RENAMED.get(key, key)] == value, key
        assert "output_throughput" not in p.metrics and "spec_decode_acceptance_length" not in p.metrics
        assert p.workload_params["request_rate"] == ("inf" if doc["request_rate"] == "inf" else doc["request_rate"])
        assert p.workload_params.get("load") == (None if doc["request_rate"] == "inf" else "rate")
        assert p.workload_params["num_prompts"] == doc["num_prompts"]
        assert "date" not in p.workload_params and "model_id" not in p.workload_params
    assert run.configs[ARGS["config"]] == {"model_path": docs[0]["model_id"]}


def test_vllm_0_33_speculative_run() -> None:
    run = vread("v0_33_0_eagle3_c30.json")
    doc = raw(VLLM / "v0_33_0_eagle3_c30.json")
    (p,) = run.points
    assert (p.concurrency, p.source_line) == (30, 1)
    assert p.metrics["accept_length"] == doc["spec_decode_acceptance_length"]
    assert p.metrics["spec_decode_acceptance_rate"] == doc["spec_decode_acceptance_rate"]
    assert p.metrics["mean_e2el_ms"] == doc["mean_e2el_ms"]  # vLLM's name, not sglang's e2e_latency
    assert p.metrics["p90_ttft_ms"] == doc["p90_ttft_ms"]
    assert p.metrics["planned"] == doc["completed"] + doc["failed"] == 300
    assert p.workload_params["request_rate"] == "inf"
    assert p.workload_params["label"] == "eagle3-topk1"
    assert (p.workload_params["tp"], p.workload_params["spec"]) == ("8", "eagle3")  # --metadata
    assert p.requests is None  # `latencies` alone (no --save-detailed) makes no per-request record
    assert run.importer == "vllm-bench" and run.run_id.startswith("vllm-bench-")


def test_vllm_save_detailed_becomes_per_request_records() -> None:
    run = vread("v0_33_0_detailed.json")
    doc = raw(VLLM / "v0_33_0_detailed.json")
    req = run.points[0].requests
    assert req is not None
    assert req["input_len"] == doc["input_lens"]
    assert req["output_len"] == doc["output_lens"]
    assert req["ttft_s"] == doc["ttfts"]
    assert req["itl_s"] == doc["itls"]
    assert req["e2e_s"] == doc["latencies"]
    assert req["error"] == doc["errors"]
    t0 = min(doc["start_times"])
    assert req["sent_s"] == [round(t - t0, 6) for t in doc["start_times"]]
    assert "generated_texts" not in req and "queue_times" not in req
    assert run.points[0].metrics["failed"] == doc["failed"] == sum(1 for e in doc["errors"] if e) == 1


def test_vllm_old_formats() -> None:
    p = vread("v0_9_0_c4.json").points[0]
    doc = raw(VLLM / "v0_9_0_c4.json")
    assert doc["request_goodput:"] is None and "request_goodput" not in p.metrics
    assert p.workload_params["endpoint_type"] == "openai-chat" and p.workload_params["best_of"] == 1
    assert p.requests is not None and p.requests["ttft_s"] == doc["ttfts"]  # 0.9.0 always writes them
    assert p.metrics["failed"] == 0 and p.metrics["planned"] == doc["completed"]  # counted from `errors`
    p = vread("benchmark_serving_2025_03.json").points[0]
    assert p.workload_params["backend"] == "vllm" and "endpoint_type" not in p.workload_params
    p = vread("v0_10_1_1_c16.json").points[0]
    doc = raw(VLLM / "v0_10_1_1_c16.json")
    assert "failed" not in doc and "errors" not in doc and p.requests is None
    # No `failed`, no details: every request sent (num_prompts) is a success or a failure.
    assert p.metrics["failed"] == doc["num_prompts"] - doc["completed"] and p.metrics["planned"] == doc["num_prompts"]


def test_vllm_request_rate_without_max_concurrency_is_an_open_loop_point() -> None:
    # Once refused with "pass --concurrency N", which stored the rate as a C (issue 37).
    p = vread("v0_33_0_rate_no_max_concurrency.json").points[0]
    assert p.workload_params["load"] == "rate" and p.workload_params["request_rate"] == 10.0
    assert p.workload_params["burstiness"] == "inf"  # Infinity in the file
    assert "max_concurrency" not in p.workload_params and p.concurrency == DEFAULT_CAP
    with pytest.raises(InputError, match=r"^[^;]*--concurrency 40 does not apply: the file records request "
                                         r"rate 10 req/s with no concurrency cap .*; drop --concurrency$"):
        vread("v0_33_0_rate_no_max_concurrency.json", concurrency=40)


def test_vllm_append_result_file_is_one_point_per_line() -> None:
    run = vread("v0_33_0_append.json")
    assert [(p.concurrency, p.source_line) for p in run.points] == [(1, 1), (8, 2)]
    assert records_in(run.line_hashes) == 2  # each record: a byte hash and a record hash (D99)


def test_vllm_pretty_printed_single_object_is_accepted() -> None:
    doc = raw(VLLM / "v0_10_1_1_c16.json")
    run = vllm_bench.read(common.Source("p.json", json.dumps(doc, indent=2).encode()), **ARGS)
    assert run.points[0].throughput == doc["output_throughput"]


GOOD = {"max_concurrency": 4, "output_throughput": 100.0, "model_id": "m"}


@pytest.mark.parametrize(
    ("change", "field", "message"),
    [
        ({"output_throughput": None}, "output_throughput", ">= 0"),
        ({"output_throughput": "fast"}, "output_throughput", "expected a number, got str"),
        ({"output_throughput": float("inf")}, "output_throughput", "finite"),
        ({"output_throughput": -1}, "output_throughput", ">= 0"),
        ({"max_concurrency": 0}, "max_concurrency", "integer >= 1"),
        ({"max_concurrency": 2.5}, "max_concurrency", "integer >= 1"),
        ({"max_concurrency": "8"}, "max_concurrency", "integer >= 1"),
        ({"completed": -3}, "completed", "count >= 0"),
        ({"failed": 1.5}, "failed", "count >= 0"),
        ({"completed": "3"}, "completed", "expected a number"),
        ({"p99_ttft_ms": float("-inf")}, "p99_ttft_ms", "finite"),
        ({"mean_ttft_ms": 10**400}, "mean_ttft_ms", "too large"),
        ({"model_id": 5}, "model_id", "expected a string"),
        ({"burstiness": [1]}, "burstiness", "scalar"),
        ({"ttfts": [0.1], "output_lens": [1, 2]}, "ttfts", "has 1 entries, expected 2 as in 'output_lens'"),
        ({"itls": [[0.1], ["x"]]}, "itls[1]", "list of finite numbers"),
        ({"errors": [1]}, "errors", "list of strings"),
        ({"input_lens": "x"}, "input_lens", "expected a list"),
        ({"bad\nkey": float("inf")}, '"bad\\nkey"', "finite"),
        ({"completed": 1e308, "failed": 1e308}, "completed", "too large a count"),
        ({"start_times": [1e308, -1e308], "errors": ["", ""]}, "start_times", "too far apart"),
    ],
)
def test_vllm_malformed_names_file_line_and_field_and_writes_nothing(
        tmp_path: Path, change: dict[str, Any], field: str, message: str) -> None:
    f = tmp_path / "bad.json"
    good = json.dumps({**GOOD, "max_concurrency": 1})
    f.write_text(good + "\n" + json.dumps({**GOOD, **change}))  # --append-result layout: line 2 is bad
    with pytest.raises(InputError) as exc:
        ingest.ingest_vllm_bench(tmp_path / "store", str(f), **WRITE)
    assert (exc.value.path, exc.value.line, exc.value.field) == (str(f), 2, field)
    assert message in str(exc.value) and "\n" not in str(exc.value)
    assert nothing_written(tmp_path / "store")


@pytest.mark.parametrize(
    ("text", "line", "message"),
    [
        ("", None, "empty"),
        ("[1, 2]", None, "JSON object"),
        ('{"output_throughput": 1,\n "max_concurrency": }', 2, "not valid JSON"),
        ('{"max_concurrency": 1, "output_throughput": 1}\n[3]', 2, "JSON object"),
        ('{"max_concurrency": 1, "output_throughput": 1}\n{"max_concurrency": 1, "output_throughput": 1}', 2,
         "repeats an earlier one"),
        ('{"max_concurrency": 1, "output_throughput": 1, "model_id": "a"}\n'
         '{"max_concurrency": 2, "output_throughput": 1, "model_id": "b"}', 2, "one file holds one config"),
        ('{"max_concurrency": 1, "duration": 1' + "0" * 5000 + ', "output_throughput": 1}', None, "not valid JSON"),
    ],
)
def test_vllm_malformed_documents(text: str, line: int | None, message: str) -> None:
    with pytest.raises(InputError) as exc:
        vllm_bench.read(common.Source("x.json", text.encode()), **ARGS)
    assert exc.value.line == line
    assert message in str(exc.value) and "\n" not in str(exc.value)


def test_vllm_appended_file_with_skip_existing(tmp_path: Path) -> None:
    lines = (VLLM / "v0_33_0_append.json").read_text().splitlines()
    f = tmp_path / "grow.json"
    f.write_text(lines[0])  # as --save-result leaves it: one object, no newline
    s = tmp_path / "store"
    assert ingest.ingest_vllm_bench(s, str(f), **WRITE).points == 1
    f.write_text("\n".join(lines))  # --append-result adds "\n" + the next object
    with pytest.raises(DuplicateError, match="1 of its records were already ingested"):
        ingest.ingest_vllm_bench(s, str(f), **WRITE)
    got = ingest.ingest_vllm_bench(s, str(f), **WRITE, skip_existing=True)
    assert got.points == 1
    assert sorted(p.concurrency for p in store.load(s).points) == [1, 8]
    with pytest.raises(InputError, match="already ingested"):
        ingest.ingest_vllm_bench(s, str(f), **WRITE, skip_existing=True)


# ---------------------------------------------------------------- aiperf

AIPERF_FIXTURES = sorted(p.name for p in AIPERF.glob("*.json"))


def _metric_objects(doc: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {k: v for k, (_, v) in aiperf.metric_objects(doc).items()}


@pytest.mark.parametrize("name", [n for n in AIPERF_FIXTURES if "all_failed" not in n])
def test_aiperf_mapped_values_equal_the_file(name: str) -> None:
    run = aread(name)
    roundtrip(run)
    (p,) = run.points
    objs = _metric_objects(raw(AIPERF / name))
    assert p.throughput == objs["output_token_throughput"]["avg"]
    assert objs["output_token_throughput"]["unit"] == "tokens/sec"
    assert p.metrics["request_throughput"] == objs["request_throughput"]["avg"]
    assert p.metrics["completed"] == objs["request_count"]["avg"]
    for tag, stem in (("time_to_first_token", "ttft"), ("ttft", "ttft"), ("inter_token_latency", "tpot"),
                      ("inter_chunk_latency", "itl"), ("request_latency", "e2e_latency")):
        if tag not in objs:
            continue
        assert objs[tag]["unit"] == "ms"
        assert p.metrics[f"mean_{stem}_ms"] == objs[tag]["avg"]
        assert p.metrics[f"median_{stem}_ms"] == objs[tag]["p50"]
        assert p.metrics[f"p90_{stem}_ms"] == objs[tag]["p90"]
        assert p.metrics[f"p99_{stem}_ms"] == objs[tag]["p99"]
    assert "mean_ttft_ms" in p.metrics and "mean_tpot_ms" in p.metrics and "mean_e2e_latency_ms" in p.metrics
    if "benchmark_duration" in objs:
        assert objs["benchmark_duration"]["unit"] == "sec"
        assert p.metrics["duration"] == pytest.approx(objs["benchmark_duration"]["avg"])
    assert not any(k.startswith(("p1_", "p5_", "p25_")) for k in p.metrics)


def test_aiperf_0_13_concurrency_phase_and_speculation() -> None:
    run = aread("aiperf_0_13_0_eagle3_c30.json")
    doc = raw(AIPERF / "aiperf_0_13_0_eagle3_c30.json")
    (p,) = run.points
    assert p.concurrency == 30  # the profiling phase, not the warmup one
    assert p.source_line is None
    assert p.metrics["accept_length"] == doc["spec_decode_token_weighted_acceptance_length"]["avg"]
    assert p.metrics["mean_spec_decode_acceptance_length"] == doc["spec_decode_acceptance_length"]["avg"]
    assert p.metrics["completed_request_count"] == 300 and p.metrics["failed"] == 0 and p.metrics["planned"] == 300
    assert p.workload_params == {"tool": "aiperf", "load_type": "concurrency", "request_count": 300,
                                 "dataset": "synthetic"}
    assert run.configs[ARGS["config"]] == {"model_path": "meta-llama/Llama-3.3-70B-Instruct"}
    assert run.environment["aiperf_version"] == "0.13.0"
    assert p.note is None


def test_aiperf_0_13_rate_run_with_errors_is_an_open_loop_point() -> None:
    # Once refused with "no concurrency in the file (a request-rate run?); pass --concurrency N".
    doc = raw(AIPERF / "aiperf_0_13_0_rate_errors.json")
    p = aread("aiperf_0_13_0_rate_errors.json").points[0]
    assert p.workload_params["load"] == "rate" and p.workload_params["request_rate"] == 4.0
    assert p.workload_params["burstiness"] == 1.0  # a poisson phase
    assert p.concurrency == DEFAULT_CAP and "max_concurrency" not in p.workload_params
    with pytest.raises(InputError, match="--concurrency 16 does not apply"):
        aread("aiperf_0_13_0_rate_errors.json", concurrency=16)
    assert p.metrics["failed"] == doc["error_request_count"]["avg"] == 3
    assert p.metrics["planned"] == doc["completed_request_count"]["avg"] == 100
    assert p.workload_params["request_rate"] == 4.0 and p.workload_params["load_type"] == "poisson"


def test_aiperf_default_concurrency_phase_omits_its_concurrency() -> None:
    doc = raw(AIPERF / "aiperf_0_13_0_eagle3_c30.json")
    for phase in doc["input_config"]["phases"]:
        phase.pop("concurrency")  # exclude_unset drops ConcurrencyPhase's default of 1
    run = aiperf.read(common.Source("d.json", json.dumps(doc).encode()), **ARGS)
    assert run.points[0].concurrency == 1


def test_aiperf_older_layouts() -> None:
    p = aread("aiperf_0_6_0_c8.json").points[0]
    assert p.concurrency == 8  # input_config.loadgen.concurrency
    p = aread("aiperf_0_1_1_records_c4.json").points[0]
    doc = raw(AIPERF / "aiperf_0_1_1_records_c4.json")
    assert p.concurrency == 4
    assert p.metrics["mean_ttft_ms"] == doc["records"]["ttft"]["avg"]  # 0.1.x: "records" and tag "ttft"
    assert p.metrics["mean_ttst_ms"] == doc["records"]["ttst"]["avg"]
    run = aread("genai_perf_0_0_16_c16.json")
    assert run.points[0].concurrency == 16  # input_config.perf_analyzer.stimulus.concurrency
    assert run.points[0].workload_params["tool"] == "genai-perf"
    assert run.configs[ARGS["config"]] == {"model_path": "Qwen/Qwen3-8B"}
    assert "aiperf_version" not in run.environment


@pytest.mark.parametrize(("unit", "factor"), [("sec", 1e-3), ("s", 1e-3), ("us", 1e3), ("ns", 1e6), ("ms", 1.0)])
def test_aiperf_time_units_are_converted_to_ms(unit: str, factor: float) -> None:
    doc = raw(AIPERF / "aiperf_0_6_0_c8.json")
    ttft = doc["time_to_first_token"]
    doc["time_to_first_token"] = {k: (v * factor if k != "unit" else unit) for k, v in ttft.items()}
    doc["benchmark_duration"] = {"unit": "ms" if unit == "sec" else "sec",
                                 "avg": doc["benchmark_duration"]["avg"] * (1000 if unit == "sec" else 1)}
    p = aiperf.read(common.Source("u.json", json.dumps(doc).encode()), **ARGS).points[0]
    assert p.metrics["mean_ttft_ms"] == pytest.approx(ttft["avg"])
    assert p.metrics["p99_ttft_ms"] == pytest.approx(ttft["p99"])
    assert p.metrics["duration"] == pytest.approx(raw(AIPERF / "aiperf_0_6_0_c8.json")["benchmark_duration"]["avg"])


def test_aiperf_cancelled_or_incomplete_run_gets_a_note() -> None:
    doc = raw(AIPERF / "aiperf_0_13_0_eagle3_c30.json")
    doc.update(was_cancelled=True, is_complete=False, incomplete_reason="record stall\nwatchdog")
    p = aiperf.read(common.Source("n.json", json.dumps(doc).encode()), **ARGS).points[0]
    assert p.note == ("AIPerf reports the run was cancelled; "
                      "AIPerf reports the run incomplete: record stall watchdog")


def _edit(doc: dict[str, Any], path: str, value: Any) -> None:
    *head, last = path.split(".")
    for key in head:
        doc = doc[int(key)] if key.isdigit() else doc[key]
    if value is ...:
        del doc[last]
    else:
        doc[last] = value


@pytest.mark.parametrize(
    ("path", "value", "field", "message"),
    [
        ("output_token_throughput", ..., "output_token_throughput", "missing"),
        ("output_token_throughput.avg", "fast", "output_token_throughput.avg", "expected a number"),
        ("output_token_throughput.avg", None, "output_token_throughput.avg", "missing"),
        ("output_token_throughput.avg", -5, "output_token_throughput.avg", ">= 0"),
        ("output_token_throughput.unit", "requests/sec", "output_token_throughput.unit", "tokens/sec"),
        ("time_to_first_token.unit", "parsecs", "time_to_first_token.unit", "time unit"),
        ("time_to_first_token.p99", float("inf"), "time_to_first_token.p99", "finite"),
        ("request_count.avg", 2.5, "request_count.avg", "count >= 0"),
        ("input_config", [1], "input_config", "expected an object"),
        ("input_config.loadgen.concurrency", 0, "input_config.loadgen.concurrency", "integer >= 1"),
        ("input_config.loadgen.concurrency", "8", "input_config.loadgen.concurrency", "integer >= 1"),
        ("request_latency", {"unit": "sec", "avg": 1e308}, "request_latency.avg", "out of range"),
        ("benchmark_duration", {"unit": "ns", "avg": float("nan")}, None, None),
    ],
)
def test_aiperf_malformed_names_file_and_field_and_writes_nothing(
        tmp_path: Path, path: str, value: Any, field: str, message: str) -> None:
    doc = raw(AIPERF / "aiperf_0_6_0_c8.json")
    _edit(doc, path, value)
    f = tmp_path / "bad.json"
    f.write_text(json.dumps(doc, indent=2))
    if field is None:  # NaN (genai-perf's json.dumps can write it) means "not measured"
        ingest.ingest_aiperf(tmp_path / "s2", str(f), **WRITE)
        assert "duration" not in store.load(tmp_path / "s2").points[0].metrics
        return
    with pytest.raises(InputError) as exc:
        ingest.ingest_aiperf(tmp_path / "store", str(f), **WRITE)
    assert (exc.value.path, exc.value.field) == (str(f), field)
    assert message in str(exc.value) and "\n" not in str(exc.value)
    assert nothing_written(tmp_path / "store")


def test_aiperf_phases_that_disagree_on_concurrency() -> None:
    doc = raw(AIPERF / "aiperf_0_13_0_eagle3_c30.json")
    extra = copy.deepcopy(doc["input_config"]["phases"][1])
    extra.update(name="profiling_hi", concurrency=60)
    doc["input_config"]["phases"].append(extra)
    with pytest.raises(InputError, match="60 differs from 30") as exc:
        aiperf.read(common.Source("p.json", json.dumps(doc).encode()), **ARGS)
    assert exc.value.field == "input_config.phases[2].concurrency"


@pytest.mark.parametrize(
    ("text", "line", "message"),
    [
        ("", None, "empty"),
        ("[1]", None, "JSON object"),
        ('{\n  "output_token_throughput": {"unit": "tokens/sec", "avg": }\n}', 2, "not valid JSON"),
        (json.dumps({"output_token_throughput": {"unit": "tokens/sec", "mean": 5.0, "ci_low": 4.0}}), None,
         "aggregate"),
    ],
)
def test_aiperf_malformed_documents(text: str, line: int | None, message: str) -> None:
    with pytest.raises(InputError) as exc:
        aiperf.read(common.Source("a.json", text.encode()), **ARGS, concurrency=1)
    assert exc.value.line == line
    assert message in str(exc.value) and "\n" not in str(exc.value)


def test_aiperf_same_file_twice_is_refused(tmp_path: Path) -> None:
    s = tmp_path / "store"
    f = str(AIPERF / "aiperf_0_6_0_c8.json")
    ingest.ingest_aiperf(s, f, **WRITE)
    with pytest.raises(DuplicateError, match="already ingested"):
        ingest.ingest_aiperf(s, f, **{**WRITE, "campaign": "other"})
    with pytest.raises(InputError, match="already ingested; nothing to add"):
        ingest.ingest_aiperf(s, f, **WRITE, skip_existing=True)


# ---------------------------------------------------------------- detection

DETECT_CASES = (
    [(p, "sglang-bench") for p in sorted(SGL.glob("*.jsonl"))]
    + [(HISTORY / "measurements.csv", "table"), (FIXTURES / "rigor.csv", "table")]
    + [(p, "vllm-bench") for p in sorted(VLLM.glob("*.json"))]
    + [(p, "aiperf") for p in sorted(AIPERF.glob("*.json"))]
)


@pytest.mark.parametrize(("path", "fmt"), DETECT_CASES, ids=[p.name for p, _ in DETECT_CASES])
def test_detect_picks_the_format_of_every_fixture(path: Path, fmt: str) -> None:
    assert detect.detect(common.read_source(str(path))) == fmt


def test_detect_covers_all_fixture_folders() -> None:
    assert len(list(SGL.glob("*.jsonl"))) >= 5 and len(VLLM_FIXTURES) >= 5 and len(AIPERF_FIXTURES) >= 5


@pytest.mark.parametrize(
    ("data", "why"),
    [
        (b"", "empty"),
        (b"   \n\n", "empty"),
        (b"\xff\xfe\x00garbage", "not UTF-8"),
        (b"hello world\nthis is not data\n", "neither JSON"),
        (b"[1, 2, 3]", "a list, not an object"),
        (b'{"foo": 1}', "neither AIPerf metric objects nor 'output_throughput'"),
        (b'{"output_throughput": 5.0, "max_concurrency": 1}', "no key that only vLLM or only sglang writes"),
        (b'{"output_throughput": 5.0, "model_id": "m", "random_input_len": 32}', "keys only vLLM writes (model_id)"),
        (b'{"output_throughput": 5.0,\n "model_id": ', "not valid JSON"),
        (b"a,b,c\n1,2,3\n", "without the table's columns campaign, workload, config"),
    ],
)
def test_detect_refuses_what_it_cannot_tell(data: bytes, why: str) -> None:
    with pytest.raises(InputError) as exc:
        detect.detect(common.Source("junk.bin", data))
    msg = str(exc.value)
    assert msg.startswith("junk.bin: cannot tell the format (") and why in msg and "\n" not in msg
    assert "table | sglang-bench | vllm-bench | aiperf" in msg


def test_detect_refuses_a_configs_table_with_a_hint() -> None:
    with pytest.raises(InputError, match="a configs table: give it to 'ingest table --configs'"):
        detect.detect(common.read_source(str(HISTORY / "configs.csv")))


def test_detect_aiperf_before_anything_else() -> None:
    doc = {"output_throughput": 1.0, "model_id": "m",
           "output_token_throughput": {"unit": "tokens/sec", "avg": 1.0}}
    assert detect.detect(common.Source("x.json", json.dumps(doc).encode())) == "aiperf"


# ---------------------------------------------------------------- ingest_auto

POINT_OPTS: dict[str, Any] = dict(config="eagle3-topk1-v2", campaign="auto", workload="random-1024-512",
                                  date="2026-11-02", checks=ingest.Checks(create=True))


@pytest.mark.parametrize(("path", "fmt", "points"), [
    (VLLM / "v0_33_0_append.json", "vllm-bench", 2),
    (AIPERF / "aiperf_0_13_0_eagle3_c30.json", "aiperf", 1),
    (SGL / "v0_5_23.jsonl", "sglang-bench", 4),
])
def test_ingest_auto_end_to_end(tmp_path: Path, path: Path, fmt: str, points: int) -> None:
    s = tmp_path / "store"
    got_fmt, got = ingest.ingest_auto(s, str(path), **POINT_OPTS)
    assert (got_fmt, got.points) == (fmt, points)
    assert got.run_id.startswith(fmt + "-") and got.path.exists()
    data = store.load(s)
    assert len(data.points) == points and {p.campaign for p in data.points} == {"auto"}
    assert all(THROUGHPUT in p.metrics for p in data.points)


def test_ingest_auto_table_with_configs(tmp_path: Path) -> None:
    fmt, got = ingest.ingest_auto(tmp_path / "store", str(HISTORY / "measurements.csv"),
                                  configs=str(HISTORY / "configs.csv"),
                                  environment=str(HISTORY / "environment.toml"), checks=ingest.Checks(create=True))
    assert fmt == "table" and got.points == 30


def test_ingest_auto_passes_concurrency_and_skip_existing(tmp_path: Path) -> None:
    s = tmp_path / "store"
    doc = raw(VLLM / "v0_33_0_eagle3_c30.json")
    doc["max_concurrency"] = None  # an infinite rate with no cap: the file leaves the concurrency out
    f = str(tmp_path / "nocap.json")
    Path(f).write_text(json.dumps(doc))
    with pytest.raises(InputError, match="pass --concurrency N"):
        ingest.ingest_auto(s, f, **POINT_OPTS)
    fmt, got = ingest.ingest_auto(s, f, **POINT_OPTS, concurrency=50, order=2)
    assert fmt == "vllm-bench" and store.load(s).points[0].concurrency == 50
    assert store.load(s).campaign("auto").order == 2
    with pytest.raises(InputError, match="already ingested"):
        ingest.ingest_auto(s, f, **POINT_OPTS, concurrency=50, order=2, skip_existing=True)


@pytest.mark.parametrize(("path", "opts", "message"), [
    (VLLM / "v0_9_0_c4.json", dict(config="x"),
     "is vllm-bench output, which needs --campaign, --workload, --date"),
    (AIPERF / "aiperf_0_6_0_c8.json", dict(),
     "is aiperf output, which needs --config, --campaign, --workload, --date"),
    (SGL / "old_format.jsonl", dict(POINT_OPTS, configs=str(HISTORY / "configs.csv")),
     "--configs applies to tables only"),
    (HISTORY / "measurements.csv", dict(config="x", date="2026-11-01"),
     "is a table (campaign, config and workload are its columns): --config, --date do not apply"),
    (VLLM / "v0_9_0_c4.json", dict(POINT_OPTS, date="2026/11/01"), "--date: expected YYYY-MM-DD"),
])
def test_ingest_auto_checks_the_options_the_format_needs(
        tmp_path: Path, path: Path, opts: dict[str, Any], message: str) -> None:
    with pytest.raises(SettingsError) as exc:
        ingest.ingest_auto(tmp_path / "store", str(path), **opts)
    assert message in str(exc.value) and "\n" not in str(exc.value)
    assert nothing_written(tmp_path / "store")


def test_ingest_auto_refuses_an_unknown_format_and_writes_nothing(tmp_path: Path) -> None:
    f = tmp_path / "notes.txt"
    f.write_text("we ran it twice and it was fast\n")
    with pytest.raises(InputError, match="cannot tell the format"):
        ingest.ingest_auto(tmp_path / "store", str(f), **POINT_OPTS)
    with pytest.raises(InputError, match="cannot read"):
        ingest.ingest_auto(tmp_path / "store", str(tmp_path / "missing.json"), **POINT_OPTS)
    assert nothing_written(tmp_path / "store")


def test_detect_never_fails_otherwise_on_random_input() -> None:
    hypothesis = pytest.importorskip("hypothesis")
    st = hypothesis.strategies
    seeds = [p.read_bytes()[:400] for p, _ in DETECT_CASES]

    @hypothesis.settings(max_examples=300, deadline=None, database=None)
    @hypothesis.given(st.one_of(st.binary(max_size=300), st.text(max_size=300).map(str.encode),
                                st.tuples(st.sampled_from(seeds), st.binary(max_size=20), st.integers(0, 400))
                                .map(lambda t: t[0][:t[2]] + t[1])))
    def check(data: bytes) -> None:
        try:
            assert detect.detect(common.Source("r.bin", data)) in detect.FORMATS
        except InputError as exc:
            assert str(exc).startswith("r.bin: cannot tell the format (") and "\n" not in str(exc)

    check()


# ---------------------------------------------------------------- real files once refused (issue 27)

def test_aiperf_0_8_cancelled_run_where_every_request_errored_is_a_failed_point(tmp_path: Path) -> None:
    """Written by aiperf 0.8.0 itself: error_request_count 32, was_cancelled,
    an error_summary, no throughput, latency or request_count. Once refused
    with "field 'output_token_throughput': missing"."""
    run = aread("aiperf_0_8_0_cancelled_all_failed.json", concurrency=None)
    (p,) = run.points
    assert p.concurrency == 32  # input_config.loadgen.concurrency
    assert p.metrics == {"planned": 32.0, "completed": 0.0, "failed": 32.0}
    assert THROUGHPUT not in p.metrics
    assert p.note == "AIPerf reports the run was cancelled; errors: 32x HTTP 500 Internal Server Error"
    s = tmp_path / "st"
    ingest.ingest_aiperf(s, str(AIPERF / "aiperf_0_8_0_cancelled_all_failed.json"), **WRITE)
    from findings import api as document
    from findings.document import settings as settings_mod
    got = json.loads(document.conclusions_json(settings_mod.load(None).with_overrides(
        store=str(s), baseline=None, noise_floor=None)))
    assert got["flagged"] == {f"{run.run_id}/0": ["all 32 requests failed"]}


def test_vllm_latency_only_file_is_stored_with_throughput_unknown(tmp_path: Path) -> None:
    """vllm-ascend's February 2025 benchmark_serving.py wrote TTFT/TPOT/ITL
    statistics only: stored, throughput and counts unknown (never zero),
    never in a throughput verdict, shown in its campaign."""
    run = vread("benchmark_serving_2025_02_latency_only.json")
    (p,) = run.points
    assert THROUGHPUT not in p.metrics and "completed" not in p.metrics and "failed" not in p.metrics
    assert p.metrics["mean_ttft_ms"] == raw(VLLM / "benchmark_serving_2025_02_latency_only.json")["mean_ttft_ms"]
    assert p.metrics["p99_itl_ms"] > 0
    # Its file name says qps_4 and it records request_rate 4: an open-loop point at 4 req/s (D97),
    # no longer a C given by --concurrency.
    assert (p.workload_params["load"], p.workload_params["request_rate"]) == ("rate", 4.0)
    s = tmp_path / "st"
    fmt, got = ingest.ingest_auto(s, str(VLLM / "benchmark_serving_2025_02_latency_only.json"), **POINT_OPTS)
    assert fmt == "vllm-bench" and "with latency statistics only" in (got.detected_by or "")
    from conftest import cli
    text = cli("conclusions", store=s).output
    assert text.splitlines()[0] == "1 points in the store, no closed-loop comparison: 1 open-loop points " \
                                   "(judged by request rate, below); 1 with latencies only (throughput unknown)"
    doc = cli("--settings", str(FIXTURES.parent.parent / "findings.toml"), "render", "--output", "-", store=s).output
    row = next(line for line in doc.splitlines() if line.startswith("| eagle3-topk1-v2 ") and "| auto " in line)
    cells = [c.strip() for c in row.strip("|").split("|")]
    assert cells[1] == "4" and cells[5] == f"{p.metrics['p99_ttft_ms']:.1f}"  # on the rate axis, its TTFT p99
    row = next(x for x in doc.splitlines() if x.startswith("| P1") and "vllm-bench-" in x)  # the appendix
    import re
    assert re.search(r"\|\s+n/a\s+\| unknown\s+\|", row)  # throughput n/a, requests unknown, not 0


def test_genai_perf_csv_export_is_ingested() -> None:
    """genai-perf 0.0.12's own CsvExporter output: CRLF, two tables,
    thousands separators in quoted numbers."""
    path = AIPERF / "genai_perf_0_0_12_export_c16.csv"
    assert b"\r\n\r\nMetric,Value\r\n" in path.read_bytes() and b'"1,019.69"' in path.read_bytes()
    run = aread("genai_perf_0_0_12_export_c16.csv", concurrency=16)
    (p,) = run.points
    assert p.metrics[THROUGHPUT] == 1019.69
    assert p.metrics["mean_ttft_ms"] == 1245.31 and p.metrics["p99_e2e_latency_ms"] == 9650.30
    assert p.metrics["completed"] == 256 and "failed" not in p.metrics  # genai-perf records no failures
    assert p.workload_params["tool"] == "genai-perf"
    assert detect.explain(common.read_source(str(path)))[0] == "aiperf"
    with pytest.raises(InputError, match="expected a number, got 'fast'"):
        aiperf.parse_csv(common.Source(str(path), b""),
                         "Metric,avg,min\r\nTime To First Token (ms),fast,1.0\r\n")
