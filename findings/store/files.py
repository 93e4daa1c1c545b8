"""Reading run files and their sidecars: the store's lowest layer, used by
the store itself (findings/store/__init__.py) and by its index
(findings/store/index.py), which must read a run without importing the store."""

from __future__ import annotations

import contextlib
import dataclasses
import gc
import gzip
import hashlib
import json
import os
import zlib
from pathlib import Path
from typing import Callable, Iterator, Mapping

from findings.core import diskio, jsonfast
from findings.core.errors import StoreError
from findings.core.model import Point, Run, Sidecar
from findings.store.schema import SIDECAR_KIND, SIDECAR_SUFFIX, run_from_dict

RUNS = "runs"


def run_path(store: Path, run_id: str) -> Path:
    return store / RUNS / f"{run_id}.json"


def sidecar_path(store: Path, run_id: str) -> Path:
    return store / RUNS / f"{run_id}{SIDECAR_SUFFIX}"


def load_runs(store: Path, requests: bool = True) -> list[Run]:
    """Every run in the store, validated, in file-name order (without
    ``requests``: the per-request records in sidecars are not read)."""
    folder = store / RUNS
    if not folder.is_dir():
        if store.exists() and not store.is_dir():
            raise StoreError(f"{store}: the store is not a directory")
        return []
    runs = []
    with quiet_gc():
        for path in sorted(folder.glob("*.json")):
            if path.name.startswith("."):
                continue
            runs.append(read_run(path, requests))
    return runs


#: Objects allocated while reading beyond which they are moved out of the
#: collector's sight (about a 3,000-point store with per-request records).
FREEZE_AFTER = 100_000


@contextlib.contextmanager
def quiet_gc() -> Iterator[None]:
    """The cyclic garbage collector off while a store is read.

    Parsed run files hold no reference cycles, so the collector finds nothing
    in them, but millions of new objects make it run again and again over
    all of them: a third of the time to render a 100k-point store. Once a
    large store is read, its objects go to the permanent generation
    (``gc.freeze``), which later collections skip; small reads (tests, a
    single ingest) leave the collector as it was.
    """
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if gc.get_count()[0] > FREEZE_AFTER:
            gc.freeze()
        if enabled:
            gc.enable()


#: ``os.path.basename`` of a path as a string: where "/" is the one
#: separator, the part after the last one, without a Python call per file.
_basename: Callable[[str], str] = ((lambda p: p[p.rfind("/") + 1:]) if os.sep == "/" and os.altsep is None
                                   else os.path.basename)


def read_run(path: Path | str, requests: bool | Callable[[Point], bool] = True, raw: bytes | None = None) -> Run:
    """One run file, validated, with its sidecar's per-request records
    (unless ``requests`` is False; when it is a function, only if it is
    true of one of the points the sidecar holds records of). ``raw``: the
    file's bytes, when the caller has read them already."""
    if raw is None:
        try:
            raw = diskio.read_bytes(path)
        except OSError as exc:
            raise StoreError(f"{path}: cannot read: {exc}") from exc
    label = str(path)
    base = _basename(label)
    run = parse_run(raw, label, base[:-5] if base.endswith(".json") else Path(label).stem)
    if callable(requests) and run.sidecar is not None:
        requests = wants_records(run, requests)
        side = os.path.join(os.path.dirname(label), run.sidecar.file)  # no Path: a run per point (D173)
        if not requests and not os.path.isfile(side):  # not read, but a store missing it is damaged: say so
            raise StoreError(f"{path}: its per-request records {side} are missing "
                             f"(restore the file, e.g. git checkout -- {side})")
    if requests and run.sidecar is not None:
        run = with_requests(run, read_sidecar(Path(path).parent / run.sidecar.file, run.sidecar, run.run_id,
                                              str(path)))
    return run


def wants_records(run: Run, needed: Callable[[Point], bool]) -> bool:
    """Whether ``needed`` is true of one of the points the run's sidecar
    holds records of (False without a sidecar)."""
    if run.sidecar is None:
        return False
    return any(needed(run.points[i]) for i in run.sidecar.points if i < len(run.points))


def read_sidecar(path: Path, sidecar: Sidecar, run_id: str, label: str) -> dict[int, dict[str, object]]:
    """A sidecar's records by point index, checked against the hash its run
    file recorded; StoreError names the run file and the sidecar."""
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        raise StoreError(f"{label}: its per-request records {path} are missing "
                         f"(restore the file, e.g. git checkout -- {path})") from None
    except OSError as exc:
        raise StoreError(f"{label}: cannot read its per-request records {path}: {diskio.cause(exc)}") from None
    return parse_sidecar(raw, sidecar, run_id, label, str(path))


def parse_sidecar(raw: bytes, sidecar: Sidecar, run_id: str, label: str,
                  path: str) -> dict[int, dict[str, object]]:
    """A sidecar's bytes (``path``: where they came from, for messages)."""
    verify_sidecar(raw, sidecar, label, path)
    try:
        doc = jsonfast.loads(gzip.decompress(raw))
    except (OSError, EOFError, zlib.error, jsonfast.JSONDecodeError) as exc:
        raise StoreError(f"{label}: {path}: not gzip-compressed JSON ({exc})") from None
    points = doc.get("points") if isinstance(doc, dict) else None
    if not isinstance(doc, dict) or doc.get("kind") != SIDECAR_KIND or doc.get("run_id") != run_id \
            or not isinstance(points, dict):
        raise StoreError(f"{label}: {path}: not the per-request records of run {run_id}")
    if set(points) != {str(i) for i in sidecar.points} or not all(isinstance(v, dict) for v in points.values()):
        raise StoreError(f"{label}: {path}: holds records of other points than its run file lists")
    return {int(k): v for k, v in points.items()}


def verify_sidecar(raw: bytes, sidecar: Sidecar, label: str, path: str) -> None:
    """StoreError unless a sidecar's bytes are those whose sha256 its run
    file recorded (checked without parsing them)."""
    if hashlib.sha256(raw).hexdigest() != sidecar.sha256:
        raise StoreError(f"{label}: {path} does not match the sha256 its run file recorded "
                         f"(a foreign or changed file; restore it from git)")


def with_requests(run: Run, records: Mapping[int, Mapping[str, object]]) -> Run:
    """The run with its sidecar's records (``read_sidecar``, ``parse_sidecar``)
    put back into its points."""
    points = tuple(p._replace(requests=records[i]) if i in records else p
                   for i, p in enumerate(run.points))
    return dataclasses.replace(run, points=points)


def parse_run(raw: bytes, label: str, stem: str) -> Run:
    """A run file's bytes, validated (``stem``: the file name without .json).

    orjson parses a store several times faster than the json module. It is
    only the fast path: a file it refuses, or whose run fails validation
    (which, on this path, includes any float large enough to have been an
    integer beyond 64 bits, which orjson would have rounded), is read again
    with json, so every outcome and every message is json's.
    """
    run = fast_run(raw, label)
    if run is None:
        try:  # again as text, exactly as it has always been read
            text = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise StoreError(f"{label}: cannot read: {exc}") from exc
        try:
            doc = json.loads(text, parse_constant=refuse_constant)
        except (json.JSONDecodeError, ValueError) as exc:
            raise StoreError(f"{label}: not valid JSON: {exc}") from exc
        except RecursionError:
            raise StoreError(f"{label}: not valid JSON: nested too deeply") from None
        run = run_from_dict(doc, label)
    if stem != run.run_id:
        raise StoreError(f"{label}: file name does not match run_id {run.run_id!r}")
    return run


def fast_run(raw: bytes, label: str) -> Run | None:
    """A run file's bytes through orjson, validated, or None where orjson
    refuses them or cannot vouch for the run (a float that may have been an
    integer beyond 64 bits, any failed check): the caller then reads them
    with json, whose outcome and words are the reference."""
    try:  # orjson checks the UTF-8 itself
        return run_from_dict(jsonfast.loads(raw), label, big_floats=False)
    except (jsonfast.JSONDecodeError, StoreError):
        return None


def refuse_constant(name: str) -> float:
    raise ValueError(f"{name} is not allowed in the store")
