"""Work done aside (findings/core/aside.py, D137): a pure function computed
in a forked process, its result pickled back; computed here instead
whenever that fails, so the answer, or the error, is the same. Real forks,
real pipes, real signals. And the history's replay run aside while the
rest is derived (findings/derive/history.py ``begin``, derived.py
``History``): the same entries, the same document, replayed once and only
when read."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from conftest import ROOT
from findings.core import aside
from findings.derive import history
from findings.derive.analysis import Rules, cells
from findings.derive.derived import derive
from findings.derive.history import HistoryCache, begin, replay

pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="work goes aside by fork only")

sys.path.insert(0, str(ROOT / "tests"))
from test_scaling import synthetic  # noqa: E402


@pytest.fixture(autouse=True)
def two_cores(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(aside, "cores", lambda: 2)


def _where(calls: list[int]) -> Any:
    def fn() -> tuple[int, str]:
        calls.append(os.getpid())
        return os.getpid(), "x" * 300_000  # more than a pipe holds: sent while the parent reads
    return fn


def test_the_result_comes_from_another_process() -> None:
    calls: list[int] = []
    handle = aside.forked(_where(calls))
    pid, text = handle.result()
    assert pid != os.getpid() and text == "x" * 300_000
    assert calls == []  # not computed here


def test_one_core_computes_it_here(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(aside, "cores", lambda: 1)
    calls: list[int] = []
    assert aside.forked(_where(calls)).result()[0] == os.getpid() and calls == [os.getpid()]
    calls.clear()
    assert aside.inline(_where(calls)).result()[0] == os.getpid() and calls == [os.getpid()]


def test_an_error_aside_is_raised_here() -> None:
    calls: list[int] = []

    def fn() -> None:
        calls.append(os.getpid())
        raise ValueError(f"bad input ({len(calls)} calls here)")

    with pytest.raises(ValueError, match=r"bad input \(1 calls here\)"):
        aside.forked(fn).result()  # computed again here, where it raises the same error
    assert calls == [os.getpid()]


def test_a_forked_process_killed_is_computed_here() -> None:
    parent = os.getpid()
    calls: list[int] = []

    def fn() -> str:
        if os.getpid() != parent:
            os.kill(os.getpid(), signal.SIGKILL)
        calls.append(os.getpid())
        return "done"

    assert aside.forked(fn).result() == "done" and calls == [parent]


def test_a_result_that_does_not_pickle_is_computed_here() -> None:
    calls: list[int] = []

    def fn() -> Any:
        calls.append(os.getpid())
        return lambda: 7

    assert aside.forked(fn).result()() == 7
    assert calls == [os.getpid()]


def _gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


def test_close_kills_the_forked_process() -> None:
    handle = aside.forked(lambda: time.sleep(120))
    pid = handle._proc.pid  # type: ignore[attr-defined]
    assert not _gone(pid)
    started = time.monotonic()
    handle.close()
    assert _gone(pid) and time.monotonic() - started < 30
    handle.close()  # twice: nothing


def test_the_forked_process_dies_with_its_parent(tmp_path: Path) -> None:
    """SIGKILL leaves the parent no time to kill it: the kernel does (prctl)."""
    pids = tmp_path / "pids"
    script = (f"import os, sys, time\nsys.path.insert(0, {str(ROOT)!r})\n"
              "from findings.core import aside\naside.cores = lambda: 2\n"
              "h = aside.forked(lambda: time.sleep(120))\n"
              f"open({str(pids)!r}, 'w').write(str(h._proc.pid))\ntime.sleep(120)\n")
    proc = subprocess.Popen([sys.executable, "-c", script])
    try:
        deadline = time.monotonic() + 60
        while not (pids.exists() and pids.read_text()) and time.monotonic() < deadline:
            time.sleep(0.05)
        child = int(pids.read_text())
        assert not _gone(child)
        proc.kill()
        proc.wait()
        deadline = time.monotonic() + 30
        while not _gone(child) and time.monotonic() < deadline:
            time.sleep(0.05)  # reaped by init once killed
        assert _gone(child) or _zombie(child)
    finally:
        proc.kill()


def _zombie(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(") ")[1].startswith("Z")
    except OSError:
        return True


def _counted(run_aside: Any, calls: list[int]) -> Any:
    def counted(fn: Any) -> Any:
        calls.append(1)
        return run_aside(fn)
    return counted


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("run_aside", ["forked", "inline"])
def test_a_replay_aside_equals_one_replay_here(seed: int, run_aside: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The entries, and the cache it leaves, whichever process replayed."""
    monkeypatch.setattr(history, "ASIDE_CELLS", 1)
    data = synthetic(seed, campaigns=14)
    rules = Rules(resamples=200)
    one = replay(data, rules)
    calls: list[int] = []
    counted = _counted(getattr(aside, run_aside), calls)
    cache = HistoryCache()
    aside_ = begin(data, rules, cache=cache, aside=counted).result()
    assert calls == [1]
    assert aside_ == one
    assert [list(e.policies) for e in aside_] == [list(e.policies) for e in one]  # in order, too
    plain = HistoryCache()
    replay(data, rules, cache=plain)
    assert (cache.chain, cache.entries, cache.concluded, cache.replayed) == \
        (plain.chain, plain.entries, plain.concluded, plain.replayed)
    # A cache left by a replay aside resumes, aside too (its tables are built
    # again from every earlier cell, D143): one more campaign replayed, only
    # its entry sent back, and the cache left as one replay here leaves it.
    earlier = data.upto(data.campaigns[-2].name)
    cache = HistoryCache()
    assert begin(earlier, rules, cache=cache, aside=counted).result() == replay(earlier, rules)
    assert calls == [1, 1]
    assert begin(data, rules, cache=cache, aside=counted).result() == one and cache.replayed == 1
    assert calls == [1, 1, 1]
    plain = HistoryCache()
    replay(earlier, rules, cache=plain)
    replay(data, rules, cache=plain)
    assert (cache.chain, cache.entries, cache.concluded, cache.replayed) == \
        (plain.chain, plain.entries, plain.concluded, plain.replayed) and plain.replayed == 1


def test_a_short_replay_is_not_run_aside() -> None:
    data = synthetic(1, campaigns=10)
    rules = Rules(resamples=200)
    calls: list[int] = []
    assert begin(data, rules, aside=_counted(aside.forked, calls)).result() == replay(data, rules)
    assert calls == []  # fewer cells than ASIDE_CELLS


def test_derive_with_the_replay_aside_equals_derive(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(history, "ASIDE_CELLS", 1)
    data = synthetic(4, campaigns=12)
    rules = Rules(resamples=200)
    plain, split = derive(data, rules), derive(data, rules, aside=aside.forked)
    assert split.history == plain.history and split.to_json() == plain.to_json()


def test_the_history_is_replayed_once_and_only_when_asked_for(monkeypatch: pytest.MonkeyPatch) -> None:
    """deploy and plan never read the history: it is never replayed for them."""
    runs: list[int] = []
    real = history._run

    def counted(*args: Any, **kwargs: Any) -> Any:
        runs.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(history, "_run", counted)
    data = synthetic(2, campaigns=10)
    rules = Rules(resamples=200)
    d = derive(data, rules)
    assert d.conclusions.workloads and d.tables and not d.replayed.known and runs == []
    entries = d.history
    assert runs == [1] and d.replayed.known and len(entries) == 10
    assert d.history is entries and d.to_json()["history"] and runs == [1]


def test_close_stops_a_replay_aside_never_asked_for(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(history, "ASIDE_CELLS", 1)
    monkeypatch.setattr(history, "_run", lambda *args, **kwargs: time.sleep(120))
    d = derive(synthetic(2, campaigns=6), Rules(resamples=200), aside=aside.forked)
    pids = [p._proc.pid for p in d.replayed._replay._aside]  # type: ignore[union-attr]
    assert len(pids) == 1 and not any(map(_gone, pids))
    d.close()
    assert all(map(_gone, pids))


def test_a_render_with_the_replay_aside_is_the_same_document(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The whole command, the render cache on: the same bytes, and the cache
    given the state of the replay that ran aside (the next render resumes)."""
    from findings import api
    from findings.document import cache as rendercache
    from findings.document.settings import load as load_settings
    sys.path.insert(0, str(ROOT / "benchmarks" / "perf"))
    import render_scaling
    folder = tmp_path / "store"
    folder.mkdir()
    render_scaling.build_store(folder, 2000, seed=5)
    settings = load_settings(str(render_scaling._settings(tmp_path))).with_overrides(store=str(folder))
    monkeypatch.setenv("FINDINGS_CACHE", "off")
    here = api.render_text(settings)
    monkeypatch.setattr(history, "ASIDE_CELLS", 1)
    runs: list[int] = []
    real = aside.forked

    def counted(fn: Any) -> Any:
        runs.append(1)
        return real(fn)

    monkeypatch.setattr(aside, "forked", counted)
    assert api.render_text(settings) == here and runs == [1]
    monkeypatch.setenv("FINDINGS_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("FINDINGS_CACHE")
    assert api.render_text(settings) == here and runs == [1, 1]
    kept = rendercache.get_history(rendercache.scan(folder))
    assert kept is not None and len(kept.chain) == len(kept.entries) > 0 and kept.replayed == len(kept.entries)


def test_the_chain_is_hashed_aside_when_the_replay_may_resume(monkeypatch: pytest.MonkeyPatch,
                                                              tmp_path: Path) -> None:
    """D146: with nothing to resume, the caller hashes the chain while the
    whole replay runs aside. D171: with a cache to resume from, the caller
    hashes it first (to tell whether the replay resumes), and a replay
    resumed with many cells new runs aside. The entries and the cache left
    are those of one replay here, either way."""
    monkeypatch.setattr(history, "ASIDE_CELLS", 1)
    where = tmp_path / "hashed"
    real = history._chain

    def chain(*args: Any) -> list[str]:
        with where.open("a") as f:
            f.write(f"{os.getpid()}\n")
        return real(*args)

    monkeypatch.setattr(history, "_chain", chain)
    data = synthetic(2, campaigns=12)
    earlier = data.upto(data.campaigns[-2].name)
    rules = Rules(resamples=200)
    cache = HistoryCache()
    assert begin(earlier, rules, cache=cache, aside=aside.forked).result() == replay(earlier, rules)
    assert [int(p) for p in where.read_text().split()] == [os.getpid()]  # nothing to resume: here
    where.unlink()
    forks: list[int] = []

    def counted(fn: Any) -> Any:
        forks.append(1)
        return aside.forked(fn)

    got = begin(data, rules, cache=cache, aside=counted).result()
    pids = [int(p) for p in where.read_text().split()]
    assert pids == [os.getpid()] and cache.replayed == 1 and forks == [1]  # resumed: hashed here, run aside
    plain = HistoryCache()
    replay(earlier, rules, cache=plain)
    assert got == replay(data, rules, cache=plain)
    assert (cache.chain, cache.entries, cache.replayed) == (plain.chain, plain.entries, plain.replayed)


def test_a_replay_resumed_with_few_cells_new_runs_here(monkeypatch: pytest.MonkeyPatch) -> None:
    """D171: a store large enough for its replay to run aside, whose cache
    resumes it with fewer than ASIDE_CELLS cells new (a render after a new
    campaign): replayed here, when asked for. A fork's pages, copied as this
    process went on deriving, cost more than such a replay."""
    data = synthetic(2, campaigns=12)
    earlier = data.upto(data.campaigns[-2].name)
    rules = Rules(resamples=200)
    cache = HistoryCache()
    replay(earlier, rules, cache=cache)
    every = len(cells(data, rules))
    new = every - len(cells(earlier, rules))
    assert 0 < new < every
    monkeypatch.setattr(history, "ASIDE_CELLS", new + 1)  # the store's cells are more, the new ones fewer
    forks: list[int] = []

    def counted(fn: Any) -> Any:
        forks.append(1)
        return aside.forked(fn)

    begun = begin(data, rules, cache=cache, aside=counted)
    assert forks == []
    got = begun.result()
    assert forks == [] and cache.replayed == 1 and got == replay(data, rules)
    # One cell fewer than the new ones: aside, as before.
    monkeypatch.setattr(history, "ASIDE_CELLS", new)
    again = HistoryCache()
    replay(earlier, rules, cache=again)
    assert begin(data, rules, cache=again, aside=counted).result() == got and forks == [1]
