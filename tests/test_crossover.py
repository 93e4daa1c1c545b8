"""The crossover estimate (findings/derive/crossover.py) on synthetic
ladders whose true crossing is known: its range holds the crossing and the
estimate lies within 15% of it (issue 27)."""

from __future__ import annotations

import math

import pytest
from conftest import dataset

from findings.derive.analysis import Rules
from findings.derive.regressions import conclude
from findings.derive.crossover import Level, estimate


def ladder(ratio_at, cs, rules=Rules(noise_floor=0.04)):
    """One campaign: the baseline at 100 tok/s x C, the candidate at ratio_at(C) times that."""
    rows = [("c", "baseline", "w", c, 100.0 * c) for c in cs] + [("c", "spec", "w", c, 100.0 * c * ratio_at(c))
                                                                 for c in cs]
    (wc,) = conclude(dataset(rows), rules).workloads
    (cand,) = wc.candidates
    return cand


def test_the_published_shape_crossing_near_28():
    """+3% at C=24, -4% at C=32, -12% at C=48 (the ladder of the issue): the
    switch was once said to lie between C=32 and C=48."""
    given = {1: 1.40, 4: 1.25, 8: 1.15, 16: 1.08, 24: 1.03, 32: 0.96, 48: 0.88, 64: 0.82}
    cand = ladder(given.__getitem__, sorted(given))
    assert cand.policy == "on-below"
    assert cand.threshold == 24  # C=32 measured against speculation (-4%): never the switch
    x = cand.crossover
    assert x is not None and x.between == (24, 32)
    true = 24 * (32 / 24) ** (0.03 / 0.07)  # where the straight line on log C crosses: 27.2
    assert abs(x.estimate - true) < 0.1
    assert abs(x.estimate - 28) / 28 < 0.15  # "the ratio crosses 1 near C≈28"
    assert x.low <= 28 <= x.high and x.low < 32


SMOOTH = [  # (true crossing, slope of the ratio per e-fold of C, ladder)
    (28.0, 0.08, [1, 2, 4, 8, 16, 24, 32, 48, 64, 128]),
    (10.0, 0.15, [1, 2, 5, 10, 30, 70, 100, 250]),
    (45.0, 0.05, [1, 4, 16, 32, 64, 128, 256]),
    (3.0, 0.20, [1, 2, 4, 8, 16, 32]),
    (150.0, 0.10, [1, 8, 32, 64, 128, 256, 512]),
]


@pytest.mark.parametrize("true,slope,cs", SMOOTH)
def test_on_below_ladders_with_known_crossings(true, slope, cs):
    cand = ladder(lambda c: 1 + slope * math.log(true / c), cs)
    assert cand.policy == "on-below", cand.verdicts
    x = cand.crossover
    assert x is not None
    assert x.low <= true <= x.high
    assert abs(x.estimate - true) / true < 0.15


@pytest.mark.parametrize("true,slope,cs", SMOOTH)
def test_on_above_ladders_with_known_crossings(true, slope, cs):
    cand = ladder(lambda c: 1 - slope * math.log(true / c), cs)
    assert cand.policy == "on-above", cand.verdicts
    x = cand.crossover
    assert x is not None
    assert x.low <= true <= x.high
    assert abs(x.estimate - true) / true < 0.15
    assert cand.comparisons[[c.concurrency for c in cand.comparisons].index(cand.threshold)].ratio >= 1


@pytest.mark.parametrize("true,cs", [(20.0, [1, 4, 8, 16, 32, 64, 128]), (6.0, [1, 2, 4, 8, 16, 32])])
def test_a_curved_ratio_still_lands_within_15_percent(true, cs):
    """The ratio a power law of C (curved on log C): the range still holds it."""
    cand = ladder(lambda c: (true / c) ** 0.12, cs)
    x = cand.crossover
    assert cand.policy == "on-below" and x is not None
    assert x.low <= true <= x.high and abs(x.estimate - true) / true < 0.15


def test_the_on_above_switch_is_never_a_c_that_measured_against_it():
    """A user measured on-above with threshold C=2 where C=2 measured -5.7%
    (a tie inside a wide band): the switch moves to the first C at or above
    the baseline."""
    cand = ladder({1: 0.80, 2: 0.943, 4: 1.02, 8: 1.20}.__getitem__, [1, 2, 4, 8], Rules(noise_floor=0.06))
    assert [cand.verdicts[c] for c in (1, 2, 4, 8)] == ["loss", "tie", "tie", "win"]
    assert cand.policy == "on-above" and cand.threshold == 4
    assert cand.crossover is not None and 2 < cand.crossover.estimate < 4


def test_no_crossover_for_other_policies():
    assert estimate([Level(1, 1.2, 1.1, 1.3, "win"), Level(2, 1.3, 1.2, 1.4, "win")], "always-on") is None
    cand = ladder(lambda c: 1.2, [1, 2, 4])
    assert cand.policy == "always-on" and cand.crossover is None


def test_the_goldens_show_what_a_policy_rests_on():
    """Issue 27: the one-point policy note, the not-compared list and the
    single-run note, in a golden document (tests/golden/fixture-store.md,
    held by tests/test_render.py)."""
    from conftest import ROOT

    text = (ROOT / "tests" / "golden" / "fixture-store.md").read_text()
    assert "(from one measured C)" in text
    assert "Not compared: " in text and " there)." in text
    assert "No noise was measured (one run of each config at each C" in text and "floor alone." in text
