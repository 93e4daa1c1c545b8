"""A stored point's metrics, packed (findings.core.model.Metrics, D131): read
back from a real run file they are the numbers that were written, bit for
bit, behave as the dict they came from, survive the render cache's pickle,
and cost a fraction of a dict's memory."""

from __future__ import annotations

import dataclasses
import math
import pickle
import struct
import sys
import tracemalloc
from pathlib import Path

import pytest

from findings import store as store_mod
from findings.core.model import THROUGHPUT, Campaign, Metrics, Point, Run
from findings.store.schema import SCHEMA_VERSION, point_id

#: Values whose bits a careless conversion would change: the smallest
#: subnormal, -0.0, a value just below 2**53, one that prints with 17 digits.
AWKWARD = {THROUGHPUT: 1234.5678901234567, "a_zero": -0.0, "b_tiny": 5e-324, "c_big": 2.0 ** 53 - 1,
           "completed": 64.0, "failed": 0.0, "planned": 64.0, "z_third": 1 / 3}


def _run(metrics: dict[str, float], run_id: str = "bench-20260101-0123456789") -> Run:
    campaign = Campaign(name="c1", date="2026-01-01")
    point = Point(id=point_id(run_id, 0), run_id=run_id, campaign="c1", config="baseline", workload="w",
                  concurrency=4, metrics=metrics, source="runner", source_file=None, source_line=None)
    return Run(schema_version=SCHEMA_VERSION, run_id=run_id, source="runner", importer="findings-bench",
               importer_version="1", tool_version="0.1.0", created_at="2026-01-01T00:00:00Z", source_file=None,
               source_sha256="0" * 64, environment={}, campaigns=(campaign,),
               configs={"baseline": {"speculative_algorithm": "none"}}, points=(point,))


def _bits(x: float) -> bytes:
    return struct.pack("<d", x)


def test_a_stored_points_metrics_read_back_packed_and_bit_for_bit(tmp_path: Path) -> None:
    store = tmp_path / "store"
    path = store_mod.add_run(store, _run(dict(AWKWARD)), create=True)
    got = store_mod.read_run(path).points[0].metrics
    assert type(got) is Metrics
    assert got == AWKWARD and AWKWARD == got  # equal to the dict, both ways
    assert list(got) == sorted(AWKWARD) and len(got) == len(AWKWARD)  # the order the store wrote (by name)
    for k, v in AWKWARD.items():
        assert _bits(got[k]) == _bits(v) and type(got[k]) is float
        assert k in got and _bits(got.get(k)) == _bits(v)
    assert math.copysign(1.0, got["a_zero"]) == -1.0
    assert "missing" not in got and got.get("missing") is None and got.get("missing", 7.0) == 7.0
    assert dict(got.items()) == AWKWARD and {**got} == AWKWARD and sorted(got.values()) == sorted(AWKWARD.values())
    assert repr(got) == repr(dict(sorted(AWKWARD.items())))
    try:
        got["missing"]
    except KeyError:
        pass
    else:
        raise AssertionError("a missing metric must raise KeyError, as a dict does")


def test_packed_metrics_survive_the_render_caches_pickle_and_share_their_names() -> None:
    a, b = Metrics.of(dict(AWKWARD)), Metrics.of({k: v + 1 for k, v in AWKWARD.items()})
    back_a, back_b = pickle.loads(pickle.dumps((a, b), protocol=pickle.HIGHEST_PROTOCOL))
    assert back_a == a and back_b == b
    assert [_bits(x) for x in back_a.values()] == [_bits(x) for x in AWKWARD.values()]
    assert back_a._index is a._index is b._index  # one index for every point with these names


def test_packed_metrics_take_a_fraction_of_a_dicts_memory() -> None:
    names = [f"metric_{i:02d}" for i in range(30)]
    Metrics.of(dict.fromkeys(names, 0.0))  # the shared index, made once
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        dicts = [{k: float(i * 31 + j) + 0.5 for j, k in enumerate(names)} for i in range(2000)]
        as_dicts = tracemalloc.get_traced_memory()[0] - before
        packed = [Metrics.of(d) for d in dicts]
        as_packed = tracemalloc.get_traced_memory()[0] - before - as_dicts
    finally:
        tracemalloc.stop()
    assert len(packed) == len(dicts) and packed[-1] == dicts[-1]
    # A dict of 30 floats with their float objects is about 1.9 KB; packed, about 0.4 KB.
    assert as_packed < as_dicts / 3, (as_packed / 2000, as_dicts / 2000, sys.version)


def test_equal_looking_facts_of_other_types_are_not_shared(tmp_path: Path) -> None:
    """Runs share equal environments, config facts and workload parameters
    (D131), but 1, 1.0 and True are equal in Python and must stay apart."""
    store = tmp_path / "store"
    values: list[object] = [1, 1.0, True, 0.0, -0.0]
    runs = []
    for i, v in enumerate(values):
        run = _run(dict(AWKWARD), run_id=f"bench-20260101-{i:010d}")
        # A campaign and a workload of its own each: the store's guard rails
        # refuse one config or one workload name with two definitions.
        point = run.points[0]._replace(campaign=f"c{i}", workload=f"w{i}",
                                    workload_params={"flag": v, "n": 64})
        runs.append(dataclasses.replace(run, environment={"x": v}, configs={"baseline": {"x": v}},
                                        campaigns=(Campaign(name=f"c{i}", date=f"2026-01-0{i + 1}"),),
                                        points=(point,), source_sha256=f"{i:064d}"))
    paths = store_mod.add_runs(store, runs, create=True)
    for v, path in zip(values, paths):
        got = store_mod.read_run(path)
        for read in (got.environment["x"], got.configs["baseline"]["x"], got.points[0].workload_params["flag"]):
            assert type(read) is type(v) and repr(read) == repr(v), (v, read)


def test_the_gates_in_columns_judge_every_point_as_one_by_one(monkeypatch) -> None:
    """validity.assess reads the packed metrics in chunks (model.PACK_ROWS)
    and picks out each layout in a pass of its own (FEW_LAYOUTS) or by a
    sort (more): whatever the chunking and the layouts, every point's flags
    and counts are those of ``reasons`` and ``counts`` point by point."""
    import random

    from findings.core import model
    from findings.core.model import Dataset
    from findings.derive.validity import Gates, assess, counts, reasons

    rng = random.Random(7)
    extra = [f"x_{i}" for i in range(12)]
    points = []
    for i in range(400):
        layout = i % 11  # eleven layouts of the same names throughout: more than FEW_LAYOUTS
        m: dict[str, float] = {THROUGHPUT: 100.0 + i, "client_loop_lag_p99_ms": rng.choice([1.0, 1.0, 500.0])}
        for name in extra[:layout]:
            m[name] = float(i)
        if layout % 2:
            planned = 32.0
            failed = float(rng.choice([0, 0, 0, 1, 5, 32]))
            m.update(planned=planned, failed=failed, completed=planned - failed)
        if layout % 3 == 0:
            m.update(offered_rate_req_s=10.0, achieved_rate_req_s=rng.choice([9.9, 2.0, 0.0]))
        if layout % 5 == 0:
            m["accept_length"] = 2.5
        packed = Metrics.of(dict(sorted(m.items())))
        point = Point(id=f"r{i // 4}/{i % 4}", run_id=f"r{i // 4}", campaign="c1", config=rng.choice(["base", "spec"]),
                      workload="w", concurrency=1 + i % 5, metrics=dict(m) if i % 19 == 0 else packed,
                      source="runner", source_file=None, source_line=None)
        points.append(point)
    configs = {"base": {"speculative_algorithm": "none"}, "spec": {"speculative_algorithm": "EAGLE3"}}
    gates = Gates()

    def judged(pts: list[Point]) -> tuple[dict[str, tuple[str, ...]], dict[str, object]]:
        data = Dataset(runs=(), points=tuple(pts), campaigns=(model.Campaign(name="c1", date="2026-01-01"),),
                       configs=configs)
        return assess(data, gates)

    def one_by_one(pts: list[Point]) -> tuple[dict[str, tuple[str, ...]], dict[str, object]]:
        flags = {p.id: why for p in pts if (why := reasons(p, configs[p.config], gates))}
        return flags, {p.id: counts(p) for p in pts}

    cases = {
        "mixed": points,
        "packed only": [p for p in points if type(p.metrics) is Metrics],
        "few layouts": [p for p in points if type(p.metrics) is Metrics and int(p.metrics[THROUGHPUT]) % 11 in (1, 3, 6)],
        "one layout": [p for p in points if type(p.metrics) is Metrics and int(p.metrics[THROUGHPUT]) % 11 == 1],
    }
    for rows in (1, 3, 64, model.PACK_ROWS):
        monkeypatch.setattr(model, "PACK_ROWS", rows)
        for name, pts in cases.items():
            assert pts, name
            flags, every = judged(pts)
            expected_flags, expected_counts = one_by_one(pts)
            assert flags == expected_flags, (name, rows)
            assert every == expected_counts, (name, rows)
    assert judged(points)[0], "some points fail a gate"


def test_packed_metrics_compare_as_the_mapping_they_stand_for():
    """Metrics of one key order compare their doubles at once (D165); any
    other pair compares as Mappings do, so the answers are the same."""
    from findings.core.model import Metrics
    a = Metrics.packed(("x", "y"), [1.0, 2.0])
    assert a == Metrics.packed(("x", "y"), [1.0, 2.0]) and a == {"x": 1.0, "y": 2.0} and {"y": 2.0, "x": 1.0} == a
    assert a != Metrics.packed(("x", "y"), [1.0, 2.5]) and a != Metrics.packed(("x", "z"), [1.0, 2.0])
    assert a == Metrics.packed(("y", "x"), [2.0, 1.0])  # another key order: the same mapping
    assert a != Metrics.packed(("x",), [1.0]) and a != {"x": 1.0} and a != [1.0, 2.0]
    assert Metrics.packed(("x",), [0.0]) == Metrics.packed(("x",), [-0.0])  # as 0.0 == -0.0
    with pytest.raises(TypeError):
        hash(a)
