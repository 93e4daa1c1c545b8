"""Open-loop campaigns in the document and in `conclusions --json` (golden):
verdicts on a request-rate axis from latency and goodput, the policy's
threshold as a rate and the running batch measured there, the deploy
settings at that batch, the max sustainable rate, and a day replay per
phase. Also the pure rules behind them (findings/derive/openloop.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from conftest import ROOT, cli, render_golden

from findings import store as store_mod
from findings.derive.analysis import Rules, cells
from findings.derive import openloop as verdicts
from findings.core.model import Campaign, Dataset, Point, Run
from findings.store.schema import SCHEMA_VERSION, point_id

GOLDEN = ROOT / "tests" / "golden" / "open-loop.md"
FACTS = {"baseline": {"speculative_algorithm": "none"},
         "spec": {"speculative_algorithm": "EAGLE3", "speculative_num_steps": 3, "speculative_eagle_topk": 1},
         "spec-adaptive": {"speculative_algorithm": "EAGLE3", "speculative_num_steps": 3,
                           "speculative_eagle_topk": 1}}
SLO = {"slo_ttft_ms": 1000.0, "slo_tpot_ms": 60.0, "slo_attainment": 0.9}

#: (config, rate) -> (median TPOT ms, TTFT p99 ms, SLO share, running batch):
#: speculation makes each user faster while the server is quiet, and costs
#: it (then the SLO) once it is busy; the baseline keeps its SLO one rate
#: longer.
RATES = {
    ("baseline", 1.0): (40.0, 300.0, 1.0, 1.2), ("spec", 1.0): (25.0, 320.0, 1.0, 0.9),
    ("baseline", 2.0): (42.0, 320.0, 1.0, 2.6), ("spec", 2.0): (30.0, 340.0, 0.99, 2.1),
    ("baseline", 4.0): (48.0, 400.0, 0.97, 6.0), ("spec", 4.0): (55.0, 480.0, 0.72, 7.5),
    ("baseline", 8.0): (70.0, 2400.0, 0.40, 20.0), ("spec", 8.0): (90.0, 4100.0, 0.10, 24.0),
}
#: A day: quiet, past the crossover, quiet again (phase -> config -> TPOT, SLO share).
DAY = {1: {"baseline": (40.0, 1.0), "spec": (26.0, 1.0), "spec-adaptive": (26.0, 1.0)},
       2: {"baseline": (50.0, 0.95), "spec": (62.0, 0.55), "spec-adaptive": (50.5, 0.95)},
       3: {"baseline": (41.0, 1.0), "spec": (26.0, 1.0), "spec-adaptive": (27.0, 1.0)}}
PHASES = ((600, 1.0), (600, 4.0), (600, 1.0))


def _rate_metrics(config: str, rate: float, repeat: int) -> dict[str, float]:
    tpot, ttft, share, batch = RATES[(config, rate)]
    wobble = 1 + 0.01 * (repeat - 1.5)  # the repeats differ by 1%
    n = 600.0
    return {"output_throughput_tok_s": rate * 128, "completed": n, "failed": 0.0, "planned": n,
            "median_tpot_ms": tpot * wobble, "p99_tpot_ms": tpot * 1.5 * wobble, "median_ttft_ms": ttft / 3,
            "p99_ttft_ms": ttft * wobble, "offered_rate_req_s": rate * 0.99, "achieved_rate_req_s": rate * 0.99,
            "slo_attainment": share, "goodput_req_s": share * rate * 0.99, "server_running_mean": batch * wobble,
            "send_lateness_p50_ms": 0.01, "send_lateness_p99_ms": 0.4, "inflight_mean": batch,
            **({"accept_length": 2.4} if config != "baseline" else {})}


def _day_metrics(config: str) -> dict[str, float]:
    m: dict[str, float] = {"output_throughput_tok_s": 256.0, "completed": 3600.0, "failed": 0.0,
                           "planned": 3600.0, "duration": 1800.0, "offered_rate_req_s": 2.0,
                           **({"accept_length": 2.4} if config != "baseline" else {})}
    met = 0.0
    for i, (secs, rate) in enumerate(PHASES, start=1):
        tpot, share = DAY[i][config]
        n = secs * rate
        met += share * n
        m.update({f"phase.{i}.requests": n, f"phase.{i}.duration": float(secs),
                  f"phase.{i}.offered_rate_req_s": rate, f"phase.{i}.completed": n,
                  f"phase.{i}.median_tpot_ms": tpot, f"phase.{i}.p99_tpot_ms": tpot * 1.4,
                  f"phase.{i}.median_ttft_ms": 100.0 * rate, f"phase.{i}.p99_ttft_ms": 300.0 * rate,
                  f"phase.{i}.output_throughput_tok_s": rate * 128, f"phase.{i}.slo_attainment": share,
                  f"phase.{i}.goodput_req_s": share * rate, f"phase.{i}.server_running_mean": rate * 1.5})
    m.update({"median_tpot_ms": sum(DAY[i][config][0] * PHASES[i - 1][0] * PHASES[i - 1][1] for i in DAY) / 3600,
              "p99_ttft_ms": 1200.0, "slo_attainment": met / 3600, "goodput_req_s": met / 1800})
    return m


def _point(rid: str, config: str, workload: str, metrics: dict[str, float], params: dict) -> Run:
    point = Point(id=point_id(rid, 0), run_id=rid, campaign="open", config=config, workload=workload,
                  concurrency=512, metrics=metrics, source="runner", source_file=None, source_line=None,
                  workload_params=params)
    return Run(schema_version=SCHEMA_VERSION, run_id=rid, source="runner", importer="findings-bench",
               importer_version="1", tool_version="test", created_at="2026-12-01T00:00:00Z", source_file=None,
               source_sha256=f"{abs(hash(rid)):064x}"[:64], environment={},
               campaigns=(Campaign("open", "2026-12-01", 1),), configs={config: FACTS[config]}, points=(point,))


def build_store(path: Path) -> None:
    base = {"prompts": "diverse", "input_len": 256, "output_len": 128, "seed": 1, "ignore_eos": False,
            "burstiness": 1.0, **SLO}
    i = 0
    for (config, rate) in RATES:
        for repeat in (1, 2):
            store_mod.add_run(path, _point(f"rate-{i:02d}", config, "chat-open", _rate_metrics(config, rate, repeat),
                                           {**base, "load": "rate", "request_rate": rate}), create=True)
            i += 1
    for config in ("baseline", "spec", "spec-adaptive"):
        store_mod.add_run(path, _point(f"day-{config}", config, "chat-day", _day_metrics(config),
                                       {**base, "load": "profile", "profile": "600s@1,600s@4,600s@1"}))


def _data() -> Dataset:
    runs = [_point(f"rate-{i}", c, "w", _rate_metrics(c, r, 1 + i % 2), {"load": "rate", "request_rate": r,
                                                                        **SLO})
            for i, (c, r) in enumerate([k for k in RATES for _ in (1, 2)])]
    return Dataset(campaigns=(Campaign("open", "2026-12-01", 1),), points=tuple(r.points[0] for r in runs),
                   configs=FACTS)


def test_rate_axis_policy_threshold_and_batch():
    oc, = verdicts.conclude(_data(), Rules(), {})
    cand, = oc.candidates
    assert [v.verdict for v in cand.verdicts] == ["win", "win", "loss", "loss"]
    # From 4 req/s speculation also loses goodput under the SLO, which decides.
    assert [v.decided_by for v in cand.verdicts] == ["median_tpot_ms", "median_tpot_ms", "goodput_req_s",
                                                     "goodput_req_s"]
    assert (cand.policy, cand.threshold_rate) == ("on-below", 2.0)
    assert cand.threshold_batch == pytest.approx(2.1)  # spec's measured running batch at 2 req/s
    sus = {s.config: (s.rate, s.failed_at) for s in oc.sustained}
    assert sus == {"baseline": (4.0, 8.0), "spec": (2.0, 4.0)}


def test_open_loop_points_never_enter_throughput_verdicts():
    assert cells(_data(), Rules()) == []


def test_golden_document_for_open_loop(project, tmp_path):
    build_store(project / "benchmarks" / "results")
    text = render_golden(project, tmp_path / "doc.md", GOLDEN, "tests/test_load_render.py")
    assert "`spec`: **on-below** (threshold 2 req/s; spec's server ran 2.10 requests there" in text
    assert "**Deploy `spec`** (on-below, threshold running batch 2 (at 2 req/s)" in text
    assert '{"1": {"candidate_steps": [3]}, "3": {"candidate_steps": [0]}}' in text
    assert "`baseline` sustains 4 req/s, not 8 req/s (40% met the SLO there, needed 90%)" in text
    assert "Over the whole replay, `spec-adaptive` beats or ties every other config" in text
    # No throughput verdict is drawn from open-loop points.
    assert "### Workload `chat-open`" not in text


def test_conclusions_json_gives_each_verdicts_load_axis(project):
    build_store(project / "benchmarks" / "results")
    r = cli("--settings", str(project / "findings.toml"), "conclusions", "--json")
    assert r.exit_code == 0, r.output
    w = json.loads(r.output)["workloads"]
    assert w["chat-open"]["load_axis"] == "request_rate"
    spec = w["chat-open"]["candidates"]["spec"]
    assert spec["policy"] == "on-below" and spec["threshold"] == 2.0
    assert spec["threshold_running_batch"] == pytest.approx(2.1)
    assert spec["verdicts"] == {"1": "win", "2": "win", "4": "loss", "8": "loss"}
    assert spec["metrics"]["8"]["goodput_req_s"]["verdict"] == "loss"
    assert w["chat-open"]["sustained"]["baseline"] == {"rate": 4.0, "failed_at": 8.0, "attainment":
                                                        {"1": 1.0, "2": 1.0, "4": 0.97, "8": 0.4}}
    assert w["chat-day"]["replay"]["best"] == "spec-adaptive"
    r = cli("--settings", str(project / "findings.toml"), "deploy", "--json", "--engine", "vllm")
    d = json.loads(r.output)["workloads"]["chat-open"]["spec"]
    assert d["load_axis"] == "request_rate" and d["threshold_rate"] == 2.0 and d["threshold"] == 2
    assert d["vllm"]["speculative_config"]["num_speculative_tokens_per_batch_size"] == [[1, 2, 3], [3, 3, 0]]


def test_goodput_where_the_baseline_has_none_is_a_win():
    rules = Rules()
    cell = lambda config, good: verdicts.RateCell("w", "c", 0, config, 8.0, 1, (config,),  # noqa: E731
                                                  {"goodput_req_s": (good,)})
    win = verdicts.compare_cells(cell("spec", 2.0), cell("baseline", 0.0), "goodput_req_s", rules, 0.0, True)
    tie = verdicts.compare_cells(cell("spec", 0.0), cell("baseline", 0.0), "goodput_req_s", rules, 0.0, True)
    loss = verdicts.compare_cells(cell("spec", 0.0), cell("baseline", 2.0), "goodput_req_s", rules, 0.0, True)
    assert (win.verdict, tie.verdict, loss.verdict) == ("win", "tie", "loss")
