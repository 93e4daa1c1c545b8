"""The history's replay in two parts (D154): the campaigns before a split
replayed aside, the rest in this process from each workload's state found
again from its cells. Both parts together are the whole replay: the same
entries, the same state left in the cache, at every place a store can be
split, with the baseline's steps known at different times on each side."""

from __future__ import annotations

import dataclasses
import pickle
import random
import time

import pytest
from test_scaling import synthetic

from findings.core.aside import Limit, cores, forked, inline
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
    whole, state = job.run_part(0)
    assert whole == replay(data, rules)
    for k in range(1, len(data.campaigns)):
        head, _ = job.run_part(0, lambda rank: rank < k)
        tail, after = job.run_part(k)
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
    parts: list[tuple[int, str | None]] = []
    run_part = history._Job.run_part
    monkeypatch.setattr(history._Job, "run_part", lambda self, start, claim=None:
                        parts.append((start, None if claim is None else "claimed")) or run_part(self, start, claim))
    cache = HistoryCache()
    valid = cells(data, rules)
    begun = begin(data, rules, valid, regressions.analyse(data, rules, valid), cache, aside=run_aside)
    if run_aside is forked and cores() >= 2:
        time.sleep(0.2)  # the part aside has begun
    assert begun.result() == whole
    if run_aside is inline:  # nothing runs aside: the whole replay here, in one piece
        assert parts == []
    else:  # the campaigns left when the result was asked for, split: the later ones replayed here
        assert [stop for _, stop in parts] == [None] * len(parts) and len(parts) <= 1
    assert (cache.chain, cache.entries, cache.concluded) == \
        (whole_cache.chain, whole_cache.entries, whole_cache.concluded)
    assert cache.replayed == len(data.campaigns)
    cache = pickle.loads(pickle.dumps(cache))  # as the render cache keeps it: nothing new, nothing replayed
    assert replay(data, rules, cache=cache) == whole and cache.replayed == 0


def test_the_split_takes_half_the_cells_left():
    by_rank = {r: [None] * n for r, n in enumerate([5, 5, 5, 5, 80])}  # type: ignore[list-item]
    assert history.split_rank(by_rank, 0, 5) == 4  # the last campaign holds most: it alone is replayed here
    assert history.split_rank(by_rank, 0, 5, share=0.1) == 2
    assert history.split_rank(by_rank, 0, 5, share=0.0) == 1  # each part replays one campaign at least
    assert history.split_rank(by_rank, 3, 5) == 4
    assert history.split_rank(by_rank, 4, 5) == 5  # one campaign left: no split
    assert history.split_rank(by_rank, 5, 5) == 5
    rng = random.Random(0)
    sizes = [rng.randint(0, 30) for _ in range(200)]
    k = history.split_rank({r: [None] * n for r, n in enumerate(sizes)}, 50, len(sizes))  # type: ignore[list-item]
    assert sum(sizes[50:k - 1]) < 0.5 * sum(sizes[50:]) <= sum(sizes[50:k])


@pytest.mark.parametrize("taken", [0, 1, 5, 13, 14])
def test_a_split_asked_for_at_any_progress_is_the_whole_replay(taken, monkeypatch):
    """However far the part aside has gone when the result is asked for
    (the first ``taken`` campaigns claimed), the entries and the state left
    are those of one replay. Run here, with the part aside's claims made
    in the order a forked process makes them."""
    data = stepped(3, 14)
    rules = Rules(resamples=200)
    whole_cache = HistoryCache()
    whole = replay(data, rules, cache=whole_cache)
    limits: list[Limit] = []

    class Started:
        """A part aside that has taken its first ``taken`` campaigns when the result is asked for."""
        running = True

        def __init__(self, fn):
            self.fn, self.limit = fn, limits[-1]
            for rank in range(taken):
                assert self.limit.claim(rank)

        def result(self):
            return self.fn()

        def close(self):
            pass

    made = Limit
    monkeypatch.setattr(history, "Limit", lambda n: limits.append(made(n)) or limits[-1])
    monkeypatch.setattr(history, "ASIDE_CELLS", 1)
    monkeypatch.setattr(history, "SPLIT_CELLS", 1)
    cache = HistoryCache()
    valid = cells(data, rules)
    begun = begin(data, rules, valid, regressions.analyse(data, rules, valid), cache, aside=Started)
    assert begun.result() == whole
    assert (cache.chain, cache.entries, cache.concluded) == \
        (whole_cache.chain, whole_cache.entries, whole_cache.concluded)


def test_a_limit_stops_a_loop_aside_exactly_where_it_is_cut():
    limit = Limit(10)
    assert [limit.claim(r) for r in range(3)] == [True] * 3
    assert limit.cut(lambda taken: taken + 4) == 7
    assert [limit.claim(r) for r in range(3, 10)] == [True] * 4 + [False] * 3
    late = Limit(10)
    assert all(late.claim(r) for r in range(10))
    assert late.cut(lambda taken: 2) == 10  # never below what was taken
    capped = Limit(5)
    assert capped.cut(lambda taken: 99) == 5  # never above the limit
