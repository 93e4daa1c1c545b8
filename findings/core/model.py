"""Frozen dataclasses that every layer shares. No I/O, no third-party imports.

The words follow docs/architecture.md: a *point* is one measurement of
(campaign, config, workload, concurrency, repeat); a *run* is one stored file
(one ingest or one benchmark run), which may hold points of several
campaigns.
"""

from __future__ import annotations

from array import array
from bisect import bisect_left
from collections.abc import Mapping as _AbcMapping
from dataclasses import dataclass, field
from functools import cached_property
from itertools import accumulate, chain, compress, groupby, islice, repeat
from operator import add, attrgetter, getitem, is_
from types import MappingProxyType
from typing import Any, Callable, ItemsView, Iterable, Iterator, Mapping, NamedTuple, Sequence, TypeVar, ValuesView

#: Where a point came from. Simulated points are never pooled with real ones.
SOURCES = ("import", "runner", "simulated")

#: The metric every verdict is computed from: total output tokens/s.
THROUGHPUT = "output_throughput_tok_s"

Scalar = str | int | float | bool | None


#: A point's workload parameters when none are given (read-only: shared).
_NO_PARAMS: Mapping[str, Scalar] = MappingProxyType({})

#: A key order -> its index (one per distinct order, shared by every point
#: that has it).
_KEYS: dict[tuple[str, ...], dict[str, int]] = {}
#: id(an index) -> its key order (indexes live as long as _KEYS holds them).
_ORDER: dict[int, tuple[str, ...]] = {}


class Metrics(Mapping[str, float]):
    """A stored point's metrics, read-only: the names shared by every point
    with the same names, the values packed as doubles. A dict of 30 floats
    is about 1.9 KB, this about 0.4 KB: at a million points, 1.5 GB less
    (docs/decisions.md D131). Reads as a Mapping, equal to the dict it came from.

    The doubles are a row of a buffer that many rows share (D176): a run's
    points, read from its file, share one array, and the points of a
    segment of the render cache's points table one view of the segment's
    bytes, each row from ``_at`` on. An array of its own per point was 80
    bytes more per point, and a copy of every double when read from the
    cache."""

    __slots__ = ("_index", "_values", "_at")

    def __init__(self, index: dict[str, int], values: Sequence[float], at: int = 0) -> None:
        self._index = index
        #: An ``array("d")`` or a ``memoryview`` cast to doubles: this row is
        #: ``values[at:at + len(index)]``.
        self._values = values
        self._at = at

    @classmethod
    def of(cls, d: Mapping[str, float]) -> Metrics:
        return cls(_index_of(tuple(d)), array("d", list(d.values())))  # from a list: twice as fast

    @classmethod
    def packed(cls, keys: tuple[str, ...], values: list[float]) -> Metrics:
        """From the names in order and their values (floats, checked by the caller)."""
        return cls(_index_of(keys), array("d", values))

    def __getitem__(self, key: str) -> float:
        return self._values[self._at + self._index[key]]

    def get(self, key: str, default: Any = None) -> Any:
        i = self._index.get(key)
        return default if i is None else self._values[self._at + i]

    def row(self) -> Any:
        """This row's doubles, in its key order: an ``array("d")`` or a
        ``memoryview`` of doubles (a buffer either way)."""
        return self._values[self._at:self._at + len(self._index)]

    def __contains__(self, key: object) -> bool:
        return key in self._index

    def __iter__(self) -> Iterator[str]:
        return iter(self._index)

    def __len__(self) -> int:
        return len(self._index)

    def __repr__(self) -> str:
        return repr(dict(self))

    def __eq__(self, other: object) -> bool:
        # Two packed rows of one key order: their doubles compared at C
        # speed (`findings diff` compares every run of both sides, issue 38).
        # Stored metrics are finite, so this is the Mapping's equality.
        if type(other) is Metrics and other._index is self._index:
            return self.row() == other.row()  # type: ignore[no-any-return]
        return _AbcMapping.__eq__(self, other)

    __hash__ = None  # type: ignore[assignment]  # a Mapping: unhashable, as before

    def __reduce__(self) -> tuple[Any, tuple[Any, ...]]:
        # The one tuple of its key order: a pickle of many points holds it once.
        keys = _ORDER.get(id(self._index)) or tuple(self._index)
        return (_metrics, (keys, self.row().tobytes()))


#: Rows packed at a time (``packed_tables``): a chunk of doubles, not the
#: whole store's, is held at once (issue 38: the gates' peak memory).
PACK_ROWS = 1 << 13
#: Up to this many layouts, each is picked out in a pass of its own (no sort).
FEW_LAYOUTS = 8


def packed_tables(metrics: Sequence[Mapping[str, float]]) -> tuple[
        list[tuple[Mapping[str, int], Sequence[int], Iterator[bytes]]], list[int]]:
    """``metrics`` grouped by layout, for reading in columns: per layout
    (``Metrics.index``) the positions that have it, ascending, and their
    values packed row after row, in chunks of at most ``PACK_ROWS`` rows
    (made as they are read, so that one chunk is held at a time); then the
    positions of metrics not packed (a dict). Iterated at C speed: no
    Python step per point. A store of one layout (the usual one) needs no
    grouping: its positions are a ``range``."""
    types = set(map(type, metrics))
    indexes = attrgetter("_index")
    groups: list[list[int]]
    if types == {Metrics}:
        layouts = set(map(id, map(indexes, metrics)))
        if len(layouts) <= 1:
            return ([(metrics[0]._index, range(len(metrics)), _packed(metrics))]  # type: ignore[attr-defined]
                    if metrics else []), []
        loose: list[int] = []
        ids = list(map(id, map(indexes, metrics)))
        if len(layouts) <= FEW_LAYOUTS:  # a pass at C speed per layout: no sort, no key list
            groups = [list(compress(range(len(metrics)), map(layout.__eq__, ids))) for layout in sorted(layouts)]
        else:
            groups = _grouped(range(len(metrics)), ids.__getitem__)
    else:
        where = [i for i, m in enumerate(metrics) if type(m) is Metrics]
        loose = [i for i, m in enumerate(metrics) if type(m) is not Metrics]
        groups = _grouped(where, dict(zip(where, map(id, map(indexes, map(metrics.__getitem__, where))))).__getitem__)
    out: list[tuple[Mapping[str, int], Sequence[int], Iterator[bytes]]] = []
    for mine in groups:
        rows = list(map(metrics.__getitem__, mine))
        out.append((rows[0]._index, mine, _packed(rows)))  # type: ignore[attr-defined]
    return out, loose


def _grouped(where: Sequence[int], layout_of: Callable[[int], int]) -> list[list[int]]:
    """The positions ``where``, grouped by their layout, in the layouts' order."""
    return [list(run) for _, run in groupby(sorted(where, key=layout_of), key=layout_of)]


def _packed(rows: Sequence[Mapping[str, float]]) -> Iterator[bytes]:
    """The rows' values (``Metrics``), packed ``PACK_ROWS`` rows at a time."""
    for start in range(0, len(rows), PACK_ROWS):
        yield b"".join(rows_of(rows[start:start + PACK_ROWS]))


_VALUES, _AT, _INDEX = attrgetter("_values"), attrgetter("_at"), attrgetter("_index")


def rows_of(rows: Sequence[Mapping[str, float]]) -> Iterator[Any]:
    """Each ``Metrics``' row of doubles (``Metrics.row``), as buffers, at C
    speed: for ``bytes.join``."""
    starts = list(map(_AT, rows))
    ends = map(add, starts, map(len, map(_INDEX, rows)))
    return map(getitem, map(_VALUES, rows), map(slice, starts, ends))


def packed_rows(keys: Sequence[tuple[str, ...]], flat: Sequence[float]) -> list[Metrics]:
    """Many rows' ``Metrics`` at once: ``keys``, each row's names in order;
    ``flat``, their values (floats, checked by the caller), row after row.
    The values go into one array, which the rows share (D176)."""
    whole = array("d", flat)
    indexes: list[dict[str, int]] = list(map(_KEYS.get, keys))  # type: ignore[arg-type]
    if None in indexes:  # a key order not seen before in this process
        indexes = list(map(_index_of, keys))
    return rows_in(indexes, whole, list(map(len, keys)))


#: Where a row starts in the buffer its ``Metrics`` reads (``_at``) is
#: below this, so that it is one of ``_STARTS``: one int object per place,
#: shared by every row at that place in its buffer (D177).
_SHIFT = 16
_BLOCK = 1 << _SHIFT
_STARTS = tuple(range(_BLOCK))


def rows_in(indexes: Iterable[dict[str, int]], values: Any, widths: Sequence[int]) -> list[Metrics]:
    """The ``Metrics`` of rows laid one after the other in ``values`` (an
    ``array("d")`` or a ``memoryview`` of doubles), with these key orders
    (``indexes``) and so many values each (``widths``). Each row reads a
    view of ``values`` that starts at a multiple of ``_BLOCK`` doubles, from
    a place below it: at a million points, a million ints of their own
    (32 MiB) were a place each. At C speed, block by block."""
    if len(values) < _BLOCK:
        return list(map(Metrics, indexes, repeat(values), map(_STARTS.__getitem__, accumulate(widths, initial=0))))
    starts = list(accumulate(widths, initial=0))
    whole = memoryview(values)
    rows = iter(indexes)
    out: list[Metrics] = []
    lo, n = 0, len(widths)
    while lo < n:
        base = starts[lo] >> _SHIFT << _SHIFT
        hi = bisect_left(starts, base + _BLOCK, lo, n)  # the rows that start in this block
        out.extend(map(Metrics, islice(rows, hi - lo), repeat(whole[base:]),
                       map(_STARTS.__getitem__, accumulate(widths[lo:hi - 1], initial=starts[lo] - base))))
        lo = hi
    return out


def _index_of(keys: tuple[str, ...]) -> dict[str, int]:
    """The one index of a key order."""
    index = _KEYS.get(keys)
    if index is None:
        index = _KEYS.setdefault(keys, {k: i for i, k in enumerate(keys)})
        _ORDER.setdefault(id(index), keys)
    return index


def _metrics(keys: tuple[str, ...], packed: bytes) -> Metrics:
    """Unpickles a Metrics (the render cache)."""
    return Metrics(_index_of(keys), array("d", packed))


@dataclass(frozen=True)
class Campaign:
    """Measurements taken together. Ordered by date, then explicit order."""

    name: str
    date: str | None = None  # YYYY-MM-DD
    order: int | None = None

    @property
    def sort_key(self) -> tuple[str, int, str]:
        # Undated campaigns (hand-recorded history) come before dated ones.
        return (self.date or "", self.order if self.order is not None else 0, self.name)

    @property
    def when(self) -> str:
        if self.date:
            return self.date
        return f"order {self.order}" if self.order is not None else "undated"


class Point(NamedTuple):
    """One stored measurement. ``metrics`` holds THROUGHPUT, except for points
    that measure something other than a server's output (findings' own
    render times in the perf store), which the analysis leaves out.

    A named tuple, not a frozen dataclass: a store of a million points is
    read into as many, and a tuple is made (and unpickled from the render
    cache) several times faster; ``p._replace(...)`` changes a field."""

    id: str
    run_id: str
    campaign: str
    config: str
    workload: str
    concurrency: int
    metrics: Mapping[str, float]
    source: str
    source_file: str | None
    source_line: int | None
    note: str | None = None
    workload_params: Mapping[str, Scalar] = _NO_PARAMS
    requests: Mapping[str, object] | None = None
    #: Derived, never stored: output tokens/s per time window, computed from
    #: ``requests`` (stats.window_series). Set by the render cache, which
    #: keeps this instead of the records; None: compute it from ``requests``.
    series: tuple[float, ...] | None = None

    @property
    def throughput(self) -> float:
        return self.metrics[THROUGHPUT]

    @property
    def simulated(self) -> bool:
        return self.source == "simulated"

    @property
    def by_runner(self) -> bool:
        """Measured by findings' own runner (a real server or the emulator),
        not imported from another tool's file (which names its file)."""
        return self.source in ("runner", "simulated") and self.source_file is None


@dataclass(frozen=True)
class Input:
    """A file a run was made from, beyond its main source (configs, environment, matrix)."""

    path: str
    sha256: str
    role: str  # "configs" | "environment" | "matrix" | ...


@dataclass(frozen=True)
class Sidecar:
    """A run's per-request records, kept next to its run file (schema
    version 4): ``runs/<file>``, gzip-compressed JSON, with the sha256 of its
    bytes recorded in the run file, for the points at these indices."""

    file: str
    sha256: str
    points: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class Run:
    """One file of the results store, as read and validated. Slotted: a
    store of `findings bench` holds a run per point (D131)."""

    schema_version: int
    run_id: str
    source: str
    importer: str
    importer_version: str
    tool_version: str
    created_at: str
    source_file: str | None
    source_sha256: str
    environment: Mapping[str, Scalar]
    campaigns: tuple[Campaign, ...]
    configs: Mapping[str, Mapping[str, Scalar]]
    points: tuple[Point, ...]
    line_hashes: frozenset[str] = frozenset()
    path: str | None = None
    #: How the run was taken: URL, launch command (redacted), log path,
    #: start/end time, git commit, ... (flat scalars; optional).
    provenance: Mapping[str, Scalar] = field(default_factory=dict)
    #: Other input files, hashed (schema version 2).
    extra_inputs: tuple[Input, ...] = ()
    #: Facts true of a config in one campaign only (schema version 3): a
    #: configs table with a ``campaign`` column. They override ``configs``
    #: for that campaign's points.
    campaign_configs: Mapping[str, Mapping[str, Mapping[str, Scalar]]] = field(default_factory=dict)
    #: Where the points' per-request records are (schema version 4); None:
    #: inline in the points, or none at all.
    sidecar: Sidecar | None = None


def slotted_maker(cls: type[Any], name: str) -> Callable[..., Any]:
    """A function of every field of a slotted frozen dataclass, in order, that
    makes one with no check, default or ``__init__``: each slot set through
    its descriptor, in one unrolled function, since a frozen dataclass's
    ``__init__`` sets each through ``object.__setattr__`` (0.9 against 1.7 µs
    a Run). The class is pickled through it (its ``__reduce__``, set here),
    so the function must be its module's ``name``: unpickled so, a slotted
    dataclass is made several times faster than from its generic state
    (D173), and holds less than one with a ``__dict__`` (D177)."""
    names = cls.__slots__
    if len(names) < 2:
        raise TypeError(f"{cls.__name__}: slotted_maker needs two fields or more")
    setters = {f"_set{i}": getattr(cls, field).__set__ for i, field in enumerate(names)}
    body = "".join(f"    _set{i}(made, {field})\n" for i, field in enumerate(names))
    source = f"def {name}({', '.join(names)}):\n    made = _new(_cls)\n{body}    return made\n"
    namespace: dict[str, Any] = {"_new": object.__new__, "_cls": cls, **setters}
    exec(source, namespace)  # as dataclasses makes __init__ itself
    made: Callable[..., Any] = namespace[name]
    made.__module__ = cls.__module__
    made.__qualname__ = name
    fields = attrgetter(*names)

    def __reduce__(self: Any) -> tuple[Callable[..., Any], tuple[object, ...]]:
        return (made, fields(self))

    cls.__reduce__ = __reduce__  # type: ignore[assignment]
    return made


#: ``Run(*fields)``, every field given, in order, checked by the caller: for
#: the store's readers and the render cache, which make one per run file.
make_run: Callable[..., Run] = slotted_maker(Run, "make_run")


@dataclass(frozen=True)
class Dataset:
    """Everything the analysis needs, merged from all runs of a store."""

    campaigns: tuple[Campaign, ...]  # in replay order
    points: tuple[Point, ...]
    #: Each config's facts as of its latest campaign (what the document lists).
    configs: Mapping[str, Mapping[str, Scalar]]
    runs: tuple[Run, ...] = ()
    #: (config, campaign) -> what the config's server reported in that
    #: campaign: the facts of the runs holding its points there.
    facts: Mapping[tuple[str, str], Mapping[str, Scalar]] = field(default_factory=dict)

    # What the outputs read of every run, found in one pass each, once
    # (D173): ``derive`` asks for them before the history's replay is forked
    # (findings/derive/derived.py), since a pass over every run after it
    # copies each page it touches (a store of `findings bench` holds a run
    # per point).

    @cached_property
    def runs_by_id(self) -> Mapping[str, Run]:
        """Run id -> run."""
        return {r.run_id: r for r in self.runs}

    @cached_property
    def environments(self) -> tuple[tuple[Mapping[str, Scalar], frozenset[str]], ...]:
        """Each environment the runs record (one object for the runs read
        in one process that share it), with the campaigns of its runs, in
        the order of the last run of each: updating a dict with each in
        turn gives what updating it with every run's does."""
        last: dict[int, int] = {}
        found: dict[int, tuple[Mapping[str, Scalar], set[str]]] = {}
        for i, run in enumerate(self.runs):
            key = id(run.environment)
            got = found.get(key)
            if got is None:
                got = found[key] = (run.environment, set())
            got[1].update(c.name for c in run.campaigns)
            last[key] = i
        return tuple((found[key][0], frozenset(found[key][1])) for key in sorted(found, key=last.__getitem__))

    @cached_property
    def from_matrix(self) -> frozenset[str]:
        """The configs measured by runs that record the matrix they ran."""
        return frozenset(p.config for r in compress(self.runs, map(_EXTRA_INPUTS, self.runs))
                         if any(i.role == "matrix" for i in r.extra_inputs) for p in r.points)

    def read_runs(self) -> None:
        """Finds each of these now (each kept once found): the runs by id,
        the environments, the configs from a matrix, the points by id."""
        for _ in (self.runs_by_id, self.environments, self.from_matrix, self.points_by_id):
            pass

    def facts_of(self, config: str, campaign: str) -> Mapping[str, Scalar]:
        """The config's facts in that campaign; else its latest known facts."""
        found = self.facts.get((config, campaign))
        return found if found is not None else self.configs.get(config, {})

    @cached_property
    def points_by_id(self) -> PointsById:
        """Point id -> point (``PointsById``)."""
        return PointsById(self)

    def campaign(self, name: str) -> Campaign:
        for c in self.campaigns:
            if c.name == name:
                return c
        raise KeyError(name)

    def upto(self, campaign_name: str) -> "Dataset":
        """The data as it stood once ``campaign_name`` was measured."""
        names: list[str] = []
        for c in self.campaigns:
            names.append(c.name)
            if c.name == campaign_name:
                break
        keep = set(names)
        return Dataset(
            campaigns=tuple(c for c in self.campaigns if c.name in keep),
            points=tuple(p for p in self.points if p.campaign in keep),
            configs=self.configs,
            runs=self.runs,
            facts={k: v for k, v in self.facts.items() if k[1] in keep},
        )


_RUN_POINTS = attrgetter("points")
_EXTRA_INPUTS = attrgetter("extra_inputs")
_POINT_ID = attrgetter("id")

V = TypeVar("V")


class InPointOrder(Mapping[str, V]):
    """``dict(zip((p.id for p in data.points), values))``: a value for each
    of the dataset's points, in their order, found by id through the
    points' runs (``PointsById.place``), where their ids are known to be
    distinct (``distinct``: the caller's to say). No dict of every id is
    made (the request counts of every point: 29 MiB at a million points,
    D177). Otherwise, a dict, made when first needed."""

    __slots__ = ("_data", "_values", "_fast", "_whole")

    def __init__(self, data: Dataset, values: Sequence[V], distinct: bool) -> None:
        if len(values) != len(data.points):
            raise ValueError("a value for each point is needed")
        self._data = data
        self._values = values
        self._fast = distinct and data.points_by_id.through_runs
        self._whole: dict[str, V] | None = None

    def _all(self) -> dict[str, V]:
        if self._whole is None:
            self._whole = dict(zip(map(_POINT_ID, self._data.points), self._values))
        return self._whole

    def _place(self, key: object) -> int | None:
        if not self._fast or type(key) is not str:
            return None
        return self._data.points_by_id.place(key)

    def __getitem__(self, key: str) -> V:
        at = self._place(key)
        return self._values[at] if at is not None else self._all()[key]

    def get(self, key: str, default: Any = None) -> Any:
        at = self._place(key)
        return self._values[at] if at is not None else self._all().get(key, default)

    def __contains__(self, key: object) -> bool:
        return self._place(key) is not None or key in self._all()

    def __iter__(self) -> Iterator[str]:
        return map(_POINT_ID, self._data.points) if self._fast else iter(self._all())

    def __len__(self) -> int:
        return len(self._values) if self._fast else len(self._all())

    def values(self) -> ValuesView[V]:
        return _InOrderValues(self)

    def items(self) -> ItemsView[str, V]:
        return _InOrderItems(self)


class _InOrderValues(ValuesView[V]):
    _mapping: InPointOrder[V]

    def __iter__(self) -> Iterator[V]:
        m = self._mapping
        return iter(m._values) if m._fast else iter(m._all().values())


class _InOrderItems(ItemsView[str, V]):
    _mapping: InPointOrder[V]

    def __iter__(self) -> Iterator[tuple[str, V]]:
        m = self._mapping
        return zip(map(_POINT_ID, m._data.points), m._values) if m._fast else iter(m._all().items())


class PointsById(Mapping[str, Point]):
    """A dataset's points by id, as ``{p.id: p for p in data.points}``.

    Where the dataset's points are its runs' points, in order, and its runs'
    ids are distinct (what store.merge makes), a point is found through
    its run: a stored point's id is ``{run_id}/{i}``, point i of that run,
    and the point found is checked to have that id. No dict of every point
    is made (at a million points, 0.5 s and 40 MiB of each command, which
    looks up a few hundred: the cited points, the verdicts' caveats). Any
    other id, or any other dataset, reads a dict of every point, made when
    first needed."""

    __slots__ = ("_points", "_runs", "_whole", "_starts")

    def __init__(self, data: Dataset) -> None:
        self._points = data.points
        self._whole: dict[str, Point] | None = None
        runs = data.runs
        self._runs: Mapping[str, Run] | None = None
        self._starts: dict[str, int] | None = None
        if (runs and len(data.points) == sum(map(len, map(_RUN_POINTS, runs))) and len(data.runs_by_id) == len(runs)
                and all(map(is_, data.points, chain.from_iterable(map(_RUN_POINTS, runs))))):
            self._runs = data.runs_by_id

    @property
    def through_runs(self) -> bool:
        """Whether points are found through their runs (see the class)."""
        return self._runs is not None

    def place(self, point_id: str) -> int | None:
        """The point's place in the dataset's points, found through its run;
        None where it is not found so (``through_runs`` false, or an id
        that is not its run's point at that place)."""
        found = self._through_run(point_id)
        if found is None:
            return None
        if self._starts is None:
            runs = self._runs.values() if self._runs is not None else ()
            self._starts = dict(zip((r.run_id for r in runs), accumulate(map(len, map(_RUN_POINTS, runs)),
                                                                       initial=0)))
        run_id, _, place = point_id.rpartition("/")  # (what ``_through_run`` found it by)
        return self._starts[run_id] + int(place)

    def _all(self) -> dict[str, Point]:
        if self._whole is None:
            self._whole = {p.id: p for p in self._points}
        return self._whole

    def _through_run(self, point_id: str) -> Point | None:
        if self._runs is None or type(point_id) is not str:
            return None
        run_id, _, place = point_id.rpartition("/")
        run = self._runs.get(run_id)
        if run is None or not (place.isascii() and place.isdigit()):
            return None
        i = int(place)
        if i < len(run.points) and run.points[i].id == point_id:
            return run.points[i]
        return None

    def __getitem__(self, point_id: str) -> Point:
        found = self._through_run(point_id)
        return found if found is not None else self._all()[point_id]

    def get(self, point_id: str, default: Any = None) -> Any:
        found = self._through_run(point_id)
        return found if found is not None else self._all().get(point_id, default)

    def __contains__(self, point_id: object) -> bool:
        return self._through_run(point_id) is not None or point_id in self._all()  # type: ignore[arg-type]

    def __iter__(self) -> Iterator[str]:
        return iter(self._all())

    def __len__(self) -> int:
        return len(self._all())
