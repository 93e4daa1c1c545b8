"""Issue 26's guard rails: a wrong label, a mistyped path or a killed job
never silently changes a conclusion or passes a CI gate green."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import findings
from findings.core.errors import NotAStoreError
from conftest import HISTORY, ROOT, cli

READERS = [
    ("conclusions",),
    ("conclusions", "--json"),
    ("plan",),
    ("deploy",),
    ("export",),
    ("render", "--output", "-"),
    ("store", "check"),
]


@pytest.mark.parametrize("argv", READERS, ids=lambda a: " ".join(a))
def test_a_typod_store_exits_2_for_every_reader(tmp_path, argv):
    r = cli(*argv, store=tmp_path / "results-typo")
    assert r.exit_code == 2, r.output
    assert r.output.strip().splitlines() == [
        f"Error: {tmp_path / 'results-typo'}: not a findings store (no such folder); "
        "check --store, $FINDINGS_STORE or findings.toml"]


def test_a_folder_without_runs_is_not_a_store_and_an_empty_store_is_no_points(tmp_path):
    (tmp_path / "plain").mkdir()
    r = cli("conclusions", store=tmp_path / "plain")
    assert r.exit_code == 2 and "not a findings store (no runs/ folder)" in r.output
    (tmp_path / "empty" / "runs").mkdir(parents=True)
    r = cli("conclusions", store=tmp_path / "empty")
    assert r.exit_code == 0 and r.output.strip() == "no points in the store"


def test_frame_refuses_a_typod_store(tmp_path):
    pytest.importorskip("pandas")
    with pytest.raises(NotAStoreError, match="not a findings store"):
        findings.frame(tmp_path / "results-typo")
    with pytest.raises(NotAStoreError, match="not a findings store"):
        findings.conclusions(tmp_path / "results-typo")


def test_diff_refuses_a_typod_store(tmp_path):
    repo = tmp_path / "repo"
    repo.mkdir()
    subprocess.run(["git", "init", "-q", "-b", "main", str(repo)], check=True)
    (repo / "findings.toml").write_text('store = "results"\n')
    subprocess.run(["git", "-C", str(repo), "add", "."], check=True)
    subprocess.run(["git", "-C", str(repo), "-c", "user.email=t@t", "-c", "user.name=t", "commit", "-qm", "x"],
                   check=True)
    r = subprocess.run([sys.executable, "-m", "findings", "--store", str(repo / "results-typo"), "diff", "main"],
                       cwd=repo, capture_output=True, text=True)
    assert r.returncode == 2, r.stderr
    assert "not a findings store" in r.stderr and r.stderr.count("\n") == 1


def test_global_options_after_the_command(tmp_path):
    store = tmp_path / "st"
    r = cli("ingest", "table", str(HISTORY / "measurements.csv"), "--configs", str(HISTORY / "configs.csv"),
            "--create", "--store", str(store))
    assert r.exit_code == 0, r.output
    assert (store / "runs").is_dir()
    before = cli("--store", str(store), "conclusions", "--json").output
    after = cli("conclusions", "--json", "--store", str(store)).output
    assert before == after and '"policy"' in after
    # the one after the command wins
    r = cli("conclusions", "--store", str(tmp_path / "nope"), store=store)
    assert r.exit_code == 2
    r = cli("conclusions", "--baseline", "eagle3-topk4-v1", "--json", store=store)
    assert '"baseline": "eagle3-topk4-v1"' in r.output


SGL = Path(__file__).resolve().parent / "fixtures" / "sglang_bench"
VLLM = Path(__file__).resolve().parent / "fixtures" / "vllm_bench"


def _ingest(store, fmt, file, config, campaign, workload, date="2026-01-01", *extra):
    return cli("ingest", fmt, str(file), "--config", config, "--campaign", campaign, "--workload", workload,
               "--date", date, "--create", *extra, store=store)


def test_a_workload_redefinition_is_refused_naming_the_key(tmp_path):
    st = tmp_path / "st"
    assert _ingest(st, "sglang-bench", SGL / "v0_5_23_baseline.jsonl", "baseline", "c1", "W").exit_code == 0
    short = tmp_path / "short.jsonl"
    short.write_text((SGL / "v0_5_23_baseline.jsonl").read_text().replace('"random_input_len": 1024',
                                                                          '"random_input_len": 64'))
    r = _ingest(st, "sglang-bench", short, "baseline", "c2", "W", "2026-01-02")
    assert r.exit_code == 1
    assert "workload 'W': input_len=64 here, input_len=1024 in run sglang-bench-" in r.output
    assert "--workload NEW" in r.output and "--allow-workload-change" in r.output
    assert len(list((st / "runs").glob("*.json"))) == 1
    # a new name, or the explicit flag, proceeds; the flag moves the definition on
    assert _ingest(st, "sglang-bench", short, "baseline", "c2", "W-short", "2026-01-02").exit_code == 0
    r = cli("store", "retract", next(p.stem for p in (st / "runs").glob("*.json") if "d0cb" not in p.stem),
            "--why", "test", store=st)
    assert r.exit_code == 0, r.output
    r = _ingest(st, "sglang-bench", short, "baseline", "c2", "W", "2026-01-02", "--allow-workload-change")
    assert r.exit_code == 0, r.output
    longer = tmp_path / "long.jsonl"
    longer.write_text((SGL / "v0_5_23_baseline.jsonl").read_text().replace('"random_output_len": 512',
                                                                           '"random_output_len": 500'))
    r = _ingest(st, "sglang-bench", longer, "baseline", "c3", "W", "2026-01-03")
    # Compared with the definition stored last, with --allow-workload-change (64/512): runs are
    # stamped to the microsecond, so two written within one second no longer tie (the tie fell to
    # the run ids' order, and this check named the first definition now and then).
    assert r.exit_code == 1 and "input_len=1024 and output_len=500 here, input_len=64 and output_len=512" \
        in r.output
    assert r.output.count("workload 'W'") == 1  # one phrase per workload (issue 37)
    # the name now pools two definitions, as allowed: store check says so (a warning, not an error)
    r = cli("store", "check", store=st)
    assert r.exit_code == 0 and "workload 'W': input_len=" in r.output  # (runs of one second: either order)
    assert "0 errors, 1 warnings" in r.output and "findings store relabel" in r.output


def test_one_file_defining_a_workload_twice_is_split_by_definition(tmp_path):
    """Issue 37 (D98): sglang.bench_serving appends every run to one file, so
    a file with two lengths holds two workloads; once refused."""
    lines = (SGL / "v0_5_23_baseline.jsonl").read_text().splitlines()
    mixed = tmp_path / "mixed.jsonl"
    mixed.write_text(lines[0] + "\n" + lines[1].replace('"random_input_len": 1024', '"random_input_len": 64') + "\n")
    r = _ingest(tmp_path / "st", "sglang-bench", mixed, "baseline", "c1", "W")
    assert r.exit_code == 0 and "split by definition into workloads: W-in1024, W-in64" in r.output


def test_a_baseline_that_speculates_by_its_facts_is_refused(tmp_path):
    st = tmp_path / "st"
    r = _ingest(st, "sglang-bench", SGL / "v0_5_23.jsonl", "baseline", "c1", "W")
    assert r.exit_code == 1
    assert "config 'baseline' is the baseline, but its recorded facts in campaign 'c1' say " \
           "speculative_algorithm=EAGLE3" in r.output
    assert not (st / "runs").exists() or not list((st / "runs").glob("*.json"))
    # the same file under its own name is stored; another configured baseline is checked instead
    assert _ingest(st, "sglang-bench", SGL / "v0_5_23.jsonl", "eagle3", "c1", "W").exit_code == 0
    r = cli("--baseline", "eagle3b", "ingest", "sglang-bench", str(SGL / "v0_5_23.jsonl"), "--config", "eagle3b",
            "--campaign", "c9", "--workload", "W", "--date", "2026-01-09", store=st)
    assert r.exit_code == 1 and "config 'eagle3b' is the baseline" in r.output


def test_one_config_has_one_set_of_facts_in_a_campaign(tmp_path):
    st = tmp_path / "st"
    assert _ingest(st, "sglang-bench", SGL / "v0_5_23_baseline.jsonl", "X", "c1", "W").exit_code == 0
    r = _ingest(st, "sglang-bench", SGL / "v0_5_23.jsonl", "X", "c1", "W")
    assert r.exit_code == 1
    assert "config 'X' in campaign 'c1': " in r.output and "within a campaign a config has one set of facts" in r.output
    # in another campaign the facts may change (that is how regressions are explained)
    assert _ingest(st, "sglang-bench", SGL / "v0_5_23.jsonl", "X", "c2", "W", "2026-01-02").exit_code == 0


def test_an_explicit_importer_refuses_another_tools_file(tmp_path):
    st = tmp_path / "st"
    r = _ingest(st, "sglang-bench", VLLM / "v0_9_0_c4.json", "baseline", "c1", "W")
    assert r.exit_code == 1
    assert "this is vllm-bench output, not sglang-bench (keys only vLLM writes: " in r.output
    assert "findings ingest vllm-bench" in r.output
    # nothing was stored, so the right importer is not told the content "was already ingested"
    r = _ingest(st, "vllm-bench", VLLM / "v0_9_0_c4.json", "baseline", "c1", "W")
    assert r.exit_code == 0, r.output
    r = _ingest(st, "vllm-bench", SGL / "v0_5_23_baseline.jsonl", "baseline", "c2", "W", "2026-01-02")
    assert r.exit_code == 1 and "this is sglang-bench output, not vllm-bench" in r.output
    r = cli("ingest", "table", str(VLLM / "v0_9_0_c4.json"), store=st)
    assert r.exit_code == 1 and "this is vllm-bench output, not table" in r.output


def _conclusions(st):
    r = cli("conclusions", "--json", store=st)
    assert r.exit_code == 0, r.output
    return r.output


def test_retract_and_relabel_round_trip_with_store_check_clean(seed_store, tmp_path):
    import json

    before = _conclusions(seed_store)
    # a run filed under the wrong labels
    r = _ingest(seed_store, "sglang-bench", SGL / "v0_5_23_baseline.jsonl", "eagle3-topk4-v1", "later", "W",
                "2026-02-01")
    assert r.exit_code == 0, r.output
    rid = r.output.split("into run ")[1].split()[0]
    assert _conclusions(seed_store) != before
    r = cli("store", "relabel", rid, "--config", "baseline", "--workload", "W=random-1024",
            "--why", "it was the baseline server", store=seed_store)
    assert r.exit_code == 0, r.output
    assert f"relabelled run {rid} (config eagle3-topk4-v1 -> baseline; workload W -> random-1024)" in r.output
    doc = json.loads((seed_store / "runs" / f"{rid}.json").read_text())
    assert {p["config"] for p in doc["points"]} == {"baseline"} and "baseline" in doc["configs"]
    assert {p["workload"] for p in doc["points"]} == {"random-1024"}
    r = cli("store", "check", store=seed_store)
    assert r.exit_code == 0 and "index current: 2 runs" in r.output, r.output
    # relabelled as it should have been ingested: the same as ingesting it right
    right = tmp_path / "right"
    assert cli("ingest", "table", str(HISTORY / "measurements.csv"), "--configs", str(HISTORY / "configs.csv"),
               "--environment", str(HISTORY / "environment.toml"), "--create", store=right).exit_code == 0
    assert _ingest(right, "sglang-bench", SGL / "v0_5_23_baseline.jsonl", "baseline", "later", "random-1024",
                   "2026-02-01").exit_code == 0
    assert _conclusions(seed_store) == _conclusions(right)
    # a relabel that the checks refuse changes nothing
    r = cli("store", "relabel", rid, "--config", "eagle3-topk4-v1", store=seed_store)
    assert r.exit_code == 0  # eagle3-topk4-v1 has no facts in 'later': allowed
    r = cli("store", "relabel", rid, "--campaign", "single-stream", store=seed_store)
    assert r.exit_code == 1 and "nothing was changed" in r.output
    # retract: gone, recorded, the store as it was
    r = cli("store", "retract", rid, "--why", "mislabelled import", store=seed_store)
    assert r.exit_code == 0, r.output
    assert not (seed_store / "runs" / f"{rid}.json").exists()
    assert _conclusions(seed_store) == before
    r = cli("store", "check", store=seed_store)
    assert r.exit_code == 0 and "index current: 1 runs" in r.output, r.output
    listed = cli("store", "list", store=seed_store).output
    assert f"retracted run {rid}, from {SGL / 'v0_5_23_baseline.jsonl'}, 2 points" in listed
    assert "mislabelled import" in listed and "relabelled run" in listed
    # the same content can be ingested again, under the right labels
    assert _ingest(seed_store, "sglang-bench", SGL / "v0_5_23_baseline.jsonl", "baseline", "later", "random-1024",
                   "2026-02-01").exit_code == 0
    assert cli("store", "check", store=seed_store).exit_code == 0


def test_retract_refuses_an_unknown_run_and_an_empty_why(seed_store):
    r = cli("store", "retract", "table-0041a71bbc6", "--why", "x", store=seed_store)
    assert r.exit_code == 1 and "no run 'table-0041a71bbc6' (did you mean table-0041a71bbc6e?)" in r.output
    r = cli("store", "retract", "table-0041a71bbc6e", "--why", " ", store=seed_store)
    assert r.exit_code == 1 and "--why" in r.output
    r = cli("store", "relabel", "table-0041a71bbc6e", "--config", "x", store=seed_store)
    assert r.exit_code == 1 and "the run holds 3 configs" in r.output and "OLD=NEW" in r.output
    assert cli("store", "check", store=seed_store).exit_code == 0


def _mislabelled(tmp_path):
    """A 64-in/32-out random-ids sglang.bench_serving file (the real tool's
    lines, lengths and throughputs changed) at 3.9x the seed baseline."""
    import json

    lines = [json.loads(x) for x in (SGL / "v0_5_23_baseline.jsonl").read_text().splitlines()]
    out = []
    for c, t in ((1, 361.5), (30, 2689.0), (100, 3015.0), (250, 2800.5)):
        d = dict(lines[0] if c == 1 else lines[1], max_concurrency=c, output_throughput=t,
                 random_input_len=64, random_output_len=32)
        out.append(json.dumps(d))
    path = tmp_path / "short-random.jsonl"
    path.write_text("\n".join(out) + "\n")
    return path


def test_the_3_9x_mislabel_is_flagged_and_the_seed_policies_are_unchanged(seed_store, tmp_path):
    import json

    before = json.loads(_conclusions(seed_store))
    r = _ingest(seed_store, "sglang-bench", _mislabelled(tmp_path), "baseline", "later", "diverse-prompts",
                "2026-03-01")
    assert r.exit_code == 0, r.output  # the seed's table records no lengths: nothing to refuse it by
    rid = r.output.split("into run ")[1].split()[0]
    after = json.loads(_conclusions(seed_store))
    for w, wc in before["workloads"].items():
        assert after["workloads"][w]["candidates"] == wc["candidates"], w  # policies, verdicts, bands
        assert after["workloads"][w]["throughput"] == wc["throughput"]
        assert after["workloads"][w]["latency"] == wc["latency"]
    (s,) = after["suspect"]
    assert (s["config"], s["campaign"], s["runs"], s["ratio"]) == ("baseline", "later", [rid], 3.9)
    assert "suspect: check the labels" in s["evidence"]
    assert after["drift"] == before["drift"] and after["regressions"] == before["regressions"]
    assert all("suspect" in after["flagged"][f"{rid}/{i}"][0] for i in range(4))
    text = cli("conclusions", store=seed_store).output
    assert f"suspect     baseline moved 3.90x" in text and f"store relabel {rid} --workload NEW" in text
    # the fix it names restores the store as it was
    r = cli("store", "relabel", rid, "--workload", "random-64-32", store=seed_store)
    assert r.exit_code == 0, r.output
    fixed = json.loads(_conclusions(seed_store))
    assert fixed["suspect"] == [] and fixed["workloads"]["diverse-prompts"] == before["workloads"]["diverse-prompts"]
    assert cli("store", "check", store=seed_store).exit_code == 0


def test_a_level_that_holds_is_a_step_not_suspect(tmp_path, rules):
    from conftest import dataset
    from findings.derive import regressions
    from findings.derive.analysis import cells

    rows = [(camp, "baseline", "w", c, t) for camp, t in (("a", 100), ("b", 390), ("c", 392)) for c in (1, 8)]
    found = regressions.analyse(data := dataset(rows), rules, cells(data, rules))
    (m,) = [m for m in found if m.campaign == "b"]
    assert m.kind == "improvement" and "held in c" in m.reason
    rows = [(camp, "baseline", "w", c, t) for camp, t in (("a", 100), ("b", 390), ("c", 101)) for c in (1, 8)]
    found = regressions.analyse(data := dataset(rows), rules, cells(data, rules))
    # b is suspect; c is set against a (the level before it), not against b
    assert [(m.campaign, m.previous_campaign, m.kind) for m in found] == [("b", "a", "suspect")]


def test_a_drift_beyond_the_cap_is_not_comparable_not_a_tie(rules):
    from conftest import dataset
    from findings.derive.analysis import NOT_COMPARABLE, Rules
    from findings.derive.regressions import conclude

    # the baseline wanders by 60% between campaigns at C=8 (no step: not consistent across C)
    rows = [("a", "baseline", "w", 1, 100), ("a", "baseline", "w", 8, 400), ("a", "spec", "w", 1, 130),
            ("a", "spec", "w", 8, 420),
            ("b", "baseline", "w", 1, 101), ("b", "baseline", "w", 8, 700), ("b", "spec", "w", 1, 131),
            ("b", "spec", "w", 8, 720)]
    (wc,) = conclude(dataset(rows), rules).workloads
    (cand,) = wc.candidates
    assert cand.verdicts == {1: "win", 8: NOT_COMPARABLE}
    assert cand.policy == "always-on"  # from C=1: C=8 is left out, not a tie
    from findings.document import prose
    assert "is not comparable at C=8, where the baseline's own campaigns drift by up to ±54.5%, beyond the " \
           "drift cap (left out of the policy)" in prose.policy(cand)
    # under the cap the same wander is a (wide) band and a tie
    (wc,) = conclude(dataset(rows), Rules(noise_floor=0.04, drift_cap=0.6)).workloads
    assert wc.candidates[0].verdicts == {1: "win", 8: "tie"}


GUARD = Path(__file__).resolve().parent / "fixtures" / "guardrails"


def test_the_best_line_never_contradicts_the_policy_golden(tmp_path):
    from conftest import render_golden

    project = tmp_path / "project"
    project.mkdir()
    (project / "findings.toml").write_text(
        f'[findings]\ntitle = "Peaks at different C"\nstore = "st"\ntemplates = "{ROOT / "templates"}"\n')
    # relative to the checkout, so that the rendered sources do not depend on where it lies
    r = cli("ingest", "table", os.path.relpath(GUARD / "peaks-apart.csv"),
            "--configs", os.path.relpath(GUARD / "peaks-apart-configs.csv"), "--create", store=project / "st")
    assert r.exit_code == 0, r.output
    text = render_golden(project, tmp_path / "doc.md", ROOT / "tests" / "golden" / "peaks-apart.md",
                         "tests/test_guardrails.py")
    line = next(x for x in text.splitlines() if x.startswith("- **Throughput-focused workloads:**"))
    assert "has the highest peak" in line and "`eagle3-topk1-v2` +49.3% against `baseline`" in line
    assert "The peaks come from different concurrencies (C=32 and C=8; `baseline` was not measured at C=32)" in line
    assert "**off**" in text and "Evidence (against `baseline`): it loses at C=1 and 8" in text
    latency = next(x for x in text.splitlines() if x.startswith("- **Latency-sensitive single requests:**"))
    assert "`eagle3-topk1-v2` -7.6% against `baseline`" in latency  # the policy's direction, not +8.3%


def test_rendered_commands_run_as_pasted_at_the_repository_root(tmp_path):
    """A document rendered with settings in a subfolder (as benchmarks/*.findings.toml):
    its Open questions commands name --settings and --store from the root."""
    import re
    import shlex

    repo = tmp_path / "repo"
    (repo / "sub").mkdir(parents=True)
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    (repo / "sub" / "my.findings.toml").write_text(
        f'[findings]\nstore = "results-x"\ndocument = "../out/doc.md"\ntemplates = "{ROOT / "templates"}"\n')
    r = cli("--settings", str(repo / "sub" / "my.findings.toml"), "ingest", "table", str(HISTORY / "measurements.csv"),
            "--configs", str(HISTORY / "configs.csv"), "--create")
    assert r.exit_code == 0, r.output
    r = cli("--settings", str(repo / "sub" / "my.findings.toml"), "render")
    assert r.exit_code == 0, r.output
    text = (repo / "out" / "doc.md").read_text()
    commands = re.findall(r"`(findings [^`]* plan [^`]*?) && ", text)
    assert commands, "no Open questions command"
    # the seed records no matrix: the command names the placeholder the user supplies
    assert all("--from-matrix MATRIX.toml" in c for c in commands)
    shutil.copy(ROOT / "benchmarks" / "emulated.toml", repo / "MATRIX.toml")
    shutil.copytree(ROOT / "benchmarks" / "datasets", repo / "datasets")
    ran = 0
    for command in commands:
        argv = shlex.split(command)
        assert argv[1:5] == ["--settings", "sub/my.findings.toml", "--store", "sub/results-x"], argv
        done = subprocess.run([sys.executable, "-m", "findings", *argv[1:]], cwd=repo, capture_output=True,
                              text=True)
        if "--workload fixed-prompt" in command:  # the stand-in matrix has no such workload; the paths held
            assert "MATRIX.toml has no fixed-prompt" in done.stderr, done.stderr
            continue
        assert done.returncode == 0, done.stderr
        assert "matrix written to build/plan.toml" in done.stdout
        ran += 1
    assert ran


def test_generated_stores_are_ignored_by_git():
    r = subprocess.run(["git", "check-ignore", "-q", "benchmarks/results-emulated/runs/x.json"], cwd=ROOT)
    assert r.returncode == 0
