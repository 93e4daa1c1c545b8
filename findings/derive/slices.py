"""A campaign's slice of the derivation, kept by content (issue 38, D174).

The validity gates' flags of a campaign's points, their request counts and
the campaign's valid cells are derived from its points alone, given its
configs' speculation, its rank and the gates. So each campaign's are kept
between commands (the render cache, findings/document/cache.py), keyed by
all of that, and a command derives them again only for the campaigns
whose inputs changed: after a new campaign, that campaign.

Pure. What is kept changes only how fast the flags, counts and cells are
found, never what they are: ``derive`` assembles exactly what
``validity.assess`` and ``analysis.cells`` give over the whole store,
in the same order (tests/test_slices.py holds it to that).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from itertools import compress
from operator import attrgetter
from typing import Mapping, Sequence

from findings.core.model import Dataset
from findings.derive.analysis import Cell, Rules, cells
from findings.derive.validity import Counts, assess, speculative

#: Bump when what a slice holds, or how its key is made, changes.
VERSION = "1"

_ID, _CAMPAIGN = attrgetter("id"), attrgetter("campaign")


@dataclass(frozen=True)
class Slice:
    """One campaign's flags, counts and valid cells."""

    #: point id -> why the gates leave it out, in its points' order
    flagged: Mapping[str, tuple[str, ...]]
    #: each of its points' counts, in their order in the store
    counts: tuple[Counts, ...]
    #: workload -> its valid cells there, by (config, concurrency)
    cells: Mapping[str, tuple[Cell, ...]]


@dataclass(frozen=True)
class Slices:
    """The slices of one store: each campaign's key, and the slices known by
    key (``known``: as the caller kept them; ``made``: derived by this
    command, for the caller to keep)."""

    keys: Mapping[str, str]  # campaign name -> its slice's key
    known: Mapping[str, Slice]
    made: dict[str, Slice] = field(default_factory=dict)

    def live(self) -> dict[str, Slice]:
        """key -> slice, of every campaign of the store (known or made)."""
        out = {}
        for key in self.keys.values():
            got = self.made.get(key) or self.known.get(key)
            if got is not None:
                out[key] = got
        return out


def keys(data: Dataset, rules: Rules, run_keys: Sequence[str]) -> dict[str, str] | None:
    """campaign name -> the key of its slice: the gates, the campaign's name
    and rank, the speculation of each config it measured (from the configs'
    merged facts, which a later campaign's run can change), and the content
    keys of the runs that hold it (``run_keys``, one per run of
    ``data.runs``, as the caller keys their content and code), in their
    order. None when a run has no key, or the configs each campaign measured
    are not known (a dataset not made by ``store.merge``)."""
    if len(run_keys) != len(data.runs) or (data.points and not data.facts):
        return None
    held: dict[str, list[str]] = {c.name: [] for c in data.campaigns}
    for run, key in zip(data.runs, run_keys):
        for c in run.campaigns:
            held[c.name].append(key)
    measured: dict[str, list[str]] = {}
    for config, campaign in data.facts:
        measured.setdefault(campaign, []).append(config)
    spec = {config: speculative(data.configs.get(config, {})) for config in data.configs}
    gates = repr(rules.gates)
    out = {}
    for rank, c in enumerate(data.campaigns):
        configs = sorted(measured.get(c.name, ()))
        text = "\n".join([VERSION, gates, c.name, str(rank),
                          repr([(config, spec.get(config, speculative({}))) for config in configs]),
                          *held[c.name]])
        out[c.name] = hashlib.sha256(text.encode()).hexdigest()
    return out


Found = tuple[dict[str, tuple[str, ...]], dict[str, Counts], list[Cell]]


def derive(data: Dataset, rules: Rules, given: Slices | None = None) -> Found:
    """``validity.assess`` (the gates' flags, every point's counts) and
    ``analysis.cells`` of the valid points, over the whole store: from
    ``given``'s known slices where a campaign's key is there, derived for
    the others (added to ``given.made``)."""
    if given is None:
        flags, every = assess(data, rules.gates)
        return flags, every, cells(data, rules, flags)
    by_name = {name: given.known[key] for name, key in given.keys.items() if key in given.known}
    missing = [c.name for c in data.campaigns if c.name not in by_name]
    if len(missing) == len(data.campaigns):  # nothing kept: derived whole, then cut into slices
        flags, every = assess(data, rules.gates)
        valid = cells(data, rules, flags)
        _keep(given, _cut(data, missing, flags, every, valid))
        return flags, every, valid
    if missing:
        wanted = set(missing)
        points = tuple(compress(data.points, map(wanted.__contains__, map(_CAMPAIGN, data.points))))
        part = Dataset(campaigns=data.campaigns, points=points, configs=data.configs)
        flags, every = assess(part, rules.gates)
        made = _cut(part, missing, flags, every, cells(part, rules, flags))
        _keep(given, made)
        by_name.update(made)
    found = _assemble(data, by_name)
    if found is None:  # a slice that does not fit its campaign's points: derived whole
        flags, every = assess(data, rules.gates)
        return flags, every, cells(data, rules, flags)
    return found


def _keep(given: Slices, made: Mapping[str, Slice]) -> None:
    for name, piece in made.items():
        given.made[given.keys[name]] = piece


def _cut(data: Dataset, names: Sequence[str], flags: Mapping[str, tuple[str, ...]], every: Mapping[str, Counts],
         valid: Sequence[Cell]) -> dict[str, Slice]:
    """The slices of ``names`` (every campaign of ``data``'s points), from
    what was derived over those points."""
    counts: dict[str, list[Counts]] = {name: [] for name in names}
    flagged: dict[str, dict[str, tuple[str, ...]]] = {name: {} for name in names}
    for p in data.points:
        counts[p.campaign].append(every[p.id])
        why = flags.get(p.id)
        if why is not None:
            flagged[p.campaign][p.id] = why
    by: dict[str, dict[str, list[Cell]]] = {name: {} for name in names}
    for cell in valid:
        by[cell.campaign].setdefault(cell.workload, []).append(cell)
    return {name: Slice(flagged=flagged[name], counts=tuple(counts[name]),
                        cells={w: tuple(cs) for w, cs in by[name].items()}) for name in names}


def _assemble(data: Dataset, by_name: Mapping[str, Slice]) -> Found | None:
    """What ``assess`` and ``cells`` give over the whole store, from every
    campaign's slice: the counts in the points' order, the flags in the
    points' order, the cells by (workload, campaign, config, concurrency).
    None when a slice's counts are not as many as its campaign's points."""
    points = data.points
    ids = list(map(_ID, points))
    names = list(map(_CAMPAIGN, points))
    if sum(len(s.counts) for s in by_name.values()) != len(points) or not set(names) <= by_name.keys():
        return None
    each = {name: iter(s.counts) for name, s in by_name.items()}
    slots = list(map(next, map(each.__getitem__, names)))  # each point's, from its campaign's, in turn
    if len(slots) != len(points) or any(next(it, None) is not None for it in each.values()):
        return None
    every = dict(zip(ids, slots))
    flagged: dict[str, tuple[str, ...]] = {}
    for s in by_name.values():
        if s.flagged:
            flagged.update(s.flagged)
    flags = {i: flagged[i] for i in compress(ids, map(flagged.__contains__, ids))} if flagged else {}
    workloads = sorted({w for s in by_name.values() for w in s.cells})
    ordered = sorted(by_name)
    valid: list[Cell] = []
    for w in workloads:
        for name in ordered:
            got = by_name[name].cells.get(w)
            if got:
                valid.extend(got)
    return flags, every, valid
