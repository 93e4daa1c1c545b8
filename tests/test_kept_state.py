"""What the render cache keeps of a derivation besides the runs (issue 38,
D171). Bootstrap intervals, by the content of the cells they compare:
``stats.intervals`` answers from those known before and records those
asked for, and the cache keeps them per store. The history's replay state,
its entries in pieces written once each. The intervals, the history and
every document are the same with them, without them and with a damaged
entry: only how much is computed again changes."""

from __future__ import annotations

import marshal
import os
import pickle
import shutil
import sys
from pathlib import Path
from typing import Any

import pytest

from conftest import ROOT, cache_off, cli
from findings.core.model import Campaign
from findings.derive import stats
from findings.derive.history import Entry, HistoryCache
from findings.document import cache as rendercache

sys.path.insert(0, str(ROOT / "benchmarks" / "perf"))
import render_scaling  # noqa: E402

A = (101.0, 99.5, 100.25, 98.75)
B = (90.0, 91.5, 89.25, 90.5)


def _counted(monkeypatch: pytest.MonkeyPatch) -> list[tuple[Any, ...]]:
    """Every bootstrap computed from now on (stats._bootstrap's arguments)."""
    ran: list[tuple[Any, ...]] = []
    real = stats._bootstrap

    def counted(*args: Any) -> tuple[float, float]:
        ran.append(args)
        return real(*args)

    counted.cache_clear = real.cache_clear  # type: ignore[attr-defined]
    monkeypatch.setattr(stats, "_bootstrap", counted)
    return ran


def test_an_interval_known_before_is_taken_and_every_one_asked_for_is_recorded(
        monkeypatch: pytest.MonkeyPatch) -> None:
    computed = stats.ratio_ci(A, B, 0.95, 500, "seed")
    with stats.intervals() as asked:
        assert stats.ratio_ci(A, B, 0.95, 500, "seed") == computed
    assert list(asked.values()) == [computed] and len(asked) == 1
    ran = _counted(monkeypatch)
    # Known: taken as it is, with no bootstrap (a planted value shows it was not computed).
    planted = {next(iter(asked)): (0.5, 2.0)}
    with stats.intervals(planted) as again:
        assert stats.ratio_ci(A, B, 0.95, 500, "seed") == (0.5, 2.0)
        other = stats.ratio_ci(A, B, 0.95, 500, "another seed")  # not known: computed
    assert len(ran) == 1 and ran[0][4] == "another seed"
    assert set(again.values()) == {(0.5, 2.0), other}
    # Outside, nothing is taken or recorded.
    assert stats.ratio_ci(A, B, 0.95, 500, "seed") == computed
    assert len(again) == 2


def test_intervals_nest_and_leave_the_state_as_they_found_it() -> None:
    with stats.intervals() as outer:
        stats.ratio_ci(A, B, 0.95, 200, "outer")
        with stats.intervals() as inner:
            stats.ratio_ci(A, B, 0.95, 200, "inner")
        stats.ratio_ci(A, B, 0.95, 200, "outer again")
    assert len(inner) == 1 and len(outer) == 2
    assert stats._ASKED is None and stats._KNOWN == {}


def test_the_inputs_are_told_apart_where_equality_would_not() -> None:
    """0.0 == -0.0 and 1 == 1.0, but a bootstrap of one need not be that of
    the other: the key is their bytes (marshal), and each is its own."""
    with stats.intervals() as asked:
        stats.ratio_ci((0.0, 1.0), (1.0, 2.0), 0.95, 200, "s")
        stats.ratio_ci((-0.0, 1.0), (1.0, 2.0), 0.95, 200, "s")
        stats.ratio_ci((1, 2), (1.0, 2.0), 0.95, 200, "s")
        stats.ratio_ci((1.0, 2.0), (1.0, 2.0), 0.95, 200, "s")
    assert len(asked) == 4
    assert [marshal.loads(k)[0] for k in asked] == [(0.0, 1.0), (-0.0, 1.0), (1, 2), (1.0, 2.0)]


def test_inputs_marshal_cannot_write_are_computed_and_not_recorded() -> None:
    class Odd(float):
        pass

    odd = (Odd(101.0), Odd(99.5))
    with stats.intervals() as asked:
        got = stats.ratio_ci(odd, (90.0, 91.0), 0.95, 200, "s")
    assert asked == {} and got == stats.ratio_ci((101.0, 99.5), (90.0, 91.0), 0.95, 200, "s")


def _store(tmp_path: Path) -> tuple[Path, Path, list[Path]]:
    """A synthetic store with repeats (bootstrapped) less its last campaign,
    its settings, and the last campaign's run files."""
    full = tmp_path / "full"
    render_scaling.build_store(full, 1200, seed=5, request_fraction=0.3)
    files = sorted(p for p in (full / "runs").iterdir() if not p.name.startswith("."))
    last = max(p.name.split("-")[1] for p in files)
    store = tmp_path / "store"
    (store / "runs").mkdir(parents=True)
    later = []
    for p in files:
        if p.name.split("-")[1] == last:
            later.append(p)
        else:
            shutil.copy2(p, store / "runs" / p.name)
    settings = tmp_path / "findings.toml"
    settings.write_text(f'[findings]\ntitle = "intervals"\nbaseline = "baseline"\ntemplates = "{ROOT / "templates"}"\n'
                        f'template = "eagle-fast-verify.md.j2"\nstore = "{store}"\ndocument = "doc.md"\n')
    return store, settings, later


def _render(tmp_path: Path, settings: Path) -> bytes:
    out = tmp_path / "out.md"
    r = cli("--settings", str(settings), "render", "--output", str(out))
    assert r.exit_code == 0, r.output
    return out.read_bytes()


def test_a_render_after_a_new_campaign_bootstraps_only_what_it_had_not_and_writes_the_same_bytes(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cache = tmp_path / "cache"
    monkeypatch.setenv("FINDINGS_CACHE_DIR", str(cache))
    monkeypatch.delenv("FINDINGS_CACHE", raising=False)
    store, settings, later = _store(tmp_path)
    stats._bootstrap.cache_clear()  # each process starts with none
    ran = _counted(monkeypatch)
    first = _render(tmp_path, settings)
    assert len(ran) > 10
    entry, = (cache / "intervals").iterdir()
    code, kept = pickle.loads(entry.read_bytes())
    assert code == rendercache.code_fingerprint() and len(kept) >= len(set(ran))

    for p in later:
        shutil.copy2(p, store / "runs" / p.name)
    stats._bootstrap.cache_clear()
    ran.clear()
    grown = _render(tmp_path, settings)
    again = len(ran)
    with cache_off():
        stats._bootstrap.cache_clear()
        ran.clear()
        assert _render(tmp_path, settings) == grown != first
    # Those of the cells compared before were kept: about those of the new campaign are computed.
    assert 0 < again < len(ran) / 3, (again, len(ran))

    # A damaged entry, or one of the wrong shape, is a miss: the same bytes.
    for damaged in (b"not a pickle", pickle.dumps((code, {b"key": "not an interval"})),
                    pickle.dumps((code, {k: (0.5, 2.0) for k in kept}))[:-9]):
        entry.write_bytes(damaged)
        assert rendercache.get_intervals(rendercache.scan(store)) == {}
        shutil.rmtree(cache / "documents")  # the document derived again
        stats._bootstrap.cache_clear()
        assert _render(tmp_path, settings) == grown
    # One of other code is never read.
    entry.write_bytes(pickle.dumps(("other code", kept)))
    assert rendercache.get_intervals(rendercache.scan(store)) == {}


def test_what_is_kept_is_what_was_known_and_asked_within_a_bound(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FINDINGS_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("FINDINGS_CACHE", raising=False)
    store = tmp_path / "store"
    (store / "runs").mkdir(parents=True)
    found = rendercache.scan(store)
    assert found.cache is not None

    def kept() -> set[bytes]:
        return set(rendercache.get_intervals(found))

    one = {b"a": (0.9, 1.1), b"b": (1.0, 1.2)}
    rendercache.put_intervals(found, one, {})
    assert kept() == {b"a", b"b"}
    # Another command's (conclusions asks for fewer than render): both kept.
    rendercache.put_intervals(found, {b"c": (0.8, 1.0)}, rendercache.get_intervals(found))
    assert kept() == {b"a", b"b", b"c"}
    # Past the bound, only those asked for.
    monkeypatch.setattr(rendercache, "KEEP_INTERVALS", 3)
    rendercache.put_intervals(found, {b"d": (1.0, 1.1), b"e": (1.0, 1.3)}, rendercache.get_intervals(found))
    assert kept() == {b"d", b"e"}
    # Nothing new: the entry is not written again.
    entry, = (tmp_path / "cache" / "intervals").iterdir()
    before = entry.stat().st_mtime_ns
    entry.write_bytes(entry.read_bytes())  # a known mtime
    stamp = entry.stat().st_mtime_ns
    rendercache.put_intervals(found, {b"d": (1.0, 1.1)}, rendercache.get_intervals(found))
    assert entry.stat().st_mtime_ns == stamp and stamp >= before


def _history(n: int, prefix: str = "link") -> HistoryCache:
    campaigns = [Campaign(f"c{k}", date=f"2026-01-{k % 28 + 1:02d}") for k in range(n)]
    return HistoryCache(chain=tuple(f"{prefix}-{k}" for k in range(n)),
                        entries=tuple(Entry(c, {"chat": {"eagle": f"policy {k}"}}, ()) for k, c in enumerate(campaigns)),
                        concluded={}, replayed=n)


def _pieces(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[rendercache.Scan, Path]:
    """An empty store's scan with a cache, pieces of four entries, and its history's folder."""
    monkeypatch.setenv("FINDINGS_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("FINDINGS_CACHE", raising=False)
    monkeypatch.setattr(rendercache, "HISTORY_PIECE", 4)
    store = tmp_path / "store"
    (store / "runs").mkdir(parents=True)
    return rendercache.scan(store), tmp_path / "cache" / "history" / rendercache._store_id(store)


def test_the_history_is_kept_in_pieces_each_written_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    found, folder = _pieces(tmp_path, monkeypatch)
    written: list[str] = []
    real = rendercache._write

    def counted(path: Path, data: bytes) -> None:
        written.append(path.name)
        real(path, data)

    monkeypatch.setattr(rendercache, "_write", counted)
    assert rendercache.get_history(found) == HistoryCache()  # nothing kept yet

    legacy = folder.parent / f"{folder.name}.pickle"  # the whole state in one file (before D171)
    legacy.parent.mkdir(parents=True)
    legacy.write_bytes(b"old")
    first = _history(13)
    rendercache.put_history(found, first)
    assert not legacy.exists()
    assert len(written) == 4 and written[-1] == "head.pickle"  # three pieces of four, then the last one
    assert rendercache.get_history(found) == first
    # One campaign more: only what follows the last whole piece is written again.
    written.clear()
    grown = _history(14)
    rendercache.put_history(found, grown)
    assert written == ["head.pickle"] and rendercache.get_history(found) == grown
    # A chain that changed from its sixth link on: the pieces after it written anew, the stale one removed.
    written.clear()
    changed = _history(14)
    changed.chain = first.chain[:5] + tuple(f"other-{k}" for k in range(5, 14))
    rendercache.put_history(found, changed)
    assert len(written) == 3 and sorted(os.listdir(folder)) == sorted(written[:2] + [first_piece(folder, first)]
                                                                     + ["head.pickle"])
    assert rendercache.get_history(found) == changed
    # Nothing replayed (the cache as it was): nothing written.
    written.clear()
    rendercache.put_history(found, HistoryCache(chain=changed.chain, entries=changed.entries, replayed=0))
    assert written == []


def first_piece(folder: Path, history: HistoryCache) -> str:
    """The name of the first piece of ``history`` (its first four entries)."""
    return rendercache._piece_name(history.chain[3])


@pytest.mark.parametrize("damage", ["piece", "head", "missing piece", "other code", "short piece", "head's pieces",
                                    "head's chain"])
def test_a_damaged_history_is_a_fresh_one(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, damage: str) -> None:
    found, folder = _pieces(tmp_path, monkeypatch)
    rendercache.put_history(found, _history(9))
    piece = folder / first_piece(folder, _history(9))
    if damage == "piece":
        piece.write_bytes(b"garbage")
    elif damage == "head":
        (folder / "head.pickle").write_bytes(pickle.dumps(("not", "a", "head")))
    elif damage == "missing piece":
        piece.unlink()
    elif damage in ("head's pieces", "head's chain"):
        code, chain, concluded, replayed, pieces, tail = pickle.loads((folder / "head.pickle").read_bytes())
        head = (code, chain, concluded, replayed, 5, tail) if damage == "head's pieces" else \
            (code, chain[:-1] + (7,), concluded, replayed, pieces, tail)
        (folder / "head.pickle").write_bytes(pickle.dumps(head))
    elif damage == "short piece":
        piece.write_bytes(pickle.dumps(tuple(_history(3).entries)))
    else:
        monkeypatch.setattr(rendercache, "_CODE", "another findings")
    assert rendercache.get_history(found) == HistoryCache()


def test_without_a_cache_intervals_are_neither_looked_up_nor_recorded(tmp_path: Path) -> None:
    store = tmp_path / "store"
    (store / "runs").mkdir(parents=True)
    with cache_off():
        found = rendercache.scan(store)
        with rendercache.intervals(found):
            assert stats._ASKED is None
            assert stats.ratio_ci(A, B, 0.95, 200, "s") == stats._bootstrap(A, B, 0.95, 200, "s")
    assert found.cache is None and not (tmp_path / "cache").exists()
