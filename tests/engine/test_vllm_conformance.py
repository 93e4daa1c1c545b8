"""Runner conformance against vLLM on the CPU, with real speculation (issue 14).
`make test-engine` only (FINDINGS_ENGINE=1), beside llama.cpp's.

One launch-mode matrix through the real CLI in a subprocess, the tiny
random-weight Llama of tools/vllm_serve.py: `baseline`, `spec` (n-gram
speculation, k = 8) and `sched`, n-gram speculation with a per-batch-size
schedule that drafts up to a running batch of 3 and not from 4 on
(`num_speculative_tokens_per_batch_size` [[1,3,8],[4,4,0]]), at C = 1 and 8,
`openai-completions`. Every stored point is checked against vLLM's own
`/metrics` counters over the point (scraped after the warm-up and after the
last request):

- tokens: the client's (each response's usage) against
  `vllm:generation_tokens_total`, exactly; prompt tokens against
  `vllm:prompt_tokens_total`;
- throughput: the client's against the counters over the same window, within 5%;
- acceptance: the accepted tokens per draft position add up to the accepted
  total, the acceptance length is 1 + accepted / drafts, and n-gram drafts on
  the looping model are accepted (length above 2);
- the schedule: `sched` drafts at C=1 as much as `spec` does, and at C=8
  near zero: at most a tenth of what `spec` drafts at C=8. Not exactly zero:
  a closed loop's last requests finish one by one, and once fewer than 4 are
  running the schedule drafts again, as it should. How much depends on how
  spread out the requests ran (one run in six drafted 52 tokens against
  `spec`'s 1,007, with the machine busy; the others drafted none);
- the facts: engine vLLM, its version, and the speculative config as launched.

The figures are also written to build/engine/vllm-conformance.md.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from conftest import ENGINE_TRANSPORT, run_docs

pytestmark = pytest.mark.skipif(os.environ.get("FINDINGS_ENGINE") != "1",
                                reason="the real vLLM engine tier: run `make test-engine`")

ROOT = Path(__file__).resolve().parents[2]
CONFIGS = ("baseline", "spec", "sched")
CONCURRENCY = (1, 8)
OUTPUT_LEN = 64
PROMPTS = 16
SCHEDULE = [[1, 3, 8], [4, 4, 0]]
SCHED_JSON = json.dumps({"method": "ngram", "num_speculative_tokens": 8, "prompt_lookup_max": 4,
                         "prompt_lookup_min": 2, "num_speculative_tokens_per_batch_size": SCHEDULE},
                        separators=(",", ":"))
SUMMARY = ROOT / "build" / "engine" / "vllm-conformance.md"

MATRIX = f"""
[defaults]
transport = "{ENGINE_TRANSPORT}"
api = "openai-completions"
concurrency = {list(CONCURRENCY)}
warmup = 2
health_timeout_s = 1200
read_timeout_s = 120

[workloads.tiny-loop]
prompts = "diverse"
input_len = 32
output_len = {OUTPUT_LEN}
num_prompts = {PROMPTS}

[configs.baseline]
launch = "{{python}} tools/vllm_serve.py {{port}} none"

[configs.spec]
launch = "{{python}} tools/vllm_serve.py {{port}} ngram"

[configs.sched]
launch = '''{{python}} tools/vllm_serve.py {{port}} none --speculative-config '{SCHED_JSON}' '''

[[campaigns]]
name = "vllm-conformance"
configs = {list(CONFIGS)}
"""

Points = dict[tuple[str, int], dict[str, Any]]


@pytest.fixture(scope="module")
def sweep(tmp_path_factory: pytest.TempPathFactory) -> Points:
    tmp = tmp_path_factory.mktemp("vllm")
    matrix = tmp / "conformance.toml"
    matrix.write_text(MATRIX, encoding="utf-8")
    store = tmp / "store"
    r = subprocess.run([sys.executable, "-m", "findings", "--settings", "benchmarks/vllm.findings.toml",
                        "--store", str(store), "bench", str(matrix), "--no-progress", "--log-dir", str(tmp / "logs"),
                        "--create"],
                       cwd=ROOT, text=True, capture_output=True, timeout=3600)
    print(r.stdout, r.stderr)
    assert r.returncode == 0, r.stderr[-3000:]
    points: Points = {}
    for doc in run_docs(store):
        for p in doc["points"]:
            points[(p["config"], p["concurrency"])] = {**p, "facts": doc["configs"][p["config"]]}
    _write_summary(points)
    return points


def _ratio(m: dict[str, float]) -> float:
    return m["output_throughput_tok_s"] / m["server_output_throughput_tok_s"]


def _write_summary(points: Points) -> None:
    lines = ["# vLLM conformance (make test-engine)", "", f"Measured with the {ENGINE_TRANSPORT} transport.", "",
             "| config | C | tokens client / counters | tok/s client | tok/s counters | ratio | drafted | "
             "accepted | accept length | batch p90 |", "|---|---|---|---|---|---|---|---|---|---|"]
    for (config, c), p in sorted(points.items()):
        m = p["metrics"]
        lines.append(f"| {config} | {c} | {int(m['total_output_tokens'])} / {int(m.get('server_generation_tokens', 0))} "
                     f"| {m['output_throughput_tok_s']:.1f} | {m.get('server_output_throughput_tok_s', 0):.1f} | "
                     f"{_ratio(m):.4f} | {int(m.get('draft_tokens_metrics', 0))} | "
                     f"{int(m.get('draft_accepted_tokens_metrics', 0))} | {m.get('accept_length_metrics', 0):.2f} | "
                     f"{m.get('server_running_p90', 0):g} |")
    SUMMARY.parent.mkdir(parents=True, exist_ok=True)
    SUMMARY.write_text("\n".join(lines) + "\n", encoding="utf-8")


def test_every_point_was_measured(sweep: Points) -> None:
    assert set(sweep) == {(c, n) for c in CONFIGS for n in CONCURRENCY}
    for key, p in sweep.items():
        m = p["metrics"]
        assert m["completed"] == m["planned"] == PROMPTS and m["failed"] == 0, key
        assert p["requests"]["output_len"] == [OUTPUT_LEN] * PROMPTS, key  # ignore_eos kept lengths fixed


def test_tokens_match_the_counters_exactly(sweep: Points) -> None:
    for key, p in sweep.items():
        m = p["metrics"]
        assert m["server_generation_tokens"] == m["total_output_tokens"] == PROMPTS * OUTPUT_LEN, key
        assert m["server_prompt_tokens"] == sum(p["requests"]["prompt_tokens"]), key


def test_throughput_agrees_with_the_counters(sweep: Points) -> None:
    for key, p in sweep.items():
        m = p["metrics"]
        assert m["server_metrics_window_s"] >= m["duration"], key
        assert abs(_ratio(m) - 1) <= 0.05, (key, _ratio(m))


def test_acceptance_from_the_counters(sweep: Points) -> None:
    for (config, c), p in sweep.items():
        m = p["metrics"]
        if config == "baseline":
            assert "draft_tokens_metrics" not in m, c  # no spec_decode counters without speculation
            continue
        if config == "sched" and c >= 4:
            continue
        assert m["draft_tokens_metrics"] > 0 and m["spec_drafts_metrics"] > 0, (config, c)
        per_pos = sum(v for k, v in m.items() if k.startswith("spec_acceptance_pos"))
        assert per_pos * m["spec_drafts_metrics"] == pytest.approx(m["draft_accepted_tokens_metrics"]), (config, c)
        assert m["accept_length_metrics"] == pytest.approx(
            1 + m["draft_accepted_tokens_metrics"] / m["spec_drafts_metrics"]), (config, c)
        assert m["accept_length_metrics"] > 2, (config, c)  # the looping model's n-grams are accepted


def test_the_schedule_stops_drafting_at_its_threshold(sweep: Points) -> None:
    low, high = sweep[("sched", 1)]["metrics"], sweep[("sched", 8)]["metrics"]
    full = sweep[("spec", 8)]["metrics"]  # the same speculation without a schedule, at the same C
    assert low["draft_tokens_metrics"] == sweep[("spec", 1)]["metrics"]["draft_tokens_metrics"] > 0
    # K = 0 from a running batch of 4: only a point's ragged tail (fewer than 4 left running) drafts
    assert high["draft_tokens_metrics"] <= 0.1 * full["draft_tokens_metrics"], (high, full)
    assert high["spec_drafts_metrics"] <= 0.1 * full["spec_drafts_metrics"], (high, full)
    assert high["server_running_p90"] >= 4  # the batch did reach the range where K = 0


def test_configs_record_vllm_and_the_speculative_config_as_launched(sweep: Points) -> None:
    for (config, c), p in sweep.items():
        f = p["facts"]
        assert f["engine"] == "vLLM" and f["vllm_version"].startswith("0.32"), (config, f)
        assert f["max_running_requests"] == 64 and f["dtype"] == "float32", (config, f)
        if config == "baseline":
            assert f["speculative_algorithm"] == "none"
        else:
            assert f["speculative_algorithm"] == "ngram" and f["num_speculative_tokens"] == 8
        if config == "sched":
            assert json.loads(f["num_speculative_tokens_per_batch_size"]) == SCHEDULE
