"""`findings tune` end to end on the emulator: real server processes launched
with SGLang's flags, the real client, the real store (docs/tune.md).

A small space (4 configs and the baseline, 2 C values, short requests) keeps
this in `make test`; the full search space and its seeded runs are
`make test-tune` (tests/tune/)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from findings import store
from findings.derive import tuning

ROOT = Path(__file__).resolve().parents[1]
FINDINGS = str(Path(sys.executable).parent / "findings")

SMALL = """
[vars]
speed = "8"

[defaults]
concurrency = [1, 8]
warmup = 0
health_timeout_s = 60
running_sample_s = 0

[workloads.w]
prompts = "diverse"
input_len = 32
output_len = 16
num_prompts = 6
prompts_per_concurrency = 1

[configs.baseline]
launch = "{python} -m findings emulate --port {port} --profile baseline --speed {speed} --seed 3"

[tune]
name = "small"
engine = "sglang"
launch = "{python} -m findings emulate --port {port} --speed {speed} --seed 3"
baseline = "baseline"
workload = "w"
search = "SEARCH"
trials = TRIALS
seed = 2
start = { speculative-num-steps = 3, disable-overlap-schedule = true }

[tune.space]
speculative-algorithm = ["EAGLE3"]
speculative-num-steps = [1, 3]
speculative-eagle-topk = [1]
disable-overlap-schedule = [true, false]
max-running-requests = [64]
"""

SETTINGS = """
[findings]
store = "results"
document = "doc.md"
templates = "TEMPLATES"
template = "eagle-fast-verify.md.j2"
simulated = true

[tune]
objective = "throughput"
weights = { "1" = 0.6, "8" = 0.4 }
"""


def _setup(tmp_path: Path, search: str = "grid", trials: int = 10) -> tuple[Path, Path]:
    matrix = tmp_path / "tune.toml"
    matrix.write_text(SMALL.replace("SEARCH", search).replace("TRIALS", str(trials)))
    settings = tmp_path / "findings.toml"
    settings.write_text(SETTINGS.replace("TEMPLATES", str(ROOT / "templates")))
    return matrix, settings


def _tune(settings: Path, matrix: Path, *extra: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run([FINDINGS, "--settings", str(settings), "tune", str(matrix), *extra],
                          capture_output=True, text=True, timeout=timeout, cwd=settings.parent)


def _runs(folder: Path) -> list[dict[str, object]]:
    return [json.loads(p.read_text()) for p in sorted((folder / "results" / "runs").glob("*.json"))]


def test_a_grid_tune_stores_one_run_per_trial_and_the_document_shows_the_search(tmp_path: Path) -> None:
    matrix, settings = _setup(tmp_path)
    done = _tune(settings, matrix, "--date", "2026-12-03")
    assert done.returncode == 0, done.stderr
    assert "grid over 4 configs of 4 combinations" in done.stderr
    runs = _runs(tmp_path)
    assert len(runs) == 5  # the baseline and four trials, one file each
    trials = sorted(int(r["provenance"]["tune_trial"]) for r in runs)  # type: ignore[index]
    assert trials == [0, 1, 2, 3, 4]
    first = next(r for r in runs if r["provenance"]["tune_trial"] == 1)  # type: ignore[index]
    # The start config first, launched with its flags as SGLang runs them (topk 1: draft tokens = steps + 1).
    assert first["provenance"]["tune_args"] == ("--speculative-algorithm EAGLE3 --speculative-num-steps 3 "  # type: ignore[index]
                                                "--speculative-eagle-topk 1 --speculative-num-draft-tokens 4 "
                                                "--disable-overlap-schedule --max-running-requests 64")
    assert "--speculative-num-steps 3" in str(first["provenance"]["launch_command"])  # type: ignore[index]
    for r in runs:
        assert r["campaigns"] == [{"name": "tune-small", "date": "2026-12-03"}] or \
            r["campaigns"][0]["name"] == "tune-small"  # type: ignore[index]
        assert r["source"] == "simulated"
    # The server reported the flags it ran with: the facts of the stored config.
    facts = first["configs"]["eagle3-s3-k1-d4-no-r64"]  # type: ignore[index]
    assert facts["speculative_num_steps"] == 3 and facts["speculative_eagle_topk"] == 1
    # Scores by the derivation: every trial has one, the best is the best of them.
    from findings.api import derived
    from findings.document import settings as settings_mod
    d = derived(settings_mod.load(str(settings)))
    (t,) = d.tuning
    assert t.tried == 4 and t.space == 4 and t.untried == 0 and t.baseline is not None
    scores = {x.config: x.score for x in t.trials if x.state != tuning.PRUNED}
    assert t.best is not None and all(v is not None for v in scores.values())
    assert t.best.score == max(v for k, v in scores.items() if k != "baseline")  # type: ignore[type-var]
    assert f"best: {t.best.config}" in done.stdout
    as_json = subprocess.run([FINDINGS, "--settings", str(settings), "conclusions", "--json"], capture_output=True,
                             text=True, cwd=tmp_path)
    (tj,) = json.loads(as_json.stdout)["tuning"]
    assert tj["best"] == t.best.config and tj["tried"] == 4 and tj["objective"]["weights"] == {"1": 0.6, "8": 0.4}
    assert {x["config"]: x["score"] for x in tj["trials"]}[t.best.config] == pytest.approx(t.best.score, rel=1e-4)
    render = subprocess.run([FINDINGS, "--settings", str(settings), "render"], capture_output=True, text=True,
                            cwd=tmp_path)
    assert render.returncode == 0, render.stderr
    doc = (tmp_path / "doc.md").read_text()
    assert "## Config search (`findings tune`)" in doc
    assert f"**Best: `{t.best.config}`** (trial {t.best.number})" in doc
    assert "4 trials of the 4 configs the engine accepts" in doc
    # Again: every trial is in the store, nothing is measured twice.
    again = _tune(settings, matrix)
    assert again.returncode == 0, again.stderr
    assert "4 trials already stored, continuing" in again.stderr
    assert len(_runs(tmp_path)) == 5


def test_optuna_within_a_budget_and_a_killed_tune_continues(tmp_path: Path) -> None:
    matrix, settings = _setup(tmp_path, search="optuna", trials=3)
    proc = subprocess.Popen([FINDINGS, "--settings", str(settings), "tune", str(matrix)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=tmp_path)
    runs = tmp_path / "results" / "runs"
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline and len(list(runs.glob("*.json")) if runs.is_dir() else []) < 2:
        time.sleep(0.2)
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=120)
    kept = _runs(tmp_path)
    assert 2 <= len(kept) <= 4, err
    for r in kept:  # whole trials only: each run holds every C it measured, or is marked stopped early
        cs = sorted(p["concurrency"] for p in r["points"])  # type: ignore[union-attr, index]
        assert cs == [1, 8] or r["provenance"]["tune_state"] == tuning.PRUNED, r  # type: ignore[index]
    # Every server this tune launched was stopped (they run in its folder: no other checkout's).
    ps = subprocess.run(["pgrep", "-f", "findings emulate --port"], capture_output=True, text=True)
    assert not [pid for pid in ps.stdout.split() if _cwd(pid) == str(tmp_path)]
    done = _tune(settings, matrix)
    assert done.returncode == 0, done.stderr
    assert "already stored, continuing" in done.stderr
    final = _runs(tmp_path)
    assert len(final) == 4  # the baseline and the budget of 3 trials, none measured twice
    names = [c for r in final for c in r["configs"]]  # type: ignore[union-attr]
    assert len(names) == len(set(names))


def _cwd(pid: str) -> str:
    try:
        return os.readlink(f"/proc/{pid}/cwd")
    except OSError:
        return ""


def test_a_store_of_real_results_refuses_the_emulators_trials(tmp_path: Path) -> None:
    matrix, settings = _setup(tmp_path)
    settings.write_text(settings.read_text().replace("simulated = true", "simulated = false"))
    done = _tune(settings, matrix, "--trials", "1")
    assert done.returncode != 0
    assert done.stderr.strip().splitlines()[-1].startswith("Error:")
    assert "simulated" in done.stderr
    assert not store.is_store(tmp_path / "results") or not list((tmp_path / "results" / "runs").glob("*.json"))


GOODPUT = """
[defaults]
warmup = 0
health_timeout_s = 60
running_sample_s = 0

[workloads.open]
prompts = "diverse"
input_len = 32
output_len = 32
num_prompts = 18
request_rate = [6]
slo_tpot_ms = 4
seed = 4

[configs.baseline]
launch = "{python} -m findings emulate --port {port} --profile baseline --speed 4 --seed 3"

[tune]
name = "good"
engine = "sglang"
launch = "{python} -m findings emulate --port {port} --speed 4 --seed 3"
baseline = "baseline"
workload = "open"
search = "grid"

[tune.space]
speculative-algorithm = ["EAGLE3"]
speculative-num-steps = [2]
speculative-eagle-topk = [1]
disable-overlap-schedule = [false, true]
max-running-requests = [64]
"""


def test_a_goodput_objective_scores_open_loop_trials(tmp_path: Path) -> None:
    matrix = tmp_path / "tune.toml"
    matrix.write_text(GOODPUT)
    settings = tmp_path / "findings.toml"
    settings.write_text('[findings]\nstore = "results"\nsimulated = true\n\n[tune]\nobjective = "goodput"\nrate = 6\n')
    done = _tune(settings, matrix)
    assert done.returncode == 0, done.stderr
    from findings.api import derived
    from findings.document import settings as settings_mod
    d = derived(settings_mod.load(str(settings)))
    (t,) = d.tuning
    assert t.tried == 2
    # Scored by goodput at 6 req/s: the measured goodput of each trial's open-loop point, unless a
    # validity gate flagged it (a client that sent late on a loaded machine): then no score.
    points = {p.config: p for p in d.data.points}
    for x in t.trials:
        p = points[x.config]
        assert x.score == (None if p.id in d.flags else pytest.approx(p.metrics["goodput_req_s"])), (x, d.flags)
    scored = [x.score for x in t.trials if x.state != tuning.BASELINE and x.score is not None]
    assert t.best is not None if scored else t.best is None
    if scored:
        assert t.best is not None and t.best.score == max(scored)
        assert f"best: {t.best.config}" in done.stdout and "req/s" in done.stdout
    # A closed-loop objective on an open-loop workload is refused in one line.
    settings.write_text('[findings]\nstore = "results"\nsimulated = true\n')
    bad = _tune(settings, matrix)
    assert bad.returncode != 0 and "is an open loop" in bad.stderr.strip().splitlines()[-1]
