"""The render cache: what `findings render` derived before, kept outside git
and safe to delete (docs/store.md, docs/decisions.md D77).

Two levels, both keyed by content hashes:

- **Per run file, in the points table.** The run as read and validated,
  with each point's throughput per time window (stats.window_series)
  computed from its per-request records and the records themselves left
  out, keyed by the sha256 of the run file and of its sidecar, and of the
  findings code. The runs are held in columns (findings/document/columns.py,
  D145), in a few segments per store: a render after adding a campaign
  reads and parses only the new run files, and writes them as one more
  segment; past ``MAX_SEGMENTS`` the smaller ones are written again as one.
- **Per document.** The rendered text and its plots, keyed by every run's
  key, the settings, the template files and the findings code itself. A
  render of an unchanged store reads nothing else.

Beside them: per store, the history's replay state (D91), the bootstrap
intervals by their inputs (D171), each campaign's gate flags, counts and
valid cells by its content (findings/derive/slices.py, D174), the moves
between campaigns with the chain of those campaigns' keys (D175), and the
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
import functools
import hashlib
import mmap
import operator
import os
import pickle
import shutil
import signal
import sys
import threading
import time
from pathlib import Path
from typing import Any, Iterator

from findings.core import aside, diskio, jsonfast
from findings.document import columns
from findings import store as store_mod
from findings.derive.analysis import Rules, point_series
from findings.derive import regressions, slices as slices_mod, stats
from findings.derive.history import HistoryCache
from findings.derive.validity import records_counted
from findings.core.model import Dataset, Point, Run
from findings.store.schema import SIDECAR_SUFFIX, hash_and_seal, seal_state

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


def _write(path: Path, data: bytes | diskio.Filler) -> None:
    """Atomically, without fsync (a derived file); a cache that cannot be
    written (a full disk, a read-only home) is simply not kept."""
    with contextlib.suppress(diskio.DiskError):
        diskio.write_replace(path, data, durable=False)


def _write_pickled(path: Path, value: Any) -> bool:
    """``value`` pickled into ``path`` as it goes (never held whole as bytes:
    a segment of slices or the moves at a million points are 20-40 MB, in a
    forked writer whose memory starts at this process's, D177), atomically;
    whether it was written (not where a value does not pickle, or the disk
    refuses: derived again next time)."""
    try:
        _write(path, functools.partial(pickle.dump, value, protocol=pickle.HIGHEST_PROTOCOL))
    except Exception:  # a value that does not pickle
        return False
    return path.is_file()


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
    #: Each run's key in the points table (its content and the code that
    #: read it), in the order of the loaded dataset's runs: filled by ``load``.
    run_keys: list[str] = dataclasses.field(default_factory=list, compare=False)

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
        # In the folder's order: the keys are sorted below, and the manifest
        # is compared as a mapping.
        entries = [(e.name, e.stat()) for e in os.scandir(runs) if not e.name.startswith(".")]
    except (FileNotFoundError, NotADirectoryError):
        return Scan(store, cache, ())
    manifest_path = cache / "stores" / f"{_store_id(store)}.json"
    known: dict[str, list[Any]] = {}
    with contextlib.suppress(OSError, ValueError, TypeError, AttributeError):
        doc = jsonfast.loads(diskio.read_bytes(str(manifest_path)))
        if (doc.get("version") == VERSION and doc.get("store") == str(store.resolve())
                and type(doc["files"]) is dict):
            known = doc["files"]
    settled = time.time_ns() - int(RACY_S * 1e9)  # a file modified before this is not racy
    # Each file's (size, modification time, inode) against the manifest's,
    # in comprehensions (a store of a million points has 64k files).
    names = [name for name, _ in entries]
    now = [(st.st_size, st.st_mtime_ns, st.st_ino) for _, st in entries]
    rows: list[list[Any] | None] = list(map(known.get, names))
    misses = [i for i, (row, (size, mtime, ino)) in enumerate(zip(rows, now))
              if not (type(row) is list and len(row) == 5 and row[0] == size and row[1] == mtime and row[2] == ino)]
    for i, got in zip(misses, _hash_files(str(runs), [names[i] for i in misses])):
        # None: gone, or unreadable (the reader says which)
        rows[i] = None if got is None else [*now[i], *got]
    # A file as it was is kept as its manifest row was (the manifest is
    # written again only if one changed); one modified lately, not at all.
    recorded = {name: row for name, row, (_, mtime, _) in zip(names, rows, now)
                if row is not None and mtime < settled}
    hashes = {name: row[3] for name, row in zip(names, rows) if row is not None}
    edited = [name for name, row in zip(names, rows) if row is not None and row[4] == "edited"]
    if recorded != known:
        _write(manifest_path, jsonfast.dumps({"version": VERSION, "store": str(store.resolve()), "files": recorded}))
    files = []
    for name, digest in hashes.items():
        if name.endswith(".json"):
            side = hashes.get(name[:-len(".json")] + SIDECAR_SUFFIX, "")
            files.append((name, hashlib.sha256(f"{digest}|{side}".encode()).hexdigest()))
    return Scan(store, cache, tuple(sorted(files)), tuple(sorted(edited)))


#: From this many files to hash on, two threads hash them (D168): reading
#: a file and its sha256 let go of the interpreter's lock, so both cores
#: work. A render into an empty cache hashes every file first: 2 GB at
#: a million points.
HASH_THREADS_FROM = 64


def _hash_file(top: str, name: str) -> tuple[str, str] | None:
    """A file's sha256 (hex) and seal state (a run file's; "" for a
    sidecar), or None when it cannot be read."""
    try:
        raw = diskio.read_bytes(f"{top}/{name}")
    except OSError:
        return None
    if name.endswith(".json"):
        return hash_and_seal(raw)
    return hashlib.sha256(raw).hexdigest(), ""


def _hash_files(top: str, names: list[str]) -> list[tuple[str, str] | None]:
    """``_hash_file`` of each name, in order: by this thread and a second
    one, every other file each, when there are many and two cores. An
    error other than a file that cannot be read (or Ctrl-C here) stops
    both, and is raised here once the second has ended."""
    out: list[tuple[str, str] | None] = [None] * len(names)
    failed: list[BaseException] = []

    def work(first: int, step: int) -> None:
        try:
            for i in range(first, len(names), step):
                if failed:
                    return
                out[i] = _hash_file(top, names[i])
        except BaseException as exc:
            failed.append(exc)

    if len(names) < HASH_THREADS_FROM or aside.cores() < 2:
        work(0, 1)
    else:
        helper = threading.Thread(target=work, args=(1, 2), daemon=True)
        helper.start()
        try:
            work(0, 2)
        finally:
            helper.join()
    if failed:
        raise failed[0]
    return out


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


def needs_records(p: Point) -> bool:
    """Whether the render needs a point's per-request records: not when its
    run file holds the point's time-window series (written with the run,
    D109) and its failed count (else validity.counts reads the records)."""
    return p.series is None or "failed" not in p.metrics


_REQUESTS = operator.attrgetter("requests")


def derived_run(run: Run) -> Run:
    """The run as the render needs it: window series in, records out (but
    what validity.counts reads of them)."""
    if not any(map(_REQUESTS, run.points)):
        return run
    points = tuple(p._replace(series=point_series(p), requests=records_counted(p)) if p.requests else p
                   for p in run.points)
    return dataclasses.replace(run, points=points)


def load(store: Path, found: Scan | None = None) -> Dataset:
    """The store as ``store.load`` reads it, less the per-request records
    (their window series kept): the runs the points table holds from it,
    the others read and then added to it."""
    found = found if found is not None else scan(store)
    if not found.files and not (store / store_mod.RUNS).is_dir():
        return store_mod.load(store)  # the same message for a store that is not one
    folder_ = store / store_mod.RUNS
    if found.cache is None:
        with store_mod.quiet_gc():
            return _load_uncached(folder_, found)
    code = code_fingerprint()
    top = str(folder_)  # a string: no Path per file
    settle()  # the table as the load before this one left it
    table = _Table(found.cache, store)
    # A run's key is its content as this code derived it: other code
    # (another findings, another Python) never reads it.
    keys = [hashlib.sha256(f"{code}|{key}".encode()).hexdigest() for _, key in found.files]
    found.run_keys[:] = keys  # (merge keeps the runs in this order)
    with store_mod.quiet_gc():
        got = table.runs(dict(zip(keys, (name for name, _ in found.files))), top)
        missing = [(name, key) for (name, _), key in zip(found.files, keys) if key not in got]
        # The files not in the table, read (by two processes when many: a
        # cold cache) and then added; the first that cannot be read is the error.
        new: dict[str, Run] = {}
        for (name, key), (run, _, error) in zip(missing, _read_all(top, [n for n, _ in missing], seals=False)):
            if error is not None:
                raise error
            assert run is not None
            new[key] = run
        got.update(new)
        if sum(len(r.points) for r in new.values()) >= KEEP_ASIDE_POINTS:
            _KEEPING.append(aside.forked(functools.partial(table.keep, got, new)))
        else:
            table.keep(got, new)
        return store_mod.merge([got[k] for k in keys])


#: From this many new points on, the points table is written aside (D168):
#: by a process forked from this one (core/aside.py), while this one goes
#: on deriving. At a million points, writing it took 5.7 s of a render into
#: an empty cache.
KEEP_ASIDE_POINTS = 20_000
#: The points tables being written aside (``load``), until ``settle``.
_KEEPING: list[aside.Pending] = []
#: The campaigns' slices being written aside (``put_slices``), likewise.
_SLICE_WRITERS: list[aside.Pending] = []
#: The moves being written aside (``put_moves``), likewise.
_MOVES_WRITERS: list[aside.Pending] = []


def settle() -> None:
    """Waits until every points table written aside is written (or, where
    that failed there, writes it here). A command calls it before it ends
    (a process that ended would take its writer with it), and ``load``
    before it reads a table, so that two writers never overlap."""
    for writers in (_KEEPING, _SLICE_WRITERS, _MOVES_WRITERS):
        _wait(writers)


def _wait(writers: list[aside.Pending]) -> None:
    """Waits until each of ``writers`` has written (or, where that failed
    there, writes here), in order."""
    while writers:
        writers.pop(0).result()


#: At most this many segments in a store's points table: past it, the
#: smaller ones are written again as one (all of them, once they hold as
#: many live rows as half the largest, or the largest is half dead).
MAX_SEGMENTS = 8


class _Table:
    """A store's points table in the render cache (findings/document/columns.py,
    D145): segments, each the runs of one render's new run files in columns,
    and an index of the run keys each holds. A render reads the segments
    that hold its runs and writes one segment of the runs it read from
    their files; a segment it cannot read is a miss, its runs read again."""

    def __init__(self, cache: Path, store: Path) -> None:
        self.folder = cache / "points" / _store_id(store)
        index = _read_pickle(self.folder / "index.pickle")
        ok = (isinstance(index, dict) and index.get("format") == columns.FORMAT
              and isinstance(index.get("segments"), dict))
        #: segment name -> its run keys, in order
        self.index: dict[str, list[str]] = index["segments"] if ok else {}
        #: segment name -> (its live rows, its dead rows), of those read
        self.rows: dict[str, tuple[int, int]] = {}
        #: segment name -> the keys of its live runs, of those read
        self.live: dict[str, list[str]] = {}

    def runs(self, wanted: dict[str, str], top: str) -> dict[str, Run]:
        """key -> its run (its file ``top``/name), for each key of ``wanted``
        (key -> run file name) that a readable segment holds."""
        out: dict[str, Run] = {}
        for segment, keys in self.index.items():
            if not any(k in wanted for k in keys):
                continue
            got = _read_segment(self.folder / f"{segment}.pickle")
            if got is None or got[0] != keys:
                continue
            _, headers, counts, points = got
            live = dead = 0
            at = 0
            taken = self.live[segment] = []
            for key, header, n in zip(keys, headers, counts):
                name = wanted.get(key)
                if name is not None and key not in out and f"{columns.run_id(header)}.json" == name:
                    out[key] = columns.run(header, tuple(points[at:at + n]), f"{top}/{name}")
                    taken.append(key)
                    live += n
                else:
                    dead += n
                at += n
            self.rows[segment] = (live, dead)
        return out

    def keep(self, runs: dict[str, Run], new: dict[str, Run]) -> None:
        """Writes a segment of the ``new`` runs; a segment read whose dead
        rows (runs no longer in the store) outnumber its live ones, again
        with its live runs only; and the smaller segments again as one when
        there are more than ``MAX_SEGMENTS``. The index then names the
        segments kept; the others go. ``runs``: key -> run, every run of
        the store."""
        #: (segment name, or None for one to write; its keys; its live rows)
        parts: list[tuple[str | None, list[str], int]] = []
        for segment, (live, dead) in self.rows.items():
            if dead * 2 > live:
                parts.append((None, self.live[segment], live))
            else:
                parts.append((segment, self.index[segment], live))
        if new:
            parts.append((None, list(new), sum(len(r.points) for r in new.values())))
        if len(parts) > MAX_SEGMENTS:
            parts.sort(key=lambda p: -p[2])
            big, rest = parts[0], parts[1:]
            merged = [k for p in rest for k in (self.live[p[0]] if p[0] is not None else p[1])]
            rows = sum(p[2] for p in rest)
            if rows * 2 >= big[2]:  # written again whole: geometric, so each row is written O(1) times
                big_keys = self.live[big[0]] if big[0] is not None else big[1]
                parts = [(None, big_keys + merged, big[2] + rows)]
            else:
                parts = [big, (None, merged, rows)]
        if all(name is not None for name, _, _ in parts) and len(parts) == len(self.index):
            return  # as it was
        index: dict[str, list[str]] = {}
        with contextlib.suppress(OSError):
            self.folder.mkdir(parents=True, exist_ok=True, mode=0o700)
        for name, keys, _ in parts:
            if name is None:
                name = hashlib.sha256("\n".join(keys).encode()).hexdigest()[:32]
                path = self.folder / f"{name}.pickle"
                try:
                    blob, values = columns.encode_apart(keys, [runs[k] for k in keys])
                except Exception:  # a value that does not pickle: its runs are read from their files next time
                    continue
                apart = path.with_suffix(VALUES_SUFFIX)
                _write(apart, values)  # first: a segment never names doubles that are not there
                del values
                if not apart.is_file():
                    continue  # not written (a full disk): read from the files next time
                _write(path, blob)
                if not path.is_file():
                    continue
            index[name] = keys
        _write(self.folder / "index.pickle",
               pickle.dumps({"format": columns.FORMAT, "segments": index}, protocol=pickle.HIGHEST_PROTOCOL))
        for path in [*self.folder.glob("*.pickle"), *self.folder.glob(f"*{VALUES_SUFFIX}")]:
            if path.stem != "index" and path.stem not in index:
                with contextlib.suppress(OSError):
                    path.unlink()
        # The older form of this cache, a pickle per run: no code reads it now.
        shutil.rmtree(self.folder.parent.parent / "runs", ignore_errors=True)


def _read_segment(path: Path) -> columns.Decoded | None:
    try:
        with open(path, "rb") as f:
            return columns.read(f, functools.partial(_mapped, path.with_suffix(VALUES_SUFFIX)))
    except OSError:
        return None


#: A segment's doubles, kept apart from it (columns.encode_apart, D176).
VALUES_SUFFIX = ".values"


def _mapped(path: Path, size: int, token: bytes) -> memoryview | None:
    """The doubles of a segment's values file, mapped read-only: a page is
    read (and held) only once a point's metrics on it are read. None when
    the file is missing or not that segment's. The cache writes every file
    whole and then moves it into place (never over a mapped one), and
    removes the values files no segment names. Where the file cannot be
    mapped, it is read whole."""
    try:
        with open(path, "rb") as f:
            try:
                whole: Any = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
            except (OSError, ValueError):  # a file system that cannot map it: read whole
                whole = f.read()
            return columns.values_of(whole, size, token)
    except (OSError, ValueError):
        return None


#: A store of at least this many run files is read by two processes when
#: two cores are free (D133): this one reads chunks of its files from the
#: first on, a forked one from the last back, each claiming a chunk before
#: it reads it, until they meet (D173); the forked one sends back each chunk
#: pickled through a pipe (a run unpickles several times faster than it is
#: parsed and checked).
PARALLEL_FILES = 256
#: Files per chunk: at least this many, and at most ``CHUNKS`` chunks.
CHUNK_FILES = 64
CHUNKS = 128
#: A chunk's claim, in the map the two readers share (0 where nobody's
#: yet): this process's, the forked reader's.
_HERE, _THERE = 1, 2


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
            run = derived_run(store_mod.read_run(label, requests=needs_records, raw=raw))
        except Exception as exc:  # raised by the caller, in file order
            out.append((None, edited, exc))
            break
        out.append((run if run.path == label else dataclasses.replace(run, path=label), edited, None))
    return out


def _read_in_child(top: str, chunks: list[list[str]], out: int, seals: bool = True,
                   claims: Any = None) -> None:
    """The forked reader: each chunk's ``_read_files``, from the last back,
    each claimed in ``claims`` (a shared map, one byte a chunk) before it is
    read, up to one this process has claimed or the first error; each
    written to ``out`` as it is read (its length, then a pickle of its
    index, its seals, its error and its runs in columns,
    findings/document/columns.py; of its index and None for a chunk whose
    error does not pickle)."""
    with os.fdopen(out, "wb") as pipe, store_mod.quiet_gc():
        for k in range(len(chunks) - 1, -1, -1):
            if claims is not None:
                if claims[k] == _HERE:
                    return  # the readers have met
                claims[k] = _THERE
            got = _read_files(top, chunks[k], seals)
            runs = [run for run, _, error in got if run is not None]
            error = got[-1][2] if got and got[-1][2] is not None else None
            try:
                # In columns: written and read back in about half the time
                # of a pickle of the runs (D145).
                blob = pickle.dumps((k, [edited for _, edited, _ in got], error,
                                     columns.encode(chunks[k][:len(runs)], runs)), protocol=pickle.HIGHEST_PROTOCOL)
            except Exception:  # an error object that does not pickle: the parent reads the chunk
                blob = pickle.dumps((k, None))
            pipe.write(len(blob).to_bytes(8, "little") + blob)
            if error is not None:
                return


def _unpack(frame: bytes, top: str, chunks: list[list[str]]) -> tuple[int, list[_Read] | None]:
    """A chunk the forked reader sent (``_read_in_child``): its index, and
    what it read, or None."""
    k, *sent = pickle.loads(frame)
    if not sent or sent[0] is None:
        return k, None
    edited, error, blob = sent
    got = columns.decode(blob)
    if got is None:
        return k, None
    names, headers, counts, points = got
    if names != chunks[k][:len(names)]:
        return k, None
    out: list[_Read] = []
    at = 0
    for name, header, n, was_edited in zip(names, headers, counts, edited):
        out.append((columns.run(header, tuple(points[at:at + n]), f"{top}/{name}"), was_edited, None))
        at += n
    if error is not None:
        out.append((None, edited[len(out)], error))
    return k, out


def _drain(fd: int, frames: list[bytes | None]) -> None:
    """Every pickle the forked reader writes, as it comes (so that it never
    waits on a full pipe while this process reads its own share), each kept
    whole on its own; a frame cut short (the reader died) is left out."""
    with os.fdopen(fd, "rb") as pipe:
        # Each frame read straight into its own bytes object (a read blocks,
        # the GIL let go, until it is whole or the pipe ends): no copy
        # through a buffer, which this thread made holding the GIL that the
        # main thread reads with (0.24 s of it at a million points, D169).
        while len(head := pipe.read(8)) == 8:
            size = int.from_bytes(head, "little")
            frame = pipe.read(size)
            if len(frame) < size:
                break
            frames.append(frame)


def _chunks_back(frames: list[bytes | None], top: str, chunks: list[list[str]],
                 back: list[list[_Read] | None], done: int = 0) -> int:
    """The forked reader's chunks come so far, from ``frames[done:]`` (each
    frame let go once read), put into ``back`` by their index where that
    chunk is not there already (this process read it too); a frame that
    cannot be read is left out (the chunk is read here). Returns how many
    frames are done."""
    for i in range(done, len(frames)):
        frame, frames[i] = frames[i], None
        try:
            k, got = _unpack(frame, top, chunks) if frame is not None else (-1, None)
        except Exception:
            continue
        if got is not None and 0 <= k < len(back) and back[k] is None:
            back[k] = got
    return len(frames)


#: The pipe the forked reader writes to, in bytes, where the system lets it
#: be this large (Linux's default limit, /proc/sys/fs/pipe-max-size).
PIPE_BYTES = 1 << 20


def _widen(fd: int) -> None:
    """The pipe ``fd`` writes to holds ``PIPE_BYTES`` where the system
    allows it, else stays as it is. This process empties the pipe from a
    thread, which runs only when this process's reading lets go of the GIL
    (every 5 ms at most); a pipe of Linux's default 64 KiB filled up in
    between, and the forked reader then waited on it: a third of its time
    on a store of a run file per point (D169)."""
    try:
        import fcntl
        fcntl.fcntl(fd, fcntl.F_SETPIPE_SZ, PIPE_BYTES)
    except (ImportError, AttributeError, OSError):
        pass  # another system, or a lower limit: the pipe as it is, slower


def _read_all(top: str, names: list[str], seals: bool = True) -> list[_Read]:
    """``_read_files`` of every file: for a large store on two free cores,
    in chunks, this process reading them from the first on and a forked
    process from the last back, until they meet (D173): each claims a
    chunk in a map they share before reading it, so that neither waits on
    the other however fast each goes (at most the chunk where they meet is
    read twice: this process's reading of it is kept). Each chunk the
    forked reader sends back is unpickled here between this process's own.
    Whatever the forked reader does not give back is read here, so the
    outcome, and the first error in file order, is the same either way.
    The forked reader ends when this process does: its next write finds the
    pipe closed, and an interrupted or failed read here kills it."""
    if len(names) < PARALLEL_FILES or aside.cores() < 2 or not hasattr(os, "fork"):
        return _read_files(top, names, seals)
    import mmap
    size = max(CHUNK_FILES, -(-len(names) // CHUNKS))
    chunks = [names[k:k + size] for k in range(0, len(names), size)]
    try:
        claims = mmap.mmap(-1, len(chunks))  # shared with the forked reader: anonymous, MAP_SHARED
    except OSError:  # no memory to map: one reader
        return _read_files(top, names, seals)
    r, w = os.pipe()
    _widen(w)
    try:
        pid = os.fork()
    except OSError:
        os.close(r)
        os.close(w)
        claims.close()
        return _read_files(top, names, seals)
    if pid == 0:  # the forked reader: never returns
        code = 1
        try:
            os.close(r)
            _read_in_child(top, chunks, w, seals, claims)
            code = 0
        finally:
            os._exit(code)
    os.close(w)
    frames: list[bytes | None] = []
    drain = threading.Thread(target=_drain, args=(r, frames), daemon=True)
    drain.start()
    done = False
    try:
        back: list[list[_Read] | None] = [None] * len(chunks)
        seen = 0
        for k, chunk in enumerate(chunks):
            if claims[k] == _THERE:
                break  # the readers have met: the rest is the forked reader's
            claims[k] = _HERE
            got = back[k] = _read_files(top, chunk, seals)
            if got and got[-1][2] is not None:
                return [read for part in back[:k + 1] for read in part or ()]  # an error here comes first
            seen = _chunks_back(frames, top, chunks, back, seen)  # what came meanwhile
        drain.join()
        os.waitpid(pid, 0)
        done = True
        _chunks_back(frames, top, chunks, back, seen)
        out: list[_Read] = []
        for chunk, sent in zip(chunks, back):
            part = sent if sent is not None else _read_files(top, chunk, seals)
            out.extend(part)
            if part and part[-1][2] is not None:
                break
        return out
    finally:
        claims.close()
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


#: The history's entries are kept in pieces of this many, each written once
#: (D171): a piece is named by the chain link of its last entry, which
#: hashes everything before, so it never changes; a render after a new
#: campaign writes only the entries after the last whole piece. Written
#: whole, a million points' 10k entries took 0.55 s of every such render.
HISTORY_PIECE = 256


def _history_folder(found: Scan) -> Path | None:
    if found.cache is None:
        return None
    return found.cache / "history" / _store_id(found.store)


def _piece_name(link: str) -> str:
    return hashlib.sha256(f"{code_fingerprint()}|{link}".encode()).hexdigest()[:32] + ".pickle"


def get_history(found: Scan) -> HistoryCache | None:
    """The replay's state as the last render of this store left it (a
    HistoryCache, findings/derive/history.py: resumed only where its own
    content chain matches), or a fresh one (where it is missing, damaged,
    of other code or incomplete); None without a cache."""
    folder_ = _history_folder(found)
    if folder_ is None:
        return None
    head = _read_pickle(folder_ / "head.pickle")  # (None where missing)
    if not (type(head) is tuple and len(head) == 6 and head[0] == code_fingerprint()):
        return HistoryCache()
    _, chain, concluded, replayed, pieces, tail = head
    if not (type(chain) is tuple and all(type(link) is str for link in chain) and type(concluded) is dict
            and type(replayed) is int and type(tail) is tuple and len(tail) < HISTORY_PIECE
            and type(pieces) is list and len(pieces) * HISTORY_PIECE + len(tail) == len(chain)
            and pieces == [_piece_name(chain[k - 1]) for k in range(HISTORY_PIECE, len(chain) + 1, HISTORY_PIECE)]):
        return HistoryCache()
    entries: list[Any] = []
    for name in pieces:
        piece = _read_pickle(folder_ / name)
        if type(piece) is not tuple or len(piece) != HISTORY_PIECE:
            return HistoryCache()
        entries.extend(piece)
    entries.extend(tail)
    return HistoryCache(chain=chain, entries=tuple(entries), concluded=concluded, replayed=replayed)


def put_history(found: Scan, history: HistoryCache | None) -> None:
    """Keeps the replay's state: the pieces of entries not kept yet, then the
    rest (the chain, the last entries, each workload's state), and removes
    the pieces no longer part of it."""
    folder_ = _history_folder(found)
    if folder_ is None or history is None or not history.chain or not history.replayed:
        return
    whole = len(history.entries) // HISTORY_PIECE * HISTORY_PIECE
    pieces = []
    for k in range(0, whole, HISTORY_PIECE):
        name = _piece_name(history.chain[k + HISTORY_PIECE - 1])
        pieces.append(name)
        if not (folder_ / name).exists():
            _write(folder_ / name, pickle.dumps(tuple(history.entries[k:k + HISTORY_PIECE]),
                                                protocol=pickle.HIGHEST_PROTOCOL))
    head = (code_fingerprint(), tuple(history.chain), dict(history.concluded), history.replayed, pieces,
            tuple(history.entries[whole:]))
    _write(folder_ / "head.pickle", pickle.dumps(head, protocol=pickle.HIGHEST_PROTOCOL))
    keep = set(pieces) | {"head.pickle"}
    with contextlib.suppress(OSError):
        for other in os.listdir(folder_):
            if other not in keep and not other.startswith("."):  # (a write in progress is a dot file)
                with contextlib.suppress(OSError):
                    os.unlink(folder_ / other)
    with contextlib.suppress(OSError):  # the whole state in one file, as code before D171 kept it
        os.unlink(folder_.parent / f"{folder_.name}.pickle")


def _intervals_entry(found: Scan) -> Path | None:
    if found.cache is None:
        return None
    return found.cache / "intervals" / f"{_store_id(found.store)}.pickle"


def get_intervals(found: Scan) -> stats.Intervals:
    """The bootstrap intervals the last command that kept them for this
    store was asked for, by their inputs (stats.intervals, D171): none
    without a cache, or where the entry is missing, damaged or of other code."""
    entry = _intervals_entry(found)
    value = _read_pickle(entry) if entry is not None else None  # (None where missing)
    if not (type(value) is tuple and len(value) == 2 and value[0] == code_fingerprint() and type(value[1]) is dict):
        return {}
    known: stats.Intervals = value[1]
    if all(type(k) is bytes and type(v) is tuple and len(v) == 2 and type(v[0]) is float and type(v[1]) is float
           for k, v in known.items()):
        return known
    return {}


#: The intervals kept per store: those known before and those a command
#: asked for, up to this many or twice what it asked for; past that, only
#: those it asked for (a render of a million points asks for about 3,000).
#: Others' commands ask for others (``conclusions`` for fewer than
#: ``render``), so each keeps what the other asked for.
KEEP_INTERVALS = 4096


def put_intervals(found: Scan, asked: stats.Intervals, known: stats.Intervals) -> None:
    """Keeps the intervals a command was asked for (``asked``) beside those
    it was given (``known``), within ``KEEP_INTERVALS``: written only when
    that changes what is kept."""
    entry = _intervals_entry(found)
    if entry is None:
        return
    kept = {**known, **asked}
    if len(kept) > max(KEEP_INTERVALS, 2 * len(asked)):
        kept = asked
    if kept.keys() != known.keys():
        _write(entry, pickle.dumps((code_fingerprint(), kept), protocol=pickle.HIGHEST_PROTOCOL))


@contextlib.contextmanager
def intervals(found: Scan, keep: bool = True) -> Iterator[None]:
    """Within it, the bootstrap intervals of this store kept before are
    taken where the same inputs come again (stats.intervals, D171), and,
    with ``keep``, those asked for are kept once it ends without an error.
    Without a cache, nothing: the intervals are computed as they are asked for."""
    if found.cache is None:
        yield
        return
    known = get_intervals(found)
    with stats.intervals(known) as asked:
        yield
    if keep:
        put_intervals(found, asked, known)


# --------------------------------------------------------------------------- each campaign's slice (D174)

#: From this many points in the slices to write on, they are written by a
#: forked process (core/aside.py), as the points table is (D168): at a
#: million points, pickling every slice takes about 3 s.
KEEP_SLICES_ASIDE_POINTS = 20_000
#: At most this many segments of slices per store: past it, every live
#: slice is written again as one segment (so is a store whose segments hold
#: more dead slices than live ones).
MAX_SLICE_SEGMENTS = 8


def _slices_folder(found: Scan) -> Path | None:
    if found.cache is None:
        return None
    return found.cache / "slices" / _store_id(found.store)


def _slices_index(folder_: Path) -> dict[str, list[str]]:
    """segment name -> the keys of its slices; {} where missing, damaged or of other code."""
    value = _read_pickle(folder_ / "index.pickle")
    if not (type(value) is tuple and len(value) == 2 and value[0] == code_fingerprint() and type(value[1]) is dict):
        return {}
    index: dict[str, list[str]] = value[1]
    ok = all(type(k) is str and type(v) is list for k, v in index.items())
    return index if ok else {}


def _encode_slice(piece: slices_mod.Slice) -> tuple[Any, ...]:
    return (tuple(piece.flagged.items()), piece.counts, piece.rows)


def _decode_slice(value: Any) -> slices_mod.Slice | None:
    """A slice as ``_encode_slice`` wrote it, or None (a miss)."""
    if not (type(value) is tuple and len(value) == 3 and type(value[1]) is tuple and type(value[2]) is tuple):
        return None
    try:
        return slices_mod.Slice(flagged=dict(value[0]), counts=value[1], rows=value[2])
    except (TypeError, ValueError):
        return None


def get_slices(found: Scan, data: Dataset, rules: Rules) -> slices_mod.Slices | None:
    """Each campaign's slice that a command before kept for this store and
    that has the same inputs (findings/derive/slices.py), by its key; None
    without a cache, or where the runs' keys are not known (``load``)."""
    folder_ = _slices_folder(found)
    if folder_ is None:
        return None
    _wait(_SLICE_WRITERS)  # the index as the command before left it
    given = slices_mod.plan(data, rules, found.run_keys)
    if given is None:
        return None
    live = set(given.keys.values())
    known = given.known
    for segment, keys in _slices_index(folder_).items():
        if live.isdisjoint(keys):
            continue
        got = _read_pickle(folder_ / f"{segment}.pickle")
        if type(got) is not dict:
            continue  # a miss: derived again
        for key in live.intersection(keys):
            piece = _decode_slice(got.pop(key, None))
            if piece is not None:
                known[key] = piece
    return given


def put_slices(found: Scan, given: slices_mod.Slices | None) -> None:
    """Keeps the slices a command derived (``given.made``) as one more
    segment; once there would be more than ``MAX_SLICE_SEGMENTS``, or the
    segments hold more dead slices than live ones, every live slice as one
    segment instead (those kept read again from their segments). Written
    aside when many points' or every slice is written (D168's writer)."""
    folder_ = _slices_folder(found)
    if folder_ is None or given is None or not (given.made or given.pending):
        return
    _wait(_SLICE_WRITERS)  # two writers never overlap
    live = set(given.keys.values())
    index = _slices_index(folder_)
    kept = {name: keys for name, keys in index.items() if not live.isdisjoint(keys)}
    dead = sum(len(keys) - len(live.intersection(keys)) for keys in kept.values())
    whole = len(kept) + 1 > MAX_SLICE_SEGMENTS or dead > len(live)
    job = functools.partial(_write_slices, folder_, kept, given, live, whole)
    # (every campaign derived in one pass, into an empty cache: cut into slices there too)
    if whole or given.points >= KEEP_SLICES_ASIDE_POINTS:
        _SLICE_WRITERS.append(aside.forked(job))
    else:
        job()


def _write_slices(folder_: Path, kept: dict[str, list[str]], given: slices_mod.Slices, live: set[str],
                  whole: bool) -> None:
    """One segment of the slices ``given`` derived (and, when ``whole``, of
    every ``live`` slice the ``kept`` segments hold), then the index of it
    and of the segments still kept; the segments the index does not name
    are removed."""
    with contextlib.suppress(OSError):
        folder_.mkdir(parents=True, exist_ok=True, mode=0o700)
    entries = {k: _encode_slice(v) for k, v in given.to_keep().items() if k in live}
    if whole:
        for segment, keys in kept.items():
            got = _read_pickle(folder_ / f"{segment}.pickle")
            if type(got) is dict:  # (one that cannot be read: its slices derived again next time)
                for k in live.intersection(keys):
                    if k not in entries and k in got:
                        entries[k] = got[k]
        kept = {}
    keys = sorted(entries)
    name = hashlib.sha256("\n".join(keys).encode()).hexdigest()[:32]
    path = folder_ / f"{name}.pickle"
    if not _write_pickled(path, entries):
        return  # not written (a value that does not pickle, a full disk): derived again next time
    index = {**kept, name: keys}
    _write(folder_ / "index.pickle", pickle.dumps((code_fingerprint(), index), protocol=pickle.HIGHEST_PROTOCOL))
    with contextlib.suppress(OSError):
        for other in os.listdir(folder_):
            if other.endswith(".pickle") and other != "index.pickle" and other[:-len(".pickle")] not in index:
                with contextlib.suppress(OSError):
                    os.unlink(folder_ / other)


# --------------------------------------------------------------------------- the moves (D175)

#: From this many moves on, they are written aside (D168's writer): at a
#: million points, 65k moves took 0.3 s to pickle.
KEEP_MOVES_ASIDE = 20_000


def _moves_path(found: Scan) -> Path | None:
    if found.cache is None:
        return None
    return found.cache / "moves" / f"{_store_id(found.store)}.pickle"


def get_moves(found: Scan) -> regressions.MovesCache | None:
    """The moves the last command kept for this store, to resume from
    (regressions.moves_kept: only where their chain says which campaigns
    are the same), in a MovesCache with none where missing, damaged or of
    other code; None without a cache."""
    path = _moves_path(found)
    if path is None:
        return None
    _wait(_MOVES_WRITERS)  # as the command before left it
    value = _read_pickle(path)
    ok = (type(value) is tuple and len(value) == 2 and value[0] == code_fingerprint()
          and type(kept := value[1]) is regressions.MovesKept and type(kept.chain) is tuple
          and type(kept.moves) is tuple and type(kept.groups) is dict)
    return regressions.MovesCache(kept=value[1] if ok else None)


def put_moves(found: Scan, cache: regressions.MovesCache | None) -> None:
    """Keeps the moves this command found (``cache.made``) where they are
    not those it was given: aside when there are many (``KEEP_MOVES_ASIDE``)."""
    path = _moves_path(found)
    if path is None or cache is None or cache.made is None or cache.made is cache.kept:
        return
    _wait(_MOVES_WRITERS)  # two writers never overlap
    job = functools.partial(_write_moves, path, cache.made)
    if len(cache.made.moves) >= KEEP_MOVES_ASIDE:
        _MOVES_WRITERS.append(aside.forked(job))
    else:
        job()


def _write_moves(path: Path, kept: regressions.MovesKept) -> None:
    with contextlib.suppress(OSError):
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    # (each move's ratios packed: the next command holds them in a fifth of
    # the memory, and reads few of them, D177; a fact that does not pickle:
    # found again next time)
    _write_pickled(path, (code_fingerprint(), kept.packed()))
