"""`findings plan`, the "Open questions" section, and `findings bench
--until-decided` with its sequential stopping rule (issue 16)."""

from __future__ import annotations

import json
import math
import random
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import HISTORY, ROOT, cli

from findings.decide import plan
from findings.derive import sequential
from findings.bench.matrix import parse

PY = sys.executable


def seed_store(tmp_path: Path) -> Path:
    st = tmp_path / "seed"
    r = cli("ingest", "table", str(HISTORY / "measurements.csv"), "--configs", str(HISTORY / "configs.csv"), "--create",
            store=st)
    assert r.exit_code == 0, r.output
    return st


def test_seed_threshold_question_lies_strictly_inside_the_bracket(tmp_path: Path) -> None:
    st = seed_store(tmp_path)
    r = cli("plan", "--json", store=st)
    assert r.exit_code == 0, r.output
    doc = json.loads(r.output)
    first = doc["questions"][0]
    assert (first["workload"], first["config"], first["kind"]) == ("diverse-prompts", "eagle3-topk1-v2", "threshold")
    assert first["concurrency"] and all(1 < c < 30 for c in first["concurrency"])
    # the baseline's own grid inside the estimated crossover's range (1.6 to 8.5)
    x = json.loads(cli("conclusions", "--json", store=st).output)["workloads"]["diverse-prompts"]["candidates"][
        "eagle3-topk1-v2"]["crossover"]
    assert (x["estimate"], x["low"], x["high"]) == (3.7, 1.6, 8.5)
    assert first["concurrency"] == [2, 5]
    assert "crosses the baseline near C≈3.7, between 1.6 and 8.5; nothing was measured between C=1 and C=30" \
        in first["why"]
    assert first["configs"] == ["baseline", "eagle3-topk1-v2"]
    kinds = [(q["kind"], q["config"]) for q in doc["questions"]]
    assert ("missing-pair", "eagle3-topk1-v2") in kinds  # C=70 never measured for it
    undecided = [q for q in doc["questions"] if q["kind"] == "undecided" and q["config"] == "eagle3-topk1-v2"][0]
    assert 30 in undecided["concurrency"] and "C=30 win becomes a tie against the baseline of parallel-sweep" \
        in undecided["why"]
    # an import records no launch lines: no matrix, and why
    assert doc["matrix"] is None and "--from-matrix" in doc["matrix_missing"]
    assert doc["estimate"] == {"requests": None, "minutes": None}  # the table records no durations: unknown
    r = cli("plan", "--output", str(tmp_path / "p.toml"), store=st)
    assert r.exit_code == 1 and "no matrix to write" in r.output


def test_seed_document_has_the_open_questions() -> None:
    text = (ROOT / "eagle-fast-verify.md").read_text()
    section = text.split("## Open questions")[1].split("\n## ")[0]
    first = [x for x in section.splitlines() if x.startswith("- ")][0]
    assert first.startswith("- threshold: eagle3-topk1-v2 on diverse-prompts at C=2, 5 ")
    assert "--kind threshold --from-matrix MATRIX.toml --output build/plan.toml" in section


def test_bracket_points_and_repeats() -> None:
    assert plan.bracket_points(1, 30, [1, 2, 5, 10, 30, 70]) == [2, 5, 10]
    assert plan.bracket_points(1, 30, [1, 30]) == [2, 5, 13]  # geometric when the grid has nothing inside
    assert plan.bracket_points(30, 250, [1, 30, 250]) == [51, 87, 147]
    assert plan.bracket_points(4, 6, []) == [5]
    assert plan.bracket_points(1, 250, [1, 2, 4, 8, 16, 32, 64, 128, 250]) == [2, 16, 128]
    # n = 2 (z cv / margin)^2: 3% spread, 2% margin, 95% -> 2 * (1.96 * 1.5)^2 = 17.3 -> capped at 10
    assert plan.repeats_needed(0.03, 0.02, 0.95) == plan.MAX_REPEATS
    assert plan.repeats_needed(0.01, 0.03, 0.95) == 2
    assert plan.repeats_needed(0.02, 0.03, 0.95) == 4


def test_budget_cuts_repeats_then_the_least_decisive_questions() -> None:
    qs = [plan.Question("w", "a", "threshold", (2, 5), 1, "t", ("baseline", "a"), 0, 40, 4.0),
          plan.Question("w", "a", "undecided", (30,), 10, "u", ("baseline", "a"), 2, 200, 10.0),
          plan.Question("w", "b", "missing-pair", (70,), 1, "m", ("baseline", "b"), 2, 20, 3.0)]
    p = plan.within_budget(qs, 8.0)  # 17 min: undecided down to 2 repeats (9 min), then missing-pair out (6)
    assert [q.kind for q in p.questions] == ["threshold", "undecided"]
    assert p.questions[1].repeats == 2 and p.questions[1].minutes == 2.0
    assert [q.kind for q in p.left_out] == ["missing-pair"]
    assert plan.within_budget(qs, None).questions == tuple(qs)


# ---------------------------------------------------------------- the stopping rule

def aa_false_decisions(trials: int, looks: int, band: float, max_repeats: int = 10, cv: float = 0.03,
                       seed: int = 11) -> tuple[float, float]:
    """A/A: candidate and baseline are the same config. The rate of sequences
    stopped as a win, and as a loss, when looking after every repeat."""
    rng = random.Random(seed)
    wins = losses = 0
    for _ in range(trials):
        a: list[float] = []
        b: list[float] = []
        for _n in range(max_repeats):
            a.append(rng.lognormvariate(0, cv))
            b.append(rng.lognormvariate(0, cv))
            d = sequential.decide(a, b, band, 0.95, looks)
            if d.verdict == sequential.WIN:
                wins += 1
            elif d.verdict == sequential.LOSS:
                losses += 1
            if d.verdict is not None:
                break
    return wins / trials, losses / trials


def test_sequential_rule_keeps_false_wins_at_the_nominal_level_on_aa_runs() -> None:
    nominal = 0.025  # one side of a 95% interval
    wins, losses = aa_false_decisions(4000, looks=9, band=0.0)
    assert wins <= nominal + 0.005 and losses <= nominal + 0.005, (wins, losses)
    # the document's band on top only lowers it
    wins_band, _ = aa_false_decisions(4000, looks=9, band=0.04)
    assert wins_band <= wins + 0.003
    # the naive rule (a 95% interval at every look) inflates it several times: the simulation can tell
    naive, _ = aa_false_decisions(4000, looks=1, band=0.0)
    assert naive > 3 * nominal, naive


def test_sequential_decides_a_clear_difference_and_settles_a_tie() -> None:
    a = [1.10, 1.11, 1.09]
    b = [1.00, 1.01, 0.99]
    d = sequential.decide(a, b, 0.04, 0.95, 9)
    assert d.verdict == sequential.WIN and d.lo > 1.04
    tie = sequential.decide([0.97, 0.971, 0.969, 0.97], [1.0, 1.001, 0.999, 1.0], 0.04, 0.95, 9)
    assert tie.verdict == sequential.TIE and 0.96 <= tie.lo and tie.hi <= 1.04
    assert sequential.decide([1.1], [1.0], 0.04, 0.95, 9).verdict is None  # one repeat: no interval
    assert round(sequential.t_ppf(0.975, 10), 3) == 2.228


# ---------------------------------------------------------------- end to end on the emulator

MATRIX = """
[defaults]
api = "native"
concurrency = [1, 30]
warmup = 1
health_timeout_s = 60

[workloads.diverse-prompts]
prompts = "diverse"
input_len = 64
output_len = 32
num_prompts = 8
prompts_per_concurrency = 1

[configs.baseline]
launch = "{python} -m findings emulate --port {port} --profile baseline --speed 2 --seed 1"

[configs.eagle3-topk1-v2]
launch = "{python} -m findings emulate --port {port} --profile eagle3-topk1-v2 --speed 2 --seed 3"

[[campaigns]]
name = "sweep"
configs = ["baseline", "eagle3-topk1-v2"]
"""


def findings(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([PY, "-m", "findings", *args], cwd=cwd, capture_output=True, text=True, timeout=600)


#: Measurements of the store below, at most: its premise is a real measurement's.
MEASURE_TRIES = 3


@pytest.fixture(scope="module")
def measured(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A store the emulator filled: eagle3-topk1-v2 loses at C=1 and wins at C=30.

    At C=1 it loses by about 7%, and a decode step takes 5 ms at speed 2: on
    a machine starved of CPU (the suite's workers on two cores), the lag
    each step gets weighs twice as much on the baseline's shorter steps,
    and the loss can read as a tie (the conclusion then, rightly, always-on;
    seen twice under load). The store is measured again, in a new folder,
    until it shows the crossover the tests below are about."""
    verdicts = None
    for _ in range(MEASURE_TRIES):
        work = tmp_path_factory.mktemp("plan")
        (work / "m.toml").write_text(MATRIX)
        r = findings("--store", "st", "bench", "m.toml", "--no-progress", "--log-dir", "logs", "--date",
                     "2026-12-01", "--create", cwd=work)
        assert r.returncode == 0, r.stderr[-2000:]
        cand = json.loads(findings("--store", "st", "conclusions", "--json", cwd=work).stdout)[
            "workloads"]["diverse-prompts (simulated)"]["candidates"]["eagle3-topk1-v2"]
        if (cand["policy"], cand["threshold"]) == ("on-above", 30):
            return work
        verdicts = cand["verdicts"]
    raise AssertionError(f"eagle3-topk1-v2 against the baseline in {MEASURE_TRIES} measurements: the last "
                         f"{verdicts}, not a loss at C=1 and a win at C=30")


def test_plan_matrix_runs_unchanged_and_narrows_the_bracket(measured: Path, tmp_path: Path) -> None:
    work = tmp_path / "w"
    subprocess.run(["cp", "-r", str(measured), str(work)], check=True)
    before = json.loads(findings("--store", "st", "conclusions", "--json", cwd=work).stdout)
    cand = before["workloads"]["diverse-prompts (simulated)"]["candidates"]["eagle3-topk1-v2"]
    assert (cand["policy"], cand["threshold"]) == ("on-above", 30)
    r = findings("--store", "st", "plan", "--kind", "threshold", "--output", "plan.toml", "--json", cwd=work)
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    q = doc["questions"][0]
    x = cand["crossover"]
    cs = q["concurrency"]
    # The JSON rounds the range to 0.1 (high 5.03 reads 5.0, while the plan
    # brackets up to ceil(5.03) = 6): the bracket holds within that rounding.
    low, high = max(1, math.floor(x["low"] - 0.05)), math.ceil(x["high"] + 0.05)
    assert q["kind"] == "threshold" and cs and all(low < c < high for c in cs)
    assert doc["estimate"]["requests"] == 2 * sum(max(8, c) for c in cs) and doc["estimate"]["minutes"] is not None
    text = (work / "plan.toml").read_text()
    assert text == doc["matrix"]
    matrix = parse("plan.toml", text)  # the runner's own parser
    assert matrix.configs["eagle3-topk1-v2"].launch.endswith("--profile eagle3-topk1-v2 --speed 2 --seed 3")
    r = findings("--store", "st", "bench", "plan.toml", "--no-progress", "--log-dir", "logs", "--date", "2026-12-01",
                 "--campaign-suffix", "-1", cwd=work)
    assert r.returncode == 0, r.stderr[-2000:]
    after = json.loads(findings("--store", "st", "conclusions", "--json", cwd=work).stdout)
    cand = after["workloads"]["diverse-prompts (simulated)"]["candidates"]["eagle3-topk1-v2"]
    grid = [str(c) for c in sorted({1, 30, *cs})]
    assert set(cand["verdicts"]) == set(grid)
    assert cand["policy"] == "on-above" and cand["threshold"] in (*cs, 30)
    verdicts = [cand["verdicts"][c] for c in grid]
    first_win = verdicts.index("win")
    assert "loss" not in verdicts[first_win:]  # the bracket is now between two adjacent measured C


def test_until_decided_repeats_in_turn_until_the_rule_decides(measured: Path, tmp_path: Path) -> None:
    work = tmp_path / "w"
    subprocess.run(["cp", "-r", str(measured), str(work)], check=True)
    # points long enough (3 waves at C=30, speed 5) that the spread stays small
    (work / "ud.toml").write_text(MATRIX.replace("concurrency = [1, 30]", "concurrency = [30]")
                                  .replace('name = "sweep"', 'name = "ud"').replace("--speed 2 ", "--speed 5 ")
                                  .replace("prompts_per_concurrency = 1", "prompts_per_concurrency = 3"))
    r = findings("--store", "st", "bench", "ud.toml", "--until-decided", "--max-repeats", "6", "--no-progress",
                 "--log-dir", "logs", "--date", "2026-12-01", cwd=work)
    assert r.returncode == 0, r.stderr[-2000:]
    line = [x for x in r.stdout.splitlines() if x.startswith("sequential: ")]
    assert len(line) == 1 and "eagle3-topk1-v2 vs baseline diverse-prompts C=30: decided win after" in line[0], \
        r.stdout
    n = int(line[0].split("after ")[1].split(" repeats")[0])
    assert 2 <= n <= 6
    # in the order the runner wrote them (started_at has whole seconds: two short points can share one)
    files = sorted((work / "st" / "runs").glob("*.json"), key=lambda p: p.stat().st_mtime_ns)
    runs = [json.loads(p.read_text()) for p in files]
    ud = [(r["provenance"]["started_at"], r["points"][0]["config"], r["provenance"]["repeat"])
          for r in runs if r["campaigns"][0]["name"] == "ud"]
    assert len(ud) == 2 * n
    # alternating order: the baseline first in odd rounds, last in even ones
    order = [cfg for _, cfg, _ in ud]
    assert order[:4] == ["baseline", "eagle3-topk1-v2", "eagle3-topk1-v2", "baseline"]
