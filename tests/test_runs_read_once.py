"""What the outputs read of every run, found once and before the replay is
forked (D173); runs made by ``make_run`` as by ``Run``."""

from __future__ import annotations

import dataclasses
import pickle
import random
import sys
from pathlib import Path
from typing import Any

import pytest

from conftest import ROOT, cache_off
from findings.core.model import Campaign, Dataset, Input, Point, Run, make_run
from findings.derive import derived as derived_mod
from findings.derive.analysis import Rules
from findings.document import cache as rendercache

sys.path.insert(0, str(ROOT / "benchmarks" / "perf"))
import render_scaling  # noqa: E402


def _run(run_id: str, environment: dict[str, Any], campaigns: tuple[str, ...], configs: tuple[str, ...] = ("a",),
         matrix: bool = False) -> Run:
    points = tuple(Point(id=f"{run_id}/{i}", run_id=run_id, campaign=campaigns[0], config=c, workload="w",
                         concurrency=1, metrics={"output_throughput_tok_s": 1.0}, source="runner",
                         source_file=None, source_line=None) for i, c in enumerate(configs))
    return Run(schema_version=5, run_id=run_id, source="runner", importer="findings-bench", importer_version="1",
               tool_version="0", created_at="2026-01-01T00:00:00Z", source_file=None, source_sha256="0" * 64,
               environment=environment, campaigns=tuple(Campaign(n) for n in campaigns), configs={},
               points=points, extra_inputs=(Input("m.toml", "0" * 64, "matrix"),) if matrix else ())


def test_the_environments_updated_in_turn_give_what_every_runs_do() -> None:
    """deploy merges every run's environment, in the runs' order: the
    distinct environments, in the order of the last run of each, give the
    same dict. Shared objects and equal copies alike, shuffled."""
    rng = random.Random(7)
    shared = [{"gpu": f"g{k}", "host": f"h{k % 2}", **({"tp_size": k} if k % 2 else {})} for k in range(4)]
    for _ in range(50):
        runs = []
        for i in range(rng.randint(1, 12)):
            env = rng.choice(shared)
            runs.append(_run(f"r{i}", env if rng.random() < 0.7 else dict(env), (f"c{rng.randint(0, 3)}",)))
        data = Dataset(campaigns=(), points=(), configs={}, runs=tuple(runs))
        every: dict[str, Any] = {}
        for run in runs:
            every.update(run.environment)
        merged: dict[str, Any] = {}
        for environment, _ in data.environments:
            merged.update(environment)
        assert merged == every and list(merged.items()) == list(every.items())
        # each environment object once, with the campaigns of its runs
        assert len({id(e) for e, _ in data.environments}) == len(data.environments) == len(
            {id(r.environment) for r in runs})
        for environment, names in data.environments:
            assert names == {c.name for r in runs if r.environment is environment for c in r.campaigns}


def test_runs_by_id_and_the_configs_from_a_matrix() -> None:
    runs = (_run("x", {}, ("c1",), ("a", "b"), matrix=True), _run("y", {}, ("c1",), ("c",)))
    data = Dataset(campaigns=(), points=(), configs={}, runs=runs)
    assert data.runs_by_id == {"x": runs[0], "y": runs[1]}
    assert data.from_matrix == {"a", "b"}


def test_make_run_is_run_and_a_run_pickles_through_it() -> None:
    run = _run("x", {"gpu": "g"}, ("c1",), ("a", "b"), matrix=True)
    values = [getattr(run, f.name) for f in dataclasses.fields(Run)]
    made = make_run(*values)
    assert type(made) is Run and made == run
    assert all(getattr(made, f.name) is getattr(run, f.name) for f in dataclasses.fields(Run))
    bare = dataclasses.replace(run, points=())  # (a test point's metrics are a read-only view: no pickle)
    back = pickle.loads(pickle.dumps(bare, protocol=pickle.HIGHEST_PROTOCOL))
    assert back == bare and type(back) is Run
    with pytest.raises(dataclasses.FrozenInstanceError):
        made.run_id = "y"  # type: ignore[misc]
    with pytest.raises(TypeError):
        make_run(*values[:-1])  # every field, always


def test_derive_finds_what_every_run_gives_before_the_replay_begins(tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """The passes over every run are made before ``begin`` (which may fork
    the replay): afterwards they would copy each page of the runs they touch."""
    store = tmp_path / "store"
    store.mkdir()
    render_scaling.build_store(store, 300, seed=5, shape="bench")
    with cache_off():
        data = rendercache.load(store, rendercache.scan(store))
    assert len(data.runs) == 300
    seen: list[set[str]] = []
    real = derived_mod.begin

    def begin(data: Dataset, *args: Any, **kwargs: Any) -> Any:
        seen.append(set(vars(data)))
        return real(data, *args, **kwargs)

    monkeypatch.setattr(derived_mod, "begin", begin)
    d = derived_mod.derive(data, Rules(baseline="baseline", noise_floor=0.04))
    assert seen and {"runs_by_id", "environments", "from_matrix", "points_by_id"} <= seen[0]
    assert d.data.runs_by_id == {r.run_id: r for r in data.runs}
