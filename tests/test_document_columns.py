"""The configs that speculate are found by a shorter path (D169), the
document's point labels campaign by campaign (D171), and the cells' views
are checked beside them. Each must give what its plain
reading gives, written out here as the reference, on a real store of
many points and on the cases that could tell them apart (-0.0, an integer
metric, a config whose facts are silent)."""

from __future__ import annotations

import sys
from typing import Any, Iterable, Mapping

import pytest

from conftest import ROOT, cache_off, dataset
from findings.core.model import THROUGHPUT, Dataset, Point
from findings.derive import caveats
from findings.derive.analysis import Rules, cells
from findings.derive.derived import derive
from findings.document import cache as rendercache
from findings.document import views
from findings.document.report import Labels

sys.path.insert(0, str(ROOT / "benchmarks" / "perf"))
import render_scaling  # noqa: E402


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> Dataset:
    folder = tmp_path_factory.mktemp("columns") / "store"
    folder.mkdir()
    render_scaling.build_store(folder, 3000, seed=5)
    with cache_off():
        return rendercache.load(folder, rendercache.scan(folder))


def _views_reference(cs: Iterable[Any], points: Mapping[str, Point]) -> list[views.CellView]:
    out = []
    for c in cs:
        pts = [points[i] for i in c.point_ids]
        metrics = {}
        for k in sorted({k for p in pts for k in p.metrics}):
            vals = [p.metrics[k] for p in pts if k in p.metrics]
            metrics[k] = sum(vals) / len(vals)
        out.append(views.CellView(c.config, c.concurrency, c.campaign, c.mean, metrics, c.point_ids))
    return out


def _spec_reference(configs: Mapping[str, Mapping[str, Any]], points: Iterable[Point]) -> frozenset[str]:
    by: dict[str, list[Point]] = {}
    for p in points:
        by.setdefault(p.config, []).append(p)
    return frozenset(n for n, pts in by.items() if caveats.speculates(configs.get(n, {}), pts))


def _same(a: Any, b: Any) -> None:
    assert repr(a) == repr(b)  # -0.0 against 0.0, 3 against 3.0: told apart
    assert type(a) is type(b)


def test_on_a_store_of_many_points_each_reads_as_its_reference(data: Dataset) -> None:
    rules = Rules(baseline="baseline")
    d = derive(data, rules)
    valid = cells(data, rules)
    points = {p.id: p for p in data.points}
    assert sum(len(c.point_ids) == 1 for c in valid) > 100 and any(len(c.point_ids) > 1 for c in valid)
    _same(views.cell_views(valid, points), _views_reference(valid, points))
    assert caveats.speculative_configs(data.configs, data.points) == _spec_reference(data.configs, data.points)
    assert caveats.speculative_configs(data.configs, iter(data.points)) == d.speculative


def test_the_cases_that_could_tell_them_apart() -> None:
    base = dataset([("c1", "baseline", "chat", 1, 100.0), ("c1", "eagle", "chat", 1, 120.0),
                    ("c2", "baseline", "chat", 2, 90.0), ("c2", "ngram", "chat", 2, 95.0),
                    ("c2", "quiet", "chat", 4, 80.0)])
    odd = [p._replace(metrics={THROUGHPUT: -0.0, "ttft_ms": 3, "accept_length": 2.5})
           if p.config == "ngram" else p._replace(source="simulated") if p.config == "eagle" else p
           for p in base.points]
    data = Dataset(campaigns=base.campaigns, points=tuple(odd),
                   configs={"eagle": {"speculative_algorithm": "EAGLE3"}, "baseline": {"speculative_algorithm": None},
                            "quiet": {"speculative_algorithm": "none"}})
    points = {p.id: p for p in data.points}
    every = cells(data)
    _same(views.cell_views(every, points), _views_reference(every, points))
    spec = caveats.speculative_configs(data.configs, data.points)
    assert spec == _spec_reference(data.configs, data.points) == {"eagle", "ngram"}


def _labels_reference(data: Dataset, rules: Rules) -> dict[str, int]:
    """Every point numbered in one sort of them all (the labels before D171)."""
    rank = {c.name: i for i, c in enumerate(data.campaigns)}
    ordered = sorted(data.points, key=lambda p: (rank[p.campaign], p.workload + (" (simulated)" if p.simulated else ""),
                                                  p.config != rules.baseline, p.config, p.concurrency, p.id))
    return {p.id: k for k, p in enumerate(ordered, start=1)}


def _check_labels(data: Dataset, rules: Rules) -> None:
    reference = _labels_reference(data, rules)
    points = {p.id: p for p in data.points}
    labels = Labels(data, rules, points)
    some = list(points)[::7]
    assert [labels.label(i) for i in some] == [f"P{reference[i]}" for i in some]
    assert labels.cited == set(some)
    assert labels.in_order(reversed(some), points) == [points[i] for i in sorted(some, key=reference.__getitem__)]
    for many in (tuple(list(points)[3:9]), tuple(list(points)[:2]), tuple(sorted(points, key=reference.get)[:4])):
        expected = sorted(reference[i] for i in many)
        assert labels.cell(many) == (f"P{expected[0]}–P{expected[-1]}" if len(expected) > 2 and
                                     expected[-1] - expected[0] == len(expected) - 1
                                     else ", ".join(f"P{n}" for n in expected))
    fresh = Labels(data, rules, points)
    assert [p.id for p in fresh.points] == sorted(reference, key=reference.__getitem__)
    assert all(fresh.of[i] == f"P{n}" for i, n in reference.items()) and len(fresh.of) == len(reference)
    assert list(fresh.of) == sorted(reference, key=reference.__getitem__)
    with pytest.raises(KeyError):
        labels.place("no such point")


def test_labels_are_those_of_one_sort_of_every_point(data: Dataset) -> None:
    """Numbered campaign by campaign, when first asked for: the numbers of
    one sort of every point, on a store whose points are not in campaign
    order, with simulated points and campaigns of no point."""
    rules = Rules(baseline="baseline")
    _check_labels(data, rules)
    shuffled = list(data.points)
    import random
    random.Random(3).shuffle(shuffled)
    odd = [p._replace(source="simulated") if k % 5 == 0 else p for k, p in enumerate(shuffled)]
    _check_labels(Dataset(campaigns=data.campaigns, points=tuple(odd), configs=data.configs), rules)
    few = dataset([("c2", "eagle", "chat", 1, 120.0), ("c1", "baseline", "chat", 1, 100.0),
                   ("c2", "baseline", "chat", 1, 95.0)], campaigns=["c0", "c1", "c2", "c3"])
    _check_labels(few, rules)
