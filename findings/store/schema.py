"""The versioned on-disk schema of a run file, and its validation.

This is the file boundary: everything read from the store is checked here and
turned into frozen dataclasses; nothing unchecked goes further in. The format
is documented in docs/store.md; change both together.
"""

from __future__ import annotations

import hashlib
import math
import re
import sys
from itertools import chain, repeat
from typing import Any, Callable, Mapping

from findings.core.errors import StoreError
from findings.core.series import SERIES_KEY, window_series
from findings.core.model import (SOURCES, THROUGHPUT, Campaign, Input, Metrics, Point, Run, Scalar, Sidecar, make_run,
                                 packed_rows)

#: The version this tool writes. Readers migrate older versions and refuse
#: newer ones. History:
#:   1: one ``source_file`` {path, sha256} per run.
#:   2: ``inputs``: every file the run was made from, hashed, with its role
#:      (data, configs, environment, matrix), so that provenance covers the
#:      configs table and environment file an ingest also read.
#:   3: ``campaign_configs``: facts true of a config in one campaign only.
#:   4: ``requests``: the per-request records of the points move to a
#:      sidecar file next to the run file (``<run_id>.requests.json.gz``),
#:      hashed from the run file; inline records still read.
#:   5: ``content_sha256``: the sha256 of the run file as findings wrote it,
#:      the file's last key (``seal``), so that ``store check``, the
#:      document and ``findings diff`` see a file edited by hand (D94).
SCHEMA_VERSION = 5
KIND = "findings-run"
#: A run's sidecar of per-request records: ``runs/<run_id>`` + this.
SIDECAR_SUFFIX = ".requests.json.gz"
SIDECAR_KIND = "findings-requests"

_DATE = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2}")
_NAME = re.compile(r"^[^\x00-\x1f]{1,200}$")
_HEX64 = re.compile("[0-9a-f]{64}")
#: Beyond this magnitude a float may be an integer that a fast JSON parser
#: (orjson: 64-bit integers only) turned into a float; see run_from_dict.
_BIG = 2.0 ** 63
_SCALARS = frozenset({str, int, float, bool, type(None)})
#: A fact of these types needs no check beyond its type (no float: NaN,
#: infinities and floats that were big integers are refused one by one).
_FACT_TYPES = frozenset({str, int, bool, type(None)})
_FLOAT = {float}
_DICT, _STR, _INT = {dict}, {str}, {int}
_DICT_OR_NONE, _STR_OR_NONE, _INT_OR_NONE = frozenset({dict, type(None)}), frozenset({str, type(None)}), \
    frozenset({int, type(None)})

def _v1_to_v2(doc: dict[str, Any]) -> dict[str, Any]:
    """Version 1 knew only the main source file: it becomes the one input."""
    out = dict(doc)
    src = out.pop("source_file", None)
    inputs = []
    if isinstance(src, dict):
        inputs.append({"path": src.get("path"), "sha256": src.get("sha256"), "role": "data"})
    out["inputs"] = inputs
    out["schema_version"] = 2
    return out


#: Migrations from version N to N+1, applied in turn: {N: function}.
def _v2_to_v3(doc: dict[str, Any]) -> dict[str, Any]:
    """Version 2 kept facts per config for the whole run: they hold in every
    campaign in which the run measured that config, which is what a run
    without ``campaign_configs`` means in version 3 too."""
    out = dict(doc)
    out["schema_version"] = 3
    return out


def _v3_to_v4(doc: dict[str, Any]) -> dict[str, Any]:
    """Version 3 kept per-request records inline in the points, which
    version 4 still reads: nothing to change."""
    out = dict(doc)
    out["schema_version"] = 4
    return out


def _v4_to_v5(doc: dict[str, Any]) -> dict[str, Any]:
    """Version 4 recorded no hash of the run file itself: it reads as
    before, and cannot be verified (``seal_state``: "unsealed")."""
    out = dict(doc)
    out["schema_version"] = 5
    return out


MIGRATIONS: dict[int, Callable[[dict[str, Any]], dict[str, Any]]] = {1: _v1_to_v2, 2: _v2_to_v3, 3: _v3_to_v4,
                                                                      4: _v4_to_v5}

#: The run file's own content hash (schema 5): its last key, on its own line.
SEAL_KEY = "content_sha256"
_SEAL = re.compile(rb',\n "' + SEAL_KEY.encode() + rb'": "([0-9a-f]{64})"\n\}\n')
_SEAL_ANYWHERE = re.compile(rb'"' + SEAL_KEY.encode() + rb'"\s*:')
_SEAL_LEN = len(b',\n "' + SEAL_KEY.encode() + b'": ""\n}\n') + 64


def seal(body: bytes) -> bytes:
    """A run file's bytes as written: ``body`` (``json.dumps(doc, indent=1)``
    and a newline, without the seal key) with the sha256 of ``body`` added as
    its last key. The hash covers every byte but its own line, so any edit
    shows, and verifying it needs no JSON parse (``seal_state``)."""
    if not body.endswith(b"\n}\n"):
        raise ValueError("not a run file's JSON text")
    digest = hashlib.sha256(body).hexdigest().encode()
    return body[:-3] + b',\n "' + SEAL_KEY.encode() + b'": "' + digest + b'"\n}\n'


def seal_state(raw: bytes) -> str:
    """What a run file's bytes say of themselves: "sealed" (as findings wrote
    them), "edited" (the recorded hash no longer matches, or the file is of
    schema 5 or later and lost its seal, or the seal was moved), or
    "unsealed" (written before findings recorded the hash: schema 4 or
    older; it cannot be verified). Costs one sha256 of the file."""
    cut = len(raw) - _SEAL_LEN
    m = _SEAL.fullmatch(raw, cut) if cut > 0 else None
    if m is not None:
        h = hashlib.sha256(memoryview(raw)[:cut])
        h.update(b"\n}\n")
        return "sealed" if h.hexdigest().encode() == m.group(1) else "edited"
    return _unsealed(raw)


def hash_and_seal(raw: bytes) -> tuple[str, str]:
    """The sha256 of ``raw`` (hex) and its ``seal_state``, in one pass over
    the bytes (the render cache hashes each new file anyway)."""
    cut = len(raw) - _SEAL_LEN
    m = _SEAL.fullmatch(raw, cut) if cut > 0 else None
    if m is None:
        return hashlib.sha256(raw).hexdigest(), _unsealed(raw)
    h = hashlib.sha256(memoryview(raw)[:cut])
    full = h.copy()
    full.update(memoryview(raw)[cut:])
    h.update(b"\n}\n")
    return full.hexdigest(), "sealed" if h.hexdigest().encode() == m.group(1) else "edited"


def _unsealed(raw: bytes) -> str:
    """The state of a file whose last line is no seal: "edited" when it should have one."""
    if _SEAL_ANYWHERE.search(raw):  # a seal, but not where findings writes it: laid out again
        return "edited"
    version = re.search(rb'"schema_version"\s*:\s*([0-9]+)', raw[:4096])
    return "edited" if version is not None and int(version.group(1)) >= 5 else "unsealed"


def finite(v: int | float) -> bool:
    """A number a float can hold: not NaN or infinite, and no int beyond float range."""
    try:
        return math.isfinite(float(v))
    except OverflowError:
        return False


def valid_date(text: str) -> bool:
    if not _DATE.fullmatch(text):
        return False
    y, m, d = (int(x) for x in text.split("-"))
    return 1 <= m <= 12 and 1 <= d <= 31 and y >= 1970


#: A line hash of a record's parsed content (its canonical JSON), beside the
#: hash of its bytes: a re-formatted copy of an ingested file is the same
#: records (issue 37, D99). Runs written before carry byte hashes only.
RECORD_HASH_PREFIX = "r:"


def records_in(hashes: "frozenset[str] | set[str]") -> int:
    """How many records a set of line hashes stands for: its record hashes
    where it has them (a record then also has a byte hash), else all."""
    return sum(1 for h in hashes if h.startswith(RECORD_HASH_PREFIX)) or len(hashes)


def valid_name(text: str) -> bool:
    return bool(_NAME.match(text)) and text.strip() == text


def point_id(run_id: str, index: int) -> str:
    return f"{run_id}/{index}"


def run_to_dict(run: Run, sidecar: Sidecar | None = None) -> dict[str, Any]:
    """The JSON-ready form of a run, keys in a fixed order. With ``sidecar``,
    the per-request records are left out of the points and the run names
    the file that holds them."""
    points = []
    for p in run.points:
        d: dict[str, Any] = {
            "campaign": p.campaign,
            "config": p.config,
            "workload": p.workload,
            "concurrency": p.concurrency,
            "metrics": dict(sorted(p.metrics.items())),
        }
        if p.workload_params:
            d["workload_params"] = dict(sorted(p.workload_params.items()))
        if p.source_line is not None:
            d["source_line"] = p.source_line
        if p.note:
            d["note"] = p.note
        if p.requests is not None and sidecar is None:
            d["requests"] = p.requests
        series = window_series(p.requests, concurrency=p.concurrency) if p.requests is not None else p.series
        if series is not None:  # computed once, at write: a render needs no sidecar (D109)
            d["series"] = {"key": SERIES_KEY, "values": list(series)}
        points.append(d)
    return {
        "schema_version": SCHEMA_VERSION,
        "kind": KIND,
        "run_id": run.run_id,
        "source": run.source,
        "importer": {"name": run.importer, "version": run.importer_version},
        "tool_version": run.tool_version,
        "created_at": run.created_at,
        "inputs": [{"path": run.source_file, "sha256": run.source_sha256, "role": "data"}]
        + [{"path": i.path, "sha256": i.sha256, "role": i.role} for i in run.extra_inputs],
        "line_hashes": sorted(run.line_hashes),
        "provenance": dict(sorted(run.provenance.items())),
        "environment": dict(sorted(run.environment.items())),
        "campaigns": [
            {"name": c.name, "date": c.date, "order": c.order} for c in run.campaigns
        ],
        "configs": {k: dict(sorted(v.items())) for k, v in sorted(run.configs.items())},
        **({"campaign_configs": {c: {k: dict(sorted(v.items())) for k, v in sorted(cfgs.items())}
                                 for c, cfgs in sorted(run.campaign_configs.items())}}
           if run.campaign_configs else {}),
        **({"requests": {"file": sidecar.file, "sha256": sidecar.sha256, "points": list(sidecar.points)}}
           if sidecar is not None else {}),
        "points": points,
    }


class _Reader:
    """Field checks that name the file and the JSON path of the fault."""

    def __init__(self, path: str, big_floats: bool = True) -> None:
        self.path = path
        self.big_floats = big_floats
        # Names already found valid, by any reader in this process (a name's
        # validity is its own: a store of `findings bench` repeats its names
        # in every run file); emptied when it grows past SHARED_MAX.
        if len(_VALID_NAMES) >= SHARED_MAX:
            _VALID_NAMES.clear()
        self.names: set[str] = _VALID_NAMES

    def fail(self, where: str, message: str) -> StoreError:
        return StoreError(f"{self.path}: field '{where}': {message}")

    def obj(self, v: Any, where: str) -> dict[str, Any]:
        if not isinstance(v, dict):
            raise self.fail(where, "expected an object")
        return v

    def array(self, v: Any, where: str) -> list[Any]:
        if not isinstance(v, list):
            raise self.fail(where, "expected a list")
        return v

    def string(self, v: Any, where: str, optional: bool = False) -> str | None:
        if v is None and optional:
            return None
        if not isinstance(v, str):
            raise self.fail(where, "expected a string")
        return v

    def valid_name(self, v: str) -> bool:
        """A name that ``name`` would accept (and remembers), without a message."""
        if valid_name(v):
            self.names.add(v)
            return True
        return False

    def name(self, v: Any, where: str) -> str:
        if type(v) is str and v in self.names:
            return v
        s = self.string(v, where)
        assert s is not None
        if not valid_name(s):
            raise self.fail(where, f"invalid name {s!r}")
        self.names.add(s)
        return s

    def integer(self, v: Any, where: str, optional: bool = False, minimum: int | None = None) -> int | None:
        if v is None and optional:
            return None
        if not isinstance(v, int) or isinstance(v, bool):
            raise self.fail(where, "expected an integer")
        if minimum is not None and v < minimum:
            raise self.fail(where, f"must be >= {minimum}")
        return v

    def number(self, v: Any, where: str) -> float:
        if not isinstance(v, (int, float)) or isinstance(v, bool) or not finite(v):
            raise self.fail(where, "expected a finite number")
        self.not_big(v, where)
        return float(v)

    def series(self, v: Any, where: str) -> tuple[float, ...] | None:
        """A point's stored time-window series (D109): its values if made
        under this code's SERIES_KEY, else None (computed again from the
        per-request records). Values all floats whose magnitudes sum under
        ``_BIG`` (no NaN, no infinity, none too large) are taken as they
        are, at C speed; others are checked one by one, which names the
        fault."""
        if type(v) is dict:
            values, key = v.get("values"), v.get("key")
            if type(values) is list and type(key) is str and _FLOAT.issuperset(map(type, values)) \
                    and sum(map(abs, values)) < _BIG:
                return tuple(values) if key == SERIES_KEY else None
        return self.series_checked(v, where)

    def series_checked(self, v: Any, where: str) -> tuple[float, ...] | None:
        """``series``, each value checked on its own."""
        d = self.obj(v, where)
        key = self.string(d.get("key"), f"{where}.key")
        values = d.get("values")
        if not isinstance(values, list):
            raise self.fail(f"{where}.values", "expected a list of numbers")
        out = tuple(self.number(x, f"{where}.values[{j}]") for j, x in enumerate(values))
        return out if key == SERIES_KEY else None

    def not_big(self, v: Any, where: str) -> None:
        if not self.big_floats and isinstance(v, float) and abs(v) >= _BIG:
            raise self.fail(where, "a float this large may have been an integer; read exactly")

    def shared_scalars(self, v: Any, where: str) -> dict[str, Scalar]:
        """``scalars``, the one dict of equal facts read before when there is one
        (``_facts``: at C speed where the values need no check one by one;
        a store of `findings bench` repeats them in every run file); others
        are checked, and keyed by their repr (which tells 0.0 from -0.0)."""
        found = _facts(v)
        if found is not None:
            return found
        d = self.scalars(v, where)
        return _shared(("facts", repr(d)), lambda: d)  # type: ignore[no-any-return]

    def scalars(self, v: Any, where: str) -> dict[str, Scalar]:
        d = self.obj(v, where)
        for k, x in d.items():
            if not isinstance(x, (str, int, float, bool)) and x is not None:
                raise self.fail(f"{where}.{k}", "expected a string, number, boolean or null")
            if isinstance(x, float) and not math.isfinite(x):  # big ints are fine in a fact
                raise self.fail(f"{where}.{k}", "expected a finite number")
            self.not_big(x, f"{where}.{k}")
        return d


#: What runs read in this process share when equal (D131): a store that
#: `findings bench` wrote holds one run file per point, each repeating its
#: campaign, environment and config facts. Frozen or never changed once
#: read; keyed by type and value (repr tells 1 from 1.0 from True, and 0.0
#: from -0.0). Emptied when it grows past SHARED_MAX.
_SHARED: dict[Any, Any] = {}
_VALID_NAMES: set[str] = set()
SHARED_MAX = 65536
_NO_HASHES: frozenset[str] = frozenset()


def _shared(key: Any, make: Callable[[], Any]) -> Any:
    found = _SHARED.get(key)
    if found is None:
        if len(_SHARED) >= SHARED_MAX:
            _SHARED.clear()
        found = _SHARED[key] = make()
    return found


def facts_of(keys: tuple[str, ...], values: tuple[Any, ...]) -> dict[str, Scalar]:
    """The one dict of these facts (strings, integers, booleans and nulls)
    in this process, as ``shared_scalars`` shares them: how the render
    cache's entries come back unpickled (D136)."""
    key = ("facts", keys, values, tuple(map(type, values)))
    found = _SHARED.get(key)
    if found is None:
        found = _shared(key, lambda: dict(zip(keys, values)))
    return found  # type: ignore[no-any-return]


def campaign_of(name: str, date: str | None, order: int | None) -> Campaign:
    """The one Campaign of these fields in this process, as ``run_from_dict``
    shares them (D136)."""
    return _shared(("campaign", name, date, order),  # type: ignore[no-any-return]
                   lambda: Campaign(name=name, date=date, order=order))


def shareable_facts(d: object) -> bool:
    """Whether ``facts_of`` can stand for this dict: its values all strings,
    integers, booleans or nulls (valid by their types alone)."""
    return type(d) is dict and _FACT_TYPES.issuperset(map(type, d.values()))


def params_of(keys: tuple[str, ...], values: tuple[Any, ...],
              types: tuple[type, ...] | None = None) -> dict[str, Any]:
    """The one dict of these workload parameters in this process (none of
    the values a float), its names and strings interned: what ``_params``
    returns, and how the render cache's entries come back unpickled, so
    that equal parameters of different runs are one dict again (D136)."""
    key = ("params", keys, values, tuple(map(type, values)) if types is None else types)
    found = _SHARED.get(key)
    if found is None:
        found = _shared(key, lambda: {sys.intern(k): sys.intern(v) if type(v) is str else v
                                      for k, v in zip(keys, values)})
    return found  # type: ignore[no-any-return]


def _params(params: dict[str, Any], canon: dict[str, str], types: tuple[type, ...] | None = None) -> dict[str, Any]:
    """A point's workload parameters, checked scalars: one dict for the
    points of every run that have equal ones (the same workload at the
    same C, campaign after campaign), keyed by the values and their types.
    Parameters with a float are not shared (0.0 and -0.0 are equal); their
    strings are, within the run."""
    if types is None:
        types = tuple(map(type, params.values()))
    if _PLAIN_KINDS.issuperset(types):  # looked up as _plain_params looks up a run's (D178)
        found = _PLAIN_PARAMS.get((tuple(params), tuple(params.values())))
        return found if found is not None else _plain_params([params])[0]
    if float not in types:
        return params_of(tuple(params), tuple(params.values()), types)
    return {k: canon.setdefault(v, v) if type(v) is str else v for k, v in params.items()}


def _plain_params(params: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``_params`` of many points whose parameters are strings, integers
    and nulls only (no boolean, no float): their names and values alone tell
    them apart (1 == True and 1 == 1.0 cannot happen), so each is looked up
    by those, at C speed, and only one not seen before in this process
    takes ``params_of`` (D167)."""
    keys = list(zip(map(tuple, params), map(tuple, map(dict.values, params))))
    found = list(map(_PLAIN_PARAMS.get, keys))
    if None in found:
        if len(_PLAIN_PARAMS) >= SHARED_MAX:
            _PLAIN_PARAMS.clear()
        for i in [i for i, d in enumerate(found) if d is None]:
            names, values = keys[i]
            found[i] = _PLAIN_PARAMS[keys[i]] = params_of(names, values)
    return found  # type: ignore[return-value]


#: (names, values) -> the dict params_of shares, for parameters of strings,
#: integers and nulls only (``_plain_params``).
_PLAIN_PARAMS: dict[tuple[tuple[str, ...], tuple[Any, ...]], dict[str, Any]] = {}
_PLAIN_KINDS = frozenset({str, int, type(None)})
#: A parsed point without workload parameters reads as this (a dict, as parsed ones are).
_NO_PARSED_PARAMS: dict[str, Any] = {}
_GET = dict.get
#: A point's campaign, config and workload: one string per name in the
#: process, in every run that names it (and in runs unpickled: D136).
_intern = sys.intern


def _fast_points(listed: list[Any], r: _Reader, seen: set[str], run_id: str, source: str,
                 source_file: str | None, canon: dict[str, str]) -> list[Point] | None:
    """A run's points when every one is of the common shape, checked field by
    field across the points at C speed (``map`` over the parsed objects, no
    Python step per point and field); None when any is not, and the points
    then take ``run_from_dict``'s own checks, point by point, which name the
    fault. What it accepts, and what it makes of it, is what those checks
    accept and make."""
    if set(map(type, listed)) != _DICT:
        return None
    n = len(listed)

    def column(key: str, default: Any = None) -> list[Any]:
        return list(map(_GET, listed, repeat(key, n), repeat(default, n)))

    campaigns, configs, workloads = column("campaign"), column("config"), column("workload")
    if (set(map(type, campaigns)) != _STR or not seen.issuperset(campaigns)
            or set(map(type, configs)) != _STR or set(map(type, workloads)) != _STR
            or not all(map(r.valid_name, set(configs).union(workloads).difference(r.names)))):
        return None
    concs = column("concurrency")
    if set(map(type, concs)) != _INT or min(concs) < 1:
        return None
    metrics = column("metrics")
    if set(map(type, metrics)) != _DICT or not all(metrics):
        return None
    flat = list(chain.from_iterable(map(dict.values, metrics)))
    # Every value under _BIG, NaN and infinities refused: a sum of magnitudes
    # under it bounds each (NaN makes the sum NaN, which is under nothing).
    if set(map(type, flat)) != _FLOAT or not sum(map(abs, flat)) < _BIG \
            or min(map(_GET, metrics, repeat(THROUGHPUT, n), repeat(0.0, n))) < 0:
        return None
    requests, notes, lines, stored = column("requests"), column("note"), column("source_line"), column("series")
    params = column("workload_params", _NO_PARSED_PARAMS)
    if (not _DICT_OR_NONE.issuperset(map(type, requests)) or not _STR_OR_NONE.issuperset(map(type, notes))
            or not _INT_OR_NONE.issuperset(map(type, lines)) or not _DICT_OR_NONE.issuperset(map(type, stored))
            or set(map(type, params)) != _DICT):
        return None
    kinds = set(map(type, chain.from_iterable(map(dict.values, params))))
    if not _SCALARS.issuperset(kinds) or (float in kinds and not all(
            -_BIG < x < _BIG for x in chain.from_iterable(map(dict.values, params)) if type(x) is float)):
        return None
    if _PLAIN_KINDS.issuperset(kinds):
        shared = _plain_params(params)
    else:
        shared = [_params(pm, canon) for pm in params]
    made = packed_rows(list(map(tuple, metrics)), flat)
    # One string object per name in the process (the parser makes one per occurrence).
    interned = {name: _intern(name) for name in set(campaigns).union(configs, workloads)}
    campaigns, configs, workloads = (list(map(interned.__getitem__, named))
                                     for named in (campaigns, configs, workloads))
    series = stored if stored.count(None) == n else [
        None if st is None else r.series(st, f"points[{i}].series") for i, st in enumerate(stored)]
    ids = list(map(f"{run_id}/".__add__, map(str, range(n))))
    # Each point made from its fields at C speed, as Point(...) would (D173).
    return list(map(tuple.__new__, repeat(Point, n),
                    zip(ids, repeat(run_id, n), campaigns, configs, workloads, concs, made, repeat(source, n),
                        repeat(source_file, n), lines, notes, shared, requests, series)))


def migrate(doc: dict[str, Any], path: str) -> dict[str, Any]:
    """Bring an older document up to SCHEMA_VERSION, or refuse it."""
    version = doc.get("schema_version")
    if not isinstance(version, int) or isinstance(version, bool) or version < 1:
        raise StoreError(f"{path}: field 'schema_version': missing or not a positive integer")
    if version > SCHEMA_VERSION:
        raise StoreError(
            f"{path}: schema_version {version} is newer than this findings "
            f"(reads up to {SCHEMA_VERSION}); upgrade findings to read this store"
        )
    while version < SCHEMA_VERSION:
        doc = MIGRATIONS[version](doc)
        version = doc["schema_version"]
    return doc


def _facts(v: Any) -> dict[str, Scalar] | None:
    """``_Reader.shared_scalars`` of a dict of facts (the process's one dict
    of them), or None where that would check them one by one and might
    refuse them (D167)."""
    if type(v) is not dict:
        return None
    types = tuple(map(type, v.values()))
    if _FACT_TYPES.issuperset(types):
        return _shared(("facts", tuple(v), tuple(v.values()), types), lambda: v)  # type: ignore[no-any-return]
    if not _SCALARS.issuperset(types) or not all(-_BIG < x < _BIG for x in v.values() if type(x) is float):
        return None
    return _shared(("facts", repr(v)), lambda: v)  # type: ignore[no-any-return]


#: An optional field left out (never handed out: only compared).
_ABSENT: dict[str, Any] = {}


def _common_run(doc: Any, r: _Reader) -> Run | None:
    """A run file of the common shape, checked with no Python call per field,
    or None (D167). The common shape: its fields of the expected types, only
    campaigns this process has read before, facts valid by their types
    alone, points of the common shape (``_common_point``, ``_fast_points``),
    no per-campaign configs. A store that `findings bench` wrote holds a
    file of one point per point measured (100k files at 100k points), and
    a store of campaigns one per (campaign, config): the checks of a run's
    fields weigh as much as its points' there. Anything else (the first
    file of a campaign among them) is None, and takes ``run_from_dict``'s
    own checks, which name the fault; what this accepts, and what it makes
    of it, is what those checks accept and make. ``r``: the caller's reader,
    whose checks of a stored series it shares."""
    get = doc.get
    names = _VALID_NAMES
    if (type(schema_version := get("schema_version")) is not int or schema_version != SCHEMA_VERSION
            or get("kind") != KIND
            or type(per_campaign := get("campaign_configs", _ABSENT)) is not dict or per_campaign
            or type(run_id := get("run_id")) is not str or not (run_id in names or valid_name(run_id))
            or type(source := get("source")) is not str or source not in SOURCES
            or type(importer := get("importer")) is not dict
            or type(imp_name := importer.get("name")) is not str
            or type(imp_version := importer.get("version")) is not str
            or type(tool_version := get("tool_version")) is not str
            or type(created_at := get("created_at")) is not str
            or type(inputs := get("inputs")) is not list or not inputs
            or type(src := inputs[0]) is not dict
            or not ((source_file := src.get("path")) is None or type(source_file) is str)
            or type(sha := src.get("sha256")) is not str
            or type(listed := get("points")) is not list or not listed
            or type(clist := get("campaigns")) is not list or not clist
            or type(cfg_doc := get("configs")) is not dict
            or type(hashes := get("line_hashes", [])) is not list or not _STR.issuperset(map(type, hashes))
            or (environment := _facts(get("environment") if "environment" in doc else {})) is None
            or type(provenance := get("provenance", _ABSENT)) is not dict):
        return None
    kinds = set(map(type, provenance.values()))
    if not _SCALARS.issuperset(kinds) or (float in kinds and not all(
            -_BIG < x < _BIG for x in provenance.values() if type(x) is float)):
        return None
    extra = []
    for item in inputs[1:]:  # other inputs (a server log, a prompt set)
        if not (type(item) is dict and type(where := item.get("path")) is str
                and type(digest := item.get("sha256")) is str and type(role := item.get("role")) is str):
            return None
        extra.append(Input(path=where, sha256=digest, role=role))
    campaigns = []
    for c in clist:  # each read before, in another run file: valid as it was
        if type(c) is not dict:
            return None
        name, date, order = c.get("name"), c.get("date"), c.get("order")
        known = (_SHARED.get(("campaign", name, date, order)) if type(name) is str
                 and type(date) in (str, type(None)) and type(order) in (int, type(None)) else None)
        if known is None:
            return None
        campaigns.append(known)
    seen = {c.name for c in campaigns}
    if len(seen) != len(campaigns):
        return None
    configs = {}
    for k, v in cfg_doc.items():
        facts = _facts(v)
        if facts is None or not (k in names or valid_name(k)):
            return None
        configs[k] = facts
    source = _intern(source)
    if len(listed) > 1:  # a run of several points (an import, or a store of campaigns)
        try:
            made = _fast_points(listed, r, seen, run_id, source, source_file, {})
        except StoreError:  # a stored series that run_from_dict refuses
            return None
        if made is None:
            return None
        points = tuple(made)
    else:
        try:
            point = _common_point(listed[0], 0, seen, run_id, source, source_file, r, {})
        except StoreError:  # a stored series that run_from_dict refuses
            return None
        if point is None:
            return None
        points = (point,)
    sidecar = None
    if "requests" in doc:
        ref = doc["requests"]
        if not (type(ref) is dict and type(file := ref.get("file")) is str and file == f"{run_id}{SIDECAR_SUFFIX}"
                and type(digest := ref.get("sha256")) is str and _HEX64.fullmatch(digest)
                and type(indices := ref.get("points")) is list and indices and set(map(type, indices)) == _INT
                and min(indices) >= 0 and max(indices) < len(points) and len(set(indices)) == len(indices)
                and all(points[k].requests is None for k in indices)):
            return None
        sidecar = Sidecar(file=file, sha256=digest, points=tuple(indices))
    names.update(configs)
    return make_run(SCHEMA_VERSION, run_id, source, _intern(imp_name), _intern(imp_version), _intern(tool_version),
               _intern(created_at), source_file, sha, environment, tuple(campaigns), configs, points,
               frozenset(hashes) if hashes else _NO_HASHES, r.path,
               {} if provenance is _ABSENT else provenance, tuple(extra), {}, sidecar)


def _common_point(p: Any, i: int, seen: set[str], run_id: str, source: str, source_file: str | None,
                  r: _Reader, canon: dict[str, str]) -> Point | None:
    """Point ``i`` of a run, when it is of the common shape: checked without
    building a message for every field, or None, and it takes
    ``run_from_dict``'s checks, which name the fault. A stored series that
    ``r`` refuses raises its StoreError."""
    names = _VALID_NAMES
    if not (type(p) is dict
            and type(campaign := p.get("campaign")) is str and campaign in seen
            and type(config := p.get("config")) is str and (config in names or valid_name(config))
            and type(workload := p.get("workload")) is str and (workload in names or valid_name(workload))
            and type(conc := p.get("concurrency")) is int and conc >= 1
            and type(metrics_raw := p.get("metrics")) is dict and metrics_raw
            and set(map(type, values := list(metrics_raw.values()))) == _FLOAT
            # Every value under _BIG, NaN and infinities refused, at C speed:
            # a sum of magnitudes under it bounds each (a larger sum of
            # valid values only takes the checked path; not min/max:
            # min([1.0, nan]) is 1.0, and NaN must fail).
            and sum(map(abs, values)) < _BIG
            and metrics_raw.get(THROUGHPUT, 0.0) >= 0
            and ((requests := p.get("requests")) is None or type(requests) is dict)
            and ((note := p.get("note")) is None or type(note) is str)
            and ((line := p.get("source_line")) is None or type(line) is int)
            and ((stored := p.get("series")) is None or type(stored) is dict)
            and type(params := p.get("workload_params", _NO_PARSED_PARAMS)) is dict
            and _SCALARS.issuperset(ptypes := tuple(map(type, params.values())))
            and (float not in ptypes or all(-_BIG < x < _BIG for x in params.values() if type(x) is float))):
        return None
    series = None if stored is None else r.series(stored, f"points[{i}].series")
    names.add(config)
    names.add(workload)
    # One string object per distinct name (in the process) and parameter
    # value (in the run); the parser makes one per occurrence: about 40 MiB
    # fewer at 100k points. Positional, in the fields' order: faster.
    return Point(f"{run_id}/{i}", run_id, _intern(campaign), _intern(config), _intern(workload), conc,
                 Metrics.packed(tuple(metrics_raw), values), source, source_file, line, note,
                 _params(params, canon, ptypes), requests, series)


def run_from_dict(doc: Any, path: str, big_floats: bool = True) -> Run:
    """Validate one parsed run file and return it as a Run.

    ``big_floats=False``: ``doc`` comes from a parser that turns integers
    beyond 64 bits into floats (orjson), so any float of that magnitude in a
    metric or fact is refused, and the caller reads the file again with the
    exact parser. (Per-point ``requests`` records are not checked.)
    """
    r = _Reader(path, big_floats)
    if not (type(doc) is dict and type(version := doc.get("schema_version")) is int and version == SCHEMA_VERSION):
        doc = migrate(r.obj(doc, "<root>"), path)  # (one of this version needs none)
    common = _common_run(doc, r)
    if common is not None:
        return common
    if doc.get("kind") != KIND:
        raise r.fail("kind", f"expected {KIND!r}")
    run_id = r.name(doc.get("run_id"), "run_id")
    source = r.string(doc.get("source"), "source")
    if source not in SOURCES:
        raise r.fail("source", f"must be one of {', '.join(SOURCES)}")
    source = _intern(source)
    importer = r.obj(doc.get("importer"), "importer")
    inputs = r.array(doc.get("inputs"), "inputs")
    if not inputs:
        raise r.fail("inputs", "expected at least the run's main input")
    src = r.obj(inputs[0], "inputs[0]")
    extra = []
    for i, item in enumerate(inputs[1:], start=1):
        item = r.obj(item, f"inputs[{i}]")
        extra.append(Input(path=r.string(item.get("path"), f"inputs[{i}].path") or "",
                           sha256=r.string(item.get("sha256"), f"inputs[{i}].sha256") or "",
                           role=r.string(item.get("role"), f"inputs[{i}].role") or ""))
    campaigns = []
    seen: set[str] = set()
    for i, c in enumerate(r.array(doc.get("campaigns"), "campaigns")):
        c = r.obj(c, f"campaigns[{i}]")
        name = r.name(c.get("name"), f"campaigns[{i}].name")
        date, order = c.get("date"), c.get("order")
        # The same campaign read before (in another run file): valid as it was.
        known = (_SHARED.get(("campaign", name, date, order))
                 if type(date) in (str, type(None)) and type(order) in (int, type(None)) else None)
        if known is None:
            date = r.string(date, f"campaigns[{i}].date", optional=True)
            if date is not None and not valid_date(date):
                raise r.fail(f"campaigns[{i}].date", f"expected YYYY-MM-DD, got {date!r}")
            order = r.integer(order, f"campaigns[{i}].order", optional=True)
            known = campaign_of(name, date, order)
        if name in seen:
            raise r.fail(f"campaigns[{i}].name", f"campaign {name!r} listed twice")
        seen.add(name)
        campaigns.append(known)
    configs: dict[str, Mapping[str, Scalar]] = {}
    for k, v in r.obj(doc.get("configs"), "configs").items():
        configs[r.name(k, "configs")] = r.shared_scalars(v, f"configs.{k}")
    per_campaign: dict[str, dict[str, Mapping[str, Scalar]]] = {}
    for c, cfgs in r.obj(doc.get("campaign_configs", {}), "campaign_configs").items():
        if c not in seen:
            raise r.fail(f"campaign_configs.{c}", f"campaign {c!r} is not in 'campaigns'")
        per_campaign[c] = {r.name(k, f"campaign_configs.{c}"): r.scalars(v, f"campaign_configs.{c}.{k}")
                           for k, v in r.obj(cfgs, f"campaign_configs.{c}").items()}
    points = []
    canon: dict[str, str] = {}
    source_file = src.get("path")
    fast = source_file is None or type(source_file) is str  # else every point takes the checked path
    listed = r.array(doc.get("points"), "points")
    made = _fast_points(listed, r, seen, run_id, source, source_file, canon) if fast and len(listed) > 1 else None
    for i, p in enumerate(listed if made is None else ()):
        # The common case, checked without building a message for every field;
        # anything else takes the path below, which names the fault.
        point = _common_point(p, i, seen, run_id, source, source_file, r, canon) if fast else None
        if point is not None:
            points.append(point)
            continue
        where = f"points[{i}]"
        p = r.obj(p, where)
        campaign = r.name(p.get("campaign"), f"{where}.campaign")
        if campaign not in seen:
            raise r.fail(f"{where}.campaign", f"campaign {campaign!r} is not in 'campaigns'")
        metrics_raw = r.obj(p.get("metrics"), f"{where}.metrics")
        metrics = {k: r.number(v, f"{where}.metrics.{k}") for k, v in metrics_raw.items()}
        # A point without THROUGHPUT measures something else than a server's
        # output (findings' own render times, say: docs/decisions.md D42);
        # the analysis never uses it.
        if THROUGHPUT in metrics and metrics[THROUGHPUT] < 0:
            raise r.fail(f"{where}.metrics.{THROUGHPUT}", "must be >= 0")
        requests = p.get("requests")
        if requests is not None:
            r.obj(requests, f"{where}.requests")
        note = r.string(p.get("note"), f"{where}.note", optional=True)
        config = r.name(p.get("config"), f"{where}.config")
        workload = r.name(p.get("workload"), f"{where}.workload")
        conc = r.integer(p.get("concurrency"), f"{where}.concurrency", minimum=1) or 1
        source_file = r.string(src.get("path"), "inputs[0].path", optional=True)
        points.append(
            Point(
                id=point_id(run_id, i),
                run_id=run_id,
                campaign=campaign,
                config=config,
                workload=workload,
                concurrency=conc,
                metrics=Metrics.of(metrics),
                source=source,
                source_file=source_file,
                source_line=r.integer(p.get("source_line"), f"{where}.source_line", optional=True),
                note=note,
                workload_params=r.scalars(p.get("workload_params", {}), f"{where}.workload_params"),
                requests=requests,
                series=r.series(p["series"], f"{where}.series") if p.get("series") is not None else None,
            )
        )
    if made is not None:
        points = made
    sidecar = None
    if "requests" in doc:
        ref = r.obj(doc["requests"], "requests")
        file = r.string(ref.get("file"), "requests.file") or ""
        if file != f"{run_id}{SIDECAR_SUFFIX}":
            raise r.fail("requests.file", f"expected {run_id}{SIDECAR_SUFFIX!s}, got {file!r}")
        sha = r.string(ref.get("sha256"), "requests.sha256") or ""
        if not re.fullmatch("[0-9a-f]{64}", sha):
            raise r.fail("requests.sha256", "expected 64 hex digits")
        indices = r.array(ref.get("points"), "requests.points")
        for j, k in enumerate(indices):
            if r.integer(k, f"requests.points[{j}]", minimum=0) >= len(points):  # type: ignore[operator]
                raise r.fail(f"requests.points[{j}]", f"no point {k}")
            if points[k].requests is not None:
                raise r.fail(f"requests.points[{j}]", f"point {k} has its records inline as well")
        if not indices or len(set(indices)) != len(indices):
            raise r.fail("requests.points", "expected distinct point indices, at least one")
        sidecar = Sidecar(file=file, sha256=sha, points=tuple(indices))
    hashes = r.array(doc.get("line_hashes", []), "line_hashes")
    for i, h in enumerate(hashes):
        r.string(h, f"line_hashes[{i}]")
    # What many runs repeat (a store of `findings bench` writes a run per
    # point) is one string in the process: 18 MiB fewer at 100k runs (D136).
    return Run(
        schema_version=SCHEMA_VERSION,
        run_id=run_id,
        source=source,
        importer=_intern(r.string(importer.get("name"), "importer.name") or ""),
        importer_version=_intern(r.string(importer.get("version"), "importer.version") or ""),
        tool_version=_intern(r.string(doc.get("tool_version"), "tool_version") or ""),
        created_at=_intern(r.string(doc.get("created_at"), "created_at") or ""),
        source_file=r.string(src.get("path"), "inputs[0].path", optional=True),
        source_sha256=r.string(src.get("sha256"), "inputs[0].sha256") or "",
        environment=r.shared_scalars(doc.get("environment", {}), "environment"),
        campaigns=tuple(campaigns),
        configs=configs,
        points=tuple(points),
        line_hashes=frozenset(hashes) if hashes else _NO_HASHES,
        path=path,
        provenance=r.scalars(doc.get("provenance", {}), "provenance"),
        extra_inputs=tuple(extra),
        campaign_configs=per_campaign,
        sidecar=sidecar,
    )
