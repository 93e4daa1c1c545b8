"""Verdicts, the noise band and the regimes, on small hand-made datasets."""

from __future__ import annotations

import pytest

from conftest import dataset

from findings.derive.analysis import Rules
from findings.derive.regressions import conclude
from findings.core.model import Dataset


def cand(data, rules, workload="w", config="spec"):
    wc = conclude(data, rules).workload(workload)
    assert wc is not None
    c = wc.candidate(config)
    assert c is not None
    return c


def test_floor_decides_when_no_other_noise(rules):
    data = dataset([("a", "baseline", "w", 1, 100.0), ("a", "spec", "w", 1, 105.0),
                    ("a", "baseline", "w", 10, 100.0), ("a", "spec", "w", 10, 103.0)])
    c = cand(data, rules)
    assert c.verdicts == {1: "win", 10: "tie"}
    assert c.comparisons[0].band == pytest.approx(0.04)
    assert c.policy == "always-on"


def test_repeats_widen_the_band(rules):
    # spec's repeats at C=1 spread 90..110 (20% of mean 100): a +6% mean is a tie.
    rows = [("a", "baseline", "w", 1, 100.0), ("a", "spec", "w", 1, 96.0), ("a", "spec", "w", 1, 116.0),
            ("a", "spec", "w", 1, 106.0)]
    c = cand(dataset(rows), rules)
    comp = c.comparisons[0]
    assert comp.a.n == 3
    assert comp.band == pytest.approx(20.0 / 106.0)
    assert comp.verdict == "tie"
    # The same mean without the spread is a win.
    c2 = cand(dataset([("a", "baseline", "w", 1, 100.0), ("a", "spec", "w", 1, 106.0)]), rules)
    assert c2.comparisons[0].verdict == "win"


def test_baseline_repeats_widen_the_band_too(rules):
    rows = [("a", "baseline", "w", 1, 90.0), ("a", "baseline", "w", 1, 110.0), ("a", "spec", "w", 1, 108.0)]
    comp = cand(dataset(rows), rules).comparisons[0]
    assert comp.band == pytest.approx(0.2)
    assert comp.verdict == "tie"


def test_baseline_drift_across_campaigns_widens_the_band(rules):
    rows = [("old", "baseline", "w", 250, 772.1), ("new", "baseline", "w", 250, 718.1),
            ("new", "spec", "w", 250, 754.4)]
    comp = cand(dataset(rows), rules).comparisons[0]
    assert comp.paired
    assert comp.drift == pytest.approx((772.1 - 718.1) / ((772.1 + 718.1) / 2))
    assert comp.band == pytest.approx(comp.drift)
    assert comp.delta == pytest.approx(754.4 / 718.1 - 1)
    assert comp.verdict == "tie"  # +5.1% is inside the 7.2% drift


def test_candidate_change_between_campaigns_is_signal_not_noise(rules):
    # The candidate moved a lot between campaigns; the baseline did not. Its new
    # value is compared with the floor only.
    rows = [("old", "baseline", "w", 1, 100.0), ("old", "spec", "w", 1, 70.0),
            ("new", "baseline", "w", 1, 100.0), ("new", "spec", "w", 1, 106.0)]
    comp = cand(dataset(rows), rules).comparisons[0]
    assert comp.a.campaign == "new"
    assert comp.band == pytest.approx(0.04)
    assert comp.verdict == "win"


def test_latest_paired_campaign_is_used(rules):
    rows = [("old", "baseline", "w", 1, 100.0), ("old", "spec", "w", 1, 80.0),
            ("new", "baseline", "w", 1, 100.0), ("new", "spec", "w", 1, 120.0)]
    assert cand(dataset(rows), rules).verdicts == {1: "win"}
    # Replay order, not row order, decides which is latest.
    assert cand(dataset(rows, campaigns=["new", "old"]), rules).verdicts == {1: "loss"}


def test_unpaired_comparison_is_marked_and_widened(rules):
    rows = [("a", "baseline", "w", 1, 100.0), ("b", "spec", "w", 1, 107.0)]
    comp = cand(dataset(rows), rules).comparisons[0]
    assert not comp.paired
    assert comp.band == pytest.approx(0.08)
    assert comp.verdict == "tie"


def test_no_comparison_where_baseline_missing(rules):
    rows = [("a", "baseline", "w", 1, 100.0), ("a", "spec", "w", 1, 80.0), ("a", "spec", "w", 10, 500.0)]
    assert cand(dataset(rows), rules).verdicts == {1: "loss"}


def test_workloads_are_never_pooled(rules):
    rows = [("a", "baseline", "w1", 1, 100.0), ("a", "spec", "w1", 1, 120.0),
            ("a", "baseline", "w2", 1, 100.0), ("a", "spec", "w2", 1, 80.0)]
    data = dataset(rows)
    assert cand(data, rules, "w1").verdicts == {1: "win"}
    assert cand(data, rules, "w2").verdicts == {1: "loss"}


def test_simulated_points_form_their_own_workload(rules):
    real = dataset([("a", "baseline", "w", 1, 100.0), ("a", "spec", "w", 1, 80.0)])
    sim = dataset([("s", "baseline", "w", 1, 100.0), ("s", "spec", "w", 1, 150.0)], source="simulated")
    both = Dataset(campaigns=real.campaigns + sim.campaigns, points=real.points + sim.points, configs={})
    result = conclude(both, rules)
    assert [w.workload for w in result.workloads] == ["w", "w (simulated)"]
    assert result.workload("w").candidate("spec").verdicts == {1: "loss"}
    assert result.workload("w (simulated)").simulated


def test_regime_bests_and_decisiveness(rules):
    rows = [("a", "baseline", "w", 1, 100.0), ("a", "spec", "w", 1, 102.0),
            ("a", "baseline", "w", 100, 700.0), ("a", "spec", "w", 100, 400.0),
            ("a", "baseline", "w", 250, 650.0), ("a", "spec", "w", 250, 420.0)]
    wc = conclude(dataset(rows), rules).workload("w")
    assert wc.latency.config == "spec" and not wc.latency.decisive
    assert wc.latency.concurrency == 1
    assert wc.throughput.config == "baseline" and wc.throughput.decisive
    assert wc.throughput.concurrency == 100  # the peak, not the highest C


def test_other_baseline_name(rules):
    rows = [("a", "ref", "w", 1, 100.0), ("a", "spec", "w", 1, 120.0)]
    wc = conclude(dataset(rows), Rules(baseline="ref", noise_floor=0.04)).workload("w")
    assert wc.baseline_measured
    assert wc.candidate("spec").verdicts == {1: "win"}


def test_floor_is_configurable(rules):
    rows = [("a", "baseline", "w", 1, 100.0), ("a", "spec", "w", 1, 103.0)]
    assert cand(dataset(rows), Rules(noise_floor=0.02)).verdicts == {1: "win"}
    assert cand(dataset(rows), Rules(noise_floor=0.05)).verdicts == {1: "tie"}


def test_workload_without_baseline_is_inconclusive(rules):
    rows = [("a", "spec", "w", 1, 100.0), ("a", "other", "w", 1, 90.0)]
    wc = conclude(dataset(rows), rules).workload("w")
    assert not wc.baseline_measured
    assert {c.config: c.policy for c in wc.candidates} == {"other": "inconclusive", "spec": "inconclusive"}
    assert wc.latency.config == "spec"  # ranked by raw throughput when no baseline exists


def test_a_lead_beyond_the_band_whose_interval_includes_no_difference_is_not_called_inside_the_band():
    from findings.document import prose
    from findings.derive.analysis import Best, Cell, Comparison, WorkloadConclusion

    def cell(config: str, mean: float) -> Cell:
        return Cell(workload="w", campaign="c", rank=0, config=config, concurrency=64, mean=mean, lo=mean, hi=mean,
                    n=2, point_ids=(f"{config}/0",))

    a, b = cell("spec", 262.9), cell("baseline", 211.9)
    lead = Comparison(a=a, b=b, ratio=262.9 / 211.9, band=0.04, paired=True, drift=0.0, ci=(0.918, 1.630),
                      method="bootstrap-repeats")
    assert lead.verdict == "tie"
    wc = WorkloadConclusion(workload="w", simulated=False, concurrencies=(64,), configs=("baseline", "spec"),
                            baseline_measured=True, latency=None, throughput=Best("throughput", "spec", a, lead),
                            candidates=())
    text = prose.throughput(wc)
    assert "`spec` +24.1% against `baseline`, beyond the ±4.0% noise band, but its bootstrap interval " \
           "(-8.2%…+63.0%) includes no difference." in text
    assert "inside" not in text
    inside = Comparison(a=a, b=b, ratio=1.02, band=0.04, paired=True, drift=0.0)
    wc2 = WorkloadConclusion(workload="w", simulated=False, concurrencies=(64,), configs=("baseline", "spec"),
                             baseline_measured=True, latency=None, throughput=Best("throughput", "spec", a, inside),
                             candidates=())
    assert "`spec` +2.0% against `baseline`, inside the ±4.0% noise band." in prose.throughput(wc2)


def test_the_latest_common_campaign_is_right_however_cells_arrive():
    """Table._latest_common (found when asked, kept true by ``add``) against a
    brute-force search, on random tables grown in random batches, asked
    before, between and after the batches."""
    import random

    from findings.derive.analysis import Cell, Table

    configs, concs = ("baseline", "a", "b", "c"), (1, 8)
    for seed in range(40):
        rng = random.Random(seed)
        n = rng.randrange(1, 40)
        cells = [Cell("w", f"k{r:03d}", r, cfg, conc, 100.0, 100.0, 100.0, 1, (f"k{r}/{cfg}/{conc}",))
                 for r in range(n) for cfg in configs for conc in concs if rng.random() < 0.3 + 0.1 * (cfg == "b")]
        rng.shuffle(cells)
        cut = sorted(rng.sample(range(len(cells) + 1), min(3, len(cells) + 1)))
        batches = [cells[i:j] for i, j in zip([0, *cut], [*cut, len(cells)])]
        table = Table(batches[0], Rules())
        held: list[Cell] = list(batches[0])
        for batch in [*batches[1:], []]:
            for x in configs:
                for y in configs:
                    for conc in concs:
                        if x == y:
                            continue
                        both = {c.campaign for c in held if c.config == x and c.concurrency == conc} & \
                            {c.campaign for c in held if c.config == y and c.concurrency == conc}
                        want = max((c.rank for c in held if c.campaign in both), default=None)
                        got = table._latest_common(x, y, conc)
                        assert (got.rank if got is not None else None) == want, (seed, x, y, conc)
                        assert got is None or got.campaign in both
            table.add(batch)
            held += batch


def test_a_table_filled_at_once_is_the_table_grown_cell_by_cell():
    """Table's bulk fill of an empty table (Table._fill) against adding the
    same cells one at a time: the same indexes, drift and lookups; a
    (config, C, campaign) given twice falls back to ``add``'s own rule."""
    import random

    from findings.derive.analysis import Cell, Table

    def state(t: Table) -> tuple:
        return (t.by_key, {k: list(v.items()) for k, v in t.by_key.items()}, t._latest, t._ranked,
                {c: list(d) for c, d in t._base.items()}, t.configs, t.concurrencies, t.drift)

    for seed in range(30):
        rng = random.Random(seed)
        cells = [Cell("w", f"k{r:03d}", r, cfg, conc, rng.uniform(50, 150), 0.0, 0.0, 1, (f"{r}/{cfg}/{conc}",))
                 for r in range(rng.randrange(1, 30)) for cfg in ("baseline", "a", "b") for conc in (1, 8, 64)
                 if rng.random() < 0.5]
        if seed % 3 == 0 and cells:
            cells.append(cells[0]._replace(mean=cells[0].mean * 2))  # twice: the later one is kept
        rng.shuffle(cells)
        rules = Rules(drift_window=rng.choice([0, 3, 10]))
        bulk = Table(cells, rules)
        grown = Table([], rules)
        assert [grown.peak(c) for c in ("baseline", "a", "b")] == [None] * 3  # found of the empty table
        for cell in sorted(cells, key=lambda c: c.rank):
            grown.add([cell])
        assert state(bulk) == state(grown), seed
        assert [bulk.peak(c) for c in ("baseline", "a", "b")] == [grown.peak(c) for c in ("baseline", "a", "b")]


def test_failures_unknown_in_columns_equals_the_point_by_point_list(rules):
    """derive's failures_unknown, picked at C speed from the counts, is the
    points whose source does not record failures, in the points' order;
    with a point id twice (the counts then hold it once) it takes the
    point-by-point path and lists it twice, as before."""
    import dataclasses

    from findings.derive.derived import _failures_unknown, derive
    from findings.derive.validity import assess

    rows = [("a", "baseline", "w", c, 100.0 + c) for c in (1, 2, 4)] + [("a", "spec", "w", c, 90.0) for c in (1, 2)]
    data = dataset(rows)
    # Every other point records how many requests failed; the rest do not.
    pts = tuple(p._replace(metrics={**p.metrics, "completed": 10.0, "failed": 0.0}) if i % 2 else p
                for i, p in enumerate(data.points))
    data = dataclasses.replace(data, points=pts)
    _, every = assess(data, rules.gates)
    expected = tuple(p.id for p in data.points if every[p.id].failures_unknown)
    assert expected and len(expected) < len(data.points)
    assert derive(data, rules).failures_unknown == expected == _failures_unknown(data.points, every)
    twice = data.points + data.points[:1]
    assert _failures_unknown(twice, every) == tuple(p.id for p in twice if every[p.id].failures_unknown)
    assert len(_failures_unknown(twice, every)) == len(expected) + 1
