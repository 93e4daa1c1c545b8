"""The store's undo: ``findings store retract``, ``relabel`` and ``list``.

Run files are written once and never edited by hand; these are the only
writers that remove or rewrite one. Each takes the store's write lock, keeps
the write index consistent (findings/store/index.py), and records what it did
(who, when, why, what the run held) in ``<store>/amendments/``, one file per
act, so the document's methodology can list it and ``store check`` can see
an act a crash left half done (D89).
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime as _dt
import getpass
import json
import os
import sqlite3
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Mapping

from findings.core import diskio
from findings.store import index as storeindex
from findings.store.identity import sortable_time
from findings import store as store_mod
from findings.core.errors import LabelError, StoreError
from findings.core.model import Run
from findings.store.schema import SEAL_KEY, run_from_dict, seal_state, valid_name

FOLDER = "amendments"
KIND = "findings-amendment"
VERSION = 1


@dataclass(frozen=True)
class Amendment:
    """One recorded retraction or relabelling."""

    action: str  # "retract" | "relabel"
    run_id: str
    when: str
    who: str
    why: str
    #: What the run held: its source file, points, campaigns, configs, workloads.
    held: Mapping[str, Any]
    #: relabel: {"config": {"old": "new"}, ...}
    changes: Mapping[str, Mapping[str, str]]
    path: str

    def line(self) -> str:
        what = (f"retracted run {self.run_id}" if self.action == "retract" else
                f"relabelled run {self.run_id} ({_changes(self.changes)})")
        src = self.held.get("source_file")
        return (f"{self.when[:10]}: {what}" + (f", from {src}" if src else "") +
                f", {self.held.get('points', '?')} points, by {self.who}" + (f": {self.why}" if self.why else ""))


def _changes(changes: Mapping[str, Mapping[str, str]]) -> str:
    return "; ".join(f"{kind} {old} -> {new}" for kind, m in sorted(changes.items()) for old, new in sorted(m.items()))


def _now() -> str:
    """To the microsecond, as runs' created_at (a run ingested again right
    after its retraction must sort after it: store check)."""
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="microseconds").replace("+00:00", "Z")


def _who() -> str:
    """$FINDINGS_USER, else the login name."""
    name = os.environ.get("FINDINGS_USER")
    if name:
        return name
    try:
        return getpass.getuser()
    except (OSError, KeyError):
        return "unknown"


def _held(run: Run) -> dict[str, Any]:
    return {
        "source_file": run.source_file,
        "source_sha256": run.source_sha256,
        "points": len(run.points),
        "campaigns": sorted({p.campaign for p in run.points}),
        "configs": sorted({p.config for p in run.points}),
        "workloads": sorted({p.workload for p in run.points}),
    }


def _record(store: Path, action: str, run: Run, why: str, changes: Mapping[str, Mapping[str, str]]) -> Path:
    when = _now()
    doc = {"kind": KIND, "version": VERSION, "action": action, "run_id": run.run_id, "when": when,
           "who": _who(), "why": why, "run": _held(run), "changes": {k: dict(v) for k, v in sorted(changes.items())}}
    folder = store / FOLDER
    diskio.make_dirs(folder)
    stem = f"{when[:19].replace(':', '').replace('-', '')}Z-{action}-{run.run_id}"  # to the second, as before
    for n in range(1000):
        path = folder / (f"{stem}.json" if n == 0 else f"{stem}-{n}.json")
        try:
            return diskio.write_new(path, (json.dumps(doc, indent=1, ensure_ascii=False) + "\n").encode())
        except FileExistsError:
            continue
    raise StoreError(f"{folder}: too many amendments of run {run.run_id} this second; nothing was changed")


def _run_file(store: Path, run_id: str) -> Path:
    store_mod.require(store)
    path = store_mod.run_path(store, run_id)
    if not valid_name(run_id) or "/" in run_id or not path.is_file():
        known = sorted(p.stem for p in (store / store_mod.RUNS).glob("*.json") if not p.name.startswith("."))
        near = [k for k in known if run_id and (run_id in k or k in run_id)][:3]
        hint = f" (did you mean {', '.join(near)}?)" if near else " ('findings store list --runs' lists them)"
        raise StoreError(f"{store}: no run {run_id!r}{hint}; nothing was changed")
    return path


def _update_index(store: Path, change: Callable[[storeindex.Index], None]) -> None:
    """Apply ``change`` to the write index; an index that cannot be opened or
    updated is left stale, and rebuilt from the run files at the next write."""
    with contextlib.suppress(sqlite3.Error, OSError):
        with storeindex.open_for_write(store) as index:
            change(index)


SELECT_KEYS = ("campaign", "config", "workload")


@dataclass(frozen=True)
class Selector:
    """Which runs an amendment takes: these run ids, and/or every run holding
    a point with each of these labels (``{"campaign": "c1"}``: the runs with a
    point in campaign c1)."""

    run_ids: tuple[str, ...] = ()
    labels: Mapping[str, str] = dataclasses.field(default_factory=dict)

    def describe(self) -> str:
        parts = [f"{k}={v}" for k, v in sorted(self.labels.items())]
        return " and ".join(parts) if parts else "those run ids"


def select(store: Path, selector: Selector) -> list[Path]:
    """The run files that ``selector`` names, in run-id order; an unknown
    run id, or labels that match no run, is one line and changes nothing."""
    if not selector.run_ids and not selector.labels:
        raise StoreError("name the runs: RUN_ID ..., or --select campaign=NAME|config=NAME|workload=NAME; "
                         "nothing was changed")
    for key in selector.labels:
        if key not in SELECT_KEYS:
            raise StoreError(f"--select {key}=...: select by {', '.join(SELECT_KEYS)}; nothing was changed")
    paths = {path.stem: path for path in (_run_file(store, r) for r in selector.run_ids)}
    if selector.labels:
        store_mod.require(store)
        matched = 0
        for run in store_mod.load_runs(store, requests=False):
            if selector.run_ids and run.run_id not in paths:
                continue
            if all(any(getattr(p, k) == v for p in run.points) for k, v in selector.labels.items()):
                matched += 1
                paths.setdefault(run.run_id, store_mod.run_path(store, run.run_id))
            else:
                paths.pop(run.run_id, None)
        if not matched:
            raise StoreError(f"{store}: no run holds a point with {selector.describe()} "
                             f"('findings store list' lists the labels); nothing was changed")
    return [paths[k] for k in sorted(paths)]


def retract(store: Path, run_id: str, why: str) -> Amendment:
    """Remove a run and its sidecar, and record why."""
    return retract_many(store, Selector(run_ids=(run_id,)), why)[0]


def retract_many(store: Path, selector: Selector, why: str) -> list[Amendment]:
    """Remove every selected run and its sidecar, one amendment record per
    run, under one lock. Every run is found before the first is touched. A
    crash part-way leaves each run either retracted with its record or
    untouched (a record whose run is still there is what ``store check``
    reports as an act left half done); the same command again finishes it."""
    if not why.strip():
        raise StoreError("--why: say why the run is retracted (it is recorded in the store); nothing was changed")
    records: list[Path] = []
    store_mod.require(store)  # a reader's refusal: an amendment never creates a store
    with store_mod.locked(store):
        paths = select(store, selector)
        runs = [store_mod.read_run(path, requests=False) for path in paths]
        for path, run in zip(paths, runs):
            records.append(_record(store, "retract", run, why.strip(), {}))
            diskio.remove(path)  # the run file first: a sidecar alone is never read
            diskio.remove(store_mod.sidecar_path(store, run.run_id))
        gone = [run.run_id for run in runs]
        _update_index(store, lambda index: index.removed(gone))
    return [read_one(r) for r in records]


def _mapping(kind: str, spec: str | None, have: set[str]) -> dict[str, str]:
    """``NEW`` (the run holds one such label) or ``OLD=NEW``, comma-separated."""
    if spec is None:
        return {}
    out: dict[str, str] = {}
    for part in spec.split(","):
        part = part.strip()
        if "=" in part:
            old, new = (x.strip() for x in part.split("=", 1))
        elif len(have) == 1:
            old, new = next(iter(have)), part
        else:
            raise LabelError(f"--{kind} {spec!r}: the run holds {len(have)} {kind}s ({', '.join(sorted(have))}); "
                             f"say which as OLD=NEW; nothing was changed")
        if old not in have:
            raise LabelError(f"--{kind}: the run holds no {kind} {old!r} (it holds {', '.join(sorted(have))}); "
                             f"nothing was changed")
        if not valid_name(new):
            raise LabelError(f"--{kind}: invalid name {new!r}; nothing was changed")
        if old != new:
            out[old] = new
    return out


def _rename_keys(m: Mapping[str, Any], names: Mapping[str, str], kind: str) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in m.items():
        new = names.get(k, k)
        if new in out and out[new] != v:
            raise LabelError(f"--{kind}: {k!r} -> {new!r} would merge two {kind}s of this run with different "
                             f"facts; nothing was changed")
        out[new] = v
    return out


def relabeled(doc: Mapping[str, Any], config: Mapping[str, str], workload: Mapping[str, str],
              campaign: Mapping[str, str]) -> dict[str, Any]:
    """The run file's document with its labels renamed."""
    out = dict(doc)
    out["points"] = [{**p, "config": config.get(p["config"], p["config"]),
                      "workload": workload.get(p["workload"], p["workload"]),
                      "campaign": campaign.get(p["campaign"], p["campaign"])} for p in doc["points"]]
    camps: dict[str, dict[str, Any]] = {}
    for c in doc["campaigns"]:
        c = {**c, "name": campaign.get(c["name"], c["name"])}
        if c["name"] in camps and camps[c["name"]] != c:
            raise LabelError(f"--campaign: two campaigns of this run would become {c['name']!r} with different "
                             f"dates or orders; nothing was changed")
        camps[c["name"]] = c
    out["campaigns"] = list(camps.values())
    out["configs"] = _rename_keys(doc.get("configs", {}), config, "config")
    if doc.get("campaign_configs"):
        cc = _rename_keys(doc["campaign_configs"], campaign, "campaign")
        out["campaign_configs"] = {k: _rename_keys(v, config, "config") for k, v in cc.items()}
    return out


def relabel(store: Path, run_id: str, *, config: str | None = None, workload: str | None = None,
            campaign: str | None = None, why: str = "", baseline: str | None = None,
            allow_workload_change: bool = False) -> Amendment:
    """Rewrite a run's labels atomically, checked as a new run would be."""
    return relabel_many(store, Selector(run_ids=(run_id,)), config=config, workload=workload, campaign=campaign,
                        why=why, baseline=baseline, allow_workload_change=allow_workload_change)[0]


def relabel_many(store: Path, selector: Selector, *, config: str | None = None, workload: str | None = None,
                 campaign: str | None = None, why: str = "", baseline: str | None = None,
                 allow_workload_change: bool = False) -> list[Amendment]:
    """Rewrite the labels of every selected run, all or nothing: every new
    run file is built and checked (against the runs left as they are and the
    selected runs as relabelled) before the first is written, under one lock;
    then one amendment record per run, each followed by its atomic rewrite."""
    if config is None and workload is None and campaign is None:
        raise LabelError("give --config, --workload or --campaign (NEW, or OLD=NEW); nothing was changed")
    batch = len(selector.run_ids) != 1 or bool(selector.labels)
    store_mod.require(store)  # a reader's refusal: an amendment never creates a store
    with store_mod.locked(store):
        paths = select(store, selector)
        chosen = {p.stem for p in paths}
        others = [r for r in store_mod.load_runs(store, requests=False) if r.run_id not in chosen]
        plans: list[tuple[Path, Run, dict[str, dict[str, str]], dict[str, Any], Run]] = []
        for path in paths:
            raw = path.read_bytes()
            if seal_state(raw) == "edited":  # a rewrite would seal the hand edit as findings' own (D94)
                raise LabelError(f"{path}: edited by hand since findings wrote it (it no longer matches its "
                                 f"{SEAL_KEY}); restore it (git checkout -- {path}) before relabelling; "
                                 f"nothing was changed")
            run = store_mod.parse_run(raw, str(path), path.stem)
            try:
                changes = {k: v for k, v in (
                    ("config", _mapping("config", config, {p.config for p in run.points})),
                    ("workload", _mapping("workload", workload, {p.workload for p in run.points})),
                    ("campaign", _mapping("campaign", campaign, {p.campaign for p in run.points}))) if v}
            except LabelError as exc:
                raise LabelError(f"run {run.run_id}: {exc}" if batch else str(exc)) from None
            if not changes:
                if batch:
                    others.append(run)
                    continue  # already so labelled: a batch stopped part-way, run again
                raise LabelError(f"run {run.run_id} already has those labels; nothing was changed")
            doc = relabeled(json.loads(raw), changes.get("config", {}), changes.get("workload", {}),
                            changes.get("campaign", {}))
            new = run_from_dict(json.loads(json.dumps(doc)), f"{path} (relabelled)")
            try:
                store_mod.check_new_run(others, new, baseline=baseline, allow_workload_change=allow_workload_change)
            except StoreError as exc:
                text = str(exc).replace("nothing was written", "nothing was changed")
                text = text if "nothing was changed" in text else f"{text}; nothing was changed"
                raise LabelError(f"run {run.run_id}: {text}" if batch else text) from None
            others.append(new)
            plans.append((path, run, changes, doc, new))
        if not plans:
            raise LabelError(f"every selected run ({len(paths)}) already has those labels; nothing was changed")
        records: list[Path] = []
        for path, run, changes, doc, new in plans:
            records.append(_record(store, "relabel", run, why.strip(), changes))
            diskio.write_replace(path, store_mod.encode(doc), make_parent=False)
        news = [new for *_, new in plans]

        def replace_all(index: storeindex.Index) -> None:
            for n in news:
                index.replaced(n)
        _update_index(store, replace_all)
    return [read_one(r) for r in records]


def read_one(path: Path) -> Amendment:
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
        if doc.get("kind") != KIND:
            raise ValueError(f"kind is {doc.get('kind')!r}, not {KIND!r}")
        return Amendment(action=str(doc["action"]), run_id=str(doc["run_id"]), when=str(doc["when"]),
                         who=str(doc["who"]), why=str(doc.get("why", "")), held=dict(doc.get("run", {})),
                         changes={k: dict(v) for k, v in doc.get("changes", {}).items()}, path=str(path))
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
        raise StoreError(f"{path}: not a readable amendment record ({exc})") from None


def amendments(store: Path) -> tuple[Amendment, ...]:
    """Every recorded act, oldest first (an absent folder: none)."""
    folder = store / FOLDER
    if not folder.is_dir():
        return ()
    return tuple(sorted((read_one(p) for p in folder.glob("*.json") if not p.name.startswith(".")),
                        key=lambda a: (sortable_time(a.when), a.path)))


def _n(count: int, word: str) -> str:
    return f"{count} {word}" + ("" if count == 1 else "s")


def listing(store: Path, show_runs: bool = False) -> str:
    """``findings store list``: what the store holds, counted."""
    store_mod.require(store)
    runs = store_mod.load_runs(store, requests=False)
    data = store_mod.merge(runs)
    lines = [f"{store}: {_n(len(runs), 'run')}, {_n(len(data.points), 'point')}"]
    groups: dict[str, dict[str, list[Any]]] = {"campaign": {}, "config": {}, "workload": {}}
    for p in data.points:
        for key, by in groups.items():
            by.setdefault(getattr(p, key), []).append(p)

    def section(title: str, key: str, names: list[str], also: tuple[str, ...]) -> None:
        lines.append(f"{title}:")
        width = max((len(n) for n in names), default=0)
        for name in names:
            pts = groups[key].get(name, [])
            head = f"{data.campaign(name).when}: " if key == "campaign" else ""
            counts = ", ".join(_n(len({getattr(p, k) for p in pts}), k) for k in also)
            sim = " (simulated)" if pts and all(p.simulated for p in pts) else ""
            lines.append(f"  {name:<{width}}  {head}{_n(len(pts), 'point')}, {counts}{sim}")

    section("campaigns (in replay order)", "campaign", [c.name for c in data.campaigns], ("config", "workload"))
    section("configs", "config", sorted(groups["config"]), ("campaign", "workload"))
    section("workloads", "workload", sorted(groups["workload"]), ("campaign", "config"))
    if show_runs:
        lines.append("runs:")
        for run in runs:
            held = _held(run)
            lines.append(f"  {run.run_id}  {_n(held['points'], 'point')}  {run.source_file or run.source}  "
                         f"campaign {','.join(held['campaigns'])}; config {','.join(held['configs'])}; "
                         f"workload {','.join(held['workloads'])}")
    acts = amendments(store)
    if acts:
        lines.append("amendments:")
        lines.extend(f"  {a.line()}" for a in acts)
    return "\n".join(lines)
