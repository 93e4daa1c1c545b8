"""`findings plan` (issue 36): it never proposes a C already measured for the
configs a question compares, and ``plan --output`` writes a runnable matrix
for runs made with ``findings bench --url`` (from the options each such run
records)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Iterator

import pytest
from conftest import cli
from test_bench_e2e import start_emulator

from findings.bench.matrix import parse
from findings.decide import plan

BASE = {1: 100, 2: 190, 4: 350, 8: 600, 16: 900}
RATIO = {1: 1.25, 2: 1.12, 4: 1.01, 8: 0.9, 16: 0.8}


def test_threshold_never_proposes_a_c_measured_for_both(tmp_path: Path) -> None:
    """The seen bug: the crossover's bracket held a C of the grid measured for
    both configs (here C=4, inside 3.3-5.5), and plan proposed it again."""
    rows = ["campaign,date,workload,config,concurrency,output_throughput_tok_s"]
    for c, tput in BASE.items():
        rows += [f"c1,2026-11-01,w,baseline,{c},{tput}", f"c1,2026-11-01,w,spec,{c},{tput * RATIO[c]:.1f}"]
    table = tmp_path / "m.csv"
    table.write_text("\n".join(rows) + "\n")
    st = tmp_path / "st"
    assert cli("ingest", "table", str(table), "--create", store=st).exit_code == 0
    x = json.loads(cli("conclusions", "--json", store=st).output)["workloads"]["w"]["candidates"]["spec"]["crossover"]
    assert (x["low"], x["high"]) == (3.3, 5.5)
    r = cli("plan", "--kind", "threshold", store=st)
    assert r.exit_code == 0, r.output
    line = [ln for ln in r.output.splitlines() if ln.startswith("- threshold:")]
    assert line == [line[0]] and line[0].startswith("- threshold: spec on w at C=5 (1 repeat, with baseline, spec)")
    for q in json.loads(cli("plan", "--json", store=st).output)["questions"]:
        if q["kind"] in ("threshold", "missing-pair"):  # (repeats of an undecided C are another matter)
            assert not set(q["concurrency"]) & set(BASE), q  # every C of the grid is measured for both


def test_bracket_points_skip_what_is_measured_for_both() -> None:
    grid = [1, 2, 4, 8, 16]
    assert plan.bracket_points(3, 6, grid) == [4]  # before: the grid's own C, measured for both
    assert plan.bracket_points(3, 6, grid, taken=grid) == [5]
    assert plan.bracket_points(1, 11, grid, taken=grid) == [3, 5, 6]  # a range of 1.2-10.6: never C=4
    assert plan.bracket_points(1, 11, grid, taken=[1, 2, 4]) == [8]  # the baseline's grid the candidate lacks
    assert plan.bracket_points(1, 3, grid, taken=grid) == []  # nothing left inside: no question


@pytest.fixture
def servers() -> Iterator[dict[str, str]]:
    procs = {name: start_emulator("--profile", profile, "--speed", "25")
             for name, profile in (("baseline", "baseline"), ("spec", "eagle3-topk1-v2"))}
    yield {name: url for name, (_, url) in procs.items()}
    for proc, _ in procs.values():
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()


def attach(store: Path, url: str, config: str, concurrency: str, *extra: str) -> None:
    r = cli("bench", "--url", url, "--config", config, "--campaign", "c1", "--workload", "w", "--concurrency",
            concurrency, "--num-prompts", "4", "--input-len", "16", "--output-len", "12", "--warmup", "0",
            "--date", "2026-12-01", "--no-progress", "--create", *extra, store=store)
    assert r.exit_code == 0, r.output


def test_plan_output_for_bench_url_runs(tmp_path: Path, servers: dict[str, str]) -> None:
    st = tmp_path / "st"
    attach(st, servers["baseline"], "baseline", "1,2,4", "--api", "openai-completions", "--seed", "7")
    attach(st, servers["spec"], "spec", "1,2", "--api", "openai-completions", "--seed", "7")
    out = tmp_path / "plan.toml"
    r = cli("plan", "--kind", "missing-pair", "--output", str(out), store=st)
    assert r.exit_code == 0, r.output
    assert r.output.splitlines()[-1] == f"matrix written to {out}"
    text = out.read_text()
    assert "the options of the `findings bench --url` runs that measured these configs" in text
    m = parse(str(out), text)  # the matrix loader takes it as is
    assert {n: c.url for n, c in m.configs.items()} == servers  # each config attached at its recorded URL
    w = m.workloads["w"]
    assert (w.kind, w.input_len, w.output_len, w.num_prompts, w.seed) == ("diverse", 16, 12, 4, 7)
    [campaign] = m.campaigns
    assert (campaign.configs, campaign.workloads, campaign.sweep.concurrency, campaign.sweep.api) == \
        (("baseline", "spec"), ("w",), (4,), "openai-completions")
    # and findings bench runs it: the missing pair is measured, for both configs
    r = cli("bench", str(out), "--no-progress", "--date", "2026-12-01", store=st)
    assert r.exit_code == 0, r.output
    assert r.output.splitlines()[-1] == "stored 2 points"
    r = cli("plan", "--kind", "missing-pair", store=st)
    assert r.exit_code == 0 and r.output.strip() == "no open question: nothing to measure", r.output


def test_plan_output_refuses_an_import_in_one_line(tmp_path: Path) -> None:
    rows = ["campaign,date,workload,config,concurrency,output_throughput_tok_s",
            "c1,2026-11-01,w,baseline,1,100", "c1,2026-11-01,w,baseline,2,190", "c1,2026-11-01,w,spec,1,120"]
    table = tmp_path / "m.csv"
    table.write_text("\n".join(rows) + "\n")
    st = tmp_path / "st"
    assert cli("ingest", "table", str(table), "--create", store=st).exit_code == 0
    r = cli("plan", "--output", str(tmp_path / "p.toml"), store=st)
    assert r.exit_code == 1
    assert r.output.strip().splitlines() == [
        f"Error: --output {tmp_path / 'p.toml'}: no matrix to write: no run of these configs records the matrix "
        f"(or the `bench --url` options) that measured it (an import): pass --from-matrix"]


def test_the_recorded_matrix_loads_back_as_the_command_line(monkeypatch: pytest.MonkeyPatch) -> None:
    """What a `bench --url` run records (provenance bench_matrix) is the same
    workload and sweep again: a prompt file and a trace by absolute path, an
    open loop's keys, the sweep's settings."""
    from conftest import ROOT

    from findings.bench.matrix import Sweep, attach_load, attach_matrix_toml, attach_workload

    monkeypatch.chdir(ROOT / "benchmarks")
    load = attach_load(request_rate="1,2", burstiness="inf", max_concurrency=8, duration_s=None, load_profile=None,
                       trace=None, time_scale=None, block_size=None, slo_ttft_ms=500.0, slo_tpot_ms=None,
                       slo_attainment=None, rate_search=1)
    w = attach_workload("chat", api="openai-completions", prompts=None, dataset="datasets/chat-mix.jsonl",
                        input_len=256, output_len=64, num_prompts=8, seed=3, ignore_eos=None, split_by=None,
                        max_turns=None, vocab_size=None, load=load)
    sweep = Sweep(api="openai-completions", transport="httpx", concurrency=(1, 4), repeats=2, warmup=0,
                  read_timeout_s=30.0, flush_cache=False, running_sample_s=0.0)
    text = attach_matrix_toml("http://127.0.0.1:1", "spec", "c1", w, sweep)
    assert text is not None
    monkeypatch.chdir("/")
    m = parse("recorded", text)
    again = m.workloads["chat"]
    assert again == w and again.prompt_set is not None and again.prompt_set.sha256 == w.prompt_set.sha256
    assert again.load == w.load and m.campaigns[0].sweep == sweep and m.configs["spec"].url == "http://127.0.0.1:1"
