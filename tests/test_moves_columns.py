"""The moves between campaigns found in columns (regressions.moves through
stats.step_pairs) equal those found pair by pair in Python
(regressions._moves_pairwise): every field of every move, in order (issue 38)."""

from __future__ import annotations

import math
import random

import pytest
from test_scaling import synthetic

from findings.derive import regressions, stats
from findings.derive.analysis import Cell, Rules, cells

CS = (1, 2, 4, 8, 16, 32)


def _cells(seed: int) -> tuple[list[Cell], dict[tuple[str, str], dict[str, object]]]:
    """Series of (workload, config) with campaigns that skip Cs and configs,
    repeats (the bootstrap), jumps far beyond drift (suspects, and levels that
    hold), a fact changed now and then, and cells of no throughput."""
    rng = random.Random(seed)
    out: list[Cell] = []
    facts: dict[tuple[str, str], dict[str, object]] = {}
    version = {"base": 1, "spec": 1, "other": 1}
    level = {(w, k): 100.0 for w in ("w1", "w2") for k in version}
    for rank in range(rng.randint(5, 40)):
        campaign = f"camp-{rank:03d}"
        for config in version:
            if rng.random() < 0.2:
                continue
            if rng.random() < 0.08:
                version[config] += 1
            facts[(config, campaign)] = {"engine_version": f"0.{version[config]}", "notes": f"night {rank}"}
            for workload in ("w1", "w2"):
                if rng.random() < 0.15:
                    continue
                roll = rng.random()
                if roll < 0.06:
                    level[(workload, config)] *= rng.choice((0.5, 2.5))  # a suspect jump, or a level that holds
                elif roll < 0.12:
                    level[(workload, config)] *= rng.choice((0.9, 1.1))
                for c in sorted(rng.sample(CS, rng.randint(1, len(CS)))):
                    n = rng.choice((1, 1, 2, 3))
                    values = tuple(level[(workload, config)] * c * rng.gauss(1.0, 0.03) for _ in range(n))
                    if rng.random() < 0.02:
                        values = (0.0,) * n  # no throughput: left out of every series
                    mean = math.fsum(values) / n
                    out.append(Cell(workload, campaign, rank, config, c, mean, min(values), max(values), n,
                                    tuple(f"run-{rank}-{config}/{workload}-{c}-{i}" for i in range(n)), values))
    rng.shuffle(out)  # the moves do not depend on the order cells come in
    return out, facts


def _facts_of(facts: dict[tuple[str, str], dict[str, object]]):
    return lambda config, campaign: facts.get((config, campaign), {})


@pytest.mark.parametrize("seed", range(40))
@pytest.mark.parametrize("interval", ["auto", "band"])
def test_moves_in_columns_equal_moves_pair_by_pair(seed, interval):
    all_cells, facts = _cells(seed)
    rules = Rules(resamples=200, noise_floor=0.02, interval=interval)
    assert regressions._steps(all_cells, rules.noise_floor) is not None  # the columns' path is the one taken
    found = regressions.moves(all_cells, _facts_of(facts), rules)
    assert found == regressions._moves_pairwise(all_cells, _facts_of(facts), rules)


def test_the_cases_the_columns_walk_past_are_all_there(monkeypatch):
    """Across the seeds: steps, suspects (followed by pairs set against the
    level before them), drift, bootstrapped pairs and facts changed."""
    kinds: set[str] = set()
    changed = bootstrapped = 0
    after_suspect: list[int] = []
    measure = regressions._measure
    monkeypatch.setattr(regressions, "_measure", lambda *a: after_suspect.append(1) or measure(*a))
    for seed in range(40):
        all_cells, facts = _cells(seed)
        for m in regressions.moves(all_cells, _facts_of(facts), Rules(resamples=200, noise_floor=0.02)):
            kinds.add(m.kind)
            changed += bool(m.facts_changed)
        by_key = {(c.workload, c.config, c.rank, c.concurrency): c for c in all_cells}
        bootstrapped += sum(1 for c in all_cells if c.n >= 2 and (c.workload, c.config, c.rank - 1, c.concurrency)
                            in by_key and by_key[(c.workload, c.config, c.rank - 1, c.concurrency)].n >= 2)
    assert kinds == {regressions.REGRESSION, regressions.IMPROVEMENT, regressions.DRIFT, regressions.SUSPECT}
    assert changed > 0 and bootstrapped > 0 and after_suspect


@pytest.mark.parametrize("seed", range(6))
def test_moves_of_a_derived_store_equal_pair_by_pair(seed):
    data = synthetic(seed, campaigns=16)
    rules = Rules(resamples=200, noise_floor=0.01)
    valid = cells(data, rules)
    found = regressions.moves(valid, data.facts_of, rules)
    assert found and found == regressions._moves_pairwise(valid, data.facts_of, rules)


@pytest.mark.parametrize("odd", ["nan", "inf", "twice"])
def test_values_numpy_and_python_would_differ_on_take_the_pairwise_path(odd):
    """A mean, lo or hi that is not finite (Python's max and numpy's differ
    on NaN), or one (series, campaign, C) twice: the columns step aside."""
    all_cells, facts = _cells(3)
    target = max(range(len(all_cells)), key=lambda i: (all_cells[i].n, all_cells[i].rank))
    cell = all_cells[target]
    if odd == "nan":
        all_cells[target] = cell._replace(hi=math.nan)
    elif odd == "inf":
        all_cells[target] = cell._replace(mean=math.inf)
    else:
        all_cells.append(cell._replace(mean=cell.mean * 1.5))
    rules = Rules(resamples=200, noise_floor=0.02)
    assert regressions._steps(all_cells, rules.noise_floor) is None
    assert regressions.moves(all_cells, _facts_of(facts), rules) == \
        regressions._moves_pairwise(all_cells, _facts_of(facts), rules)


def test_step_pairs_pairs_each_row_with_its_series_previous_step():
    """Series 0: steps 3, 5, 9 (step 5 lacks key 2); series 1: step 5 only;
    a row of no value left out."""
    rows = [  # series, step, key, value
        (0, 9, 1, 110.0), (0, 3, 1, 100.0), (0, 3, 2, 50.0), (0, 5, 1, 104.0),
        (1, 5, 1, 7.0), (0, 9, 2, 60.0), (0, 5, 3, -1.0),
    ]
    s, st, k, v = (list(col) for col in zip(*rows))
    found = stats.step_pairs(s, st, k, v, v, v, [1] * len(rows), 0.05)
    assert found is not None
    assert [rows[i][:3] for i in found.order] == [(0, 3, 1), (0, 3, 2), (0, 5, 1), (0, 9, 1), (0, 9, 2), (1, 5, 1)]
    assert found.starts == [0, 2, 3, 5, 6] and found.series == [0, 0, 0, 1]
    assert found.partner == [-1, -1, 0, 2, -1, -1]  # (0, 9, 2): step 5 measured no key 2
    assert found.ratio[2] == 104.0 / 100.0 and found.ratio[3] == 110.0 / 104.0
    assert found.beyond == [False, False, False, True, False, False]
    assert found.moved == [False, False, True, False]
