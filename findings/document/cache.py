"""The render cache: what `findings render` derived before, kept outside git
and safe to delete (docs/store.md, docs/decisions.md D77).

Two levels, both keyed by content hashes:

- **Per run file.** The run as read and validated, with each point's
  throughput per time window (stats.window_series) computed from its
  per-request records and the records themselves left out. Keyed by the
  sha256 of the run file and of its sidecar, and of the findings code, so a
  render after adding a campaign reads and parses only the new run files.
- **Per document.** The rendered text and its plots, keyed by every run's
  key, the settings, the template files and the findings code itself. A
  render of an unchanged store reads nothing else.

Beside them: per store, the history's replay state (D91), and the
templates' compiled code, one folder per findings code (D140).

Which content a file has is known without reading it when its size,
modification time and inode are those recorded with its hash (as git's
index does); a file changed within the last seconds is hashed again every
time, since a write in the same tick keeps its time stamp. The store's own
files are never written here. A missing, damaged or foreign cache entry is
a miss: the result is computed again, so a render with a cold cache, a
warm one or none gives the same bytes.

Where: ``$FINDINGS_CACHE_DIR``, else ``$XDG_CACHE_HOME/findings/render``,
else ``~/.cache/findings/render`` (beside, not among, the engine builds
that tools/ caches in ``~/.cache/findings``). ``FINDINGS_CACHE=off`` turns it off. Entries are
pickles, which only this user's findings writes and reads (a cache folder
someone else can write to is not used).
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import os
import pickle
import shutil
import signal
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any, TypeGuard

from findings.core import aside, diskio
from findings import store as store_mod
from findings.derive.analysis import point_series
from findings.derive.history import HistoryCache
from findings.derive.validity import records_counted
from findings.core.model import Dataset, Metrics, Point, Run
from findings.store.schema import (SHARED_MAX, SIDECAR_SUFFIX, campaign_of, facts_of, hash_and_seal, params_of,
                                   seal_state, shareable_facts)

#: Bump when what an entry holds changes.
VERSION = "1"
#: A file modified this recently is hashed again: its time stamp may not
#: change on a second write within the same tick.
RACY_S = 2.0
PACKAGE = Path(__file__).resolve().parents[1]  # the findings package: its code keys the cache


def folder() -> Path | None:
    """The cache folder, or None when the cache is off."""
    if os.environ.get("FINDINGS_CACHE", "").strip().lower() in ("0", "off", "no", "false"):
        return None
    explicit = os.environ.get("FINDINGS_CACHE_DIR")
    if explicit:
        return Path(explicit)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "findings" / "render"


_CODE: str | None = None


def _hash_tree(h: Any, root: Path, pattern: str) -> None:
    """Every file under ``root`` matching ``pattern``: its path and bytes."""
    for path in sorted(p for p in root.rglob(pattern) if p.is_file()):
        h.update(str(path.relative_to(root)).encode() + b"\0" + path.read_bytes() + b"\0")


def code_fingerprint() -> str:
    """The findings code (every module, and the Python it runs on): an entry
    derived by other code is never used."""
    global _CODE
    if _CODE is None:
        h = hashlib.sha256(f"{VERSION}|{sys.version}".encode())
        _hash_tree(h, PACKAGE, "*.py")
        _hash_tree(h, PACKAGE / "templates", "*.j2")  # the packaged base templates
        _CODE = h.hexdigest()
    return _CODE


def _safe(cache: Path) -> bool:
    """A folder only this user can write to (pickles are only read from there)."""
    try:
        st = cache.stat()
    except OSError:
        return False
    return st.st_uid == os.getuid() and not st.st_mode & 0o022


def _usable(cache: Path | None) -> Path | None:
    """The cache folder, made (private) if missing; None when it cannot be
    used: made by someone else, or writable by others."""
    if cache is None:
        return None
    if not cache.exists():
        try:
            cache.mkdir(parents=True, mode=0o700)
            cache.chmod(0o700)  # whatever the umask
        except OSError:
            return None  # a read-only home: no cache
    return cache if _safe(cache) else None


def _write(path: Path, data: bytes) -> None:
    """Atomically, without fsync (a derived file); a cache that cannot be
    written (a full disk, a read-only home) is simply not kept."""
    with contextlib.suppress(diskio.DiskError):
        diskio.write_replace(path, data, durable=False)


def _read_pickle(path: Path | str) -> Any:
    """The entry, or None when it is missing or cannot be read."""
    try:
        with open(path, "rb") as f:
            return pickle.load(f)
    except (OSError, pickle.UnpicklingError, EOFError, AttributeError, ImportError, TypeError, ValueError,
            IndexError, KeyError, MemoryError):
        return None


@dataclasses.dataclass
class _Seals:
    """The seal states that a load without a cache found (``Scan.seals``)."""

    done: bool = False
    edited: list[str] = dataclasses.field(default_factory=list)


@dataclasses.dataclass(frozen=True)
class Scan:
    """The store's run files and the content key of each (run file and sidecar)."""

    store: Path
    cache: Path | None
    files: tuple[tuple[str, str], ...]  # (run file name, key), in file-name order
    #: The run files edited by hand since findings wrote them (their seal,
    #: schema.seal_state, fails), in name order: told when a file is hashed,
    #: and kept with its hash, so an unchanged file costs nothing (D94).
    known_edited: tuple[str, ...] = ()
    #: Without a cache nothing is hashed ahead: ``load`` checks each file's
    #: seal from the bytes it reads anyway, once (D131), and fills this in.
    seals: _Seals | None = None

    @property
    def edited(self) -> tuple[str, ...]:
        if self.seals is None:
            return self.known_edited
        if not self.seals.done:  # asked before a load: read the seals now
            self.seals.edited = list(_edited_uncached(self.store / store_mod.RUNS, [n for n, _ in self.files]))
            self.seals.done = True
        return tuple(sorted(self.seals.edited))

    @property
    def key(self) -> str:
        return hashlib.sha256("\n".join(f"{n} {k}" for n, k in self.files).encode()).hexdigest()


def _store_id(store: Path) -> str:
    return hashlib.sha256(str(store.resolve()).encode()).hexdigest()[:32]


def scan(store: Path) -> Scan:
    """Each run file's key, hashing only the files whose stat changed."""
    cache = _usable(folder())
    runs = store / store_mod.RUNS
    try:
        if cache is None:  # nothing to look up: the names are enough (and each file's seal)
            names = sorted(e.name for e in os.scandir(runs) if e.name.endswith(".json") and not e.name.startswith("."))
            return Scan(store, None, tuple((n, "") for n in names), seals=_Seals())
        entries = sorted((e.name, e.stat()) for e in os.scandir(runs) if not e.name.startswith("."))
    except (FileNotFoundError, NotADirectoryError):
        return Scan(store, cache, ())
    manifest_path = cache / "stores" / f"{_store_id(store)}.json"
    known: dict[str, list[Any]] = {}
    with contextlib.suppress(OSError, ValueError):
        doc = json.loads(manifest_path.read_text(encoding="utf-8"))
        if doc.get("version") == VERSION and doc.get("store") == str(store.resolve()):
            known = doc["files"]
    now = time.time()
    hashes: dict[str, str] = {}
    edited: list[str] = []
    recorded: dict[str, list[Any]] = {}
    for name, st in entries:
        stamp = [st.st_size, st.st_mtime_ns, st.st_ino]
        old = known.get(name)
        if old is not None and old[:3] == stamp and len(old) == 5:
            digest, state = old[3], old[4]
        else:
            try:
                raw = (runs / name).read_bytes()
            except OSError:
                continue  # gone, or unreadable: the reader says which
            if name.endswith(".json"):
                digest, state = hash_and_seal(raw)
            else:
                digest, state = hashlib.sha256(raw).hexdigest(), ""
        hashes[name] = digest
        if state == "edited":
            edited.append(name)
        if now - st.st_mtime_ns / 1e9 > RACY_S:
            recorded[name] = stamp + [digest, state]
    if recorded != known:
        _write(manifest_path, json.dumps({"version": VERSION, "store": str(store.resolve()),
                                          "files": recorded}, sort_keys=True).encode())
    files = []
    for name, digest in hashes.items():
        if name.endswith(".json"):
            side = hashes.get(name[:-len(".json")] + SIDECAR_SUFFIX, "")
            files.append((name, hashlib.sha256(f"{digest}|{side}".encode()).hexdigest()))
    return Scan(store, cache, tuple(sorted(files)), tuple(sorted(edited)))


def _edited_uncached(runs: Path, names: list[str]) -> tuple[str, ...]:
    """With no cache: each run file read once more for its seal."""
    out = []
    for name in names:
        try:
            if seal_state((runs / name).read_bytes()) == "edited":
                out.append(name)
        except OSError:
            continue  # the reader says which
    return tuple(out)


def _needs_records(p: Point) -> bool:
    """Whether the render needs a point's per-request records: not when its
    run file holds the point's time-window series (written with the run,
    D109) and its failed count (else validity.counts reads the records)."""
    return p.series is None or "failed" not in p.metrics


def _derived(run: Run) -> Run:
    """The run as the render needs it: window series in, records out (but
    what validity.counts reads of them)."""
    if not any(p.requests for p in run.points):
        return run
    points = tuple(p._replace(series=point_series(p), requests=records_counted(p)) if p.requests else p
                   for p in run.points)
    return dataclasses.replace(run, points=points)


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


#: Where Run's fields are in its pickle (Run.__reduce__: its slots in order).
_RUN_FIELD = {name: i for i, name in enumerate(Run.__slots__)}
_NAMES = tuple(_RUN_FIELD[f] for f in ("source", "importer", "importer_version", "tool_version", "created_at"))


_new_tuple = tuple.__new__  # a Point from its fields in order, without a call of its __new__
#: name -> its _Shared (sys.intern), made once per name in the process.
_NAME_MARKS: dict[str, _Shared] = {}


def _name_mark(text: Any) -> Any:
    if type(text) is not str:
        return text
    if len(_NAME_MARKS) >= SHARED_MAX:
        _NAME_MARKS.clear()
    mark = _NAME_MARKS[text] = _Shared(sys.intern, (text,))
    return mark


def _to_pickle(run: Run) -> _Shared:
    """A run's cache entry, unpickled as the run less its path: what runs
    share when read from their files (each point's parameters, the facts,
    the campaigns, the names and the strings many runs repeat) as _Shared,
    one per distinct object of the run. Parameters
    with a float stay as they are, as ``_params`` leaves them (0.0 ==
    -0.0), and so do facts that are not all strings, integers, booleans
    and nulls."""
    named = _NAME_MARKS.get
    marks: dict[int, Any] = {}
    keys_of: dict[tuple[str, ...], tuple[str, ...]] = {}

    def keys(d: dict[str, Any]) -> tuple[str, ...]:
        k = tuple(d)
        return keys_of.setdefault(k, k)

    def params(obj: Any) -> Any:
        found = marks.get(id(obj))
        if found is None:
            found = obj
            if type(obj) is dict and obj and float not in map(type, obj.values()):
                found = _Shared(params_of, (keys(obj), tuple(obj.values())))
            marks[id(obj)] = found
        return found

    def facts(obj: Any) -> Any:
        return _Shared(facts_of, (keys(obj), tuple(obj.values()))) if shareable_facts(obj) else obj

    args: list[Any] = list(run.__reduce__()[1])
    points = []
    mark = marks.get
    for (pid, rid, campaign, config, workload, conc, metrics, source, source_file, line, note, wp, requests,
         series) in run.points:
        points.append(_new_tuple(Point, (
            pid, rid, named(campaign) or _name_mark(campaign), named(config) or _name_mark(config),
            named(workload) or _name_mark(workload), conc, metrics, named(source) or _name_mark(source),
            source_file, line, note, mark(id(wp)) or params(wp), requests, series)))
    args[_RUN_FIELD["points"]] = tuple(points)
    for i in _NAMES:
        args[i] = named(args[i]) or _name_mark(args[i])
    args[_RUN_FIELD["environment"]] = facts(run.environment)
    args[_RUN_FIELD["configs"]] = {named(k) or _name_mark(k): facts(v) for k, v in run.configs.items()}
    args[_RUN_FIELD["campaigns"]] = tuple(_Shared(campaign_of, (c.name, c.date, c.order)) for c in run.campaigns)
    args[_RUN_FIELD["path"]] = None
    return _Shared(Run, tuple(args))


def load(store: Path, found: Scan | None = None) -> Dataset:
    """The store as ``store.load`` reads it, less the per-request records
    (their window series kept): cached runs from the cache, the others read
    and then cached."""
    found = found if found is not None else scan(store)
    if not found.files and not (store / store_mod.RUNS).is_dir():
        return store_mod.load(store)  # the same message for a store that is not one
    runs: list[Run] = []
    folder_ = store / store_mod.RUNS
    if found.cache is None:
        with store_mod.quiet_gc():
            return _load_uncached(folder_, found)
    code = code_fingerprint()
    top, entries = str(folder_), str(found.cache / "runs")  # strings: no Path per file
    got: list[Run | None] = []
    missing: list[tuple[int, str, str]] = []  # (place, file name, entry)
    with store_mod.quiet_gc():
        for name, key in found.files:
            # The entry is the run's content as this code derived it: other
            # code (another findings, another Python) never reads it.
            key = hashlib.sha256(f"{code}|{key}".encode()).hexdigest()
            entry = f"{entries}/{key[:2]}/{key}.pickle"
            run = _read_pickle(entry)  # None when missing
            if _plausible(run, name):
                got.append(dataclasses.replace(run, path=f"{top}/{name}"))
            else:
                missing.append((len(got), name, entry))
                got.append(None)
        # The files not in the cache, read (by two processes when many: a
        # cold cache) and then cached; the first that cannot be read is the error.
        for (at, name, entry), (run, _, error) in zip(missing, _read_all(top, [n for _, n, _ in missing], seals=False)):
            if error is not None:
                raise error
            assert run is not None
            _write(Path(entry), pickle.dumps(_to_pickle(run), protocol=pickle.HIGHEST_PROTOCOL))
            got[at] = run
        runs.extend(r for r in got if r is not None)
    return store_mod.merge(runs)


#: A store of at least this many run files is read by two processes when
#: two cores are free (D133): this one reads the first files (``MINE``),
#: a forked one the others, in chunks it sends back pickled through a pipe
#: (a run unpickles several times faster than it is parsed and checked).
PARALLEL_FILES = 256
#: The forked reader's files per chunk: at least this many, at most 64 chunks.
CHUNK_FILES = 64
#: The share of the files this process reads when two read: a little more
#: than half, since the forked reader also pickles what it read, and this
#: process unpickles it between its own chunks (D136: measured on the 1M-
#: and 100k-point perf stores, where each took about as long as the other).
MINE = 0.52

#: What reading one run file gave: its run (or the error it raised) and
#: whether its seal says it was edited by hand.
_Read = tuple[Run | None, bool, BaseException | None]


def _read_files(top: str, names: list[str], seals: bool = True) -> list[_Read]:
    """The run files, in order, up to the first that cannot be read.
    ``seals``: check each file's seal from its bytes (not when ``scan``
    has hashed them already: a render cache)."""
    out: list[_Read] = []
    for name in names:
        label = f"{top}/{name}"  # str(folder_ / name), without a Path per file
        try:
            raw: bytes | None = diskio.read_bytes(label)
        except OSError:
            raw = None  # the reader says why
        edited = seals and raw is not None and seal_state(raw) == "edited"
        try:
            run = _derived(store_mod.read_run(label, requests=_needs_records, raw=raw))
        except Exception as exc:  # raised by the caller, in file order
            out.append((None, edited, exc))
            break
        out.append((run if run.path == label else dataclasses.replace(run, path=label), edited, None))
    return out


def _read_in_child(top: str, chunks: list[list[str]], out: int, seals: bool = True) -> None:
    """The forked reader: each chunk's ``_read_files``, pickled, written to
    ``out`` as it is read (its length, then the pickle; a pickle of None
    for a result that does not pickle), up to the first error."""
    with os.fdopen(out, "wb") as pipe, store_mod.quiet_gc():
        for chunk in chunks:
            got = _read_files(top, chunk, seals)
            try:
                # As they are: what they share is shared within the chunk's
                # pickle (marking it, _to_pickle, cost more than it saved: D136).
                blob = pickle.dumps(got, protocol=pickle.HIGHEST_PROTOCOL)
            except Exception:  # an error object that does not pickle: the parent reads the chunk
                blob = pickle.dumps(None)
            pipe.write(len(blob).to_bytes(8, "little") + blob)
            if got and got[-1][2] is not None:
                return


def _drain(fd: int, frames: list[bytes | None]) -> None:
    """Every pickle the forked reader writes, as it comes (so that it never
    waits on a full pipe while this process reads its own share), each kept
    whole on its own; a frame cut short (the reader died) is left out."""
    pending = bytearray()
    with os.fdopen(fd, "rb") as pipe:
        while block := pipe.read1(1 << 20):
            pending += block
            while len(pending) >= 8:
                size = int.from_bytes(pending[:8], "little")
                if len(pending) < 8 + size:
                    break
                frames.append(bytes(pending[8:8 + size]))
                del pending[:8 + size]


def _chunks_back(frames: list[bytes | None], count: int, back: list[list[_Read] | None] | None = None,
                 so_far: bool = False) -> list[list[_Read] | None]:
    """The forked reader's chunks as it sent them, in order (each frame let
    go once read): None for one it did not give back (it died first, or
    the result did not pickle). ``back``: those unpickled before, added to;
    ``so_far``: only the frames come so far, no None for the others yet."""
    out: list[list[_Read] | None] = [] if back is None else back
    for k in range(len(out), min(count, len(frames))):
        frame, frames[k] = frames[k], None
        try:
            out.append(pickle.loads(frame) if frame is not None else None)
        except Exception:
            out.append(None)
    return out if so_far else out + [None] * (count - len(out))


def _read_all(top: str, names: list[str], seals: bool = True) -> list[_Read]:
    """``_read_files`` of every file: for a large store on two free cores,
    the first files here (``MINE`` of them) and the others in a forked
    process (D133), each chunk it sends back unpickled here between this
    process's own chunks, else all here. Whatever the forked reader does
    not give back is read here, so the outcome, and the first error in file
    order, is the same either way. The forked reader ends when this process
    does: its next write finds the pipe closed, and an interrupted or failed
    read here kills it."""
    if len(names) < PARALLEL_FILES or aside.cores() < 2 or not hasattr(os, "fork"):
        return _read_files(top, names, seals)
    mine = min(len(names) - 1, max(1, round(len(names) * MINE)))
    theirs = names[mine:]
    size = max(CHUNK_FILES, -(-len(theirs) // 64))
    chunks = [theirs[k:k + size] for k in range(0, len(theirs), size)]
    r, w = os.pipe()
    try:
        pid = os.fork()
    except OSError:
        os.close(r)
        os.close(w)
        return _read_files(top, names, seals)
    if pid == 0:  # the forked reader: never returns
        code = 1
        try:
            os.close(r)
            _read_in_child(top, chunks, w, seals)
            code = 0
        finally:
            os._exit(code)
    os.close(w)
    frames: list[bytes | None] = []
    drain = threading.Thread(target=_drain, args=(r, frames), daemon=True)
    drain.start()
    done = False
    try:
        out: list[_Read] = []
        back: list[list[_Read] | None] = []
        for k in range(0, mine, size):
            out.extend(_read_files(top, names[k:min(mine, k + size)], seals))
            if out and out[-1][2] is not None:
                return out  # an error in this share comes first
            _chunks_back(frames, len(chunks), back, so_far=True)  # what came meanwhile
        drain.join()
        os.waitpid(pid, 0)
        done = True
        for chunk, got in zip(chunks, _chunks_back(frames, len(chunks), back)):
            got = got if got is not None else _read_files(top, chunk, seals)
            out.extend(got)
            if got and got[-1][2] is not None:
                break
        return out
    finally:
        if not done:
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)


def _load_uncached(folder_: Path, found: Scan) -> Dataset:
    """Every run file read once, its seal checked from the same bytes (no
    second read and hash of the store, D131). A thread for the hashing was
    measured slower: the parser gives up the GIL at every file it opens."""
    runs: list[Run] = []
    edited: list[str] = []
    names = [name for name, _ in found.files]
    for name, (run, was_edited, error) in zip(names, _read_all(str(folder_), names)):
        if was_edited:
            edited.append(name)
        if error is not None:
            raise error
        assert run is not None
        runs.append(run)
    if found.seals is not None and not found.seals.done:
        found.seals.edited, found.seals.done = edited, True
    return store_mod.merge(runs)


def _plausible(run: object, name: str) -> TypeGuard[Run]:
    """A cheap check of an unpickled entry's shape (the key already names its
    content and the code that wrote it)."""
    return (isinstance(run, Run) and f"{run.run_id}.json" == name
            and all(type(p) is Point and type(p.metrics) in (dict, Metrics) and type(p.concurrency) is int
                    for p in run.points))


def document_key(found: Scan, templates: Path, *parts: object) -> str | None:
    """The key of one rendered document: the runs, the code, the template
    files under ``templates`` and ``parts`` (the settings, the document's
    path); None without a cache."""
    if found.cache is None:
        return None
    h = hashlib.sha256(f"{code_fingerprint()}|{found.key}".encode())
    _hash_tree(h, templates, "*")
    for part in parts:
        h.update(b"\0" + repr(part).encode())
    return h.hexdigest()


def compiled_templates(found: Scan) -> Path | None:
    """Where jinja2 keeps the templates' compiled code (findings/document/render.py,
    D140): a folder of this cache per findings code, since the compiled code
    depends on the environment's options as well as the source (which
    jinja2 checks itself); the folders of other code are removed when this
    one is made. None without a cache, or when it cannot be made."""
    if found.cache is None:
        return None
    root = found.cache / "templates"
    here = root / code_fingerprint()[:32]
    if here.is_dir():
        return here
    try:
        here.mkdir(parents=True, mode=0o700)
    except FileExistsError:
        return here  # another process made it meanwhile
    except OSError:
        return None
    for other in root.iterdir():
        if other != here:
            shutil.rmtree(other, ignore_errors=True)
    return here


def _doc_entry(found: Scan, slot: str) -> Path | None:
    if found.cache is None:
        return None
    name = hashlib.sha256(f"{_store_id(found.store)}|{slot}".encode()).hexdigest()[:32]
    return found.cache / "documents" / f"{name}.pickle"


def get_document(found: Scan, slot: str, key: str | None) -> Any:
    """The cached value for ``key`` in ``slot`` (one per store and document), or None."""
    entry = _doc_entry(found, slot)
    if key is None or entry is None or not entry.exists():
        return None
    value = _read_pickle(entry)
    if isinstance(value, tuple) and len(value) == 2 and value[0] == key:
        return value[1]
    return None


def put_document(found: Scan, slot: str, key: str | None, value: Any) -> None:
    entry = _doc_entry(found, slot)
    if key is not None and entry is not None:
        _write(entry, pickle.dumps((key, value), protocol=pickle.HIGHEST_PROTOCOL))


def _history_entry(found: Scan) -> Path | None:
    if found.cache is None:
        return None
    return found.cache / "history" / f"{_store_id(found.store)}.pickle"


def get_history(found: Scan) -> HistoryCache | None:
    """The replay's state as the last render of this store left it (a
    HistoryCache, findings/derive/history.py: resumed only where its own
    content chain matches), or a fresh one; None without a cache."""
    entry = _history_entry(found)
    if entry is None:
        return None
    value = _read_pickle(entry) if entry.exists() else None
    if (isinstance(value, tuple) and len(value) == 2 and value[0] == code_fingerprint()
            and isinstance(value[1], HistoryCache)):
        return value[1]
    return HistoryCache()


def put_history(found: Scan, history: HistoryCache | None) -> None:
    entry = _history_entry(found)
    if entry is not None and history is not None and history.chain and history.replayed:
        _write(entry, pickle.dumps((code_fingerprint(), history), protocol=pickle.HIGHEST_PROTOCOL))
