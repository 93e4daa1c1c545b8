"""llama.cpp's wire format without the engine (`make test`): the runner's
parsing of real captured streams and counters (tests/fixtures/llamacpp/,
from llama-server of llama-cpp-python 0.3.36), and a whole sweep against a
process that speaks that format (tests/llamacpp_double.py). The same checks
against the real engine are `make test-engine` (tests/engine/)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import FIXTURES, cli, run_docs
from findings.bench.metrics import derive, raw_columns
from findings.bench.protocol import Parser
from findings.bench.records import PointOutcome, RequestRecord
from findings.bench.runner import parse_prometheus
from findings.core.serverinfo import props_facts

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
LLAMA = FIXTURES / "llamacpp"


def _feed(api: str, name: str) -> RequestRecord:
    rec = RequestRecord(index=0, input_len=4)
    parser = Parser(api, rec)
    t = 0.0
    for line in (LLAMA / name).read_text(encoding="utf-8").splitlines():
        if not line.startswith("data: ") or line == "data: [DONE]":
            continue
        t += 0.001
        parser.feed(json.loads(line[6:]), t)
    parser.finish(t + 0.001)
    return rec


@pytest.mark.parametrize("api,name", [("openai-completions", "completions-self-draft.sse"),
                                      ("openai-chat", "chat-self-draft.sse")])
def test_real_stream_timings_map_to_meta_info_fields(api: str, name: str) -> None:
    rec = _feed(api, name)
    assert rec.ok, rec.error
    assert rec.output_tokens == 8 == rec.server_output_tokens  # usage.completion_tokens, timings.predicted_n
    assert rec.draft_n is not None and rec.draft_accepted is not None
    assert 0 < rec.draft_accepted <= rec.draft_n
    assert rec.prompt_tokens == (rec.server_prompt_eval or 0) + (rec.cached_tokens or 0)
    assert rec.server_prompt_ms is not None and rec.server_prompt_ms > 0
    assert rec.server_decode_ms is not None and rec.server_decode_ms > 0
    assert rec.events[-1][1] == 8 and rec.finish_reason == "length"
    outcome = PointOutcome(records=(rec,), started=0.0, finished=1.0, planned=1, lag_samples_ms=())
    m = derive(outcome)
    assert m["server_output_tokens"] == 8 and m["token_count_mismatches"] == 0
    assert m["draft_acceptance"] == rec.draft_accepted / rec.draft_n
    cols = raw_columns(outcome)
    assert cols["server_output_tokens"] == [8] and cols["draft_n"] == [rec.draft_n]


def test_real_metrics_counters_over_a_window() -> None:
    after = parse_prometheus((LLAMA / "metrics-self-draft.txt").read_text(encoding="utf-8"))
    assert after is not None
    # Labelled samples are summed: accepted per draft position.
    assert after["llamacpp:spec_decode_num_accepted_tokens_per_pos_total"] > 0
    before = {k: 0.0 for k in after}
    rec = RequestRecord(index=0, input_len=1, sent=0.0, end=2.0, output_tokens=int(after["llamacpp:tokens_predicted_total"]))
    m = derive(PointOutcome(records=(rec,), started=0.0, finished=2.0, planned=1, lag_samples_ms=(),
                            metrics_before=before, metrics_after=after, metrics_window=(10.0, 12.5)))
    assert m["server_generation_tokens"] == after["llamacpp:tokens_predicted_total"]
    assert m["server_metrics_window_s"] == 2.5
    assert m["server_output_throughput_tok_s"] == after["llamacpp:tokens_predicted_total"] / 2.5
    drafted = after["llamacpp:spec_decode_num_draft_tokens_total"]
    accepted = after["llamacpp:spec_decode_num_accepted_tokens_total"]
    steps = after["llamacpp:spec_decode_num_drafts_total"]
    assert m["draft_tokens_metrics"] == drafted
    assert m["draft_acceptance_metrics"] == accepted / drafted
    assert m["accept_length_metrics"] == (accepted + steps) / steps
    assert m["server_prompt_tokens"] == after["llamacpp:prompt_tokens_total"] + after[
        "llamacpp:prompt_tokens_cached_total"]


def test_counters_without_a_window_give_no_throughput() -> None:
    rec = RequestRecord(index=0, input_len=1, sent=0.0, end=1.0, output_tokens=5)
    m = derive(PointOutcome(records=(rec,), started=0.0, finished=1.0, planned=1, lag_samples_ms=(),
                            metrics_before={"llamacpp:tokens_predicted_total": 10.0},
                            metrics_after={"llamacpp:tokens_predicted_total": 15.0}))
    assert m["server_generation_tokens"] == 5 and "server_output_throughput_tok_s" not in m


def test_bad_timings_are_ignored_not_stored() -> None:
    rec = RequestRecord(index=0, input_len=1)
    p = Parser("openai-completions", rec)
    p.feed({"choices": [{"text": "a", "finish_reason": "length"}], "usage": {"completion_tokens": 1},
            "timings": {"predicted_n": -3, "prompt_n": True, "prompt_ms": float("nan"), "predicted_ms": "x",
                        "draft_n": 2, "draft_n_accepted": 5, "cache_n": 1.5}}, 0.1)
    p.finish(0.2)
    assert rec.ok and rec.output_tokens == 1
    assert (rec.server_output_tokens, rec.server_prompt_eval, rec.server_prompt_ms, rec.server_decode_ms,
            rec.draft_n, rec.cached_tokens) == (None, None, None, None, None, None)


def test_props_facts() -> None:
    facts = props_facts({"build_info": "b1-0c1e570", "model_path": "/m/t.gguf", "model_ftype": "all F32",
                         "total_slots": 8, "default_generation_settings": {"n_ctx": 1024},
                         "chat_template": "{{ secret }}"})
    assert facts == {"engine": "llama.cpp", "llamacpp_build": "b1-0c1e570", "model_path": "/m/t.gguf",
                     "dtype": "all F32", "max_running_requests": 8, "context_per_slot": 1024}
    assert props_facts({"total_slots": "8"}) == {"engine": "llama.cpp"}
    spec = [{"id": 0, "speculative": True}, {"id": 1, "speculative": True}]
    assert props_facts({}, spec)["speculative_algorithm"] == "draft-model"
    assert props_facts({}, [{"speculative": False}])["speculative_algorithm"] == "none"
    assert "speculative_algorithm" not in props_facts({}, [{"speculative": "yes"}])
    assert "speculative_algorithm" not in props_facts({}, {"slots": 1})


@pytest.fixture
def double():
    procs = []

    def start(*args: str) -> str:
        p = subprocess.Popen([sys.executable, str(HERE / "llamacpp_double.py"), *args], stdout=subprocess.PIPE,
                             text=True)
        procs.append(p)
        assert p.stdout is not None
        return p.stdout.readline().split("listening on ", 1)[1].strip()

    yield start
    for p in procs:
        p.kill()
        p.wait()


@pytest.mark.parametrize("api", ["openai-completions", "openai-chat"])
def test_sweep_scopes_counters_to_the_point(tmp_path: Path, double, api: str) -> None:
    """Warm-up requests run before the first scrape, so the counters' deltas
    are the point's own requests: tokens and drafts agree exactly, and the
    counters' throughput over the scrape window agrees with the client's."""
    url = double("--accept", "0.5")
    store = tmp_path / "store"
    r = cli("bench", "--url", url, "--config", "spec", "--campaign", "k", "--workload", "w", "--api", api,
            "--concurrency", "1,4", "--num-prompts", "16", "--input-len", "6", "--output-len", "120",
            "--warmup", "3", "--no-progress", "--read-timeout", "10", "--create", store=store)
    assert r.exit_code == 0, r.output
    docs = run_docs(store)
    points = [p for d in docs for p in d["points"]]
    assert len(points) == 2
    for p in points:
        m, req = p["metrics"], p["requests"]
        assert m["completed"] == 16 and m["failed"] == 0
        assert m["total_output_tokens"] == 16 * 120 == m["server_generation_tokens"] == m["server_output_tokens"]
        assert m["token_count_mismatches"] == 0
        assert m["draft_tokens"] == m["draft_tokens_metrics"]
        assert m["draft_acceptance"] == m["draft_acceptance_metrics"]
        assert m["draft_acceptance"] == pytest.approx(0.5, abs=0.05)
        assert m["server_prompt_tokens"] == sum(req["prompt_tokens"])
        # The scrape window holds the client's window plus the scrapes' own
        # round trips (a few ms against at least 0.2 s here).
        assert m["server_metrics_window_s"] >= m["duration"]
        assert abs(m["output_throughput_tok_s"] / m["server_output_throughput_tok_s"] - 1) < 0.05
        # The warm-up met the dropped keep-alive (retried, not failed); from
        # then on each request had a fresh connection, so the point has none.
        assert "reconnects" not in m
    facts = docs[0]["configs"]["spec"]
    assert facts["engine"] == "llama.cpp" and facts["llamacpp_build"] == "b1-double"
    assert facts["max_running_requests"] == 8 and facts["speculative_algorithm"] == "draft-model"


def test_no_speculation_no_draft_figures(tmp_path: Path, double) -> None:
    url = double()
    store = tmp_path / "store"
    r = cli("bench", "--url", url, "--config", "base", "--campaign", "k", "--workload", "w",
            "--api", "openai-completions", "--concurrency", "2", "--num-prompts", "4", "--output-len", "10",
            "--warmup", "1", "--no-progress", "--create", store=store)
    assert r.exit_code == 0, r.output
    [doc] = [json.loads(p.read_text()) for p in (store / "runs").glob("*.json")]
    m = doc["points"][0]["metrics"]
    assert doc["configs"]["base"]["speculative_algorithm"] == "none"
    assert m["server_generation_tokens"] == 40 == m["total_output_tokens"]
    assert not any(k.startswith("draft_") for k in m) and "accept_length_metrics" not in m


def test_the_llamacpp_document_shows_the_agreement(tmp_path: Path, double) -> None:
    """The llama.cpp template over a store measured against the double: the
    plain statement of what it is, and the agreement computed from the store."""
    # The baseline's server does not speculate (its /slots say so: the store
    # refuses a baseline whose facts say it drafts).
    urls = {"baseline": double(), "spec": double("--accept", "0.75")}
    store = tmp_path / "store"
    # A window of about a second per point: the scrape window's few ms of
    # event-loop overhead stay well inside the 5% goal on a loaded machine.
    for config, url in urls.items():
        r = cli("--settings", str(ROOT / "benchmarks" / "llamacpp.findings.toml"), "bench", "--url", url,
                "--config", config, "--campaign", "k", "--workload", "tiny-random", "--api", "openai-completions",
                "--concurrency", "1,2", "--num-prompts", "16", "--output-len", "200", "--warmup", "2",
                "--no-progress", "--create", store=store)
        assert r.exit_code == 0, r.output
    out = tmp_path / "doc.md"
    r = cli("--settings", str(ROOT / "benchmarks" / "llamacpp.findings.toml"), "render", "--output", str(out),
            store=store)
    assert r.exit_code == 0, r.output
    text = out.read_text(encoding="utf-8")
    assert "**A tiny random-weight model on the CPU.**" in text
    assert "SGLang's `--speculative-adaptive`" not in text  # no SGLang deployment hint here
    assert "## Team notes" not in text
    section = text.split("## Server agreement", 1)[1].split("## Conclusion history", 1)[0]
    assert "(goal: within 5%, met)" in section and "exactly equal" in section
    # The acceptance tables carry the stored figures, not typed ones.
    docs = [json.loads(p.read_text()) for p in (store / "runs").glob("*.json")]
    acc = {p["concurrency"]: p["metrics"]["draft_acceptance"] for d in docs for p in d["points"]
           if p["config"] == "spec"}
    table = section.split("| from responses", 1)[1]
    row = next(line for line in table.splitlines() if line.startswith("| spec"))
    assert [f"{acc[c]:.4f}" for c in (1, 2)] == [x.strip() for x in row.strip("|").split("|")[1:]]


def test_pivot_over_and_ratios() -> None:
    from findings.document.pivot import pivot, ratios
    rows = [{"campaign": "k", "workload": "w", "config": c, "concurrency": n,
             "metrics": {"a": a, "b": b}} for c, n, a, b in
            (("x", 1, 101.0, 100.0), ("x", 2, 99.0, 100.0), ("y", 1, 50.0, 0.0))]
    t = pivot(rows, "w", "a", over="b", digits=3)
    assert t.rows == (("x", "1.010", "0.990"), ("y", "—", "—"))
    assert ratios(rows, "w", "a", "b") == [1.01, 0.99]


def test_sampled_every_says_the_points_own_interval() -> None:
    from findings.document.pivot import sampled_every
    def row(c: int, **m: float) -> dict:
        return {"campaign": "k", "workload": "w", "config": "x", "concurrency": c, "metrics": m}
    assert sampled_every([row(1, server_running_samples=3, server_running_interval_s=1.0)], "w") == "every 1 s"
    assert sampled_every([row(1, server_running_samples=3, server_running_interval_s=1.0),
                          row(2, server_running_samples=9)], "w") == \
        "every 1 s or 0.2 s (stored before runs recorded the interval)"
    assert sampled_every([row(1, output_throughput_tok_s=5.0)], "w") == "never (no point read it)"


def test_cached_tokens_from_sglang_meta_info_and_openai_usage() -> None:
    rec = RequestRecord(index=0, input_len=4)
    p = Parser("native", rec)
    p.feed({"text": "a", "meta_info": {"completion_tokens": 1, "prompt_tokens": 9, "cached_tokens": 0}}, 0.1)
    p.feed({"text": "ab", "meta_info": {"completion_tokens": 2, "prompt_tokens": 9, "cached_tokens": 6,
                                        "finish_reason": {"type": "length"}}}, 0.2)
    p.finish(0.3)
    assert rec.ok and rec.cached_tokens == 6 and rec.prompt_tokens == 9
    rec = RequestRecord(index=0, input_len=4)
    p = Parser("openai-completions", rec)
    p.feed({"choices": [{"text": "a", "finish_reason": "length"}],
            "usage": {"completion_tokens": 1, "prompt_tokens": 9, "prompt_tokens_details": {"cached_tokens": 5}}}, 0.1)
    p.finish(0.2)
    assert rec.ok and rec.cached_tokens == 5
    m = derive(PointOutcome(records=(rec,), started=0.0, finished=1.0, planned=1, lag_samples_ms=()))
    assert m["cached_prompt_tokens"] == 5 and "server_output_tokens" not in m
