"""The results store: a folder of run files, append-only.

Layout (docs/store.md)::

    <store>/runs/<run_id>.json   one file per ingest or benchmark run

A file is written once, atomically (temp file, fsync, hard link into place,
which fails rather than overwrite), and never rewritten. Readers ignore
temporary files. A write takes an exclusive lock on ``<store>/.lock`` so that
the duplicate checks and the write are one step for concurrent writers.
"""

from __future__ import annotations

import contextlib
import fcntl
import gc
import json
import os
import tempfile
from pathlib import Path
from typing import Iterator, Mapping


from findings import jsonfast
from findings.errors import DuplicateError, StoreError
from findings.model import Campaign, Dataset, Run, Scalar
from findings.schema import run_from_dict, run_to_dict

RUNS = "runs"


def run_path(store: Path, run_id: str) -> Path:
    return store / RUNS / f"{run_id}.json"


def load_runs(store: Path) -> list[Run]:
    """Every run in the store, validated, in file-name order."""
    folder = store / RUNS
    if not folder.is_dir():
        if store.exists() and not store.is_dir():
            raise StoreError(f"{store}: the store is not a directory")
        return []
    runs = []
    with _quiet_gc():
        for path in sorted(folder.glob("*.json")):
            if path.name.startswith("."):
                continue
            runs.append(read_run(path))
    return runs


#: Objects allocated while reading beyond which they are moved out of the
#: collector's sight (about a 3,000-point store with per-request records).
FREEZE_AFTER = 100_000


@contextlib.contextmanager
def _quiet_gc() -> Iterator[None]:
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


def read_run(path: Path) -> Run:
    """One run file, validated.

    orjson parses a store several times faster than the json module. It is
    only the fast path: a file it refuses, or whose run fails validation
    (which, on this path, includes any float large enough to have been an
    integer beyond 64 bits, which orjson would have rounded), is read again
    with json, so every outcome and every message is json's.
    """
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise StoreError(f"{path}: cannot read: {exc}") from exc
    run = None
    try:  # orjson checks the UTF-8 itself
        run = run_from_dict(jsonfast.loads(raw), str(path), big_floats=False)
    except (jsonfast.JSONDecodeError, StoreError):
        pass
    if run is None:
        try:  # again as text, exactly as it has always been read
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise StoreError(f"{path}: cannot read: {exc}") from exc
        try:
            doc = json.loads(text, parse_constant=_refuse_constant)
        except (json.JSONDecodeError, ValueError) as exc:
            raise StoreError(f"{path}: not valid JSON: {exc}") from exc
        except RecursionError:
            raise StoreError(f"{path}: not valid JSON: nested too deeply") from None
        run = run_from_dict(doc, str(path))
    if path.stem != run.run_id:
        raise StoreError(f"{path}: file name does not match run_id {run.run_id!r}")
    return run


def _refuse_constant(name: str) -> float:
    raise ValueError(f"{name} is not allowed in the store")


def merge(runs: list[Run]) -> Dataset:
    """One Dataset from many runs; refuses campaigns that contradict each other."""
    campaigns: dict[str, Campaign] = {}
    origin: dict[str, str] = {}
    for run in runs:
        label = str(run.path or run.source_file)
        for c in run.campaigns:
            old = campaigns.get(c.name)
            if old is not None and old != c:
                raise StoreError(
                    f"{label}: campaign {c.name!r} has date/order {c.date}/{c.order} "
                    f"but {origin[c.name]} says {old.date}/{old.order}"
                )
            campaigns[c.name] = c
            origin.setdefault(c.name, label)
    ordered = tuple(sorted(campaigns.values(), key=lambda c: c.sort_key))
    rank = {c.name: i for i, c in enumerate(ordered)}

    def latest(run: Run) -> int:
        return max((rank[c.name] for c in run.campaigns), default=-1)

    configs: dict[str, dict[str, Scalar]] = {}
    for run in sorted(runs, key=lambda r: (latest(r), r.run_id)):
        for name, facts in run.configs.items():
            configs.setdefault(name, {}).update(facts)
    points = tuple(p for run in runs for p in run.points)
    return Dataset(campaigns=ordered, points=points, configs=configs, runs=tuple(runs))


def load(store: Path) -> Dataset:
    return merge(load_runs(store))


@contextlib.contextmanager
def _locked(store: Path) -> Iterator[None]:
    (store / RUNS).mkdir(parents=True, exist_ok=True)
    with open(store / ".lock", "a+") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def check_new_run(existing: list[Run], run: Run) -> None:
    """Refuse content that is already stored, or that contradicts the store."""
    _check_not_stored(existing, run)
    _check_consistent(existing + [run])


def _check_not_stored(existing: list[Run], run: Run) -> None:
    for old in existing:
        if old.source_sha256 == run.source_sha256:
            raise DuplicateError(
                f"{run.source_file}: this content was already ingested as run "
                f"{old.run_id} (from {old.source_file}); nothing was written"
            )
        if old.run_id == run.run_id:
            raise DuplicateError(f"run {run.run_id} already exists; nothing was written")
        overlap = old.line_hashes & run.line_hashes
        if overlap:
            raise DuplicateError(
                f"{run.source_file}: {len(overlap)} of its records were already ingested "
                f"as run {old.run_id} (from {old.source_file}); nothing was written "
                f"(use --skip-existing to ingest only the new records)"
            )


def _check_consistent(runs: list[Run]) -> None:
    merged = merge(runs)  # raises on contradicting campaigns
    sources: dict[str, set[bool]] = {}
    for p in merged.points:
        sources.setdefault(p.campaign, set()).add(p.simulated)
    for name, kinds in sorted(sources.items()):
        if len(kinds) > 1:
            raise StoreError(
                f"campaign {name!r} would mix simulated and real measurements; "
                f"use another campaign name; nothing was written"
            )


def known_line_hashes(store: Path) -> frozenset[str]:
    return frozenset(h for run in load_runs(store) for h in run.line_hashes)


def add_run(store: Path, run: Run) -> Path:
    """Check and write one run, atomically. Returns the new file's path."""
    return add_runs(store, [run])[0]


def add_runs(store: Path, runs: list[Run]) -> list[Path]:
    """Check several runs against the store and each other, then write them.

    One lock and one read of the store for the lot, where ``add_run`` per run
    would read the whole store again for each. Every run is checked before
    any is written, with the same refusals as ``add_run`` one after the
    other; each file is written atomically, but a writer killed midway
    leaves the first runs of the batch stored and not the rest.
    """
    docs = [_storable(run) for run in runs]
    with _locked(store):
        existing = load_runs(store)
        for i, run in enumerate(runs):
            _check_not_stored(existing + runs[:i], run)
        _check_consistent(existing + runs)
        return [_write_new(run_path(store, run.run_id), doc) for run, doc in zip(runs, docs)]


def _storable(run: Run) -> dict[str, object]:
    doc = run_to_dict(run)
    # What is written must read back: a run the reader would refuse would make
    # the whole store unreadable, so refuse it here, before anything is written.
    label = f"{run.source_file or run.run_id} (as stored)"
    try:
        text = json.dumps(doc, allow_nan=False)
    except ValueError as exc:
        raise StoreError(f"{label}: cannot be stored: {exc}; nothing was written") from None
    run_from_dict(json.loads(text), label)
    return doc


def _write_new(path: Path, doc: Mapping[str, object]) -> Path:
    data = (json.dumps(doc, indent=1, ensure_ascii=False, allow_nan=False) + "\n").encode()
    fd, tmp = tempfile.mkstemp(prefix=".tmp-", suffix=".json", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as fh:
            os.fchmod(fh.fileno(), 0o644)  # mkstemp makes 0600; store files are shared
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        try:
            os.link(tmp, path)  # atomic, and never replaces an existing file
        except FileExistsError as exc:
            raise DuplicateError(f"{path} already exists; nothing was written") from exc
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
    dirfd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(dirfd)
    finally:
        os.close(dirfd)
    return path
