"""The one derivation: ``derive(dataset, rules) -> Derived``.

Everything the outputs say about the data is computed here, once per
command, and every consumer reads it: the document (findings/document/report.py),
``conclusions --json`` and its text form (findings/api.py), ``deploy`` and
``plan`` (findings/decide/), and ``diff`` (findings/document/diff.py). No
consumer asks for cells, flags, verdicts or the history again.

Pure: no I/O (what runs aside is the caller's: findings/core/aside.py). The
order is the order of the dependencies:

1. the validity gates' flags (findings/derive/validity.py);
2. the cells of the valid points (findings/derive/analysis.py);
3. the moves between campaigns, then the conclusions from the cells less
   those of suspect moves (findings/derive/regressions.py);
4. the within-campaign comparisons, the history (findings/derive/history.py:
   replayed when first asked for, or aside from the moment the moves are
   known while the rest is derived and read, D137), the open-loop conclusions
   (findings/derive/openloop.py), the verdicts by prompt category
   (findings/derive/categories.py), the caveats' inputs
   (findings/derive/caveats.py).

``Derived.to_json()`` is the stable ``conclusions --json`` shape
(findings/derive/jsonform.py, docs/conclusions.md).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from itertools import compress, repeat
from operator import attrgetter, is_
from typing import Any, Callable, Collection, Iterator, Mapping, Sequence

from findings.core.aside import Aside
from findings.core.model import Dataset, Point
from findings.derive import caveats, categories, openloop, regressions, slices as slices_mod
from findings.derive import tuning as tuning_mod
from findings.derive.analysis import (SIMULATED_SUFFIX, Cell, Comparison, Conclusions, Rules, Table,
                                      comparisons_in_campaigns)
from findings.derive.history import Entry, HistoryCache, Replay, begin
from findings.derive.jsonform import to_json
from findings.derive.validity import Counts

#: (campaign, workload) -> the comparisons of every candidate with the baseline there.
CampaignComparisons = Mapping[tuple[str, str], list[Comparison]]


class History:
    """The history's entries, once: from a replay begun by ``derive``
    (findings/derive/history.py ``begin``), asked for when first needed. A
    command that never reads the history (deploy, plan) never replays it."""

    def __init__(self, replay: Replay) -> None:
        self._replay: Replay | None = replay
        self._entries: tuple[Entry, ...] | None = None

    def entries(self) -> tuple[Entry, ...]:
        if self._entries is None:
            assert self._replay is not None
            self._entries = tuple(self._replay.result())
            self._replay = None
        return self._entries

    @property
    def known(self) -> bool:
        """Whether the entries were asked for (and the replay's cache filled)."""
        return self._entries is not None

    def __iter__(self) -> Iterator[Entry]:
        return iter(self.entries())

    def close(self) -> None:
        if self._replay is not None:
            self._replay.close()

    def __eq__(self, other: object) -> bool:
        return isinstance(other, History) and self.entries() == other.entries()

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"History({len(self._entries)} entries)" if self._entries is not None else "History(not replayed)"


@dataclass(frozen=True)
class Derived:
    """What the data says, under ``rules``: read by every output."""

    data: Dataset
    rules: Rules
    #: point id -> why it is left out: the validity gates' reasons and the
    #: suspect moves' (marked, in no verdict).
    flags: Mapping[str, tuple[str, ...]]
    #: the moves, the step-aware tables, the conclusions and the
    #: baseline-moved sentences (``cells``: the valid cells less suspects).
    concluded: regressions.Concluded
    #: each campaign in turn, with the conclusions up to it (``history``).
    replayed: History
    open_loop: tuple[openloop.OpenLoopConclusion, ...]
    by_category: tuple[categories.Difference, ...]
    #: ids of the points whose source does not record how many requests failed.
    failures_unknown: tuple[str, ...]
    #: point id -> its request counts (validity.counts).
    counts: Mapping[str, Counts]
    #: the configs that speculate (caveats.speculative_configs).
    speculative: frozenset[str]
    points: Mapping[str, Point]
    #: the store's tunes (findings tune), each trial scored from the valid cells.
    tuning: tuple[tuning_mod.Tuning, ...] = ()
    #: the workloads split by prompt category, by the prompt set they split
    #: (categories.families): {set label: {workload: category}}.
    families: Mapping[str, Mapping[str, str]] = field(default_factory=dict)
    #: campaign -> its within-campaign comparisons, each derived once, when
    #: first asked for (a document shows its latest campaigns only).
    _comparisons: dict[str, dict[str, list[Comparison]]] = field(default_factory=dict, compare=False, repr=False)

    @property
    def history(self) -> tuple[Entry, ...]:
        """Each campaign in turn, with the conclusions up to it: replayed
        when first asked for, or aside since ``derive`` (D137)."""
        return self.replayed.entries()

    def close(self) -> None:
        """Stops the history's replay if it runs aside and was not asked for."""
        self.replayed.close()

    def comparisons(self, campaigns: Collection[str] | None = None) -> CampaignComparisons:
        """(campaign, workload) -> the comparisons of every candidate with the
        baseline there, judged by today's noise estimate; of ``campaigns``
        only, if given."""
        wanted = [c.name for c in self.data.campaigns] if campaigns is None else sorted(campaigns)
        missing = {c for c in wanted if c not in self._comparisons}
        if missing:
            done = self.concluded
            found = comparisons_in_campaigns(self.rules, done.cells, done.tables, missing)
            for name in missing:
                self._comparisons[name] = {}
            for (campaign, workload), comps in found.items():
                self._comparisons[campaign][workload] = comps
        return {(c, w): comps for c in wanted for w, comps in sorted(self._comparisons[c].items())}

    @property
    def conclusions(self) -> Conclusions:
        return self.concluded.conclusions

    @property
    def cells(self) -> list[Cell]:
        return self.concluded.cells

    @property
    def tables(self) -> Mapping[str, Table]:
        return self.concluded.tables

    @property
    def moves(self) -> list[regressions.Move]:
        return self.concluded.moves

    def caveats_of(self, comp: Comparison) -> tuple[str, ...]:
        """Why a comparison's verdict is not a deployment fact (or nothing)."""
        return caveats.pair_reasons(self.data, self.speculative, self.points,
                                    comp.a.config, comp.a.campaign, comp.a.point_ids,
                                    comp.b.config, comp.b.campaign, comp.b.point_ids)

    def to_json(self) -> dict[str, Any]:
        """The stable ``conclusions --json`` shape."""
        done = self.concluded
        why: Callable[[Comparison], tuple[str, ...]] = self.caveats_of
        return to_json(done.conclusions, self.replayed, dict(self.flags), caveats=why,
                       failures_unknown=list(self.failures_unknown), steps=done.steps, drift=done.drift,
                       suspect=done.suspect, baseline_moved=done.baseline_moved,
                       by_category=list(self.by_category), open_loop=self.open_loop, tunes=self.tuning)


def derive(data: Dataset, rules: Rules, history_cache: HistoryCache | None = None,
           aside: Aside | None = None, slices: slices_mod.Slices | None = None,
           moves_cache: regressions.MovesCache | None = None) -> Derived:
    """Everything the outputs need, once. ``history_cache``: the replay's
    per-campaign-prefix cache (findings/derive/history.py), which changes
    only how fast the history is found, never what it is. The history is
    replayed when first asked for; with ``aside`` (findings/core/aside.py),
    a long replay runs aside from the moment the moves are known, while the
    rest is derived here and read by the caller (D137). The result is the
    same either way; ``Derived.close()`` stops a replay never asked for.
    ``slices``: each campaign's gate flags, counts and cells kept before, by
    content (findings/derive/slices.py); those of the campaigns not there
    are derived and added to it (for the caller to keep), and the result is
    the same. ``moves_cache``: the moves kept before, resumed from where the
    campaigns' slices say what changed since (regressions.analyse_kept);
    what to keep from this command is set in it."""
    gate_flags, every, valid = slices_mod.derive(data, rules, slices)
    keys = slices.keys if slices is not None else None  # each campaign's slice key (D174)
    found = regressions.analyse_kept(data, rules, valid, keys, moves_cache)
    # What the outputs read of every run, found before the replay may be
    # forked: a pass over every run after it copies each page it touches (D173).
    tunes = tuning_mod.tune_campaigns(data)
    data.read_runs()
    final: dict[str, Table] = {}  # (filled below, before the history is read: D175)
    history = History(begin(data, rules, regressions.without_suspects(valid, found), found, cache=history_cache,
                            aside=aside, cell_keys=keys, final=final))
    try:
        done = regressions.conclude_with_steps(data, rules, valid, found)
        final.update(done.tables)
        flags = {**gate_flags, **done.suspect_flags}
        spec = caveats.speculative_configs(data.configs, data.points)
        points = data.points_by_id
        families = categories.families(data.points)
        return Derived(
            data=data, rules=rules, flags=flags, concluded=done,
            replayed=history,
            open_loop=openloop.conclude(data, rules, flags, spec=spec, points=points),
            by_category=tuple(categories.differences(done.conclusions, families, SIMULATED_SUFFIX)),
            failures_unknown=_failures_unknown(data.points, every),
            counts=every,
            speculative=spec,
            points=points,
            tuning=tuning_mod.tunings(data, done.cells, flags, rules.objective, tunes),
            families=families,
        )
    except BaseException:
        history.close()
        raise


_FAILED = attrgetter("failed")


def _failures_unknown(points: Sequence[Point], every: Mapping[str, Counts]) -> tuple[str, ...]:
    """The ids of the points whose failures are unknown, in the points'
    order: where ``every`` (validity.assess) holds each point once, in that
    order, the counts with no failed count picked out at C speed (most
    points record it), and only those asked ``failures_unknown``."""
    if len(every) == len(points):
        silent = compress(every.items(), map(is_, map(_FAILED, every.values()), repeat(None)))
        return tuple(point_id for point_id, c in silent if c.failures_unknown)
    return tuple(p.id for p in points if every[p.id].failures_unknown)
