"""The real tools' request-rate files, imported as a user would (issue 37).

tests/test_real_rate_fixtures.py checks that each file in
tests/fixtures/real_tools/ holds what its logged command asked. Here each is
imported with the command a user types (``findings ingest <format>`` or
``findings ingest auto``), and the stored load axis and numbers are checked
against the file itself, read as plain JSON: the rate, the burstiness, the
concurrency cap, the throughput and the latencies the open-loop verdicts
use. The files measured the findings emulator, so their points are stored
as simulated and analysed apart (D108).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from conftest import cli
from findings import store
from findings.load.spec import DEFAULT_CAP

REAL = Path(__file__).parent / "fixtures" / "real_tools"
LATENCY = ("median_tpot_ms", "p99_ttft_ms", "median_ttft_ms", "p99_tpot_ms")


def records(name: str) -> list[dict[str, Any]]:
    text = (REAL / name).read_text(encoding="utf-8")
    if name.endswith(".jsonl"):
        return [json.loads(x) for x in text.splitlines() if x.strip()]
    return [json.loads(text)]


def ingest(st: Path, fmt: str, name: str, *extra: str, config: str = "baseline", workload: str = "chat"):
    r = cli("ingest", fmt, str(REAL / name), "--config", config, "--campaign", "pub", "--workload", workload,
            "--date", "2026-12-01", "--create", *extra, store=st)
    return r


def ok(r: Any) -> str:
    assert r.exit_code == 0, r.output
    return str(r.output)


def one_line(output: str) -> str:
    text = output.strip()
    assert "\n" not in text, text
    return text


def by_rate(st: Path, config: str = "baseline") -> list[Any]:
    return sorted((p for p in store.load(st).points if p.config == config),
                  key=lambda p: (p.workload, p.workload_params["request_rate"]))


def check_point(p: Any, doc: dict[str, Any], *, cap: int | None, burstiness: float) -> None:
    """One stored open-loop point against the record the tool wrote."""
    assert p.simulated and p.source_file is not None  # imported, from the emulator
    assert p.workload_params["load"] == "rate"
    assert p.workload_params["request_rate"] == float(doc["request_rate"])
    assert p.workload_params["burstiness"] == burstiness
    assert p.workload_params.get("max_concurrency") == cap
    assert p.concurrency == (cap or DEFAULT_CAP)
    assert p.throughput == doc["output_throughput"]
    for key in LATENCY:
        assert p.metrics[key] == doc[key], key
    assert p.metrics["completed"] == doc["completed"]


# ------------------------------------------------------------------ sglang.bench_serving 0.5.23

@pytest.mark.parametrize(("name", "cap"), [("sglang_0_5_23_rate_sweep.jsonl", None),
                                           ("sglang_0_5_23_rate_sweep_mc2.jsonl", 2)])
def test_sglang_rate_sweep(tmp_path: Path, name: str, cap: int | None) -> None:
    st = tmp_path / "st"
    ok(ingest(st, "sglang-bench", name))
    pts = by_rate(st)
    docs = records(name)
    assert [p.workload_params["request_rate"] for p in pts] == [2.0, 4.0, 8.0]
    for p, doc in zip(pts, docs):
        check_point(p, doc, cap=cap, burstiness=1.0)  # bench_serving's arrivals are Poisson; it records none
    text = ok(cli("conclusions", store=st))
    assert "3 open-loop points" in text and "rates 2, 4, 8 req/s" in text


def test_sglang_rate_sweep_given_a_concurrency_is_refused_and_its_suggestion_stores_the_file(
        tmp_path: Path) -> None:
    """The advice that once stored three rates as three repeats at one C."""
    st = tmp_path / "st"
    r = ingest(st, "sglang-bench", "sglang_0_5_23_rate_sweep.jsonl", "--concurrency", "64")
    assert r.exit_code == 1
    assert one_line(r.output).endswith("--concurrency 64 does not apply: the file records request rates 2 to 8 "
                                       "req/s with no concurrency cap (open-loop points on the rate axis); "
                                       "drop --concurrency")
    assert not list(st.glob("runs/*.json"))
    ok(ingest(st, "sglang-bench", "sglang_0_5_23_rate_sweep.jsonl"))  # its suggestion
    for p, doc in zip(by_rate(st), records("sglang_0_5_23_rate_sweep.jsonl")):
        check_point(p, doc, cap=None, burstiness=1.0)


def test_sglang_two_lengths_in_one_file_are_two_workloads(tmp_path: Path) -> None:
    st = tmp_path / "st"
    out = ok(ingest(st, "sglang-bench", "sglang_0_5_23_rate_lens.jsonl"))
    pts = by_rate(st)
    docs = records("sglang_0_5_23_rate_lens.jsonl")
    names = [p.workload for p in pts]
    assert len(set(names)) == 2 and "split by definition into workloads" in out
    for doc in docs:
        (p,) = [p for p in pts if p.workload_params["random_input_len"] == doc["random_input_len"]]
        assert f"in{doc['random_input_len']}" in p.workload and f"out{doc['random_output_len']}" in p.workload
        check_point(p, doc, cap=None, burstiness=1.0)


# ------------------------------------------------------------------ vllm bench serve 0.32.0

@pytest.mark.parametrize(("name", "cap", "burstiness"), [
    ("vllm_0_32_0_rate2.json", None, 1.0), ("vllm_0_32_0_rate8_mc2.json", 2, 1.0),
    ("vllm_0_32_0_rate4_burst0_5.json", None, 0.5)])
def test_vllm_rate_run(tmp_path: Path, name: str, cap: int | None, burstiness: float) -> None:
    st = tmp_path / "st"
    out = ok(ingest(st, "auto", name))
    assert out.startswith("detected format: vllm-bench")
    (p,) = by_rate(st)
    check_point(p, records(name)[0], cap=cap, burstiness=burstiness)


def test_vllm_rate_sweep_baseline_against_eagle3_derives_the_files_verdicts(tmp_path: Path) -> None:
    """Three rates of each config: the verdicts are the files' own median TPOT
    and TTFT p99 ratios against the 4% floor."""
    st = tmp_path / "st"
    for r in (2, 4, 8):
        ok(ingest(st, "vllm-bench", f"vllm_0_32_0_rate{r}.json"))
        ok(ingest(st, "vllm-bench", f"vllm_0_32_0_eagle3_rate{r}.json", config="eagle3-topk1-v2"))
    got = json.loads(ok(cli("conclusions", "--json", store=st)))["workloads"]["chat (simulated)"]
    assert got["load_axis"] == "request_rate" and got["simulated"] is True and got["rates"] == ["2", "4", "8"]
    cand = got["candidates"]["eagle3-topk1-v2"]
    for r in (2, 4, 8):
        base, spec = records(f"vllm_0_32_0_rate{r}.json")[0], records(f"vllm_0_32_0_eagle3_rate{r}.json")[0]
        for key in ("median_tpot_ms", "p99_ttft_ms"):
            ratio = base[key] / spec[key]  # lower is better: > 1 is a win for the candidate
            m = cand["metrics"][str(r)][key]
            assert m["ratio"] == pytest.approx(ratio, abs=1e-4)
            expect = "win" if ratio > 1 + m["band"] else "loss" if ratio < 1 - m["band"] else "tie"
            assert m["verdict"] == expect, (r, key)
        assert cand["verdicts"][str(r)] == "loss"  # TPOT p50 -8.8%, -8.8%, -6.4%: EAGLE-3 loses at every rate
    assert cand["policy"] == "off" and cand["caveats"] == {}  # the emulator's model names are labels, not models


# ------------------------------------------------------------------ AIPerf 0.13.0

@pytest.mark.parametrize(("name", "cap"), [("aiperf_0_13_0_rate4.json", None), ("aiperf_0_13_0_rate4_c2.json", 2)])
def test_aiperf_rate_run(tmp_path: Path, name: str, cap: int | None) -> None:
    st = tmp_path / "st"
    out = ok(ingest(st, "auto", name))
    assert out.startswith("detected format: aiperf")
    (p,) = by_rate(st)
    doc = records(name)[0]
    phase = doc["input_config"]["phases"][0]
    assert (phase["type"], phase["rate"], phase.get("concurrency")) == ("poisson", 4.0, cap)
    assert p.simulated
    assert p.workload_params["load"] == "rate" and p.workload_params["request_rate"] == 4.0
    assert p.workload_params["burstiness"] == 1.0  # poisson
    assert p.workload_params.get("max_concurrency") == cap and p.concurrency == (cap or DEFAULT_CAP)
    assert p.throughput == pytest.approx(doc["output_token_throughput"]["avg"])
    assert p.metrics["p99_ttft_ms"] == pytest.approx(doc["time_to_first_token"]["p99"])
    assert p.metrics["median_ttft_ms"] == pytest.approx(doc["time_to_first_token"]["p50"])
    assert p.metrics["median_tpot_ms"] == pytest.approx(doc["inter_token_latency"]["p50"])
    assert p.metrics["p99_tpot_ms"] == pytest.approx(doc["inter_token_latency"]["p99"])
    assert p.workload_params.get("ignore_eos") is True  # input_config.endpoint.extra: the ⚑ caveat is kept


# ------------------------------------------------------------------ simulated and real never share a store (D108)

def test_an_emulator_measured_file_is_refused_by_a_real_home_store_and_taken_by_a_simulated_one(
        tmp_path: Path) -> None:
    for simulated in (False, True):
        project = tmp_path / f"p{int(simulated)}"
        project.mkdir()
        (project / "findings.toml").write_text(f'[findings]\nstore = "st"\nsimulated = {str(simulated).lower()}\n')
        r = cli("--settings", str(project / "findings.toml"), "ingest", "vllm-bench",
                str(REAL / "vllm_0_32_0_rate2.json"), "--config", "baseline", "--campaign", "pub",
                "--workload", "chat", "--date", "2026-12-01", "--create")
        if simulated:
            ok(r)
            assert store.load(project / "st").points[0].simulated
        else:
            assert r.exit_code == 1
            assert "measured the findings emulator" in one_line(r.output) and "pass --store" in r.output
            assert not (project / "st" / "runs").exists() or not list((project / "st" / "runs").glob("*.json"))
    # A real file (the seed's table) is refused by the simulated store, in one line.
    r = cli("--settings", str(tmp_path / "p1" / "findings.toml"), "ingest", "sglang-bench",
            str(Path(__file__).parent / "fixtures" / "sglang_bench" / "v0_5_23_baseline.jsonl"), "--config",
            "baseline", "--campaign", "real", "--workload", "chat", "--date", "2026-12-01")
    assert r.exit_code == 1 and "store for simulated results only" in one_line(r.output)


# ------------------------------------------------------------------ an SLO from findings.toml (D108)

def _met(doc: dict[str, Any], tpot_ms: float) -> int:
    return sum(1 for f, lat, o, e in zip(doc["ttfts"], doc["latencies"], doc["output_lens"], doc["errors"])
               if not e and (o <= 1 or (lat - f) / (o - 1) * 1000 <= tpot_ms))


def test_findings_toml_slo_applies_to_imports_where_it_can(tmp_path: Path) -> None:
    project = tmp_path / "p"
    project.mkdir()
    (project / "findings.toml").write_text('[findings]\nstore = "st"\nsimulated = true\nslo_tpot_ms = 2.8\n')
    settings = ("--settings", str(project / "findings.toml"))

    def run(fmt: str, name: str, *extra: str) -> str:
        return ok(cli(*settings, "ingest", fmt, str(REAL / name), "--config", "baseline", "--campaign",
                      name.split(".")[0], "--workload", "chat", "--date", "2026-12-01", "--create", *extra))

    out = run("vllm-bench", "vllm_0_32_0_rate2.json")
    assert "findings.toml's SLO (TPOT ≤ 2.8 ms) judged 1 open-loop point" in out
    doc = records("vllm_0_32_0_rate2.json")[0]
    (p,) = store.load(project / "st").points
    assert p.metrics["slo_met"] == _met(doc, 2.8) and 0 < _met(doc, 2.8) < len(doc["ttfts"])
    assert p.metrics["goodput_req_s"] == pytest.approx(_met(doc, 2.8) / doc["duration"])
    assert (p.workload_params["slo_tpot_ms"], p.workload_params["slo_attainment"]) == (2.8, 0.9)
    # A closed-loop file: nothing for the SLO to judge, and no refusal.
    out = run("sglang-bench", "sglang_0_5_23_baseline.jsonl")
    assert "SLO" not in out
    # AIPerf writes no per-request times: imported, and the summary says the SLO could not judge it.
    out = run("aiperf", "aiperf_0_13_0_rate4.json")
    assert "judged 0 open-loop points; 1 had no per-request times" in out
    # The command line wins: its own limit, and the strict rules (D102) with it.
    out = run("vllm-bench", "vllm_0_32_0_rate4.json", "--slo-tpot-ms", "100")
    assert "findings.toml" not in out
    (p4,) = [p for p in store.load(project / "st").points if p.campaign == "vllm_0_32_0_rate4"]
    assert p4.workload_params["slo_tpot_ms"] == 100.0
    r = cli(*settings, "ingest", "aiperf", str(REAL / "aiperf_0_13_0_rate4_c2.json"), "--config", "baseline",
            "--campaign", "x", "--workload", "chat", "--date", "2026-12-01", "--slo-tpot-ms", "3")
    assert r.exit_code == 1 and "an SLO needs per-request times" in one_line(r.output)
