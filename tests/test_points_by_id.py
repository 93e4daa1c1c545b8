"""A dataset's points by id (core/model.py PointsById) read as the dict of
every point does, found through their runs where the dataset's points are
its runs' (a store read), from a dict otherwise (issue 38, D175)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
from test_slices import render_scaling

from findings import store as store_mod
from findings.core.model import Dataset, InPointOrder, PointsById


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> Dataset:
    folder = tmp_path_factory.mktemp("byid") / "store"
    render_scaling.build_store(folder, 600, seed=2, request_fraction=0.1)
    return store_mod.load(folder)


def _reads_as_the_dict(found: PointsById, points: tuple, asked: list[str]) -> None:
    whole = {p.id: p for p in points}
    for pid in asked:
        assert (pid in found) == (pid in whole)
        assert found.get(pid) is whole.get(pid)
        if pid in whole:
            assert found[pid] is whole[pid]
        else:
            with pytest.raises(KeyError):
                found[pid]
    assert list(found) == list(whole) and len(found) == len(whole) and dict(found.items()) == whole


def _odd_ids(data: Dataset) -> list[str]:
    run = data.runs[0]
    return [f"{run.run_id}/{len(run.points)}", f"{run.run_id}/01", f"{run.run_id}/-1", f"{run.run_id}/²",
            "no-such-run/0", "", "/", f"{run.run_id}/0/0"]


def test_a_store_read_finds_its_points_through_their_runs(data: Dataset) -> None:
    found = data.points_by_id
    assert isinstance(found, PointsById) and found._runs is not None
    ids = [p.id for p in data.points]
    for pid in ids[::7]:
        assert found[pid] is next(p for p in data.runs_by_id[pid.rsplit("/", 1)[0]].points if p.id == pid)
    assert found._whole is None  # every id found through its run: no dict of every point
    _reads_as_the_dict(found, data.points, ids[::5] + _odd_ids(data))


def test_a_dataset_of_other_points_than_its_runs_reads_a_dict(data: Dataset) -> None:
    """Points left out (``upto``), put in another order, or runs of one id
    twice: the ids found through the runs could be wrong, so none is."""
    upto = data.upto(data.campaigns[len(data.campaigns) // 2].name)
    reordered = dataclasses.replace(data, points=tuple(reversed(data.points)))
    twice = dataclasses.replace(data, runs=data.runs + data.runs[:1], points=data.points + data.runs[0].points)
    for other in (upto, reordered, twice):
        found = other.points_by_id
        assert isinstance(found, PointsById) and found._runs is None
        _reads_as_the_dict(found, other.points, [p.id for p in data.points[::11]] + _odd_ids(data))
    assert data.points[-1].id not in upto.points_by_id


def _in_order_reads_as_the_dict(found: InPointOrder, points: tuple, values: list, asked: list[str]) -> None:
    whole = dict(zip((p.id for p in points), values))
    for pid in asked:
        assert (pid in found) == (pid in whole)
        assert found.get(pid, "none") is whole.get(pid, "none")
        if pid in whole:
            assert found[pid] is whole[pid]
        else:
            with pytest.raises(KeyError):
                found[pid]
    assert list(found) == list(whole) and len(found) == len(whole)
    assert list(found.items()) == list(whole.items()) and list(found.values()) == list(whole.values())
    assert dict(found) == whole and found == whole


def test_values_in_the_points_order_are_found_through_their_runs(data: Dataset) -> None:
    """InPointOrder (the request counts of every point, D177): a value per
    point read by id as the dict of every id does, found through the runs
    (no dict made) where the runs' ids are distinct and the caller says the
    points' are; the dict otherwise."""
    values = [object() for _ in data.points]
    ids = [p.id for p in data.points]
    found = InPointOrder(data, values, distinct=True)
    for pid in ids[::7]:
        assert found[pid] is values[ids.index(pid)]
    assert found._whole is None and len(found) == len(values)
    assert list(found.values()) == values and found._whole is None  # in order, no dict made
    _in_order_reads_as_the_dict(found, data.points, values, ids[::5] + _odd_ids(data))
    assert found._whole is not None  # (an id found in no run: the dict asked)
    # not said to be distinct, or points other than their runs': a dict
    upto = data.upto(data.campaigns[len(data.campaigns) // 2].name)
    twice = dataclasses.replace(data, runs=data.runs + data.runs[:1], points=data.points + data.runs[0].points)
    for other, distinct in ((data, False), (upto, True), (twice, True)):
        vals = list(range(len(other.points)))
        got = InPointOrder(other, vals, distinct=distinct)
        assert not got._fast
        _in_order_reads_as_the_dict(got, other.points, vals, [p.id for p in other.points][::9] + _odd_ids(data))
    with pytest.raises(ValueError):
        InPointOrder(data, values[:-1], distinct=True)
