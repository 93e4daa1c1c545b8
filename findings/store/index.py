"""The store's write index: what a writer must know about the stored runs
(content hashes, run ids, record hashes, campaigns and whether they are
simulated) without reading every run file (docs/store.md, D75).

A derived file, ``<store>/.findings-index.sqlite3`` (SQLite, in the
standard library), never the only copy of anything: the run files are the
truth, and the index is rebuilt from them when it is missing, damaged, of
another version, or stale. Staleness is seen in O(1): the index records the
``runs/`` folder's modification time, which any added or removed file
changes (a ``git pull``, a killed writer's temp file); then only the run
files the index does not know are read. Writers use it under the store's
lock, and update it after each run file is in place, in one transaction, so
a writer killed at any point leaves an index that is either current or
visibly stale. Readers (render, conclusions) never touch it.
"""

from __future__ import annotations

import contextlib
import json
import os
import sqlite3
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Iterator

from findings.store import identity
from findings.core.model import Campaign, Run

NAME = ".findings-index.sqlite3"
#: 2: per-run kinds, and each run's workload definitions and config facts
#: (the identity checks of findings/store/identity.py), so that a run can
#: be removed or relabelled (``findings store retract`` / ``relabel``);
#: 3: workload definitions indexed by (name, key, created, run_id), so the
#: latest definition of a key is one index seek, not a scan of every run
#: that ever defined it (the write of a 1M-point store slowed with its size);
#: 4: ``created`` in identity.sortable_time's form (runs are stamped to the
#: microsecond since, and a stamp to the second must sort with them).
VERSION = "4"
GITIGNORE = "# findings: derived files, rebuilt when missing (docs/store.md)\n.findings-index.sqlite3*\n.lock\n"

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS runs (run_id TEXT PRIMARY KEY, file TEXT NOT NULL, source_sha256 TEXT NOT NULL,
                                 source_file TEXT);
CREATE INDEX IF NOT EXISTS runs_sha ON runs (source_sha256);
CREATE TABLE IF NOT EXISTS lines (hash TEXT PRIMARY KEY, run_id TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS campaigns (name TEXT NOT NULL, date TEXT, ord INTEGER, run_id TEXT NOT NULL);
CREATE INDEX IF NOT EXISTS campaigns_name ON campaigns (name);
CREATE TABLE IF NOT EXISTS kinds (name TEXT NOT NULL, simulated INTEGER NOT NULL, run_id TEXT NOT NULL,
                                  PRIMARY KEY (name, simulated, run_id));
CREATE TABLE IF NOT EXISTS workloads (name TEXT NOT NULL, key TEXT NOT NULL, value TEXT NOT NULL,
                                      created TEXT NOT NULL, run_id TEXT NOT NULL);
CREATE INDEX IF NOT EXISTS workloads_latest ON workloads (name, key, created, run_id);
CREATE TABLE IF NOT EXISTS facts (config TEXT NOT NULL, campaign TEXT NOT NULL, key TEXT NOT NULL,
                                  value TEXT NOT NULL, run_id TEXT NOT NULL);
CREATE INDEX IF NOT EXISTS facts_pair ON facts (config, campaign, key);
"""


def path(store: Path) -> Path:
    return store / NAME


def _folder_stamp(store: Path) -> str:
    st = os.stat(store / "runs")
    return f"{st.st_mtime_ns}"


@dataclass(frozen=True)
class Status:
    state: str  # "current", "stale", "missing", "damaged"
    detail: str = ""

    @property
    def line(self) -> str:
        return f"index {self.state}" + (f": {self.detail}" if self.detail else "")


def _names(store: Path) -> set[str]:
    folder = store / "runs"
    if not folder.is_dir():
        return set()
    return {e.name[:-5] for e in os.scandir(folder) if e.name.endswith(".json") and not e.name.startswith(".")}


def status(store: Path) -> Status:
    """What the index is, read-only (``findings store check``)."""
    p = path(store)
    if not p.exists():
        return Status("missing", "rebuilt from the run files at the next write")
    try:
        con = sqlite3.connect(f"file:{p}?mode=ro", uri=True)
        try:
            meta = dict(con.execute("SELECT key, value FROM meta").fetchall())
            known = {r[0] for r in con.execute("SELECT run_id FROM runs")}
        finally:
            con.close()
    except sqlite3.DatabaseError as exc:
        return Status("damaged", f"{exc}; rebuilt from the run files at the next write")
    if meta.get("version") != VERSION:
        return Status("damaged", f"version {meta.get('version')!r}, not {VERSION}; rebuilt at the next write")
    on_disk = _names(store)
    if known == on_disk:
        return Status("current", f"{len(known)} runs")
    missing, extra = sorted(on_disk - known), sorted(known - on_disk)
    parts = []
    if missing:
        parts.append(f"{len(missing)} run files not in it (e.g. {missing[0]})")
    if extra:
        parts.append(f"{len(extra)} runs no longer on disk (e.g. {extra[0]})")
    return Status("stale", "; ".join(parts) + "; brought up to date at the next write")


class Pending:
    """The runs of one batch checked so far, gathered so that checking the
    next one costs that run, not the batch (Index.conflicts): their content
    hashes, ids, record lines, campaigns with their kinds (simulated or not),
    and what their names stand for (identity.Known). Runs that conflict with
    each other never get this far together: the first conflict sends the
    whole batch to the full check."""

    def __init__(self) -> None:
        self.shas: set[str] = set()
        self.ids: set[str] = set()
        self.lines: set[str] = set()
        self.kinds: dict[str, set[bool]] = {}
        self.campaigns: dict[str, set[Campaign]] = {}
        self.known = identity.Known()

    def add(self, run: Run) -> None:
        self.shas.add(run.source_sha256)
        self.ids.add(run.run_id)
        self.lines.update(run.line_hashes)
        for p in run.points:
            self.kinds.setdefault(p.campaign, set()).add(p.simulated)
        for camp in run.campaigns:
            self.campaigns.setdefault(camp.name, set()).add(camp)
        self.known.add(run)


class Index:
    """The open index of one store, for a writer holding the store's lock."""

    def __init__(self, store: Path, con: sqlite3.Connection) -> None:
        self.store, self.con = store, con

    # -- reading
    def conflicts(self, run: Run, pending: Pending) -> bool:
        """Whether ``run`` might be refused: a stored (or pending) run with the
        same content, id or records, a campaign another run dates or orders
        otherwise, a campaign that would mix simulated and real points, or a
        name given another meaning. The caller then runs the full check, for
        its exact message. ``pending``: the batch's runs before this one, which
        the caller adds each checked run to."""
        c = self.con
        if c.execute("SELECT 1 FROM runs WHERE source_sha256 = ? OR run_id = ? LIMIT 1",
                     (run.source_sha256, run.run_id)).fetchone():
            return True
        if run.source_sha256 in pending.shas or run.run_id in pending.ids or not pending.lines.isdisjoint(
                run.line_hashes):
            return True
        hashes = sorted(run.line_hashes)
        for i in range(0, len(hashes), 500):
            chunk = hashes[i:i + 500]
            if c.execute(f"SELECT 1 FROM lines WHERE hash IN ({','.join('?' * len(chunk))}) LIMIT 1",
                         chunk).fetchone():
                return True
        kinds: dict[str, set[bool]] = {}
        for p in run.points:
            kinds.setdefault(p.campaign, set()).add(p.simulated)
        for camp in run.campaigns:
            for date, order in c.execute("SELECT date, ord FROM campaigns WHERE name = ?", (camp.name,)):
                if (date, order) != (camp.date, camp.order):
                    return True
            if any(oc != camp for oc in pending.campaigns.get(camp.name, ())):
                return True
            stored = {bool(s) for (s,) in c.execute("SELECT simulated FROM kinds WHERE name = ?", (camp.name,))}
            if len(stored | kinds.get(camp.name, set()) | pending.kinds.get(camp.name, set())) > 1:
                return True
        return (self._relabelled(run) or bool(identity.several_definitions(run))
                or bool(pending.known.workload_conflicts(run))
                or bool(pending.known.facts_conflicts(run)))

    def _relabelled(self, run: Run) -> bool:
        """Whether ``run`` may redefine a stored workload, or give a config
        other facts in a campaign (the full check then says which)."""
        c = self.con
        for name, keys in identity.workload_definitions(run).items():
            for key, values in keys.items():
                if len(values) > 1:
                    return True
                latest = c.execute("SELECT created, run_id FROM workloads WHERE name = ? AND key = ? "
                                   "ORDER BY created DESC, run_id DESC LIMIT 1", (name, key)).fetchone()
                if latest is None:
                    continue
                # (its time too, which every row of a run holds: the whole index
                # is searched, not every run that defined the name, D179)
                stored = {v for (v,) in c.execute("SELECT value FROM workloads WHERE name = ? AND key = ? "
                                                  "AND created = ? AND run_id = ?", (name, key, *latest))}
                if {_enc(v) for v in values} != stored:
                    return True
        for config, campaign in identity.measured(run):
            for key, value in identity.facts_of(run, config, campaign).items():
                for (v,) in c.execute("SELECT value FROM facts WHERE config = ? AND campaign = ? AND key = ?",
                                      (config, campaign, key)):
                    if v != _enc(value):
                        return True
        return False

    def line_hashes(self) -> frozenset[str]:
        return frozenset(h for (h,) in self.con.execute("SELECT hash FROM lines"))

    def run_ids(self) -> set[str]:
        return {r for (r,) in self.con.execute("SELECT run_id FROM runs")}

    # -- writing
    def _insert(self, run: Run) -> None:
        c = self.con
        c.execute("INSERT OR REPLACE INTO runs VALUES (?, ?, ?, ?)",
                  (run.run_id, f"{run.run_id}.json", run.source_sha256, run.source_file))
        c.executemany("INSERT OR REPLACE INTO lines VALUES (?, ?)", [(h, run.run_id) for h in run.line_hashes])
        c.executemany("INSERT INTO campaigns VALUES (?, ?, ?, ?)",
                      [(x.name, x.date, x.order, run.run_id) for x in run.campaigns])
        c.executemany("INSERT OR IGNORE INTO kinds VALUES (?, ?, ?)",
                      sorted({(p.campaign, int(p.simulated), run.run_id) for p in run.points}))
        c.executemany("INSERT INTO workloads VALUES (?, ?, ?, ?, ?)",
                      [(name, key, _enc(v), identity.sortable_time(run.created_at), run.run_id)
                       for name, keys in sorted(identity.workload_definitions(run).items())
                       for key, values in sorted(keys.items()) for v in sorted(values, key=_enc)])
        c.executemany("INSERT INTO facts VALUES (?, ?, ?, ?, ?)",
                      [(config, campaign, key, _enc(v), run.run_id)
                       for config, campaign in sorted(identity.measured(run))
                       for key, v in sorted(identity.facts_of(run, config, campaign).items())])

    def _delete(self, run_id: str) -> None:
        for table in ("runs", "lines", "campaigns", "kinds", "workloads", "facts"):
            self.con.execute(f"DELETE FROM {table} WHERE run_id = ?", (run_id,))

    def added(self, runs: Iterable[Run]) -> None:
        """Record runs whose files are now in place, with the folder's new stamp."""
        with self.con:
            for run in runs:
                self._insert(run)
            self.con.execute("INSERT OR REPLACE INTO meta VALUES ('stamp', ?)", (_folder_stamp(self.store),))

    def removed(self, run_ids: Iterable[str]) -> None:
        """Forget runs whose files were removed (``findings store retract``)."""
        with self.con:
            for rid in run_ids:
                self._delete(rid)
            self.con.execute("INSERT OR REPLACE INTO meta VALUES ('stamp', ?)", (_folder_stamp(self.store),))

    def replaced(self, run: Run) -> None:
        """Record a run file rewritten in place (``findings store relabel``)."""
        with self.con:
            self._delete(run.run_id)
            self._insert(run)
            self.con.execute("INSERT OR REPLACE INTO meta VALUES ('stamp', ?)", (_folder_stamp(self.store),))


def _enc(v: object) -> str:
    """A scalar as the index stores it: its JSON text (1 and 1.0 and "1" stay apart)."""
    return json.dumps(v, sort_keys=True)


def _fresh(store: Path, p: Path) -> sqlite3.Connection:
    with contextlib.suppress(FileNotFoundError):
        p.unlink()
    for extra in (p.with_name(p.name + "-journal"), p.with_name(p.name + "-wal")):
        with contextlib.suppress(FileNotFoundError):
            extra.unlink()
    con = sqlite3.connect(p)
    con.executescript(_SCHEMA)
    with con:
        con.execute("INSERT OR REPLACE INTO meta VALUES ('version', ?)", (VERSION,))
        con.execute("INSERT OR REPLACE INTO meta VALUES ('stamp', '')")
    gi = store / ".gitignore"
    if not gi.exists():
        with contextlib.suppress(OSError):
            gi.write_text(GITIGNORE, encoding="utf-8")
    return con


@contextlib.contextmanager
def open_for_write(store: Path) -> Iterator[Index]:
    """The store's index, brought up to date: created or rebuilt when missing
    or damaged, and only the unknown run files read when the folder changed
    since it was last recorded. Call under the store's lock."""
    from findings.store.files import read_run, run_path

    p = path(store)
    con: sqlite3.Connection | None = None
    try:
        if p.exists():
            con = sqlite3.connect(p)
            meta = dict(con.execute("SELECT key, value FROM meta").fetchall())
            if meta.get("version") != VERSION:
                raise sqlite3.DatabaseError("another version")
        else:
            raise sqlite3.DatabaseError("missing")
    except sqlite3.DatabaseError:
        if con is not None:
            con.close()
        con = _fresh(store, p)
        meta = {"stamp": ""}
    index = Index(store, con)
    try:
        if meta.get("stamp") != _folder_stamp(store):
            known = index.run_ids()
            on_disk = _names(store)
            if known - on_disk:  # a run file went away: start again from the files
                con.close()
                con = _fresh(store, p)
                index = Index(store, con)
                known = set()
            index.added(read_run(run_path(store, rid)) for rid in sorted(on_disk - known))
        yield index
    finally:
        index.con.close()
