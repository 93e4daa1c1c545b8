"""sglang.bench_serving JSONL, from 0.5.23 back to 0.3.6 (fixtures cite the source)."""

from __future__ import annotations

import json
import math

import pytest
from conftest import SGL, cli

from findings.core.errors import InputError
from findings.importers import common, sglang_bench
from findings.core.model import THROUGHPUT

ARGS = dict(config="eagle3-topk1-v2", campaign="c", workload="random-1024-512", date="2026-11-01")


def read(name: str, **kw):
    return sglang_bench.read(common.read_source(str(SGL / name)), **{**ARGS, **kw})


def read_text(text: str, **kw):
    return sglang_bench.read(common.Source("x.jsonl", text.encode()), **{**ARGS, **kw})


def test_0_5_23_lines_are_points_and_repeats():
    run = read("v0_5_23.jsonl")
    assert [p.concurrency for p in run.points] == [1, 30, 30, 30]
    assert [p.source_line for p in run.points] == [1, 2, 3, 4]
    raw = [json.loads(line) for line in (SGL / "v0_5_23.jsonl").read_text().splitlines()]
    assert [p.throughput for p in run.points] == [d["output_throughput"] for d in raw]
    p = run.points[1]
    assert p.metrics["accept_length"] == raw[1]["accept_length"]
    assert p.metrics["p99_ttft_ms"] == raw[1]["p99_ttft_ms"]
    assert p.metrics["p90_itl_ms"] == raw[1]["p90_itl_ms"]
    assert "output_throughput" not in p.metrics and THROUGHPUT in p.metrics
    assert p.workload_params["request_rate"] == "inf"  # Infinity in the file
    assert p.workload_params["tag"] == "eagle3-tp8"
    assert "sharegpt_output_len" not in p.workload_params  # null
    assert "tag" not in run.points[0].workload_params  # null tag
    facts = run.configs["eagle3-topk1-v2"]
    assert facts["speculative_algorithm"] == "EAGLE3"
    assert facts["speculative_eagle_topk"] == 1
    assert facts["speculative_num_draft_tokens"] == 3
    assert facts["disable_overlap_schedule"] is False
    assert facts["tp_size"] == 8
    assert facts["sglang_version"] == "0.5.23"
    assert run.environment["sglang_version"] == "0.5.23"
    assert run.campaigns[0].date == "2026-11-01"


def test_baseline_has_null_accept_length():
    run = read("v0_5_23_baseline.jsonl", config="baseline")
    assert all("accept_length" not in p.metrics for p in run.points)
    assert "speculative_algorithm" not in run.configs["baseline"]


def test_old_0_4_format_without_tag_server_info_or_p90():
    run = read("old_format.jsonl")
    assert [p.concurrency for p in run.points] == [1, 2]
    p = run.points[0]
    assert "p90_ttft_ms" not in p.metrics and "p99_ttft_ms" in p.metrics
    assert p.metrics["accept_length"] == pytest.approx(2.6129032258064515)
    assert run.configs["eagle3-topk1-v2"] == {}
    assert "tag" not in p.workload_params


def test_0_3_format_rates_on_the_rate_axis_inf_needs_concurrency():
    # 0.3.6 --multi --request-rate-range 1,2 then the default inf: no
    # max_concurrency key at all. The rates are open-loop points (D97); only
    # the inf line needs --concurrency, and it never turns rates into repeats.
    with pytest.raises(InputError, match="max_concurrency.*request_rate inf.*--concurrency") as exc:
        read("old_format_v0_3_6.jsonl")
    assert exc.value.line == 3
    run = read("old_format_v0_3_6.jsonl", concurrency=64)
    rate1, rate2, inf = run.points
    assert [p.workload_params["request_rate"] for p in run.points] == [1.0, 2.0, "inf"]
    assert rate1.workload_params["load"] == rate2.workload_params["load"] == "rate"
    assert rate1.workload_params["burstiness"] == 1.0 and "max_concurrency" not in rate1.workload_params
    assert "load" not in inf.workload_params and inf.concurrency == 64


def test_output_details_become_per_request_records():
    run = read("with_details.jsonl")
    req = run.points[0].requests
    assert req is not None
    raw = json.loads((SGL / "with_details.jsonl").read_text())
    assert req["ttft_s"] == raw["ttfts"]
    assert req["output_len"] == raw["output_lens"]
    assert len(req["itl_s"]) == len(raw["itls"])
    assert sum(1 for e in req["error"] if e) == sum(1 for e in raw["errors"] if e)


def test_nan_metric_is_dropped_not_stored():
    line = json.dumps({"max_concurrency": 4, "output_throughput": 10.0, "mean_e2e_latency_ms": math.nan})
    run = read_text(line + "\n")
    assert "mean_e2e_latency_ms" not in run.points[0].metrics


def test_launch_command_secrets_are_redacted():
    info = {"launch_command": "--model-path m --api-key sk-secret-123 --port 30000", "tp_size": 1}
    run = read_text(json.dumps({"max_concurrency": 1, "output_throughput": 5.0, "server_info": info}) + "\n")
    facts = run.configs["eagle3-topk1-v2"]
    assert "sk-secret-123" not in str(facts)
    assert "--api-key <redacted>" in str(facts["launch_command"])
    assert "--port 30000" in str(facts["launch_command"])


@pytest.mark.parametrize(
    ("line", "field", "message"),
    [
        ('{"max_concurrency": 1}', "output_throughput", "missing"),
        ('{"max_concurrency": 1, "output_throughput": "fast"}', "output_throughput", "expected a number"),
        ('{"max_concurrency": 1, "output_throughput": Infinity}', "output_throughput", "finite"),
        ('{"max_concurrency": 1, "output_throughput": NaN}', "output_throughput", ">= 0"),
        ('{"max_concurrency": 0, "output_throughput": 1}', "max_concurrency", "integer >= 1"),
        ('{"max_concurrency": 2.5, "output_throughput": 1}', "max_concurrency", "integer >= 1"),
        ('{"max_concurrency": 1, "output_throughput": 1, "p99_ttft_ms": -Infinity}', "p99_ttft_ms", "finite"),
        ('{"max_concurrency": 1, "output_throughput": 1, "accept_length": "2.5"}', "accept_length", "number"),
        ('{"max_concurrency": 1, "output_throughput": 1, "server_info": "x"}', "server_info", "object"),
        ('{"max_concurrency": 1, "output_throughput": 1, "ttfts": [1], "output_lens": [1, 2]}',
         "ttfts", "expected 2"),
        ('{"max_concurrency": 1, "output_throughput": 1, "itls": [["a"]]}', "itls[0]", "list of numbers"),
        ('{"max_concurrency": 1, "output_throughput": 1, "tag": {"a": 1}}', "tag", "scalar"),
        ('[1, 2]', None, "JSON object"),
        ('{"max_concurrency": 1, "output_throughput": ', None, "not valid JSON"),
    ],
)
def test_malformed_line_names_file_line_and_field(line, field, message):
    good = '{"max_concurrency": 1, "output_throughput": 10.0}'
    with pytest.raises(InputError) as exc:
        read_text(good + "\n\n" + line + "\n")
    assert exc.value.path == "x.jsonl"
    assert exc.value.line == 3
    assert exc.value.field == field
    assert message in str(exc.value)
    assert "\n" not in str(exc.value)


def test_conflicting_server_info_within_one_file():
    a = {"max_concurrency": 1, "output_throughput": 1.0, "server_info": {"speculative_eagle_topk": 1}}
    b = {"max_concurrency": 2, "output_throughput": 2.0, "server_info": {"speculative_eagle_topk": 4}}
    with pytest.raises(InputError, match="differs from 1 on line 1; one file holds one config"):
        read_text(json.dumps(a) + "\n" + json.dumps(b) + "\n")


def test_cli_malformed_file_exits_nonzero_and_writes_nothing(store, tmp_path):
    bad = tmp_path / "bad.jsonl"
    good = (SGL / "v0_5_23.jsonl").read_text().splitlines()
    bad.write_text("\n".join(good[:2] + ['{"max_concurrency": 30, "output_throughput": null}']) + "\n")
    r = cli("ingest", "sglang-bench", str(bad), "--config", "x", "--campaign", "c", "--workload", "w",
            "--date", "2026-11-01", store=store)
    assert r.exit_code == 1
    assert r.output == f"Error: {bad}:3: field 'output_throughput': expected a number >= 0\n"
    assert not (store / "runs").exists() or not list((store / "runs").glob("*.json"))


def test_cli_rejects_bad_date_and_names(store):
    base = ["ingest", "sglang-bench", str(SGL / "v0_5_23.jsonl"), "--config", "x", "--campaign", "c",
            "--workload", "w"]
    r = cli(*base, "--date", "30/11/2026", store=store)
    assert r.exit_code == 1 and "--date: expected YYYY-MM-DD" in r.output
    r = cli(*base[:4], " padded", *base[5:], "--date", "2026-11-30", store=store)
    assert r.exit_code == 1 and "--config: invalid name" in r.output


def test_appended_file_with_skip_existing(store, tmp_path):
    lines = (SGL / "v0_5_23.jsonl").read_text().splitlines()
    f = tmp_path / "grow.jsonl"
    f.write_text("\n".join(lines[:2]) + "\n")
    args = ["ingest", "sglang-bench", str(f), "--config", "e", "--campaign", "c", "--workload", "w",
            "--date", "2026-11-01"]
    assert cli(*args, store=store).exit_code == 0
    f.write_text("\n".join(lines) + "\n")  # sglang appends to --output-file
    r = cli(*args, store=store)
    assert r.exit_code == 1 and "2 of its records were already ingested" in r.output
    r = cli(*args, "--skip-existing", store=store)
    assert r.exit_code == 0 and "ingested 2 points" in r.output
    r = cli(*args, "--skip-existing", store=store)
    assert r.exit_code == 1 and "already ingested" in r.output
