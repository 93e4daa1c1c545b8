"""Each campaign's slice of the derivation (findings/derive/slices.py, D174):
its gate flags, its points' counts and its valid cells, kept in the render
cache by everything they are derived from. Assembled from slices, kept or
not, they are what the whole derivation gives, in the same order; a key
changes with each of its inputs, and only then; a render after a new
campaign derives only that campaign's slice, and its document is the one
a render without the cache writes."""

from __future__ import annotations

import dataclasses
import hashlib
from array import array
import random
import shutil
import sys
from pathlib import Path
from typing import Any

import pytest

from conftest import ROOT, cache_off, cli, counting_forks, dying_forks
from findings import store as store_mod
from findings.core.model import Dataset
from findings.derive import slices
from findings.derive.analysis import Rules, cells
from findings.derive.validity import Gates, assess
from findings.document import cache as rendercache

sys.path.insert(0, str(ROOT / "benchmarks" / "perf"))
import render_scaling  # noqa: E402


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> Dataset:
    folder = tmp_path_factory.mktemp("slices") / "store"
    render_scaling.build_store(folder, 1500, seed=5, request_fraction=0.2)
    return store_mod.load(folder)


def _run_keys(data: Dataset) -> list[str]:
    return [hashlib.sha256(r.run_id.encode()).hexdigest() for r in data.runs]


def _whole(data: Dataset, rules: Rules) -> slices.Found:
    flags, every = assess(data, rules.gates)
    return flags, every, cells(data, rules, flags)


def _keys(data: Dataset, rules: Rules, run_keys: list[str]) -> dict[str, str] | None:
    """Each campaign's slice key (``slices.plan``'s), or None where there are none."""
    given = slices.plan(data, rules, run_keys)
    return None if given is None else dict(given.keys)


def _same(got: slices.Found, want: slices.Found) -> None:
    """The same flags, counts and cells, each in the same order."""
    assert list(got[0].items()) == list(want[0].items())
    assert list(got[1].items()) == list(want[1].items())
    assert got[2] == want[2] and [type(c) for c in got[2]] == [type(c) for c in want[2]]


def test_slices_kept_or_not_give_what_the_whole_derivation_gives(data: Dataset) -> None:
    rules = Rules()
    want = _whole(data, rules)
    assert want[0] and len(want[2]) > 100  # points the gates flag, and cells
    keys = _keys(data, rules, _run_keys(data))
    assert keys is not None and set(keys) == {c.name for c in data.campaigns}
    planned = slices.plan(data, rules, _run_keys(data))  # what the render cache fills
    assert planned is not None and planned.keys == keys and planned.known == {} and planned.held is not None
    _same(slices.derive(data, rules, planned), want)
    assert {**planned.made, **planned.to_keep()}.keys() == set(keys.values())
    # None kept: derived whole, and cut into every campaign's slice.
    first = slices.Slices(keys=keys, known={})
    _same(slices.derive(data, rules, first), want)
    assert first.made == {} and [n for n, _ in first.pending] == [len(data.points)]  # cut by whoever keeps them (aside)
    cut = first.to_keep()
    assert set(cut) == set(keys.values())
    # All kept: nothing derived, and the slices taken (not held past their use).
    every = slices.Slices(keys=keys, known=dict(cut))
    got = slices.derive(data, rules, every)
    _same(got, want)
    assert every.made == {} and every.known == {}
    # The cells made again from kept slices hold their points' own ids and
    # series, not copies (a million points' would cost 200 MiB).
    by_id = {p.id: p for p in data.points}
    one = [c for c in got[2] if c.n == 1]
    assert one and all(c.point_ids[0] is by_id[c.point_ids[0]].id for c in one)
    assert all(c.series is by_id[c.point_ids[0]].series for c in one if by_id[c.point_ids[0]].series is not None)
    assert any(c.series for c in one)
    # Some kept, at random: the others derived, and those alone.
    rng = random.Random(3)
    for _ in range(4):
        known = {k: v for k, v in cut.items() if rng.random() < 0.6}
        some = slices.Slices(keys=keys, known=dict(known))
        _same(slices.derive(data, rules, some), want)
        assert set(some.made) == set(keys.values()) - set(known) and some.to_keep() == some.made
        assert {**known, **some.made} == cut
    # No slices at all: the derivation as it always was.
    _same(slices.derive(data, rules, None), want)


def test_speculation_that_contradicts_a_config_is_flagged_the_same_from_slices(data: Dataset) -> None:
    """Every config said to speculate: the baseline's points that report no
    acceptance are then flagged, from the configs' facts, slices or not."""
    spec = {name: {**facts, "speculative_algorithm": "EAGLE3"} for name, facts in data.configs.items()}
    other = dataclasses.replace(data, configs=spec)
    rules = Rules()
    want = _whole(other, rules)
    assert len(want[0]) > len(_whole(data, rules)[0])
    keys = _keys(other, rules, _run_keys(other))
    assert keys is not None
    first = slices.Slices(keys=keys, known={})
    slices.derive(other, rules, first)
    half = {k: v for i, (k, v) in enumerate(sorted(first.to_keep().items())) if i % 2}  # (cut once)
    _same(slices.derive(other, rules, slices.Slices(keys=keys, known=half)), want)


def test_a_key_changes_with_each_of_its_inputs_and_only_then(data: Dataset) -> None:
    rules = Rules()
    runs = _run_keys(data)
    base = _keys(data, rules, runs)
    assert base is not None and len(set(base.values())) == len(base)
    assert _keys(data, rules, list(runs)) == base  # the same inputs, the same keys

    # One run's content: the campaigns it holds, no others.
    edited = list(runs)
    edited[7] = "0" * 64
    held = {c.name for c in data.runs[7].campaigns}
    got = _keys(data, rules, edited)
    assert got is not None
    assert {n for n in base if got[n] != base[n]} == held

    # The gates: every campaign.
    other = _keys(data, dataclasses.replace(rules, gates=Gates(max_failed_fraction=0.5)), runs)
    assert other is not None and all(other[n] != base[n] for n in base)
    # What the slices do not read (the noise floor): none.
    assert _keys(data, dataclasses.replace(rules, noise_floor=0.2), runs) == base

    # A config's speculation (its merged facts): the campaigns that measured it.
    config = "baseline"
    facts = {**data.configs[config], "speculative_algorithm": "EAGLE3"}
    spec = dataclasses.replace(data, configs={**data.configs, config: facts})
    got = _keys(spec, rules, runs)
    assert got is not None
    measured = {campaign for c, campaign in data.facts if c == config}
    assert {n for n in base if got[n] != base[n]} == measured
    # Facts that do not change whether it speculates: none.
    same = dataclasses.replace(data, configs={**data.configs, config: {**data.configs[config], "note": "x"}})
    assert _keys(same, rules, runs) == base

    # A campaign before the others: every campaign's rank moves, so every key.
    first = data.campaigns[0]
    earlier = dataclasses.replace(first, name="0-earliest", date="2000-01-01")
    moved = dataclasses.replace(data, campaigns=(earlier, *data.campaigns))
    got = _keys(moved, rules, runs)
    assert got is not None and all(got[n] != base[n] for n in base)

    # Runs whose keys are not known, or a dataset not merged from runs: no slices.
    assert _keys(data, rules, runs[:-1]) is None
    assert _keys(dataclasses.replace(data, facts={}), rules, runs) is None


def test_a_slice_that_does_not_fit_its_campaign_is_not_used(data: Dataset) -> None:
    """A kept slice with a count too few (what no key lets happen, but a
    damaged entry might): the whole derivation instead, the same answer."""
    rules = Rules()
    want = _whole(data, rules)
    keys = _keys(data, rules, _run_keys(data))
    assert keys is not None
    first = slices.Slices(keys=keys, known={})
    slices.derive(data, rules, first)
    made = first.to_keep()
    name = next(n for n, key in keys.items()  # a campaign with cells of one point and of several
                if any(len(ones[4]) for _, _, ones, _, _ in made[key].rows)
                and any(len(many[0]) for _, _, _, many, _ in made[key].rows))
    short = made[keys[name]]
    for bad in (dataclasses.replace(short, counts=short.counts[:-1]),
                dataclasses.replace(short, counts=short.counts + short.counts[:1]),
                # a cell whose point is not among its runs' points
                dataclasses.replace(short, rows=tuple((w, kinds, (*ones[:4], array("q", [10**6] * len(ones[4])),
                                                                  ones[5]), many, rows)
                                                      for w, kinds, ones, many, rows in short.rows)),
                # a cell of several points one of which is not there
                dataclasses.replace(short, rows=tuple((w, kinds, ones, (*many[:4], array("q", [10**6] * len(many[4])),
                                                                        many[5]), rows)
                                                      for w, kinds, ones, many, rows in short.rows)),
                # a cell too few
                dataclasses.replace(short, rows=tuple((w, kinds + b"\x00", ones, many, rows)
                                                      for w, kinds, ones, many, rows in short.rows)),
                # a cell too many
                dataclasses.replace(short, rows=tuple((w, kinds[:-1], ones, many, rows)
                                                      for w, kinds, ones, many, rows in short.rows)),
                # a kind of cell swapped for another
                dataclasses.replace(short, rows=tuple((w, kinds.replace(b"\x02", b"\x01", 1), ones, many, rows)
                                                      for w, kinds, ones, many, rows in short.rows))):
        known = {**made, keys[name]: bad}
        _same(slices.derive(data, rules, slices.Slices(keys=keys, known=known)), want)


# --------------------------------------------------------------------------- in the render cache


@pytest.fixture()
def cache(render_cache: Path) -> Path:
    return render_cache


def _render(tmp: Path, *args: str) -> bytes:
    out = tmp / "out.md"
    r = cli(*args, "render", "--output", str(out))
    assert r.exit_code == 0, r.output
    return out.read_bytes()


def _store_by_campaign(tmp_path: Path) -> tuple[Path, Path, tuple[str, ...], list[str]]:
    """A synthetic store's files (``full``), an empty store, the settings'
    arguments, and the campaigns' tags in order (the run files' second word)."""
    full = tmp_path / "full"
    render_scaling.build_store(full, 900, seed=3, request_fraction=0.3)
    store = tmp_path / "store"
    (store / "runs").mkdir(parents=True)
    settings = tmp_path / "findings.toml"
    settings.write_text(f'[findings]\ntitle = "slices"\nbaseline = "baseline"\ntemplates = "{ROOT / "templates"}"\n'
                        f'template = "eagle-fast-verify.md.j2"\nstore = "{store}"\ndocument = "doc.md"\n')
    tags = sorted({p.name.split("-")[1] for p in (full / "runs").iterdir() if not p.name.startswith(".")})
    return full, store, ("--settings", str(settings)), tags


def _add(full: Path, store: Path, tags: list[str]) -> None:
    for p in (full / "runs").iterdir():
        if not p.name.startswith(".") and p.name.split("-")[1] in tags:
            shutil.copy2(p, store / "runs" / p.name)


def _assessed(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """How many points each derivation of slices assessed."""
    seen: list[int] = []
    real = slices.assess

    def counted(data: Any, gates: Gates) -> Any:
        seen.append(len(data.points))
        return real(data, gates)

    monkeypatch.setattr(slices, "assess", counted)
    return seen


def test_a_new_campaign_derives_its_slice_alone_and_the_document_is_the_same(
        tmp_path: Path, cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    full, store, args, tags = _store_by_campaign(tmp_path)
    _add(full, store, tags[:-1])
    seen = _assessed(monkeypatch)
    before = len(store_mod.load(store).points)
    _render(tmp_path, *args)  # into an empty cache: every slice derived, and kept
    assert seen == [before]
    segments = list((cache / "slices").rglob("*.pickle"))
    assert len(segments) == 2  # the index, and one segment
    seen.clear()
    r = cli(*args, "conclusions", "--json")  # every slice kept: nothing assessed
    assert r.exit_code == 0 and seen == []

    _add(full, store, tags[-1:])
    whole = store_mod.load(store)
    new = sum(1 for p in whole.points if p.campaign == whole.campaigns[-1].name)
    doc = _render(tmp_path, *args)
    assert seen == [new] and 0 < new < before  # the new campaign's points alone
    with cache_off():
        assert _render(tmp_path, *args) == doc
    seen.clear()
    r = cli(*args, "conclusions", "--json")
    assert seen == []
    with cache_off():
        assert cli(*args, "conclusions", "--json").output == r.output
    seen.clear()

    # A segment that cannot be read is a miss: derived again, the same document.
    for path in (cache / "slices").rglob("*.pickle"):
        if path.name != "index.pickle":
            path.write_bytes(b"damaged")
    shutil.rmtree(cache / "documents")  # (else the document itself is kept)
    assert _render(tmp_path, *args) == doc
    assert seen == [len(whole.points)]


def test_segments_are_written_again_as_one_past_the_limit(
        tmp_path: Path, cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(rendercache, "MAX_SLICE_SEGMENTS", 3)
    full, store, args, tags = _store_by_campaign(tmp_path)
    seen = _assessed(monkeypatch)
    _add(full, store, tags[:-5])
    counts = []
    for tag in tags[-5:]:
        _add(full, store, [tag])  # one more campaign
        seen.clear()
        r = cli(*args, "conclusions", "--json")
        assert r.exit_code == 0, r.output
        assert len(seen) == 1  # every campaign's slice derived at first, then the new campaign's alone
        with cache_off():
            assert cli(*args, "conclusions", "--json").output == r.output
        segments = [p for p in (cache / "slices").rglob("*.pickle") if p.name != "index.pickle"]
        counts.append(len(segments))
        assert len(segments) <= 3
    assert counts == [1, 2, 3, 1, 2]
    # Every slice is in the index's segments: nothing is derived again.
    seen.clear()
    assert cli(*args, "conclusions", "--json").exit_code == 0 and seen == []


def test_many_slices_are_written_aside_and_there_when_the_command_ends(
        tmp_path: Path, cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(rendercache, "KEEP_SLICES_ASIDE_POINTS", 1)
    forked = counting_forks(monkeypatch)
    full, store, args, tags = _store_by_campaign(tmp_path)
    _add(full, store, tags)
    r = cli(*args, "conclusions", "--json")
    assert r.exit_code == 0
    assert any(getattr(fn, "func", None) is rendercache._write_slices for fn in forked)
    assert rendercache._SLICE_WRITERS == []  # waited for
    seen = _assessed(monkeypatch)
    again = cli(*args, "conclusions", "--json")
    assert again.output == r.output and seen == []


def test_a_slices_writer_that_dies_aside_leaves_them_written_here(
        tmp_path: Path, cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(rendercache, "KEEP_SLICES_ASIDE_POINTS", 1)
    dying_forks(monkeypatch)
    full, store, args, tags = _store_by_campaign(tmp_path)
    _add(full, store, tags)
    r = cli(*args, "conclusions", "--json")
    assert r.exit_code == 0
    seen = _assessed(monkeypatch)
    assert cli(*args, "conclusions", "--json").output == r.output and seen == []


def test_an_interval_is_found_by_its_values_whatever_objects_hold_them() -> None:
    """The bootstrap intervals kept by their inputs (D171) are keyed by the
    inputs' values: cells read from slices share their floats where derived
    ones hold equal copies, and either finds the other's interval."""
    from findings.derive import stats

    x = float("1234.5")
    shared = ((x, x, x), (float("1000.25"), float("1000.75")))
    copies = ((float("1234.5"), float("1234.5"), float("1234.5")), (float("1000.25"), float("1000.75")))
    assert shared[0][0] is shared[0][1] and copies[0][0] is not copies[0][1]
    with stats.intervals() as asked:
        first = stats.ratio_ci(*shared, 0.95, 200, "a|b")
    with stats.intervals(asked) as again:
        assert stats.ratio_ci(*copies, 0.95, 200, "a|b") == first
    assert again.keys() == asked.keys()
    # and what the key tells apart still: 0.0 from -0.0, 1 from 1.0
    with stats.intervals() as other:
        stats.ratio_ci((1.0, 2.0), (1.0, 2.0), 0.95, 50, "s")
        stats.ratio_ci((1, 2.0), (1.0, 2.0), 0.95, 50, "s")
    assert len(other) == 2


def test_the_history_chain_hashes_each_campaigns_key_and_its_suspect_pairs(data: Dataset) -> None:
    """With the slices' keys, the replay's chain (D91) hashes each
    campaign's key and the (workload, config) pairs its suspect moves take
    out, not its cells (D174): a link changes, from its campaign on, when
    either does, and only then."""
    from findings.derive import history, regressions

    rules = Rules()
    keys = _keys(data, rules, _run_keys(data))
    assert keys is not None
    valid = _whole(data, rules)[2]
    found = regressions.analyse(data, rules, valid)
    kept = regressions.without_suspects(valid, found)

    def chain(cell_keys: dict[str, str] | None, moves: list[regressions.Move]) -> list[str]:
        job = history._Job(data, rules, regressions.without_suspects(valid, moves), moves, history.HistoryCache(),
                           None, cell_keys)
        return job.chain

    base = chain(keys, found)
    assert len(base) == len(data.campaigns) and base == chain(dict(keys), list(found))
    assert chain(None, found) != base  # the cells hashed instead: another chain
    k = len(data.campaigns) // 2
    name = data.campaigns[k].name

    def changed_from(other: list[str]) -> int:
        return next(i for i, (a, b) in enumerate(zip(base, other)) if a != b)

    assert changed_from(chain({**keys, name: "0" * 64}, found)) == k
    # A move of campaign k marked suspect (what a later campaign can do).
    move = next(m for m in found if m.campaign == name) if any(m.campaign == name for m in found) else None
    if move is None:
        cell = next(c for c in kept if c.campaign == name)
        move = regressions.Move(workload=cell.workload, config=cell.config, previous_campaign=data.campaigns[k - 1].name,
                                campaign=name, rank=k, ratios=(), facts_changed=(), kind=regressions.SUSPECT,
                                reason="", known_at=k, next_rank=None, run_ids=())
        moves = [*found, move]
    else:
        moves = [dataclasses.replace(m, kind=regressions.SUSPECT) if m is move else m for m in found]
    assert changed_from(chain(keys, moves)) == k
    job = history._Job(data, rules, regressions.without_suspects(valid, moves), moves, history.HistoryCache(),
                       None, keys)
    assert job.keyed is not None and repr((move.workload, move.config)) in job.keyed[name]
    # The pairs alone, the cells as they were: the link still changes at k.
    plain = history._Job(data, rules, kept, found, history.HistoryCache(), None, keys)
    assert plain.keyed is not None
    marked = {**plain.keyed, name: plain.keyed[name] + repr([(move.workload, move.config)])}
    other = history._chain(data, rules, plain.by_rank, plain.breaks_at, marked)
    assert plain.chain == base and changed_from(other) == k


def test_cells_of_every_shape_come_back_as_they_were() -> None:
    """A slice's cells in columns where the derivation made them (one
    point; several, their lo and hi the least and greatest value), kept as
    they are otherwise (an int, a series of their own): each made again
    equal, field by field and type by type, in its place."""
    from findings.core.model import Point
    from findings.derive.analysis import Cell

    def point(i: int, series: tuple[float, ...] | None) -> Point:
        return Point(id=f"r/{i}", run_id="r", campaign="c", config="a", workload="w", concurrency=1,
                     metrics={}, source="runner", source_file=None, source_line=None, series=series)

    flat = [point(0, (1.0, 2.0)), point(1, None), point(2, None), point(3, (3.0,)), point(4, None)]
    where = {p.id: k for k, p in enumerate(flat)}
    v, u = float("2.5"), float("4.5")
    vals = (float("1.5"), float("3.5"))
    cells_ = [
        Cell("w", "c", 7, "a", 1, v, v, v, 1, ("r/0",), (v,), flat[0].series),  # one point, its own series
        Cell("w", "c", 7, "a", 2, u, u, u, 1, ("r/1",), (u,), ()),  # one point, no series
        Cell("w", "c", 7, "a", 4, 2.5, min(vals), max(vals), 2, ("r/1", "r/2"), vals),  # repeats
        Cell("w", "c", 7, "b", 1, 3, 3, 3, 1, ("r/3",), (3,), (9.0,)),  # an int: kept as it is
        Cell("w", "c", 7, "b", 2, u, u, u, 1, ("r/4",), (u,), (5.0, 6.0)),  # a series of its own
        Cell("w", "c", 7, "b", 4, 2, 1, 3, 2, ("r/3", "r/4"), (1, 3)),  # ints, several points
    ]
    got = slices._encode("w", cells_, where, flat)
    assert list(got[1]) == [1, 1, 2, 0, 1, 0]
    back = slices._decode(got, "c", 7, flat)
    assert back == cells_
    assert [tuple(map(type, c)) for c in back] == [tuple(map(type, c)) for c in cells_]
    assert [list(map(type, c.values)) for c in back] == [list(map(type, c.values)) for c in cells_]
    assert back[0].series is flat[0].series and back[0].point_ids[0] is flat[0].id
    assert back[2].lo is back[2].values[0] and back[2].hi is back[2].values[1]
