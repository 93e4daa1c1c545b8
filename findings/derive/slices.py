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

import functools
import hashlib
from dataclasses import dataclass, field
from array import array
from itertools import chain, compress, repeat
from operator import attrgetter
from typing import Callable, Mapping, Sequence

from findings.core.model import Dataset, InPointOrder, Point
from findings.derive.analysis import Cell, Rules, cells
from findings.derive.validity import Counts, assess, speculative

#: Bump when what a slice holds, or how its key is made, changes.
VERSION = "1"

_ID, _CAMPAIGN, _POINTS, _SERIES = (attrgetter(name) for name in ("id", "campaign", "points", "series"))


#: A point's place, in a slice, is among the points of the runs that hold
#: the campaign, in order (what the slice's key holds): a cell made again
#: takes its points' own ids (and a one-point cell its point's own series),
#: not copies of them.
#:
#: A cell of another shape than the derivation makes (an int where a float
#: is due, a series of its own), as a slice keeps it: (config, concurrency,
#: mean, lo, hi, n, its points' places, values, series).
Row = tuple[str, int, float, float, float, int, tuple[int, ...], tuple[float, ...], tuple[float, ...]]
#: The one-point cells of a workload (83% of the perf stores' cells) in
#: columns: (the configs, each cell's config as a place among them, its
#: concurrency, its value, its point's place, (cell, series) where its
#: series is not its point's own). In arrays, not a tuple a cell: unpickled
#: with no object per cell, so they hold no more memory than cells derived
#: (a tuple per cell, freed once its cell is made, left 120 MiB of pages
#: behind at a million points).
Ones = tuple[tuple[str, ...], "array[int]", "array[int]", "array[float]", "array[int]",
             tuple[tuple[int, tuple[float, ...]], ...]]
#: The cells of several points (the repeats) in columns: (each cell's
#: config as a place among the configs of ``Ones``, its concurrency, its
#: mean, where its points start in the next two columns, its points'
#: places, their values). Each cell's lo and hi are made again as the cells
#: derived made them: the least and the greatest of its values.
Many = tuple["array[int]", "array[int]", "array[float]", "array[int]", "array[int]", "array[float]"]
#: A workload's cells in a slice: (workload, the kind of each of its cells
#: in their order (1: one point, 2: several, in columns, 0: a ``Row``: a
#: cell other than the derivation makes, kept as it is), the one-point
#: ones, those of several points, the others).
Cells = tuple[str, bytes, Ones, Many, tuple[Row, ...]]


@dataclass(frozen=True)
class Slice:
    """One campaign's flags, counts and valid cells."""

    #: point id -> why the gates leave it out, in its points' order
    flagged: Mapping[str, tuple[str, ...]]
    #: each of its points' counts, in their order in the store
    counts: tuple[Counts, ...]
    #: its valid cells by workload, each by (config, concurrency)
    rows: tuple[Cells, ...]


@dataclass(frozen=True)
class Slices:
    """The slices of one store: each campaign's key, and the slices known by
    key (``known``: as the caller kept them, taken out by ``derive`` as it
    uses them, so that their rows are not held once their cells are made;
    ``made``: derived by ``derive``, for the caller to keep)."""

    keys: Mapping[str, str]  # campaign name -> its slice's key
    known: dict[str, Slice]
    made: dict[str, Slice] = field(default_factory=dict)
    #: campaign name -> the places in ``data.runs`` of the runs that hold it,
    #: as ``plan`` found them for the keys (None: found again by ``derive``)
    held: Mapping[str, list[int]] | None = None
    #: slices derived but not cut yet, with how many points they hold (key
    #: -> slice, when called): where every campaign was derived in one
    #: pass, cutting it into slices is left to whoever keeps them (the
    #: render cache does it aside, D174)
    pending: list[tuple[int, Callable[[], dict[str, Slice]]]] = field(default_factory=list)

    def to_keep(self) -> dict[str, Slice]:
        """key -> slice, of every slice derived (cut now, if not yet)."""
        out = dict(self.made)
        for _, cut in self.pending:
            out.update(cut())
        return out

    @property
    def points(self) -> int:
        """How many points the slices to keep hold."""
        return sum(len(s.counts) for s in self.made.values()) + sum(n for n, _ in self.pending)


def plan(data: Dataset, rules: Rules, run_keys: Sequence[str]) -> Slices | None:
    """The ``Slices`` to fill with those known (none yet), keyed by campaign
    name -> the key of its slice: the gates, the campaign's name and rank,
    the speculation of each config it measured (from the configs' merged
    facts, which a later campaign's run can change), and the content keys
    of the runs that hold it (``run_keys``, one per run of ``data.runs``,
    as the caller keys their content and code), in their order. None when
    a run has no key, or the configs each campaign measured are not known
    (a dataset not made by ``store.merge``)."""
    if len(run_keys) != len(data.runs) or (data.points and not data.facts):
        return None
    held = _held(data)
    return Slices(keys=_keys(data, rules, run_keys, held), known={}, held=held)


def _keys(data: Dataset, rules: Rules, run_keys: Sequence[str], held: Mapping[str, list[int]]) -> dict[str, str]:
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
                          *map(run_keys.__getitem__, held[c.name])])
        out[c.name] = hashlib.sha256(text.encode()).hexdigest()
    return out


def _held(data: Dataset) -> dict[str, list[int]]:
    """campaign name -> the places in ``data.runs`` of the runs that hold it."""
    held: dict[str, list[int]] = {c.name: [] for c in data.campaigns}
    for i, run in enumerate(data.runs):
        for c in run.campaigns:
            held[c.name].append(i)
    return held


def _points_held(data: Dataset, places: list[int]) -> list[Point]:
    """The points of the runs at ``places``, in order: where a slice's rows
    find their points."""
    return list(chain.from_iterable(map(_POINTS, map(data.runs.__getitem__, places))))


Found = tuple[dict[str, tuple[str, ...]], Mapping[str, Counts], list[Cell]]


def derive(data: Dataset, rules: Rules, given: Slices | None = None) -> Found:
    """``validity.assess`` (the gates' flags, every point's counts) and
    ``analysis.cells`` of the valid points, over the whole store: from
    ``given``'s known slices where a campaign's key is there, derived for
    the others (added to ``given.made``)."""
    if given is None:
        flags, every = assess(data, rules.gates)
        return flags, every, cells(data, rules, flags)
    held = given.held if given.held is not None else _held(data)
    known = given.known
    by_name = {name: known.pop(key) for name, key in given.keys.items() if key in known}
    known.clear()  # (what no campaign of this store has)
    missing = [c.name for c in data.campaigns if c.name not in by_name]
    if len(missing) == len(data.campaigns):  # nothing kept: derived whole, then cut into slices
        flags, every = assess(data, rules.gates)
        valid = cells(data, rules, flags)
        given.pending.append((len(data.points), functools.partial(_cut_keyed, data, held, missing, flags, every,
                                                                   valid, given.keys)))
        return flags, every, valid
    made_cells: dict[str, dict[str, list[Cell]]] = {}
    if missing:
        wanted = set(missing)
        points = tuple(compress(data.points, map(wanted.__contains__, map(_CAMPAIGN, data.points))))
        part = Dataset(campaigns=data.campaigns, points=points, configs=data.configs)
        flags, every = assess(part, rules.gates)
        made, made_cells = _cut(data, points, held, missing, flags, every, cells(part, rules, flags))
        _keep(given, made)
        by_name.update(made)
    found = _assemble(data, held, by_name, made_cells)
    if found is None:  # a slice that does not fit its campaign's points: derived whole
        flags, every = assess(data, rules.gates)
        return flags, every, cells(data, rules, flags)
    return found


def _keep(given: Slices, made: Mapping[str, Slice]) -> None:
    for name, piece in made.items():
        given.made[given.keys[name]] = piece


def _cut_keyed(data: Dataset, held: Mapping[str, list[int]], names: Sequence[str],
               flags: Mapping[str, tuple[str, ...]], every: Mapping[str, Counts], valid: Sequence[Cell],
               keys: Mapping[str, str]) -> dict[str, Slice]:
    """``_cut`` of every campaign, by key."""
    return {keys[name]: piece for name, piece in _cut(data, data.points, held, names, flags, every, valid)[0].items()}


def _cut(data: Dataset, points: Sequence[Point], held: Mapping[str, list[int]], names: Sequence[str],
         flags: Mapping[str, tuple[str, ...]], every: Mapping[str, Counts],
         valid: Sequence[Cell]) -> tuple[dict[str, Slice], dict[str, dict[str, list[Cell]]]]:
    """The slices of ``names`` (every campaign of ``points``), from what was
    derived over those points; and their cells by campaign and workload."""
    counts: dict[str, list[Counts]] = {name: [] for name in names}
    flagged: dict[str, dict[str, tuple[str, ...]]] = {name: {} for name in names}
    for p in points:
        counts[p.campaign].append(every[p.id])
        why = flags.get(p.id)
        if why is not None:
            flagged[p.campaign][p.id] = why
    by: dict[str, dict[str, list[Cell]]] = {name: {} for name in names}
    for cell in valid:
        by[cell.campaign].setdefault(cell.workload, []).append(cell)
    out = {}
    for name in names:
        flat = _points_held(data, held[name])
        where = {p.id: k for k, p in enumerate(flat)}
        rows = tuple(_encode(w, cs, where, flat) for w, cs in by[name].items())
        out[name] = Slice(flagged=flagged[name], counts=tuple(counts[name]), rows=rows)
    return out, by


def _encode(w: str, cs: Sequence[Cell], where: Mapping[str, int], flat: Sequence[Point]) -> Cells:
    """A workload's cells of one campaign, as a slice keeps them (``Cells``)."""
    kinds = bytearray()
    configs: dict[str, int] = {}
    codes, concs, values, places = array("q"), array("q"), array("d"), array("q")
    overrides: list[tuple[int, tuple[float, ...]]] = []
    m_codes, m_concs, m_means, m_starts, m_places, m_values = (array("q"), array("q"), array("d"), array("q"),
                                                                array("q"), array("d"))
    rows: list[Row] = []
    for cell in cs:
        plain = (type(cell.mean) is float and type(cell.concurrency) is int and -2**63 <= cell.concurrency < 2**63
                 and type(cell.values) is tuple and len(cell.values) == cell.n == len(cell.point_ids))
        if plain and cell.n == 1 and cell.lo is cell.mean and cell.hi is cell.mean and cell.values[0] is cell.mean:
            k = where[cell.point_ids[0]]
            own = flat[k].series
            if not (cell.series is own or (own is None and cell.series == ())):
                overrides.append((len(values), cell.series))
            kinds.append(1)
            codes.append(configs.setdefault(cell.config, len(configs)))
            concs.append(cell.concurrency)
            values.append(cell.mean)
            places.append(k)
        elif (plain and cell.n > 1 and cell.series == () and all(type(v) is float for v in cell.values)
              and cell.lo is min(cell.values) and cell.hi is max(cell.values)):
            kinds.append(2)
            m_codes.append(configs.setdefault(cell.config, len(configs)))
            m_concs.append(cell.concurrency)
            m_means.append(cell.mean)
            m_starts.append(len(m_places))
            m_places.extend(where[i] for i in cell.point_ids)
            m_values.extend(cell.values)
        else:
            kinds.append(0)
            rows.append((cell.config, cell.concurrency, cell.mean, cell.lo, cell.hi, cell.n,
                         tuple(where[i] for i in cell.point_ids), cell.values, cell.series))
    return (w, bytes(kinds), (tuple(configs), codes, concs, values, places, tuple(overrides)),
            (m_codes, m_concs, m_means, m_starts, m_places, m_values), tuple(rows))


def _decode(got: Cells, name: str, rank: int, flat: Sequence[Point]) -> list[Cell]:
    """A workload's cells of one campaign made again from its slice: each
    point's own id and series (``flat``: the points of the runs that hold
    the campaign), with no Python step per cell (but a ``Row``'s)."""
    w, kinds, (configs, codes, concs, values, places, overrides), many, rows = got
    m_codes, m_concs, m_means, m_starts, m_places, m_values = many
    new = tuple.__new__
    ps = list(map(flat.__getitem__, places))
    vs = values.tolist()
    series = [() if s is None else s for s in map(_SERIES, ps)]
    for i, s in overrides:
        series[i] = s
    ones = map(new, repeat(Cell), zip(repeat(w), repeat(name), repeat(rank), map(configs.__getitem__, codes),
                                       concs.tolist(), vs, vs, vs, repeat(1), zip(map(_ID, ps)), zip(vs), series))
    cuts = list(map(slice, m_starts, [*m_starts[1:], len(m_places)]))
    ids = list(map(_ID, map(flat.__getitem__, m_places)))
    m_vs = m_values.tolist()
    if len(ids) != len(m_vs):
        raise ValueError("a slice's cells do not fit it")
    groups = list(map(tuple, map(m_vs.__getitem__, cuts)))
    several = map(new, repeat(Cell), zip(repeat(w), repeat(name), repeat(rank), map(configs.__getitem__, m_codes),
                                          m_concs.tolist(), m_means.tolist(), map(min, groups), map(max, groups),
                                          map(len, groups), map(tuple, map(ids.__getitem__, cuts)), groups,
                                          repeat(())))
    others = (new(Cell, (w, name, rank, config, conc, mean, lo, hi, n, tuple([flat[k].id for k in at]), vals, ser))
              for config, conc, mean, lo, hi, n, at, vals, ser in rows)
    out = list(map(next, map((others, ones, several).__getitem__, kinds)))  # each in its place
    if (len(out) != len(kinds) or len(vs) != kinds.count(1) or len(groups) != kinds.count(2)
            or next(ones, None) is not None or next(several, None) is not None or next(others, None) is not None):
        raise ValueError("a slice's cells do not fit it")
    return out


def _assemble(data: Dataset, held: Mapping[str, list[int]], by_name: dict[str, Slice],
              made: Mapping[str, dict[str, list[Cell]]]) -> Found | None:
    """What ``assess`` and ``cells`` give over the whole store, from every
    campaign's slice (``made``: the cells of those derived here): the
    counts in the points' order, the flags in the points' order, the cells
    by (workload, campaign, config, concurrency). None when a slice does
    not fit its campaign: counts not as many as its points, or a row whose
    point is not there."""
    points = data.points
    ids = list(map(_ID, points))
    names = list(map(_CAMPAIGN, points))
    if sum(len(s.counts) for s in by_name.values()) != len(points) or not set(names) <= by_name.keys():
        return None
    each = {name: iter(s.counts) for name, s in by_name.items()}
    slots = list(map(next, map(each.__getitem__, names)))  # each point's, from its campaign's, in turn
    if len(slots) != len(points) or any(next(it, None) is not None for it in each.values()):
        return None
    # (by id through the points' runs, no dict of every id: a stored point's
    # id is its run's id and its place there, store/schema.py, so where the
    # runs' ids are distinct, so are the points', D177)
    every = InPointOrder(data, slots, distinct=True)
    flagged: dict[str, tuple[str, ...]] = {}
    for s in by_name.values():
        if s.flagged:
            flagged.update(s.flagged)
    flags = {i: flagged[i] for i in compress(ids, map(flagged.__contains__, ids))} if flagged else {}
    by = dict(made)
    try:
        for rank, c in enumerate(data.campaigns):
            if c.name not in by:
                # (the slice let go once its cells are made: its rows are not held past them)
                flat = _points_held(data, held[c.name])
                by[c.name] = {got[0]: _decode(got, c.name, rank, flat) for got in by_name.pop(c.name).rows}
    except (IndexError, TypeError, ValueError, AttributeError, KeyError):
        return None
    workloads = sorted({w for cs in by.values() for w in cs})
    ordered = sorted(by)
    valid: list[Cell] = []
    for w in workloads:
        for name in ordered:
            got = by[name].get(w)
            if got:
                valid.extend(got)
    return flags, every, valid
