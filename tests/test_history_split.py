"""The history's replay in two parts (D154): the campaigns before a split
replayed aside, the rest in this process from each workload's state found
again from its cells. Both parts together are the whole replay: the same
entries, the same state left in the cache, at every place a store can be
split, with the baseline's steps known at different times on each side."""

from __future__ import annotations

import dataclasses
import pickle
import random

import pytest
from test_scaling import synthetic

from findings.core.aside import forked, inline
from findings.core.model import THROUGHPUT, Dataset
from findings.derive import history, regressions
from findings.derive.analysis import Rules, cells
from findings.derive.history import HistoryCache, begin, replay


def stepped(seed: int, campaigns: int = 14) -> Dataset:
    """``synthetic``, with the baseline's throughput stepping down by a
    third from a campaign on, with its engine version recorded as changed
    there: a step the regressions call, which changes the drift bands from
    then on."""
    data = synthetic(seed, campaigns)
    at = campaigns // 2
    later = {c.name for c in data.campaigns[at:]}
    points = tuple(p._replace(metrics={THROUGHPUT: p.metrics[THROUGHPUT] * 0.66})
                   if p.config == "baseline" and p.campaign in later else p for p in data.points)
    facts = {("baseline", c.name): {"engine_version": "2" if c.name in later else "1"} for c in data.campaigns}
    return dataclasses.replace(data, points=points, facts=facts)


def _job(data: Dataset, rules: Rules, cache: HistoryCache | None = None) -> history._Job:
    valid = cells(data, rules)
    return history._Job(data, rules, valid, regressions.analyse(data, rules, valid), cache, None)


@pytest.mark.parametrize("make", [synthetic, stepped])
@pytest.mark.parametrize("seed", range(4))
def test_the_two_parts_are_the_whole_replay_at_every_split(make, seed):
    data = make(seed, 14)
    rules = Rules(resamples=200)
    job = _job(data, rules)
    whole, state = job.run_part(0, None)
    assert whole == replay(data, rules)
    for k in range(1, len(data.campaigns)):
        head, _ = job.run_part(0, k)
        tail, after = job.run_part(k, None)
        assert head + tail == whole, k
        assert after == state and list(after) == list(state), k  # the workloads in the same order, too


def test_the_stepped_store_has_a_baseline_step_the_replay_learns_midway():
    data = stepped(1, 14)
    rules = Rules(resamples=200)
    valid = cells(data, rules)
    steps = regressions.steps(regressions.analyse(data, rules, valid))
    assert any(m.config == "baseline" for m in steps)


@pytest.mark.parametrize("run_aside", [inline, forked])
def test_a_split_replay_begun_aside_leaves_the_cache_of_a_whole_one(run_aside, monkeypatch):
    """begin() splits a whole replay of a large store: the entries and the
    state it leaves in the cache are those of one replay in one piece, and a
    later replay resumes from that state."""
    data = stepped(2, 14)
    rules = Rules(resamples=200)
    whole_cache = HistoryCache()
    whole = replay(data, rules, cache=whole_cache)
    monkeypatch.setattr(history, "ASIDE_CELLS", 1)
    monkeypatch.setattr(history, "SPLIT_CELLS", 1)
    parts: list[tuple[int, int | None]] = []
    run_part = history._Job.run_part
    monkeypatch.setattr(history._Job, "run_part",
                        lambda self, start, stop: parts.append((start, stop)) or run_part(self, start, stop))
    cache = HistoryCache()
    valid = cells(data, rules)
    begun = begin(data, rules, valid, regressions.analyse(data, rules, valid), cache, aside=run_aside)
    assert begun.result() == whole
    # The tail replayed here; the head too when run inline (a forked process's call is not seen here).
    [k] = [start for start, stop in parts if stop is None]
    assert 0 < k < len(data.campaigns)
    assert sorted(parts) == ([(0, k), (k, None)] if run_aside is inline else [(0, k), (k, None)][len(parts) == 1:])
    assert (cache.chain, cache.entries, cache.concluded) == \
        (whole_cache.chain, whole_cache.entries, whole_cache.concluded)
    assert cache.replayed == len(data.campaigns)
    cache = pickle.loads(pickle.dumps(cache))  # as the render cache keeps it: nothing new, nothing replayed
    assert replay(data, rules, cache=cache) == whole and cache.replayed == 0


def test_the_split_takes_about_its_share_of_the_cells():
    by_rank = {r: [None] * n for r, n in enumerate([5, 5, 5, 5, 80])}  # type: ignore[list-item]
    assert history.split_rank(by_rank, 5, 0.7) == 4  # the last campaign holds most: it alone is replayed here
    assert history.split_rank(by_rank, 5, 0.1) == 2
    assert history.split_rank(by_rank, 5, 0.0) == 1  # each part replays one campaign at least
    assert history.split_rank({0: [None] * 99}, 2, 0.7) == 1  # type: ignore[list-item]
    rng = random.Random(0)
    sizes = [rng.randint(0, 30) for _ in range(200)]
    k = history.split_rank({r: [None] * n for r, n in enumerate(sizes)}, len(sizes), 0.7)  # type: ignore[list-item]
    assert sum(sizes[:k - 1]) < 0.7 * sum(sizes) <= sum(sizes[:k])
