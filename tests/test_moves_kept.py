"""The moves resumed from those kept by a command before (regressions.moves_kept,
D175) equal the moves found over the whole store, and so does what they
keep for the next command: after campaigns added, removed, inserted before
the last or changed, with suspect moves, levels that hold, facts changed,
repeats and cells of no throughput (tests/test_moves_columns.py's series)."""

from __future__ import annotations

import hashlib
import math
import pickle
import random
import shutil
from pathlib import Path
from typing import Any

import pytest
from conftest import cache_off
from test_moves_columns import _cells, _facts_of
from test_slices import _add, _render, _store_by_campaign

from findings.derive import regressions
from findings.derive.analysis import Cell, Rules

RULES = Rules(resamples=200, noise_floor=0.02)
Facts = dict[tuple[str, str], dict[str, object]]


def _chain(all_cells: list[Cell], facts: Facts, rules: Rules = RULES) -> tuple[str, ...]:
    """A key per campaign of its name, rank, cells and facts (as a slice's
    key changes with them), chained."""
    campaigns = sorted({(c.rank, c.campaign) for c in all_cells})
    keys = []
    for rank, name in campaigns:
        mine = sorted((c for c in all_cells if c.rank == rank), key=repr)
        keys.append(hashlib.sha256(repr((rank, name, mine, sorted(
            (k, sorted(v.items())) for k, v in facts.items() if k[1] == name))).encode()).hexdigest())
    return regressions.moves_chain(rules, {}, keys)


def _whole(all_cells: list[Cell], facts: Facts) -> tuple[list[regressions.Move], regressions.MovesKept]:
    found, kept = regressions.moves_kept(all_cells, _facts_of(facts), RULES, _chain(all_cells, facts), None)
    assert kept is not None
    return found, kept


def _reranked(all_cells: list[Cell], drop: set[int]) -> list[Cell]:
    """The cells less the campaigns of ranks ``drop``, the others ranked again."""
    left = sorted({c.rank for c in all_cells} - drop)
    rank = {r: i for i, r in enumerate(left)}
    return [c._replace(rank=rank[c.rank]) for c in all_cells if c.rank in rank]


def _resume(old: list[Cell], new: list[Cell], facts: Facts) -> tuple[bool, list[regressions.Move]]:
    """The moves of ``new`` resumed from those of ``old``, checked against the
    whole; whether they were resumed (not found again over the whole)."""
    _, kept = _whole(old, facts)
    kept = pickle.loads(pickle.dumps(kept.packed()))  # as the render cache keeps them (D177)
    chain = _chain(new, facts)
    resumed = regressions._resume(new, _facts_of(facts), RULES, chain, kept)
    found, made = regressions.moves_kept(new, _facts_of(facts), RULES, chain, kept)
    want, want_kept = _whole(new, facts)
    assert found == want
    assert made == want_kept  # what the next command resumes from, too
    return resumed is not None, found


def _ranks(all_cells: list[Cell]) -> int:
    return len({c.rank for c in all_cells})


@pytest.mark.parametrize("seed", range(30))
def test_moves_after_campaigns_added_equal_the_whole(seed: int) -> None:
    all_cells, facts = _cells(seed)
    rng = random.Random(seed)
    n = _ranks(all_cells)
    for added in sorted({1, 2, rng.randint(1, max(1, n - 1))}):
        if added >= n:
            continue
        old = [c for c in all_cells if c.rank < n - added]
        _resume(old, all_cells, facts)


@pytest.mark.parametrize("seed", range(30))
def test_moves_after_campaigns_removed_inserted_or_changed_equal_the_whole(seed: int) -> None:
    all_cells, facts = _cells(seed)
    rng = random.Random(100 + seed)
    n = _ranks(all_cells)
    if n < 3:
        pytest.skip("too few campaigns")
    # The last campaigns removed.
    _resume(all_cells, [c for c in all_cells if c.rank < n - 1], facts)
    # A campaign inserted before the last (the old store lacked it: the later ones' ranks moved).
    j = rng.randrange(1, n - 1)
    _resume(_reranked(all_cells, {j}), all_cells, facts)
    # A campaign's values changed (a run file replaced).
    changed = [c._replace(mean=c.mean * 1.3) if c.rank == j else c for c in all_cells]
    _resume(all_cells, changed, facts)
    # A config's facts changed in a campaign.
    edited = {k: ({**v, "engine_version": "9.9"} if k[1] == f"camp-{j:03d}" else v) for k, v in facts.items()}
    _, kept = _whole(all_cells, facts)
    found, made = regressions.moves_kept(all_cells, _facts_of(edited), RULES, _chain(all_cells, edited), kept)
    assert (found, made) == _whole(all_cells, edited)


def test_the_resumed_path_is_taken_and_finds_few_moves_again(monkeypatch: pytest.MonkeyPatch) -> None:
    """Across the seeds, a new campaign is mostly resumed (a suspect move just
    before it is found again over the whole), from a few campaigns' cells."""
    sizes: list[int] = []
    real = regressions._steps

    def counted(cells_: list[Cell], floor: float) -> Any:
        sizes.append(len(cells_))
        return real(cells_, floor)

    resumed = whole = 0
    for seed in range(30):
        all_cells, facts = _cells(seed)
        n = _ranks(all_cells)
        if n < 4:
            continue
        _, kept = _whole([c for c in all_cells if c.rank < n - 1], facts)
        monkeypatch.setattr(regressions, "_steps", counted)
        sizes.clear()
        got = regressions._resume(all_cells, _facts_of(facts), RULES, _chain(all_cells, facts), kept)
        monkeypatch.setattr(regressions, "_steps", real)
        if got is None:
            whole += 1
            continue
        resumed += 1
        assert len(sizes) == 1 and sizes[0] < len(all_cells)
        if n >= 20:  # (a series skips campaigns: its two groups before the new one may lie further back)
            assert sizes[0] * 2 <= len(all_cells)
    assert resumed >= 20 and whole >= 1


def test_nothing_changed_gives_the_kept_moves_and_another_chain_the_whole() -> None:
    all_cells, facts = _cells(4)
    found, kept = _whole(all_cells, facts)
    again, made = regressions.moves_kept(all_cells, _facts_of(facts), RULES, _chain(all_cells, facts), kept)
    assert again == found and made is kept
    other = Rules(resamples=200, noise_floor=0.03)  # other rules: another first link, nothing kept stands
    chain = _chain(all_cells, facts, other)
    assert regressions._resume(all_cells, _facts_of(facts), other, chain, kept) is None
    got, _ = regressions.moves_kept(all_cells, _facts_of(facts), other, chain, kept)
    assert got == regressions.moves(all_cells, _facts_of(facts), other)


def test_values_not_finite_in_the_cells_found_again_are_found_over_the_whole() -> None:
    all_cells, facts = _cells(7)
    n = _ranks(all_cells)
    old = [c for c in all_cells if c.rank < n - 1]
    _, kept = _whole(old, facts)
    target = next(i for i, c in enumerate(all_cells) if c.rank == n - 1)
    odd = list(all_cells)
    odd[target] = odd[target]._replace(hi=math.nan)
    chain = _chain(odd, facts)
    assert regressions._resume(odd, _facts_of(facts), RULES, chain, kept) is None
    found, made = regressions.moves_kept(odd, _facts_of(facts), RULES, chain, kept)
    assert made is None and found == regressions._moves_pairwise(odd, _facts_of(facts), RULES)


def test_a_render_after_a_new_campaign_resumes_the_moves_and_the_document_is_the_same(
        tmp_path: Path, render_cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Through the render cache: the moves kept by one render, resumed by the
    next after a new campaign (the cells of a few campaigns paired again, not
    the store's), the same document as without the cache; a damaged file of
    moves is a miss."""
    full, store, args, tags = _store_by_campaign(tmp_path)
    _add(full, store, tags[:-1])
    _render(tmp_path, *args)
    (kept,) = (render_cache / "moves").iterdir()

    sizes: list[int] = []
    real = regressions._steps

    def counted(cells_: list[Cell], floor: float) -> Any:
        sizes.append(len(cells_))
        return real(cells_, floor)

    monkeypatch.setattr(regressions, "_steps", counted)
    _add(full, store, tags[-1:])
    doc = _render(tmp_path, *args)
    with cache_off():
        assert _render(tmp_path, *args) == doc
    every = len(sizes) and sizes.pop()  # (without the cache: every cell)
    assert len(sizes) == 1 and 0 < sizes[0] * 4 < every

    sizes.clear()
    kept.write_bytes(b"damaged")
    shutil.rmtree(render_cache / "documents")  # (else the document itself is kept)
    assert _render(tmp_path, *args) == doc
    assert sizes == [every]


def test_a_replay_resumed_for_the_last_campaign_alone_builds_no_table_and_says_the_same(
        tmp_path: Path, render_cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The history resumed for the last campaign takes the tables of the
    workloads it measured from the conclusions' (D175), and builds none from
    every cell again; with two campaigns new it builds them as before. The
    documents equal those rendered without the cache (a whole replay)."""
    from findings.derive import history

    built: list[str] = []
    real = history.Table

    def counted(cells_: Any, *args: Any, **kwargs: Any) -> Any:
        built.append("table")
        return real(cells_, *args, **kwargs)

    monkeypatch.setattr(history, "Table", counted)
    full, store, args, tags = _store_by_campaign(tmp_path)
    _add(full, store, tags[:-2])
    _render(tmp_path, *args)
    _add(full, store, tags[-2:-1])
    built.clear()
    doc = _render(tmp_path, *args)
    assert built == []
    with cache_off():
        assert _render(tmp_path, *args) == doc
    assert built  # a whole replay builds its tables

    shutil.rmtree(render_cache)
    for p in (store / "runs").iterdir():  # back to all but the last two campaigns
        if p.name.split("-")[1] in tags[-2:]:
            p.unlink()
    _render(tmp_path, *args)
    _add(full, store, tags[-2:])  # two campaigns new
    built.clear()
    doc = _render(tmp_path, *args)
    assert built  # resumed for two campaigns: each workload's table built from its cells before them
    with cache_off():
        assert _render(tmp_path, *args) == doc


@pytest.mark.parametrize("seed", range(12))
def test_the_first_flip_at_one_c_is_the_first_cross_check_unlike_it(seed: int) -> None:
    """``Candidate.flip_at`` (what the plan reads, D175) is, at every C,
    the first of every cross-check made at that C whose verdict differs
    from the candidate's there, with the cross-checks not made yet (made
    at that C alone) and made."""
    import dataclasses

    from test_scaling import synthetic

    from findings.derive.analysis import CrossChecks, cells, conclude_table, workload_tables

    data = synthetic(seed, campaigns=14)
    rules = Rules(resamples=200, noise_floor=0.01)
    found = 0
    for workload, table in workload_tables(cells(data, rules), rules).items():
        for made in (False, True):
            for cand in conclude_table(workload, table).candidates:
                assert isinstance(cand.cross, CrossChecks) and cand.cross._made is None
                want: dict[int, Any] = {}
                own_at = {c.concurrency: c for c in reversed(cand.comparisons)}  # (the first at each C)
                for x in cand.cross.made():  # (every cross-check, in order; the made path reads these)
                    own = own_at.get(x.concurrency)
                    if own is not None and x.concurrency not in want and x.verdict != own.verdict:
                        want[x.concurrency] = (own, x)
                if not made:
                    cand = dataclasses.replace(cand, cross=CrossChecks(table, cand.comparisons))
                    assert cand.cross._made is None
                for comp in cand.comparisons:
                    assert cand.flip_at(comp.concurrency) == want.get(comp.concurrency)
                    found += want.get(comp.concurrency) is not None
                assert cand.flip_at(10_000) is None
    if seed == 0:
        assert found  # (some seeds flip)


def test_ratios_packed_read_as_the_tuple_they_pack() -> None:
    """A move's ratios as the render cache keeps them (``Ratios``, D177):
    equal to the tuple of triples either way round, hashed and printed as
    it, each triple an (int, float, float) again, through pickle too; and a
    Move holding them equal to the Move holding the tuple. Ratios with a C
    that is not an int or a value that is not a finite float are not
    packed (a NaN read back would be unequal to itself)."""
    import dataclasses

    triples = ((1, 0.875, 0.04), (30, 1.0 / 3.0, 0.05), (2**40, 5e-324, 1e308))
    packed = regressions.Ratios.of(triples)
    assert packed is not None
    assert packed == triples and triples == packed and not (packed != triples)
    assert hash(packed) == hash(triples) and repr(packed) == repr(triples) and str(packed) == str(triples)
    assert len(packed) == 3 and list(packed) == list(triples) and packed[1] == triples[1]
    assert packed[-1] == triples[-1] and packed[1:] == triples[1:]
    assert [tuple(map(type, t)) for t in packed] == [(int, float, float)] * 3
    assert [x.hex() for t in packed for x in t[1:]] == [x.hex() for t in triples for x in t[1:]]
    again = pickle.loads(pickle.dumps(packed))
    assert type(again) is regressions.Ratios and again == packed and again == triples
    assert packed != triples[:2] and packed != regressions.Ratios.of(triples[:2])
    move = regressions.Move(workload="w", config="c", previous_campaign="a", campaign="b", rank=1, ratios=triples,
                            facts_changed=(), kind=regressions.DRIFT, reason="r", known_at=1)
    other = dataclasses.replace(move, ratios=packed)
    assert other == move and move == other and hash(other) == hash(move) and repr(other) == repr(move)
    assert other.ratio == move.ratio and other.moved == move.moved and other.per_c() == move.per_c()
    assert regressions.to_json(other) == regressions.to_json(move)
    for bad in (((1, 1, 0.1),), ((1.0, 1.0, 0.1),), ((1, math.nan, 0.1),), ((1, 1.0, math.inf),), ((2**63, 1.0, 0.1),)):
        assert regressions.Ratios.of(bad) is None
    kept = regressions.MovesKept(chain=("x",), moves=(move, dataclasses.replace(move, ratios=((1, math.nan, 0.1),))),
                                 groups={})
    both = kept.packed()
    assert type(both.moves[0].ratios) is regressions.Ratios and both.moves[0] == move
    assert both.moves[1] is kept.moves[1]  # not packed: kept as it is
