"""The results store: a folder of run files, append-only.

Layout (docs/store.md)::

    <store>/runs/<run_id>.json   one file per ingest or benchmark run
    <store>/runs/<run_id>.requests.json.gz
                                 its per-request records, if any (schema 4)

A file is written once, atomically (temp file, fsync, hard link into place,
which fails rather than overwrite), and never rewritten. Readers ignore
temporary files. A write takes an exclusive lock on ``<store>/.lock`` so that
the duplicate checks and the write are one step for concurrent writers.
"""

from __future__ import annotations

import contextlib
import dataclasses
import errno
import gzip
import hashlib
import json
import operator
import os
import sqlite3
from itertools import chain
from pathlib import Path
from typing import Iterator, Mapping

from findings.core import diskio, jsonfast
from findings.store import identity
from findings.core.errors import DuplicateError, FindingsError, LabelError, NotAStoreError, StoreError
from findings.core.model import Campaign, Dataset, Point, Run, Scalar, Sidecar
from findings.store import index as storeindex
from findings.store.schema import SEAL_KEY, SIDECAR_KIND, SIDECAR_SUFFIX, records_in, run_from_dict, run_to_dict, seal

# Re-exported: reading run files lives in findings/store/files.py (the index reads them too).
from findings.store.files import FREEZE_AFTER as FREEZE_AFTER
from findings.store.files import fast_run as fast_run
from findings.store.files import RUNS as RUNS
from findings.store.files import load_runs as load_runs
from findings.store.files import parse_run as parse_run
from findings.store.files import parse_sidecar as parse_sidecar
from findings.store.files import quiet_gc as quiet_gc
from findings.store.files import read_run as read_run
from findings.store.files import read_sidecar as read_sidecar
from findings.store.files import refuse_constant as refuse_constant
from findings.store.files import run_path as run_path
from findings.store.files import sidecar_path as sidecar_path
from findings.store.files import verify_sidecar as verify_sidecar
from findings.store.files import wants_records as wants_records
from findings.store.files import with_requests as with_requests


#: A point's (config, campaign); a run's points (read at C speed by ``merge``).
_CONFIG_CAMPAIGN = operator.itemgetter(3, 2)
_POINTS = operator.attrgetter("points")
_CAMPAIGNS, _RUN_ID = operator.attrgetter("campaigns"), operator.attrgetter("run_id")


def merge(runs: list[Run]) -> Dataset:
    """One Dataset from many runs; refuses campaigns that contradict each other."""
    campaigns: dict[str, Campaign] = {}
    origin: dict[str, str] = {}
    for run in runs:
        for c in run.campaigns:
            old = campaigns.get(c.name)
            if old is c:  # the one object of it that the runs read in this process share
                continue
            if old is not None and old != c:
                raise StoreError(
                    f"{run.path or run.source_file}: campaign {c.name!r} has date/order {c.date}/{c.order} "
                    f"but {origin[c.name]} says {old.date}/{old.order}"
                )
            campaigns[c.name] = c
            origin.setdefault(c.name, str(run.path or run.source_file))
    ordered = tuple(sorted(campaigns.values(), key=lambda c: c.sort_key))
    rank = {c.name: i for i, c in enumerate(ordered)}

    # Each run's latest campaign, then its id: the order the runs' facts are
    # merged in, found with no Python call per run (a store of `findings
    # bench` holds a run per point, D173).
    latest = [rank[cs[0].name] if len(cs) == 1 else max((rank[c.name] for c in cs), default=-1)
              for cs in map(_CAMPAIGNS, runs)]
    keys = list(zip(latest, map(_RUN_ID, runs)))

    configs: dict[str, dict[str, Scalar]] = {}
    facts: dict[tuple[str, str], dict[str, Scalar]] = {}
    # The facts last written into each: writing the same object again
    # changes nothing (runs read in one process share equal facts, and a
    # store of `findings bench` has a run per point).
    last: dict[object, object] = {}
    nothing: Mapping[str, Scalar] = {}
    no_configs: Mapping[str, Mapping[str, Scalar]] = {}
    by_rank = rank.__getitem__
    for i in sorted(range(len(runs)), key=keys.__getitem__):
        run = runs[i]
        measured = set(map(_CONFIG_CAMPAIGN, run.points))
        for name, run_facts in run.configs.items():
            if last.get(name) is not run_facts:
                configs.setdefault(name, {}).update(run_facts)
                last[name] = run_facts
        if run.campaign_configs:
            for campaign in sorted(run.campaign_configs, key=by_rank):
                for name, run_facts in run.campaign_configs[campaign].items():
                    if last.get(name) is not run_facts:
                        configs.setdefault(name, {}).update(run_facts)
                        last[name] = run_facts
        for config, campaign in sorted(measured):
            given = run.configs.get(config, nothing)
            only = run.campaign_configs.get(campaign, no_configs).get(config, nothing)
            key = (config, campaign)
            if last.get(key) != (id(given), id(only)):
                here = facts.setdefault(key, {})
                here.update(given)
                here.update(only)
                last[key] = (id(given), id(only))
    points = tuple(chain.from_iterable(map(_POINTS, runs)))
    return Dataset(campaigns=ordered, points=points, configs=configs, runs=tuple(runs), facts=facts)


def require(store: Path) -> None:
    """Raise NotAStoreError unless ``store`` is a findings store (a folder
    holding ``runs/``). Every reader asks; writers refuse such a path too,
    unless asked to create the store (``locked``, ``create``). An existing
    store with no runs yet is a store, and reads as no points."""
    if store.is_dir() and (store / RUNS).is_dir():
        return
    if not store.exists():
        why = "no such folder"
    elif not store.is_dir():
        why = "not a folder"
    else:
        why = "no runs/ folder"
    raise NotAStoreError(f"{store}: not a findings store ({why}); check --store, $FINDINGS_STORE or findings.toml")


def load(store: Path) -> Dataset:
    """The store's dataset, for readers: a path that is not a store is an error."""
    require(store)
    return merge(load_runs(store))


#: The one file of an empty store's runs/ folder, so that git keeps the folder.
KEEP = ".gitkeep"


def is_store(store: Path) -> bool:
    return store.is_dir() and (store / RUNS).is_dir()


#: What an existing folder may hold and still take ``create``: findings' own
#: files of a store whose empty ``runs/`` git did not keep.
_STORE_LEFTOVERS = frozenset({".gitignore", ".lock", "amendments", storeindex.NAME, f"{storeindex.NAME}-journal",
                              f"{storeindex.NAME}-wal"})


def _write_refusal(store: Path, create: bool, outcome: str) -> NotAStoreError | None:
    """Why a writer must not write to ``store`` (not a store, and ``create``
    not asked, or asked where no store may be made), or None."""
    if is_store(store):
        return None
    if store.exists() and not store.is_dir():
        return NotAStoreError(f"{store}: not a folder, so not a findings store; check --store, $FINDINGS_STORE "
                              f"or findings.toml; {outcome}")
    if not store.exists():
        return None if create else NotAStoreError(
            f"{store}: no such store (create it with --create, or findings init); {outcome}")
    try:
        held = {e.name for e in os.scandir(store)}
    except OSError as exc:
        return NotAStoreError(f"{store}: cannot read the folder: {diskio.cause(exc)}; {outcome}")
    if not held:
        return None if create else NotAStoreError(
            f"{store}: an empty folder, not a findings store (create the store there with --create, "
            f"or findings init); {outcome}")
    if create and held <= _STORE_LEFTOVERS:
        return None
    return NotAStoreError(f"{store}: not a findings store (it holds files but no runs/ folder); check --store, "
                          f"$FINDINGS_STORE or findings.toml (--create makes a store only in a new or empty "
                          f"folder); {outcome}")


def create(store: Path) -> Path:
    """Make an empty, valid findings store at ``store`` and return it
    (``findings init``, and the writers' ``--create``): the folder and
    ``runs/`` (holding ``.gitkeep``, so that git keeps it while it has no
    runs), the store's ``.gitignore``, ``.lock`` and an empty write index, as
    a first write makes them. A store already there is left as it is. A path
    that is not a folder, or a folder that holds other files and no
    ``runs/``, is refused (NotAStoreError): a store is made only in a new or
    empty folder."""
    return _create(store, "nothing was created")


def _create(store: Path, outcome: str) -> Path:
    if is_store(store):
        return store
    refusal = _write_refusal(store, True, outcome)
    if refusal is not None:
        raise refusal
    try:
        diskio.make_dirs(store / RUNS)
        with contextlib.suppress(FileExistsError):
            diskio.write_new(store / RUNS / KEEP, b"")
    except diskio.DiskError as exc:
        raise exc.with_outcome("the store was not created") from None
    with locked(store):
        with contextlib.suppress(sqlite3.Error, OSError, StoreError):
            with storeindex.open_for_write(store):
                pass  # an empty index (and the store's .gitignore)
    return store


@contextlib.contextmanager
def locked(store: Path, create: bool = False) -> Iterator[None]:
    """The store's write lock. Only writers take it: readers never create
    ``.lock`` or ``runs/``, so a read-only store reads. A path that is not a
    store is refused (NotAStoreError), unless ``create`` asks to make it one
    (``create``): a mistyped --store never becomes a new store."""
    if create:
        _create(store, "nothing was written")
    else:
        refusal = _write_refusal(store, False, "nothing was written")
        if refusal is not None:
            raise refusal
    with contextlib.ExitStack() as stack:
        try:
            stack.enter_context(diskio.exclusive_lock(store / ".lock"))
        except diskio.DiskError as exc:
            raise exc.with_outcome("nothing was written; the store is unchanged") from None
        yield


def writable(store: Path, create: bool = False) -> None:
    """Raise DiskError now if the store cannot take a write (a read-only mount,
    no permission), and NotAStoreError if it is not a store and ``create``
    does not ask to make it one: before a benchmark measures anything. A
    store that does not exist yet is not created here: its nearest existing
    folder is asked."""
    if is_store(store):
        with locked(store):
            return
    not_store = _write_refusal(store, create, "nothing was measured")
    if not_store is not None:
        raise not_store
    folder = store
    while not folder.exists() and folder != folder.parent:
        folder = folder.parent
    if os.statvfs(folder).f_flag & os.ST_RDONLY:
        refusal = OSError(errno.EROFS, os.strerror(errno.EROFS))
    elif not os.access(folder, os.W_OK | os.X_OK):
        refusal = OSError(errno.EACCES, os.strerror(errno.EACCES))
    else:
        return
    raise diskio.DiskError(folder, refusal, "cannot create the store there").with_outcome(
        "nothing was written; the store is unchanged")


def check_home_kind(store: Path, simulated: bool, home_simulated: bool | None, subject: str, verb: str) -> None:
    """Simulated and real results never share findings.toml's own store
    (``home_simulated``: that store is for simulated results; None: ``store``
    is not it). The one-line refusal reads "SUBJECT VERB the findings
    emulator ..." ("config X: the server is", "FILE measured"): the runner's
    and the importers' rule alike (D108)."""
    if home_simulated is None or simulated == home_simulated:
        return
    if simulated:
        raise FindingsError(f"{subject} {verb} the findings emulator, and simulated results never go into the "
                            f"real store {store}; pass --store (e.g. benchmarks/results-emulated)")
    raise FindingsError(f"{subject} {verb} a real server, and {store} is a store for simulated results only; "
                        f"use the real store")


def check_new_run(existing: list[Run], run: Run, *, baseline: str | None = None,
                  allow_workload_change: bool = False) -> None:
    """Refuse content that is already stored, or that contradicts the store."""
    _check_not_stored(existing, run)
    _check_labels(existing, [run], baseline, allow_workload_change)
    _check_consistent(existing + [run])


def _check_baseline(runs: list[Run], baseline: str | None) -> None:
    for run in runs:
        found = identity.baseline_conflicts(run, baseline) if baseline else []
        if found:
            raise LabelError(f"{run.source_file or run.run_id}: {found[0]}; name it otherwise (--config NAME), "
                             f"or choose another baseline (--baseline, findings.toml); nothing was written")


def _check_labels(existing: list[Run], runs: list[Run], baseline: str | None, allow_workload_change: bool) -> None:
    """A workload name keeps its definition, a config its facts within a
    campaign, and the baseline does not speculate (findings/store/identity.py)."""
    _check_baseline(runs, baseline)
    known = identity.Known(existing)
    for run in runs:
        label = run.source_file or run.run_id
        several = identity.several_definitions(run)
        if several:
            # Never "--workload NEW" (one name for all of them again) nor
            # --allow-workload-change (it averaged the definitions together).
            raise LabelError(f"{label}: one workload name, several definitions in this file: {'; '.join(several)}; "
                             f"give each definition its own workload name; nothing was written")
        if not allow_workload_change:
            found = known.workload_conflicts(run)
            if found:
                more = f" (and {len(found) - 2} more)" if len(found) > 2 else ""
                raise LabelError(f"{label}: {'; '.join(found[:2])}{more}: a workload name has one definition; "
                                 f"store it under a new name (--workload NEW), or pass --allow-workload-change "
                                 f"if the workload really changed; nothing was written")
        found = known.facts_conflicts(run)
        if found:
            raise LabelError(f"{label}: {found[0]}: within a campaign a config has one set of facts; name the "
                             f"config otherwise (--config NEW) or measure it in a new campaign; nothing was written")
        known.add(run)


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
                f"{run.source_file}: {records_in(overlap)} of its records were already ingested "
                f"as run {old.run_id} (from {old.source_file}); nothing was written "
                f"(use --skip-existing to ingest only the new records)"
            )


def _check_none_stored(existing: list[Run], runs: list[Run]) -> None:
    """``_check_not_stored`` of each of ``runs`` against ``existing`` and the
    batch's runs before it, with the same refusal for the first that fails,
    in time linear in the runs and their records: each one's content hash,
    id and record hashes looked up among those before it (the first run
    that holds each), not compared with every run before it (a batch of
    10,000 runs into a new store took 10 s, D179)."""
    before: list[Run] = []
    first_sha: dict[str, int] = {}
    first_id: dict[str, int] = {}
    first_line: dict[str, int] = {}

    def note(run: Run) -> None:
        at = len(before)
        before.append(run)
        first_sha.setdefault(run.source_sha256, at)
        first_id.setdefault(run.run_id, at)
        for h in run.line_hashes:
            first_line.setdefault(h, at)

    for run in existing:
        note(run)
    for run in runs:
        found = [at for at in (first_sha.get(run.source_sha256), first_id.get(run.run_id)) if at is not None]
        found.extend(at for at in map(first_line.get, run.line_hashes) if at is not None)
        if found:
            _check_not_stored([before[min(found)]], run)  # the first that holds any: its refusal
        note(run)


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


def preflight(store: Path, runs: list[Run], *, baseline: str | None = None,
              allow_workload_change: bool = False) -> tuple[Point, ...]:
    """The checks a write of ``runs`` would make, before measuring them (the
    runner, with placeholder points): the same refusals, saying that nothing
    was measured. Returns the stored points."""
    try:
        _check_baseline(runs, baseline)
        existing = load_runs(store, requests=False)
        _check_labels(existing, runs, None, allow_workload_change)
        _check_consistent(existing + runs)
    except StoreError as exc:
        raise type(exc)(str(exc).replace("nothing was written", "nothing was measured")) from None
    return tuple(p for run in existing for p in run.points)


def known_line_hashes(store: Path) -> frozenset[str]:
    return frozenset(h for run in load_runs(store, requests=False) for h in run.line_hashes)


def add_run(store: Path, run: Run, *, baseline: str | None = None, allow_workload_change: bool = False,
            create: bool = False) -> Path:
    """Check and write one run, atomically. Returns the new file's path."""
    return add_runs(store, [run], baseline=baseline, allow_workload_change=allow_workload_change, create=create)[0]


def add_runs(store: Path, runs: list[Run], *, baseline: str | None = None,
             allow_workload_change: bool = False, create: bool = False) -> list[Path]:
    """Check several runs against the store and each other, then write them.
    ``store`` must be a store, unless ``create`` asks to make it one
    (``locked``).

    One lock for the lot. The store's index (findings/store/index.py) says
    in constant time whether a run could be refused; only then is the whole
    store read, for the full check and its exact message (and the same when
    the index cannot be opened). Every run is checked before any is written,
    with the same refusals as ``add_run`` one after the other; each file is
    written atomically, but a writer killed midway leaves the first runs of
    the batch stored and not the rest.
    """
    docs = [_storable(run) for run in runs]
    _check_baseline(runs, baseline)
    if create and not is_store(store):  # a batch refused on its own leaves no new store behind
        _check_none_stored([], runs)
        _check_labels([], runs, None, allow_workload_change)
        _check_consistent(runs)
    with locked(store, create):
        with contextlib.ExitStack() as stack:
            try:
                index: storeindex.Index | None = stack.enter_context(storeindex.open_for_write(store))
            except (sqlite3.Error, OSError, StoreError):
                index = None  # no index (a full disk, a damaged run file): the full check
            if index is None or _any_conflict(index, runs):
                existing = load_runs(store, requests=False)
                _check_none_stored(existing, runs)
                _check_labels(existing, runs, None, allow_workload_change)
                _check_consistent(existing + runs)
            written: list[Path] = []
            try:
                for run, (doc, sidecar) in zip(runs, docs):
                    if sidecar is not None:  # first: a run file never names a sidecar that is not there
                        _write_sidecar(sidecar_path(store, run.run_id), sidecar)
                    written.append(_write_new(run_path(store, run.run_id), doc))
            except diskio.DiskError as exc:
                raise exc.with_outcome(_outcome(store, written, runs[len(written):])) from None
            finally:
                if index is not None and written:
                    with contextlib.suppress(sqlite3.Error, OSError):
                        index.added(runs[:len(written)])  # else stale, and brought up to date next time
            return written


def _any_conflict(index: storeindex.Index, runs: list[Run]) -> bool:
    """Whether any run of the batch might be refused, against the store and
    the batch's runs before it (each check costing its own run)."""
    pending = storeindex.Pending()
    for run in runs:
        if index.conflicts(run, pending):
            return True
        pending.add(run)
    return False


def _outcome(store: Path, written: list[Path], unwritten: list[Run]) -> str:
    """What a refused write left: the runs stored before it, and those not."""
    if not written:
        return "nothing was written; the store is unchanged"
    def names(xs: list[str]) -> str:
        return ", ".join(xs)
    return (f"stored {len(written)} of {len(written) + len(unwritten)} runs ({names([p.stem for p in written])}) "
            f"in {store}; not written: {names([r.run_id for r in unwritten])}")


def sidecar_bytes(run: Run) -> bytes | None:
    """The run's per-request records as its sidecar file: gzip-compressed
    JSON (docs/decisions.md D76), the same bytes for the same records (no
    time stamp in the gzip header), or None when no point has records."""
    records = {str(i): p.requests for i, p in enumerate(run.points) if p.requests is not None}
    if not records:
        return None
    body = json.dumps({"kind": SIDECAR_KIND, "run_id": run.run_id, "points": records},
                      ensure_ascii=False, allow_nan=False, separators=(",", ":")).encode()
    return gzip.compress(body, compresslevel=6, mtime=0)


def stored_form(run: Run) -> tuple[dict[str, object], bytes | None]:
    """The run file's JSON document and its sidecar's bytes (if any)."""
    data = sidecar_bytes(run)
    if data is None:
        return run_to_dict(run), None
    ref = Sidecar(file=f"{run.run_id}{SIDECAR_SUFFIX}", sha256=hashlib.sha256(data).hexdigest(),
                  points=tuple(i for i, p in enumerate(run.points) if p.requests is not None))
    return run_to_dict(run, ref), data


def _storable(run: Run) -> tuple[dict[str, object], bytes | None]:
    label = f"{run.source_file or run.run_id} (as stored)"
    try:
        doc, sidecar = stored_form(run)
        text = json.dumps(doc, allow_nan=False)
    except ValueError as exc:
        raise StoreError(f"{label}: cannot be stored: {exc}; nothing was written") from None
    # What is written must read back: a run the reader would refuse would make
    # the whole store unreadable, so refuse it here, before anything is written.
    run_from_dict(json.loads(text), label)
    return doc, sidecar


def _write_sidecar(path: Path, data: bytes) -> None:
    """Atomically, once; a sidecar left by a writer killed before its run
    file was written is taken over when its bytes are the same."""
    try:
        diskio.write_new(path, data)
    except FileExistsError as exc:
        if path.read_bytes() != data:
            raise DuplicateError(f"{path} already exists with other content; nothing was written") from exc


def encode(doc: Mapping[str, object]) -> bytes:
    """A run file's bytes, sealed with their own sha256 (schema.seal; a seal
    ``doc`` already holds, as a relabelled run's does, is replaced)."""
    body = {k: v for k, v in doc.items() if k != SEAL_KEY}
    return seal((json.dumps(body, indent=1, ensure_ascii=False, allow_nan=False) + "\n").encode())


def _write_new(path: Path, doc: Mapping[str, object]) -> Path:
    data = encode(doc)
    try:
        return diskio.write_new(path, data)  # atomic, and never replaces an existing file
    except FileExistsError as exc:
        raise DuplicateError(f"{path} already exists; nothing was written") from exc


def migrate(store: Path) -> tuple[int, int, int, int]:
    """``findings store migrate``: rewrite each run file of an older schema,
    or with per-request records inline, in the current schema, its records
    moved to a sidecar. The run ids, points and conclusions stay the same;
    each file is replaced atomically (the sidecar first), under the write
    lock, so a migration killed midway leaves every run readable, the
    migrated ones and the rest. Returns (runs read, runs rewritten, bytes
    before, bytes after) over the rewritten files."""
    read = rewritten = before = after = 0
    require(store)
    with locked(store):
        for path in sorted((store / RUNS).glob("*.json")):
            if path.name.startswith("."):
                continue
            try:
                raw = path.read_bytes()
            except OSError as exc:
                raise StoreError(f"{path}: cannot read: {diskio.cause(exc)}") from None
            # Records inline are in the run file itself; a run with a sidecar is
            # of schema 4 or later already: no sidecar needs reading. A file of
            # schema 4 is not rewritten only to seal it (D94).
            run = parse_run(raw, str(path), path.stem)
            read += 1
            inline = any(p.requests is not None for p in run.points)
            if run.sidecar is not None or (not inline and jsonfast.loads(raw).get("schema_version", 0) >= 4):
                continue
            doc, sidecar = _storable(run)
            data = encode(doc)
            if sidecar is not None:
                _write_sidecar(sidecar_path(store, run.run_id), sidecar)
            try:
                diskio.write_replace(path, data, make_parent=False)
            except diskio.DiskError as exc:
                raise exc.with_outcome(f"{rewritten} of the run files were migrated; {path} is unchanged") from None
            rewritten += 1
            before += len(raw)
            after += len(data) + (len(sidecar) if sidecar is not None else 0)
    return read, rewritten, before, after


#: The recovery file: runs measured but refused by the store's disk, kept
#: elsewhere so that ``findings ingest recovery FILE`` can store them later.
RECOVERY_KEY = "findings_recovery"
RECOVERY_VERSION = 1


def save_recovery(runs: list[Run], store: Path, why: str, folders: list[Path]) -> Path:
    """Write ``runs`` to the first of ``folders`` that takes them; DiskError
    (from the last folder tried) when none does."""
    doc = {RECOVERY_KEY: RECOVERY_VERSION, "store": str(store), "why": why,
           "runs": [run_to_dict(r) for r in runs]}
    data = (json.dumps(doc, indent=1, ensure_ascii=False, allow_nan=False) + "\n").encode()
    last: diskio.DiskError | None = None
    for folder in folders:
        path = folder / f"findings-recovery-{runs[0].run_id}.json"
        try:
            diskio.make_dirs(folder)
            return diskio.write_new(path, data)
        except FileExistsError:
            return path if path.read_bytes() == data else _refuse_overwrite(path)
        except diskio.DiskError as exc:
            last = exc
    assert last is not None
    raise last


def _refuse_overwrite(path: Path) -> Path:
    raise StoreError(f"{path} exists with other content; not overwritten")


def is_recovery(doc: object) -> bool:
    return isinstance(doc, dict) and RECOVERY_KEY in doc


def load_recovery(path: Path) -> list[Run]:
    """The runs of a recovery file, validated exactly like run files."""
    try:
        doc = json.loads(path.read_text(encoding="utf-8"), parse_constant=refuse_constant)
    except OSError as exc:
        raise StoreError(f"{path}: cannot read: {diskio.cause(exc)}") from None
    except (UnicodeDecodeError, ValueError) as exc:
        raise StoreError(f"{path}: not a recovery file (not valid JSON: {exc})") from None
    if not is_recovery(doc):
        raise StoreError(f"{path}: not a recovery file (no {RECOVERY_KEY!r} key)")
    if doc[RECOVERY_KEY] != RECOVERY_VERSION:
        raise StoreError(f"{path}: recovery file version {doc[RECOVERY_KEY]!r}; this findings reads "
                         f"{RECOVERY_VERSION}")
    runs = doc.get("runs")
    if not isinstance(runs, list) or not runs:
        raise StoreError(f"{path}: field 'runs': expected a non-empty list of runs")
    return [run_from_dict(r, f"{path} (run {i + 1})") for i, r in enumerate(runs)]
