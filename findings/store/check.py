"""`findings store check`: what is wrong with a store, and how to repair it.

Read-only. Checks every file on its own (JSON, schema, version, name, and
its bytes against the content hash findings sealed it with: an edit by
hand), then the store as a whole (duplicates, contradicting campaigns,
campaigns mixing simulated and real points, points without config facts),
and notes input files that changed since they were ingested.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path

from findings.store import index as storeindex
from findings.store import amend, identity
from findings.core.errors import StoreError
from findings.core.model import Run
from findings.core.series import window_series
from findings.store.schema import SEAL_KEY, SIDECAR_SUFFIX, records_in, run_from_dict, seal_state
from findings.store import KEEP as store_lib_keep
from findings.store import RUNS, fast_run, merge, read_sidecar, require


@dataclass(frozen=True)
class Finding:
    level: str  # "error" | "warning" | "note"
    path: str
    problem: str
    repair: str

    def line(self) -> str:
        return f"{self.level}: {self.path}: {self.problem}. Repair: {self.repair}"


def check(store: Path) -> tuple[list[Finding], int]:
    """The findings, and how many run files were read."""
    out: list[Finding] = []
    folder = store / RUNS
    require(store)  # a path that is not a store: one line, exit 2
    runs: list[Run] = []
    files = sorted(folder.iterdir())
    sidecars = {p.name for p in files if p.name.endswith(SIDECAR_SUFFIX) and not p.name.startswith(".")}
    named: set[str] = set()
    inline = unsealed = 0
    for path in files:
        if path.name in sidecars:
            continue
        if path.name.startswith(".tmp-"):
            out.append(Finding("warning", str(path), "a temporary file left by a killed writer (readers ignore it)",
                               "delete it"))
            continue
        if path.name == store_lib_keep:
            continue  # findings init's placeholder: git keeps the empty runs/ folder
        if path.suffix != ".json" or path.name.startswith("."):
            out.append(Finding("warning", str(path), "not a run file", "move it out of runs/"))
            continue
        try:
            raw = path.read_bytes()
        except OSError as exc:
            out.append(Finding("error", str(path), f"unreadable or not valid JSON ({exc})",
                               f"restore it from git (git checkout -- {path}) or delete it and re-ingest its source"))
            continue
        # orjson first, as the reader does (files.parse_run): a file it
        # refuses, or whose run it cannot vouch for, is read again with json,
        # so every finding and its words are json's.
        run = fast_run(raw, str(path))
        try:
            doc = json.loads(raw.decode("utf-8")) if run is None else None
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            out.append(Finding("error", str(path), f"unreadable or not valid JSON ({exc})",
                               f"restore it from git (git checkout -- {path}) or delete it and re-ingest its source"))
            continue
        try:
            run = run_from_dict(doc, str(path)) if run is None else run
        except StoreError as exc:
            msg = str(exc).removeprefix(f"{path}: ")
            repair = ("upgrade findings" if "newer than this findings" in msg
                      else f"restore it from git (git checkout -- {path}); files are never edited by findings")
            out.append(Finding("error", str(path), msg, repair))
            continue
        if path.stem != run.run_id:
            out.append(Finding("error", str(path), f"file name does not match run_id {run.run_id!r}",
                               f"rename it to {run.run_id}.json"))
            continue
        state = seal_state(raw)
        if state == "edited":
            exact = doc if doc is not None else json.loads(raw.decode("utf-8"))
            out.append(Finding("error", str(path), f"edited by hand since findings wrote it: {_what_edited(exact)}",
                               f"see the edit with `git diff -- {path}` and restore the file with `git checkout -- "
                               f"{path}`; to change its labels, `findings store relabel {run.run_id}`, to remove "
                               f"it, `findings store retract {run.run_id}`"))
        elif state == "unsealed":
            unsealed += 1
        if run.sidecar is not None:
            named.add(run.sidecar.file)
            try:
                records = read_sidecar(folder / run.sidecar.file, run.sidecar, run.run_id, str(path))
            except StoreError as exc:
                out.append(Finding("error", str(path), str(exc).removeprefix(f"{path}: "),
                                   f"restore {run.sidecar.file} from git (git checkout -- "
                                   f"{folder / run.sidecar.file}); findings never edits it"))
                continue
            out.extend(_series_findings(path, run, records))
        elif any(p.requests is not None for p in run.points):
            inline += 1
        runs.append(run)
    for name in sorted(sidecars - named):
        out.append(Finding("warning", str(folder / name),
                           "per-request records that no run file names (a writer killed before its run file, "
                           "or a file from elsewhere; readers ignore it)", "delete it"))
    if unsealed:
        out.append(Finding("note", str(folder), f"{unsealed} run files were written before findings sealed run "
                           f"files with their content hash (schema 4 or older): an edit of them cannot be seen",
                           "none needed; every file findings writes from now on is verified"))
    if inline:
        out.append(Finding("note", str(folder), f"{inline} run files keep their per-request records inline "
                           "(schema 3 or older: they read as before)",
                           "`findings store migrate` moves them to compact sidecars"))
    out.extend(_whole(runs))
    out.extend(_amendments(store, {r.run_id: r.created_at for r in runs}))
    return out, len(runs)


def _what_edited(doc: dict[str, object]) -> str:
    """Which part of a run file changed, as far as the file itself tells:
    its data, only its layout (the same JSON, laid out otherwise), or its
    seal (removed)."""
    recorded = doc.get(SEAL_KEY)
    if not isinstance(recorded, str):
        return f"its {SEAL_KEY} (the hash findings recorded of it) was removed"
    body = {k: v for k, v in doc.items() if k != SEAL_KEY}
    try:
        same = hashlib.sha256((json.dumps(body, indent=1, ensure_ascii=False, allow_nan=False) + "\n").encode())
    except ValueError:
        same = None
    if same is not None and same.hexdigest() == recorded:
        return "only its layout changed (the same JSON as written, laid out otherwise), not its data"
    return f"its data no longer matches the {SEAL_KEY} recorded in it"


def edited(store: Path) -> list[Path]:
    """The run files of ``store`` edited since findings wrote them (their
    bytes do not match their seal), in name order: one read and one sha256
    per file, no JSON parse. Files written before seals (schema 4 or
    older) cannot be told and are not listed. A store that is not one, or
    has no runs/, has none. (The document takes the same answer from the
    render cache, which hashes only the files whose stat changed.)"""
    folder = store / RUNS
    out: list[Path] = []
    if not folder.is_dir():
        return out
    for path in sorted(folder.glob("*.json")):
        if path.name.startswith("."):
            continue
        try:
            if seal_state(path.read_bytes()) == "edited":
                out.append(path)
        except OSError:
            continue  # unreadable: the readers and `store check` say so
    return out


def _amendments(store: Path, stored: dict[str, str]) -> list[Finding]:
    """Acts recorded in ``amendments/``: readable, and a retracted run gone
    (a retraction killed between its record and the removal leaves both; a
    run ingested again after its retraction is written later than it)."""
    out: list[Finding] = []
    folder = store / amend.FOLDER
    for path in sorted(folder.glob("*.json")) if folder.is_dir() else []:
        try:
            act = amend.read_one(path)
        except StoreError as exc:
            out.append(Finding("error", str(path), str(exc).removeprefix(f"{path}: "),
                               f"restore it from git (git checkout -- {path})"))
            continue
        if (act.action == "retract" and act.run_id in stored
                and identity.sortable_time(stored[act.run_id]) < identity.sortable_time(act.when)):
            out.append(Finding("error", str(path), f"run {act.run_id} is recorded as retracted but its file is "
                               "still in runs/ (a retraction stopped midway?)",
                               f"run `findings store retract {act.run_id} --why ...` again"))
    return out


def _whole(runs: list[Run]) -> list[Finding]:
    out: list[Finding] = []
    by_sha: dict[str, Run] = {}
    owner: dict[str, Run] = {}
    for run in sorted(runs, key=lambda r: (r.created_at, r.run_id)):
        first = by_sha.get(run.source_sha256)
        if first is not None:
            out.append(Finding("error", str(run.path), f"duplicate of run {first.run_id} (same source content)",
                               f"delete the later file {run.path}"))
            continue
        by_sha[run.source_sha256] = run
        shared = sorted(h for h in run.line_hashes if h in owner)
        if shared:
            other = owner[shared[0]]
            out.append(Finding("error", str(run.path),
                               f"{records_in(set(shared))} records also stored in run {other.run_id}: counted twice",
                               f"delete one of the two files and re-ingest with --skip-existing"))
        for h in run.line_hashes:
            owner.setdefault(h, run)
    try:
        merged = merge(runs)
    except StoreError as exc:
        out.append(Finding("error", str(exc).split(":", 1)[0], str(exc).split(": ", 1)[-1],
                           "campaigns must agree on date and order: rename the campaign in the newer run's "
                           "source and re-ingest it into a fresh file"))
        return out
    kinds: dict[str, set[bool]] = {}
    for p in merged.points:
        kinds.setdefault(p.campaign, set()).add(p.simulated)
    for name, k in sorted(kinds.items()):
        if len(k) > 1:
            out.append(Finding("error", name, f"campaign {name!r} mixes simulated and real points",
                               "move the simulated runs to a simulated store (benchmarks/results-emulated)"))
    known = identity.Known()
    for run in sorted(runs, key=lambda r: (r.created_at, r.run_id)):
        for problem in (identity.several_definitions(run) + known.workload_conflicts(run)
                        + known.facts_conflicts(run)):
            out.append(Finding("warning", str(run.path), problem,
                               f"if a label is wrong: findings store relabel {run.run_id} --workload/--config NEW "
                               f"(or store retract it)"))
        known.add(run)
    for name in sorted({p.config for p in merged.points} - set(merged.configs)):
        out.append(Finding("warning", name, f"config {name!r} has points but no recorded facts",
                           "re-ingest with --configs, or measure it with findings bench"))
    for run in runs:
        src = run.source_file
        if src and Path(src).is_file():
            if hashlib.sha256(Path(src).read_bytes()).hexdigest() != run.source_sha256:
                out.append(Finding("note", str(run.path), f"its source {src} changed since it was ingested",
                                   "nothing to repair if the file grew (ingest the new records with "
                                   "--skip-existing); otherwise check why it changed"))
    return out


def report(store: Path) -> tuple[str, bool]:
    """Printable text, and whether the store is healthy (no errors)."""
    findings, n = check(store)
    errors = sum(1 for f in findings if f.level == "error")
    lines = [f.line() for f in findings]
    lines.append(f"{store}: {n} run files read, {errors} errors, "
                 f"{sum(1 for f in findings if f.level == 'warning')} warnings; {storeindex.status(store).line}")
    return "\n".join(lines), errors == 0


def _series_findings(path: Path, run: Run, records: dict[int, dict[str, object]]) -> list[Finding]:
    """A stored time-window series (D109) that its records no longer give:
    a render reads the series, not the records, so they must agree."""
    out = []
    for i, rec in sorted(records.items()):
        p = run.points[i] if i < len(run.points) else None
        if p is None or p.series is None:
            continue
        if window_series(rec, concurrency=p.concurrency) != p.series:
            out.append(Finding("error", str(path), f"points[{i}].series does not match its per-request records",
                               f"restore the run file and {run.sidecar.file if run.sidecar else 'its sidecar'} "
                               f"from git; findings never edits them"))
    return out
