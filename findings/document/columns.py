"""The points table: runs held in columns, the render cache's form of the
runs it has read (findings/document/cache.py, issue 38, D145).

A *segment* holds many runs: per run its fields less the points, then every
point of every run in columns, one list per field, row after row in run
order, the metrics of every point packed as doubles in one buffer with a
layout (its names in order) per row. It is made from runs as the store
reads them (``encode``) and gives back equal runs (``decode``), with no
Python step per point either way: each column is read, and each point
made, by ``map`` and ``zip`` at C speed. A million points load from a
warm cache in under 3 s, where a pickle per run took 6.5-9.6 s on the same
machine (docs/decisions.md D145).

What runs share when read from their files stays shared: each point's
parameters, the facts, the campaigns and the names come back as the
process's one object of their value (``_Shared``, D136), and a string or a
dict that many rows hold is written once (pickle's memo).

Pure: bytes in, bytes out; the caller keeps them (cache.py).
"""

from __future__ import annotations

import hashlib
import pickle
import sys
from array import array
from itertools import chain, repeat
from operator import attrgetter, itemgetter
from typing import Any, BinaryIO, Callable

from findings.core.model import _NO_PARAMS, Metrics, Point, Run, _index_of, make_run, rows_in, rows_of
from findings.store.schema import SHARED_MAX, campaign_of, facts_of, params_of, shareable_facts

#: Bump when what a segment holds changes (a segment of another format is a miss).
FORMAT = "points-table-2"

#: A segment's doubles kept apart from it (``encode_apart``): this, then the
#: first 16 bytes of their sha256, then the doubles.
VALUES_MAGIC = b"findings-values1"
VALUES_HEADER = len(VALUES_MAGIC) + 16

#: Where Run's fields are in its constructor's arguments (its slots in order).
_RUN_FIELD = {name: i for i, name in enumerate(Run.__slots__)}
_NAMES = tuple(_RUN_FIELD[f] for f in ("source", "importer", "importer_version", "tool_version", "created_at"))
_POINTS, _PATH, _ENVIRONMENT, _CONFIGS, _CAMPAIGNS = (_RUN_FIELD[f] for f in (
    "points", "path", "environment", "configs", "campaigns"))
#: A run's constructor arguments, in order (its slots), at C speed.
_RUN_ARGS = attrgetter(*Run.__slots__)
#: The point fields kept as columns, as they are (names and parameters marked: ``_column``).
_FIELDS = Point._fields
_AT = {name: i for i, name in enumerate(_FIELDS)}


class _Shared:
    """Stands for an object in a pickle: unpickled as ``make(*args)``, the
    process's one object of those fields (schema.params_of, facts_of,
    campaign_of; sys.intern for a name). A run unpickled alone shares
    nothing with the runs unpickled before it: read from the cache, a
    million points held a dict of parameters each, and a store of one
    run per point its own facts, campaign and names per point (D136)."""

    __slots__ = ("make", "args")

    def __init__(self, make: Any, args: tuple[Any, ...]) -> None:
        self.make, self.args = make, args

    def __reduce__(self) -> tuple[Any, tuple[Any, ...]]:
        return (self.make, self.args)


#: name -> its _Shared (sys.intern), made once per name in the process.
_NAME_MARKS: dict[str, _Shared] = {}


def _name_mark(text: Any) -> Any:
    """A string's mark (unpickled as the interned string); anything else as it is."""
    if type(text) is not str:
        return text
    mark = _NAME_MARKS.get(text)
    if mark is None:
        if len(_NAME_MARKS) >= SHARED_MAX:
            _NAME_MARKS.clear()
        mark = _NAME_MARKS[text] = _Shared(sys.intern, (text,))
    return mark


class _Marks:
    """One mark per value within a segment: equal facts, campaigns and names
    of many runs are written once (pickle's memo) and made once when read
    (a store of `findings bench` holds a run per point). The dicts and
    campaigns that the reader shares (one object per value in the process)
    are looked up by identity first: the runs live while they are encoded."""

    def __init__(self) -> None:
        self.facts: dict[Any, Any] = {}
        self.campaigns: dict[Any, _Shared] = {}
        self.seen: dict[int, Any] = {}  # id(a dict of facts, or a campaign) -> its mark

    def of_facts(self, obj: Any) -> Any:
        mark = self.seen.get(id(obj))
        if mark is not None:
            return mark
        if not shareable_facts(obj):
            return obj
        keys, values = tuple(obj), tuple(obj.values())
        key = (keys, values, tuple(map(type, values)))
        mark = self.facts.get(key)
        if mark is None:
            mark = self.facts[key] = _Shared(facts_of, (keys, values))
        self.seen[id(obj)] = mark
        return mark

    def of_campaign(self, c: Any) -> _Shared:
        mark = self.seen.get(id(c))
        if mark is not None:
            return mark  # type: ignore[no-any-return]
        mark = self.campaigns.get(c)
        if mark is None:
            mark = self.campaigns[c] = _Shared(campaign_of, (c.name, c.date, c.order))
        self.seen[id(c)] = mark
        return mark

    def header(self, run: Run) -> list[Any]:
        """A run's constructor arguments less its points and path: what runs
        share (facts, campaigns, names) marked."""
        args: list[Any] = list(_RUN_ARGS(run))
        args[_POINTS] = None
        args[_PATH] = None
        for i in _NAMES:
            args[i] = _name_mark(args[i])
        args[_ENVIRONMENT] = self.of_facts(run.environment)
        args[_CONFIGS] = {_name_mark(k): self.of_facts(v) for k, v in run.configs.items()}
        args[_CAMPAIGNS] = tuple(map(self.of_campaign, run.campaigns))
        return args


def _no_params() -> Any:
    return _NO_PARAMS


def _params_marks(column: list[Any]) -> list[Any]:
    """Each point's parameters: a dict with no float as the process's one dict
    of its value (schema.params_of), one mark per distinct dict; a dict with
    a float as it is (0.0 == -0.0: never shared, as the reader leaves it)."""
    marks: dict[int, Any] = {}
    for obj in {id(d): d for d in column}.values():
        if type(obj) is dict and obj and float not in map(type, obj.values()):
            marks[id(obj)] = _Shared(params_of, (tuple(obj), tuple(obj.values())))
        elif obj is _NO_PARAMS:  # a point made with no parameters (read-only: not picklable itself)
            marks[id(obj)] = _Shared(_no_params, ())
        else:
            marks[id(obj)] = obj
    return list(map(marks.__getitem__, map(id, column)))


def _names(column: list[Any]) -> list[Any]:
    marks = {text: _name_mark(text) for text in set(column)}
    return list(map(marks.__getitem__, column))


def encode(keys: list[str], runs: list[Run]) -> bytes:
    """A segment of ``runs`` (``keys``: each run's cache key, in order)."""
    return pickle.dumps(_doc(keys, runs), protocol=pickle.HIGHEST_PROTOCOL)


def encode_apart(keys: list[str], runs: list[Run]) -> tuple[bytes, bytes]:
    """``encode``, the doubles apart: the segment, and its values file (the
    magic, the first 16 bytes of the doubles' sha256, the doubles), which
    ``read`` maps rather than reads (D176). A render after a new campaign
    reads few of the doubles of the campaigns before it: at a million
    points, 230 MiB less held."""
    doc = _doc(keys, runs)
    values = doc["values"]
    token = hashlib.sha256(values).digest()[:16]
    doc["values"] = None
    doc["apart"] = (len(values), token)
    return pickle.dumps(doc, protocol=pickle.HIGHEST_PROTOCOL), VALUES_MAGIC + token + values


def _doc(keys: list[str], runs: list[Run]) -> dict[str, Any]:
    points = list(chain.from_iterable(map(attrgetter("points"), runs)))
    cols: dict[str, Any] = {}
    for name in _FIELDS:
        if name == "metrics":
            continue
        column = list(map(itemgetter(_AT[name]), points))
        if name in ("campaign", "config", "workload", "source"):
            column = _names(column)
        elif name == "workload_params":
            column = _params_marks(column)
        cols[name] = column
    metrics = list(map(itemgetter(_AT["metrics"]), points))
    packed = [i for i, m in enumerate(metrics) if type(m) is Metrics]
    loose = {i: m for i, m in enumerate(metrics) if type(m) is not Metrics} if len(packed) < len(metrics) else {}
    rows = list(map(metrics.__getitem__, packed))
    indexes = list(map(attrgetter("_index"), rows))
    layouts: dict[int, int] = {}
    order: list[tuple[str, ...]] = []
    for index in {id(ix): ix for ix in indexes}.values():
        layouts[id(index)] = len(order)
        order.append(tuple(index))
    doc = {
        "format": FORMAT,
        "keys": keys,
        "headers": list(map(_Marks().header, runs)),
        "counts": [len(r.points) for r in runs],
        "columns": cols,
        "packed": packed if loose else None,  # None: every row
        "loose": loose,
        "layouts": order,
        "layout": array("H" if len(order) < 1 << 16 else "I", map(layouts.__getitem__, map(id, indexes))).tobytes(),
        "wide": len(order) >= 1 << 16,
        "values": b"".join(rows_of(rows)),
    }
    return doc


Decoded = tuple[list[str], list[list[Any]], list[int], list[Point]]


def decode(blob: bytes) -> Decoded | None:
    """A segment's keys, run headers (``run``), point counts and points, or
    None when it is not a segment of this format (damaged, foreign)."""
    try:
        return _decoded(pickle.loads(blob))
    except Exception:  # a damaged segment is a miss
        return None


#: Finds a segment's doubles kept apart (``encode_apart``), given how many
#: bytes they are and their token: a buffer of the values file (its header
#: checked), or None when it is missing or is not theirs.
Apart = Callable[[int, bytes], Any]


def read(file: BinaryIO, apart: Apart | None = None) -> Decoded | None:
    """``decode`` of a segment read from ``file`` as it is unpickled (the
    file's bytes are never all held at once); its doubles from ``apart``
    where they were kept apart (``encode_apart``)."""
    try:
        return _decoded(pickle.load(file), apart)
    except Exception:  # a damaged segment is a miss
        return None


def values_of(buffer: Any, size: int, token: bytes) -> memoryview | None:
    """The doubles of a values file's bytes (``buffer``: the whole file, a
    bytes-like object, mapped or read), or None when they are not the
    ``size`` bytes of ``token``'s segment."""
    view = memoryview(buffer)
    if len(view) != VALUES_HEADER + size or view[:VALUES_HEADER] != VALUES_MAGIC + token:
        return None
    return view[VALUES_HEADER:]


def _decoded(doc: Any, apart: Apart | None = None) -> Decoded | None:
    try:
        if type(doc) is not dict or doc.get("format") != FORMAT:
            return None
        keys, headers, counts, cols = doc["keys"], doc["headers"], doc["counts"], doc["columns"]
        layouts = [_index_of(k) for k in doc["layouts"]]
        sizes = list(map(len, layouts))
        codes = array("I" if doc["wide"] else "H")
        codes.frombytes(doc["layout"])
        widths = list(map(sizes.__getitem__, codes))
        values = doc["values"]
        if values is None:  # kept apart: mapped, not read (D176)
            size, token = doc["apart"]
            values = apart(size, token) if apart is not None else None
            if values is None:
                return None
        if sum(widths) * 8 != len(values) or not len(keys) == len(headers) == len(counts):
            return None
        # Each row a part of one view of the segment's doubles, not a copy (D176).
        made = rows_in(map(layouts.__getitem__, codes), memoryview(values).cast("d"), widths)
        total = sum(counts)
        if doc["packed"] is None:
            metrics: list[Any] = made
        else:
            metrics = [None] * total
            for i, m in zip(doc["packed"], made):
                metrics[i] = m
            for i, m in doc["loose"].items():
                metrics[i] = m
        columns = [metrics if name == "metrics" else cols[name] for name in _FIELDS]
        if any(len(c) != total for c in columns):
            return None
        points = list(map(tuple.__new__, repeat(Point), zip(*columns)))
    except Exception:  # a damaged segment is a miss
        return None
    return keys, headers, counts, points


def run(header: list[Any], points: tuple[Point, ...], path: str) -> Run:
    """A run from its decoded header, its points and its file's path."""
    args = list(header)
    args[_POINTS] = points
    args[_PATH] = path
    return make_run(*args)


def run_id(header: list[Any]) -> Any:
    return header[_RUN_FIELD["run_id"]]
