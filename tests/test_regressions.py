"""Regressions and improvements, and the history's provenance (issue 15).

The scenario: campaign c1 on sglang 0.5.20 (baseline and spec-g within 1%),
campaign c2 on sglang 0.5.23 (the baseline 12% slower at every C, spec-g
unchanged), as sglang.bench_serving files with their server_info
(tests/fixtures/regressions/, made by make_scenario.py). The files measured
the findings emulator, so the workload is ``chat (simulated)`` (D108).
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
from conftest import FIXTURES, HISTORY, ROOT, cli, render_golden

from findings.derive import regressions
from findings import store
from findings.derive.analysis import Cell, Rules, Table, cells
from findings.derive.regressions import DRIFT, IMPROVEMENT, REGRESSION, facts_changed, moves

SCENARIO = FIXTURES / "regressions"
GOLDEN = Path(__file__).resolve().parent / "golden" / "regressions-scenario.md"
DATES = {"c1": "2026-11-02", "c2": "2026-11-16"}


def ingest_scenario(st: Path, campaigns: tuple[str, ...] = ("c1", "c2")) -> None:
    for campaign in campaigns:
        for config in ("baseline", "spec-g"):
            # relative to the checkout, so that the rendered sources do not depend on where it lies
            path = os.path.relpath(SCENARIO / f"{campaign}-{config}.jsonl")
            r = cli("ingest", "sglang-bench", path, "--config", config,
                    "--campaign", campaign, "--workload", "chat", "--date", DATES[campaign], "--create", store=st)
            assert r.exit_code == 0, r.output


def conclusions(st: Path) -> dict:
    r = cli("conclusions", "--json", store=st)
    assert r.exit_code == 0, r.output
    return json.loads(r.output)


def test_engine_upgrade_is_a_baseline_regression_not_a_better_candidate(tmp_path: Path) -> None:
    st = tmp_path / "st"
    ingest_scenario(st)
    doc = conclusions(st)
    assert doc["regressions"] == [{
        "workload": "chat (simulated)", "config": "baseline", "campaign": "c2", "previous_campaign": "c1",
        "direction": "regression", "concurrency": [1, 8, 32], "ratio": 0.88,
        "ratios": {"1": 0.88, "8": 0.88, "32": 0.88}, "band": 0.04,
        "facts_changed": {"sglang_version": ["0.5.20", "0.5.23"]}, "evidence": "a recorded fact changed",
    }]
    spec = doc["workloads"]["chat (simulated)"]["candidates"]["spec-g"]
    # The step left the baseline's drift: spec-g is judged with the floor, not a band of ±12%.
    assert spec["bands"] == {"1": 0.04, "8": 0.04, "32": 0.04}
    assert spec["policy"] == "always-on"
    assert spec["baseline_moved"] == (
        "spec-g's verdicts against baseline changed at C=1, 8 and 32 (tie → win) because baseline moved, "
        "not spec-g: baseline regressed by 12.0% from c1 to c2, with sglang_version 0.5.20 → 0.5.23, while "
        "spec-g stayed within its own band of its c1 figures.")
    c2 = doc["history"][1]
    assert c2["campaign"] == "c2"
    assert c2["provenance"]["baseline"] == {"facts_changed": {"sglang_version": ["0.5.20", "0.5.23"]},
                                            "between": [["c1", "c2"]], "versus": None}
    assert doc["history"][0]["provenance"]["spec-g"]["versus"] == "baseline"
    # the terminal view says it too
    text = cli("conclusions", store=st).output
    assert "note        spec-g's verdicts against baseline changed at C=1, 8 and 32" in text
    assert "regression  baseline: -12.0% at C=1–32 (3 of 3), c1 → c2; sglang_version 0.5.20 → 0.5.23" in text


def test_golden_document_for_the_scenario(tmp_path: Path) -> None:
    project = tmp_path / "project"
    project.mkdir()
    (project / "findings.toml").write_text(
        f'[findings]\ntitle = "Engine upgrade scenario"\nstore = "st"\ntemplates = "{ROOT / "templates"}"\n')
    ingest_scenario(project / "st")
    text = render_golden(project, tmp_path / "doc.md", GOLDEN, "tests/test_regressions.py")
    section = text.split("## Regressions and improvements")[1].split("\n## ")[0]
    assert "| chat (simulated) | baseline | regression -12.0% | C=1–32 (3 of 3) | c1 → c2     | sglang_version 0.5.20 → 0.5.23" \
        in section
    assert "Verdicts that flipped because the baseline moved" in text


def test_seed_history_names_the_new_candidates_differences_and_calls_nothing_a_regression(tmp_path: Path) -> None:
    st = tmp_path / "seed"
    r = cli("ingest", "table", str(HISTORY / "measurements.csv"), "--configs", str(HISTORY / "configs.csv"), "--create",
            store=st)
    assert r.exit_code == 0, r.output
    doc = conclusions(st)
    assert doc["regressions"] == []
    cand = doc["workloads"]["diverse-prompts"]["candidates"]["eagle3-topk1-v2"]
    assert cand["verdicts"]["100"] == cand["verdicts"]["250"] == "tie"
    assert cand["bands"]["250"] == 0.0725  # the baseline's drift at C=250 (772 → 718) still widens it
    overlap = [e for e in doc["history"] if e["campaign"] == "overlap-topk1"][0]
    assert overlap["provenance"]["eagle3-topk1-v2"] == {
        "facts_changed": {"draft_tokens": [16, 3], "eagle_topk": [4, 1], "overlap_schedule": ["no", "yes"],
                          "worker_path": ["EAGLEWorker (v1)", "EAGLEWorkerV2 (spec v2)"]},
        "between": [], "versus": "eagle3-topk4-v1"}
    assert overlap["provenance"]["baseline"]["facts_changed"] == {}


def test_seed_document_history_entry() -> None:
    text = (ROOT / "eagle-fast-verify.md").read_text()
    assert ("  - recorded facts: eagle3-topk1-v2 vs eagle3-topk4-v1: draft_tokens 16 → 3, eagle_topk 4 → 1, "
            "overlap_schedule no → yes, worker_path EAGLEWorker (v1) → EAGLEWorkerV2 (spec v2)") in text
    assert "No regression or improvement found." in text


# ---------------------------------------------------------------- the detector

def cell(config: str, campaign: str, rank: int, c: int, mean: float, values: tuple[float, ...] = ()) -> Cell:
    vals = values or (mean,)
    return Cell(workload="w", campaign=campaign, rank=rank, config=config, concurrency=c, mean=mean,
                lo=min(vals), hi=max(vals), n=len(vals), point_ids=(f"{campaign}/{config}/{c}",), values=vals)


def series(config: str, *campaigns: dict[int, float]) -> list[Cell]:
    return [cell(config, f"k{i}", i, c, v) for i, by_c in enumerate(campaigns) for c, v in by_c.items()]


RULES = Rules()


def no_facts(config: str, campaign: str) -> dict:
    return {}


def test_one_pair_moving_both_ways_is_drift_like_the_seed_baseline() -> None:
    found = moves(series("baseline", {30: 711.0, 100: 761.6, 250: 772.1}, {30: 689.4, 100: 773.1, 250: 718.1}),
                  no_facts, RULES)
    assert [(m.kind, m.reason) for m in found] == [
        (DRIFT, "not consistent across C (moved one way at one C and the other way at another)")]


def test_a_recorded_change_with_a_consistent_move_is_a_step() -> None:
    def facts(config: str, campaign: str) -> dict:
        return {"sglang_version": "0.5.20" if campaign == "k0" else "0.5.23", "tp_size": 8}
    found = moves(series("baseline", {1: 100.0, 8: 400.0, 32: 800.0}, {1: 97.0, 8: 350.0, 32: 700.0}), facts, RULES)
    assert len(found) == 1 and found[0].kind == REGRESSION
    assert found[0].concurrency == (8, 32)  # C=1 moved the same way, within the band
    assert found[0].facts_changed == (("sglang_version", "0.5.20", "0.5.23"),)


def test_without_a_recorded_change_a_step_needs_the_next_campaign_to_hold() -> None:
    one_pair = series("cfg", {1: 100.0, 8: 400.0}, {1: 120.0, 8: 480.0})
    assert [m.kind for m in moves(one_pair, no_facts, RULES)] == [DRIFT]
    held = series("cfg", {1: 100.0, 8: 400.0}, {1: 120.0, 8: 480.0}, {1: 121.0, 8: 478.0})
    found = moves(held, no_facts, RULES)
    assert [(m.kind, m.campaign, m.known_at) for m in found] == [(IMPROVEMENT, "k1", 2)]
    assert regressions.steps(found, upto=1) == [] and len(regressions.steps(found, upto=2)) == 1
    back = series("cfg", {1: 100.0, 8: 400.0}, {1: 120.0, 8: 480.0}, {1: 101.0, 8: 402.0})
    assert [m.kind for m in moves(back, no_facts, RULES)] == [DRIFT, DRIFT]


def test_repeats_inside_campaigns_are_not_evidence_of_a_step() -> None:
    tight = [cell("cfg", "k0", 0, c, v, (v * 0.99, v * 1.01)) for c, v in ((1, 100.0), (8, 400.0))] + \
            [cell("cfg", "k1", 1, c, v, (v * 0.99, v * 1.01)) for c, v in ((1, 70.0), (8, 280.0))]
    assert [m.kind for m in moves(tight, no_facts, RULES)] == [DRIFT]


def test_facts_compared_flag_by_flag_without_ports_or_facts_recorded_once() -> None:
    old = {"launch": "python -m sglang.launch_server --port 30001 --speculative-num-steps 3 --tp 8",
           "sglang_version": "0.5.20", "notes": "first try"}
    new = {"launch": "python -m sglang.launch_server --port 30117 --speculative-num-steps 5 --tp 8 --enable-foo",
           "sglang_version": "0.5.20", "notes": "second", "engine": "SGLang"}
    assert facts_changed(old, new) == (("launch --enable-foo", None, "(set)"),
                                       ("launch --speculative-num-steps", "3", "5"))
    positional = facts_changed({"launch": "python tools/llama_serve.py 41234 none"},
                               {"launch": "python tools/llama_serve.py 39391 draft"})
    assert positional == (("launch arg3", "none", "draft"),)
    assert facts_changed({"tp_size": 8}, {"tp_size": 8.0}) == ()


def test_the_baseline_drift_leaves_out_its_steps() -> None:
    base = series("baseline", {1: 100.0}, {1: 101.0}, {1: 88.0}, {1: 87.0})
    assert Table(base, RULES).drift[1] == pytest.approx((101 - 87) / 94.0)
    stepped = Table(base, RULES, breaks={1: frozenset({2})})
    assert stepped.drift[1] == pytest.approx(1 / 87.5)  # the larger stretch: 88 → 87


# ---------------------------------------------------------------- per-campaign facts

def test_configs_table_with_a_campaign_column_gives_facts_per_campaign(tmp_path: Path) -> None:
    table = tmp_path / "m.csv"
    table.write_text("campaign,date,workload,config,concurrency,output_throughput_tok_s\n"
                     + "".join(f"{c},{d},w,{cfg},{n},{v * f}\n"
                               for c, d, f in (("c1", "2026-11-02", 1.0), ("c2", "2026-11-16", 0.88))
                               for cfg in ("baseline",) for n, v in ((1, 100.0), (8, 400.0))))
    configs = tmp_path / "configs.csv"
    configs.write_text("config,campaign,sglang_version,tp_size\nbaseline,,,8\nbaseline,c1,0.5.20,\n"
                       "baseline,c2,0.5.23,\n")
    st = tmp_path / "st"
    r = cli("ingest", "table", str(table), "--configs", str(configs), "--create", store=st)
    assert r.exit_code == 0, r.output
    run = json.loads(next((st / "runs").glob("*.json")).read_text())
    assert run["schema_version"] == 5
    assert run["campaign_configs"] == {"c1": {"baseline": {"sglang_version": "0.5.20"}},
                                       "c2": {"baseline": {"sglang_version": "0.5.23"}}}
    data = store.load(st)
    assert data.facts_of("baseline", "c1") == {"tp_size": 8, "sglang_version": "0.5.20"}
    assert data.facts_of("baseline", "c2") == {"tp_size": 8, "sglang_version": "0.5.23"}
    found = regressions.analyse(data, RULES, cells(data, RULES))
    assert [(m.config, m.kind, m.facts_changed) for m in found] == [
        ("baseline", REGRESSION, (("sglang_version", "0.5.20", "0.5.23"),))]
    bad = tmp_path / "bad.csv"
    bad.write_text("config,campaign,sglang_version\nbaseline,c9,0.5.23\n")
    r = cli("ingest", "table", str(table), "--configs", str(bad), store=tmp_path / "other")
    assert r.exit_code == 1 and f"{bad}:2: field 'campaign': campaign 'c9' is not in" in r.output


def test_version_2_runs_keep_their_facts_per_campaign(tmp_path: Path) -> None:
    """A v2 run (the committed stores) reads, and its facts hold in each of its campaigns."""
    st = tmp_path / "st"
    ingest_scenario(st, ("c1",))
    for path in (st / "runs").glob("*.json"):
        doc = json.loads(path.read_text())
        doc["schema_version"] = 2
        path.write_text(json.dumps(doc))
    data = store.load(st)
    assert data.runs[0].schema_version == 5
    assert data.facts_of("baseline", "c1")["sglang_version"] == "0.5.20"


# ---------------------------------------------------------------- findings diff

def git(repo: Path, *args: str) -> str:
    env = {**os.environ, "GIT_CONFIG_GLOBAL": os.devnull, "GIT_CONFIG_NOSYSTEM": "1"}
    r = subprocess.run(["git", "-c", "user.name=T", "-c", "user.email=t@e", "-c", "commit.gpgsign=false", *args],
                       cwd=repo, capture_output=True, text=True, timeout=30, env=env)
    assert r.returncode == 0, r.stderr
    return r.stdout.strip()


def test_diff_reports_the_new_regression_between_two_commits(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    (repo / "findings.toml").write_text('[findings]\nstore = "st"\n')
    ingest_scenario(repo / "st", ("c1",))
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "c1")
    ingest_scenario(repo / "st", ("c2",))
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "c2")
    settings = ["--settings", str(repo / "findings.toml")]
    md = cli(*settings, "diff", "HEAD~1").output
    assert "**Regressions and improvements (new)**" in md
    assert ("- `baseline` on `chat (simulated)`: regression -12.0% at C=1–32 (3 of 3), `c1` → `c2`; "
            "recorded: sglang_version 0.5.20 → 0.5.23") in md
    assert "  - spec-g's verdicts against baseline changed at C=1, 8 and 32" in md
    assert "  - recorded facts: baseline: sglang_version 0.5.20 → 0.5.23; spec-g: sglang_version 0.5.20 → 0.5.23" in md
    same = cli(*settings, "diff", "HEAD").output
    assert same.count("\n") == 1 and same.startswith("findings diff: no change against `HEAD`")


def test_facts_between_compares_equal_contents_once_and_tells_types_apart():
    """FactsBetween shares its comparisons between copies of equal facts, but
    True, 1 and 1.0 (or 0.0 and -0.0) are different contents, and a value
    that cannot be hashed is still compared."""
    from findings.derive.regressions import FactsBetween, facts_changed

    facts = {("c", "k1"): {"x": 1, "v": "a"}, ("c", "k2"): {"x": 1, "v": "a"},
             ("c", "k3"): {"x": True, "v": "a"}, ("c", "k4"): {"x": 1.0, "v": "a"},
             ("c", "k5"): {"x": -0.0, "v": "a"}, ("c", "k6"): {"x": 0.0, "v": "a"},
             ("c", "k7"): {"x": [1], "v": "b"}, ("c", "k8"): {"x": [1], "v": "a"}}
    between = FactsBetween(lambda config, campaign: facts[(config, campaign)])
    names = [k for _, k in facts]
    for a in names:
        for b in names:
            for one_sided in (False, True):
                want = facts_changed(facts[("c", a)], facts[("c", b)], one_sided)
                got = between("c", a, "c", b, one_sided)
                assert got == want and [type(v) for change in got for v in change] == \
                    [type(v) for change in want for v in change], (a, b)
    assert between("c", "k1", "c", "k3") == (("x", 1, True),)
    assert between("c", "k5", "c", "k6") == ()
