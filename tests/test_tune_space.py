"""findings tune's pure parts: the [tune] table, the grid under the engine's
rules, the objective of findings.toml and the scoring (docs/tune.md)."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest

from findings.bench import matrix as matrix_mod
from findings.core.errors import InputError, SettingsError
from findings.core.model import Run
from findings.derive import tuning
from findings.document import settings as settings_mod
from findings.tune import space

REPO = Path(__file__).resolve().parents[1]
MATRIX = REPO / "benchmarks" / "tune-emulated.toml"


def _spec(text: str | None = None) -> space.TuneSpec:
    text = text if text is not None else MATRIX.read_text()
    m = matrix_mod.parse(str(MATRIX), text, campaigns_required=False)
    doc = tomllib.loads(text)
    return space.parse(str(MATRIX), doc["tune"], m.configs, m.workloads, doc.get("vars", {}))


def test_the_emulated_space_under_sglangs_rules() -> None:
    spec = _spec()
    grid = space.grid(spec)
    assert grid.combinations == 1 * 5 * 3 * 3 * 2 * 1
    names = [c.name for c in grid.candidates]
    assert len(names) == len(set(names))
    # topk 1 forces the draft tokens to steps + 1: the three draft-token choices are one config.
    chains = [c for c in grid.candidates if dict(c.params)["speculative-eagle-topk"] == 1]
    assert len(chains) == 5 * 2
    assert all(dict(c.params)["speculative-num-draft-tokens"] == dict(c.params)["speculative-num-steps"] + 1
               for c in chains)
    # A tree asking for more draft nodes than its candidates is refused, and counted.
    assert grid.refused and all("candidates" in why for _, why in grid.refused)
    # topk 1's three draft-token choices are one config: 5 steps x 2 paths x 2 choices folded away.
    assert len(grid.candidates) + len(grid.refused) + (5 * 2 * 2) == grid.combinations
    assert len(grid.candidates) == 52
    start = space.candidate(spec, dict(spec.start or ()))
    assert start.name == "eagle3-s3-k4-d16-no-r128"
    assert start.args == ("--speculative-algorithm", "EAGLE3", "--speculative-num-steps", "3",
                          "--speculative-eagle-topk", "4", "--speculative-num-draft-tokens", "16",
                          "--disable-overlap-schedule", "--max-running-requests", "128")


def test_a_refused_start_or_an_unknown_flag_is_one_line() -> None:
    text = MATRIX.read_text()
    bad = text.replace("speculative-num-draft-tokens = 16, disable", "speculative-num-draft-tokens = 16, "
                       "speculative-num-steps = 1, disable").replace("speculative-num-steps = 3, ", "")
    with pytest.raises(InputError, match=r"tune\.start.*refuses.*candidates"):
        _spec(bad)
    with pytest.raises(InputError, match=r"tune\.space\.speculative-numsteps.*not a sglang flag"):
        _spec(text.replace("speculative-num-steps = [1", "speculative-numsteps = [1"))
    with pytest.raises(InputError, match=r"tune\.baseline"):
        _spec(text.replace('baseline = "baseline"', 'baseline = "nope"'))
    with pytest.raises(InputError, match=r"tune\.space\.speculative-num-steps.*range"):
        _spec(text.replace("speculative-num-steps = [1, 2, 3, 4, 6]", "speculative-num-steps = { min = 4, max = 2 }"))


def test_a_range_is_every_integer() -> None:
    spec = _spec(MATRIX.read_text().replace("speculative-num-steps = [1, 2, 3, 4, 6]",
                                            "speculative-num-steps = { min = 1, max = 8 }"))
    assert next(d for d in spec.dims if d.name == "speculative-num-steps").choices == tuple(range(1, 9))


def test_the_objective_from_findings_toml(tmp_path: Path) -> None:
    s = settings_mod.load(str(REPO / "benchmarks" / "tune-emulated.findings.toml"))
    o = s.rules.objective
    assert o.kind == "throughput" and o.weights == ((1, 0.7), (16, 0.2), (64, 0.1))
    assert o.concurrencies() == (1, 16, 64)
    f = tmp_path / "findings.toml"
    for body, message in (('[tune]\nobjective = "fast"\n', "objective must be one of"),
                          ('[tune]\nweights = { "x" = 1 }\n', "not a concurrency"),
                          ('[tune]\nobjective = "goodput"\n', "needs rate"),
                          ('[tune]\nobjective = "latency"\nfloor_tok_s = 10\n', "go together"),
                          ('[tune]\nspeed = 1\n', "unknown \\[tune\\] setting")):
        f.write_text(body)
        with pytest.raises(SettingsError, match=message):
            settings_mod.load(str(f))


def test_scores_and_the_pruning_bound() -> None:
    o = tuning.Objective(weights=((1, 0.5), (16, 0.3), (64, 0.2)))
    assert tuning.score(o, {1: 100.0, 16: 1000.0}, {}) is None  # a C is missing
    assert tuning.score(o, {1: 100.0, 16: 1000.0, 64: 2000.0}, {}) == pytest.approx(50 + 300 + 400)
    # Measured 60 at C=1 where the best trial reached 100: even the best seen at 16 and 64 (+4%) reaches 758.
    reach = tuning.bound(o, {1: 60.0}, {1: 100.0, 16: 1000.0, 64: 2000.0}, 0.04)
    assert reach == pytest.approx(30 + 0.3 * 1040 + 0.2 * 2080)
    assert not o.better(reach, 760.0) and o.better(reach, 750.0)
    lat = tuning.Objective(kind="latency", concurrency=1, floor_tok_s=500.0, floor_concurrency=64)
    assert lat.concurrencies() == (1, 64) and not lat.higher_is_better
    assert tuning.feasible(lat, {64: 600.0}) and not tuning.feasible(lat, {64: 400.0})
    assert lat.better(10.0, 12.0)


def _trial_run(run_id: str, config: str, number: int, state: str, metrics_by_c: dict[int, dict[str, float]],
               load: dict[str, object] | None = None) -> Run:
    from findings.core.model import Campaign, Point
    camp = Campaign(name="tune-t", date="2026-12-03")
    points = tuple(Point(id=f"{run_id}:{i}", run_id=run_id, campaign=camp.name, config=config, workload="w",
                         concurrency=c, metrics=m, source="runner", source_file=None, source_line=None,
                         workload_params=dict(load or {}))
                   for i, (c, m) in enumerate(sorted(metrics_by_c.items())))
    prov = {tuning.NAME: "t", tuning.TRIAL: number, tuning.STATE: state, tuning.SPACE: 3, tuning.SEARCH: "grid",
            tuning.PARAMS: "{}", tuning.ARGS: f"--flag {number}"}
    return Run(schema_version=5, run_id=run_id, source="runner", importer="findings-bench", importer_version="1",
               tool_version="0", created_at="2026-12-03T00:00:00Z", source_file=None, source_sha256="0" * 64,
               environment={}, campaigns=(camp,), configs={config: {}}, points=points, provenance=prov)


def test_latency_and_goodput_objectives_score_trials_from_the_derivation() -> None:
    from findings import store
    from findings.derive.analysis import Rules, cells
    from findings.derive.validity import flagged

    runs = [_trial_run("r0", "baseline", 0, tuning.BASELINE,
                       {1: {"output_throughput_tok_s": 100.0, "median_tpot_ms": 10.0},
                        8: {"output_throughput_tok_s": 600.0, "median_tpot_ms": 13.0}}),
            _trial_run("r1", "fast-but-small", 1, tuning.COMPLETE,
                       {1: {"output_throughput_tok_s": 150.0, "median_tpot_ms": 6.0},
                        8: {"output_throughput_tok_s": 300.0, "median_tpot_ms": 26.0}}),
            _trial_run("r2", "balanced", 2, tuning.COMPLETE,
                       {1: {"output_throughput_tok_s": 125.0, "median_tpot_ms": 8.0},
                        8: {"output_throughput_tok_s": 650.0, "median_tpot_ms": 12.0}}),
            _trial_run("r3", "pruned", 3, tuning.PRUNED,
                       {1: {"output_throughput_tok_s": 90.0, "median_tpot_ms": 11.0}})]
    data = store.merge(runs)
    lat = tuning.Objective(kind="latency", concurrency=1, floor_tok_s=500.0, floor_concurrency=8)
    rules = Rules(objective=lat)
    flags = flagged(data, rules.gates)
    (t,) = tuning.tunings(data, cells(data, rules, flags), flags, lat)
    # The fastest at C=1 misses the throughput floor at C=8: the feasible one ranks best.
    assert [x.config for x in t.scored] == ["balanced", "baseline"]
    assert t.best is not None and t.best.config == "balanced" and t.best.score == 8.0
    assert t.tried == 3 and t.untried == 0
    thr = tuning.Objective(weights=((1, 1.0), (8, 1.0)))
    (t2,) = tuning.tunings(data, cells(data, rules, flags), flags, thr)
    assert t2.best is not None and t2.best.config == "balanced" and t2.best.score == pytest.approx(387.5)
    assert next(x for x in t2.trials if x.config == "pruned").score is None  # a C missing: no score
    good = tuning.Objective(kind="goodput", rate=4.0)
    runs_g = [_trial_run("g0", "baseline", 0, tuning.BASELINE, {8: {"goodput_req_s": 3.0}},
                         {"load": "poisson", "request_rate": 4.0}),
              _trial_run("g1", "spec", 1, tuning.COMPLETE, {8: {"goodput_req_s": 3.6}},
                         {"load": "poisson", "request_rate": 4.0})]
    data_g = store.merge(runs_g)
    (t3,) = tuning.tunings(data_g, [], {}, good)
    assert t3.best is not None and t3.best.config == "spec" and t3.best.score == 3.6
