"""`make test-tune`: the search over benchmarks/tune-emulated.toml against
its exhaustive grid, on the emulator (issue 40's Done-means; docs/tune.md).

1. The exhaustive grid: every one of the space's configs, measured at every C (no pruning).
2. Five Optuna tunes, seeds 1 to 5, each with a budget of fewer trials than
   the grid: each must find the grid's best config, and the trial at which it
   did so is reported.
3. Each starts from the seed team's first config (topk 4, 16 draft tokens,
   no overlap) and must end on a topk 1 overlap config.

Real processes throughout: the emulator launched per trial with SGLang's
flags, the findings client, the store. About 20 minutes on 2 cores. The
report is build/tune/search.md. Skipped unless FINDINGS_TUNE=1.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from findings.derive import tuning

ROOT = Path(__file__).resolve().parents[2]
FINDINGS = str(Path(sys.executable).parent / "findings")
MATRIX = ROOT / "benchmarks" / "tune-emulated.toml"
SETTINGS = ROOT / "benchmarks" / "tune-emulated.findings.toml"
REPORT = ROOT / "build" / "tune" / "search.md"
SEEDS = (1, 2, 3, 4, 5)
BUDGET = 30

pytestmark = pytest.mark.skipif(os.environ.get("FINDINGS_TUNE") != "1", reason="make test-tune (FINDINGS_TUNE=1)")


def _tune(store: Path, *args: str) -> tuple[tuning.Tuning, float, str]:
    t0 = time.monotonic()
    done = subprocess.run([FINDINGS, "--settings", str(SETTINGS), "--store", str(store), "tune", str(MATRIX),
                           "--date", "2026-12-03", *args], capture_output=True, text=True, cwd=ROOT, timeout=3600)
    wall = time.monotonic() - t0
    assert done.returncode == 0, done.stderr[-3000:]
    from findings.api import derived
    from findings.document import settings as settings_mod
    s = settings_mod.load(str(SETTINGS)).with_overrides(store=str(store))
    (t,) = derived(s).tuning
    return t, wall, done.stdout


def _flags(config: str) -> dict[str, str]:
    parts = config.split("-")
    return {"steps": parts[1][1:], "topk": parts[2][1:], "draft": parts[3][1:], "overlap": parts[4]}


def test_optuna_finds_the_grids_best_in_fewer_trials(tmp_path: Path) -> None:
    grid, grid_wall, _ = _tune(tmp_path / "grid", "--search", "grid", "--trials", "1000", "--no-prune")
    assert grid.space is not None and grid.tried == grid.space
    ranked = [t for t in grid.scored if t.state != tuning.BASELINE]
    best, second = ranked[0], ranked[1]
    assert best.score is not None and second.score is not None
    lines = ["# findings tune against the exhaustive grid (SIMULATED: the emulator's flags model)", "",
             f"Space: benchmarks/tune-emulated.toml, {grid.space} configs SGLang accepts. Objective: "
             f"{grid.objective.line()}.", "",
             f"Exhaustive grid: {grid.tried} trials in {grid_wall:.0f} s "
             f"({sum(1 for t in grid.trials if t.state == tuning.PRUNED)} stopped early). "
             f"Best `{best.config}` {best.score:.1f} tok/s, runner-up `{second.config}` {second.score:.1f} "
             f"(+{best.score / second.score - 1:.1%}); baseline {grid.baseline.score:.1f}."  # type: ignore[union-attr]
             , "", "| seed | trials | found the grid's best at trial | best found | its score | wall (s) |",
             "|---|---|---|---|---|---|"]
    found_at: dict[int, int | None] = {}
    reported: dict[int, str] = {}
    starts: dict[int, str] = {}
    for seed in SEEDS:
        t, wall, out = _tune(tmp_path / f"seed{seed}", "--search", "optuna", "--seed", str(seed),
                             "--trials", str(BUDGET))
        assert t.tried <= BUDGET < grid.space
        top = t.best
        assert top is not None and top.score is not None
        hit = next((x.number for x in t.trials if x.config == best.config), None)
        found_at[seed] = hit
        lines.append(f"| {seed} | {t.tried} | {hit if hit is not None else 'never'} | `{top.config}` | "
                     f"{top.score:.1f} | {wall:.0f} |")
        reported[seed] = top.config
        starts[seed] = next(x for x in t.trials if x.number == 1).config
    REPORT.parent.mkdir(parents=True, exist_ok=True)
    REPORT.write_text("\n".join(lines) + "\n")
    print(REPORT.read_text())
    for seed in SEEDS:
        # Found the grid's best within the budget (fewer trials than the grid), and reports it as the best.
        assert found_at[seed] is not None and found_at[seed] < grid.space, (seed, found_at[seed])  # type: ignore[operator]
        assert reported[seed] == best.config, (seed, reported[seed], best.config)
        # Started from the seed team's first config (topk 4 tree, v1 path) and reached a topk 1 overlap config.
        assert _flags(starts[seed]) == {"steps": "3", "topk": "4", "draft": "16", "overlap": "no"}, starts[seed]
        assert _flags(reported[seed])["topk"] == "1" and _flags(reported[seed])["overlap"] == "ov"
