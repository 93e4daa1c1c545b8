"""`findings diff`: what a change to the results store does to the conclusions.

Compares the store as committed at a git revision (the *base*) with the store
in the working tree, and returns a short markdown summary for a pull-request
comment. Documented in docs/diff.md.

Both sides are derived with the same settings (the working tree's
findings.toml and overrides): the diff shows what the *data* changed. The base
store is read straight from git's object database (``git ls-tree`` and ``git
cat-file --batch``) into memory; nothing is written anywhere.

Default base (no ``base_ref``): the merge base of HEAD with ``main``, else with
``origin/main``, else ``HEAD~1``, else (a repository with one commit) HEAD.
"""

from __future__ import annotations

import os
import subprocess
from dataclasses import dataclass, replace
from pathlib import Path, PurePosixPath
from typing import Any, Sequence

from findings.core import aside, fmt
from findings.derive import regressions
from findings import store
from findings.derive.analysis import Cell, Comparison, cells
from findings.derive.derived import derive as derive_all
from findings.core.errors import FindingsError
from findings.derive.history import replay
from findings.core.model import Dataset, Run
from findings.store import check as storecheck
from findings.store.schema import SIDECAR_SUFFIX, seal_state
from findings.document import cache as rendercache
from findings.document.settings import Settings

#: Seconds any one git command may take.
GIT_TIMEOUT_S = 60.0
#: Branches whose merge base with HEAD is the default base, in order.
DEFAULT_BRANCHES = ("main", "origin/main")
#: Sub-bullets listed per new campaign before "and N more".
MAX_CHANGES_LISTED = 6

CellKey = tuple[str, str, str, int]  # (campaign, workload, config, C)


# ---------------------------------------------------------------- git

class _GitFailed(Exception):
    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


def _git(cwd: Path, *args: str, stdin: bytes | None = None) -> bytes:
    try:
        proc = subprocess.run(
            ["git", *args], cwd=cwd, input=stdin, capture_output=True, timeout=GIT_TIMEOUT_S, check=False,
            env={**os.environ, "GIT_TERMINAL_PROMPT": "0", "GIT_LITERAL_PATHSPECS": "1", "LC_ALL": "C"},
        )
    except FileNotFoundError:
        raise FindingsError("git is not installed (or not on PATH); findings diff needs it") from None
    except subprocess.TimeoutExpired:
        raise FindingsError(f"git {args[0]} took longer than {GIT_TIMEOUT_S:g} s; giving up") from None
    except OSError as exc:
        raise FindingsError(f"cannot run git: {exc.strerror or exc}") from None
    if proc.returncode != 0:
        lines = proc.stderr.decode("utf-8", "replace").strip().splitlines()
        raise _GitFailed(lines[-1] if lines else f"git {args[0]} exited with {proc.returncode}")
    return proc.stdout


def _commit(top: Path, rev: str) -> str | None:
    """The commit ``rev`` names, or None."""
    try:
        out = _git(top, "rev-parse", "--verify", "--quiet", f"{rev}^{{commit}}")
    except _GitFailed:
        return None
    sha = out.decode().strip()
    return sha or None


def _existing_ancestor(path: Path) -> Path:
    for folder in (path, *path.parents):
        if folder.is_dir():
            return folder
    return Path("/")


def _toplevel(store_path: Path) -> Path:
    where = _existing_ancestor(store_path)
    try:
        out = _git(where, "rev-parse", "--show-toplevel")
    except _GitFailed as exc:
        raise FindingsError(
            f"{where}: not inside a git repository ({exc.message}); findings diff compares git revisions"
        ) from None
    top = out.decode().strip()
    if not top:
        raise FindingsError(f"{where}: inside a bare git repository or .git folder; findings diff needs a work tree")
    return Path(top)


def _store_in_repo(top: Path, store_path: Path) -> str:
    """The store's path relative to the repository top, POSIX style ("." for the top itself)."""
    real_store = Path(os.path.realpath(store_path))
    real_top = Path(os.path.realpath(top))
    try:
        rel = real_store.relative_to(real_top)
    except ValueError:
        raise FindingsError(
            f"{store_path}: the store is not inside the git repository {top}; findings diff reads it from git"
        ) from None
    return rel.as_posix() or "."


@dataclass(frozen=True)
class Base:
    ref: str  # the revision as named ("HEAD~1", "origin/main", "main" for a merge base with main)
    commit: str
    merge_base: bool = False  # True: ``commit`` is the merge base of HEAD and ``ref``


def resolve_base(top: Path, base_ref: str | None) -> Base:
    """The revision to compare with (see the module docstring for the default)."""
    if base_ref is not None:
        ref = base_ref.strip()
        if not ref or ref.startswith("-"):
            raise FindingsError(f"not a git revision: {base_ref!r}")
        sha = _commit(top, ref)
        if sha is None:
            raise FindingsError(f"unknown git revision {ref!r} in {top}")
        return Base(ref, sha)
    head = _commit(top, "HEAD")
    if head is None:
        raise FindingsError(f"{top}: the repository has no commit yet; nothing to compare with")
    for branch in DEFAULT_BRANCHES:
        if _commit(top, branch) is None:
            continue
        try:
            merge_base = _git(top, "merge-base", "HEAD", branch).decode().strip()
        except _GitFailed:
            continue  # unrelated histories
        if merge_base:
            return Base(branch, merge_base, merge_base=True)
    parent = _commit(top, "HEAD~1")
    if parent is not None:
        return Base("HEAD~1", parent)
    return Base("HEAD", head)


def runs_at(top: Path, commit: str, store_rel: str, edited: list[str] | None = None) -> list[Run]:
    """The store's run files as of ``commit``, read from git into memory, as
    the render reads them (findings/document/cache.py): each point's
    per-request records parsed only where the derivation needs them (a
    point whose run file holds no series or no failed count), then left out
    but for what the validity counts read; every sidecar still checked
    against the sha256 its run file recorded.

    Nothing is written: ``findings diff`` works on a read-only checkout or a
    full disk. A store that did not exist at ``commit`` has no runs.
    ``edited``, when given, receives the names (``runs/NAME.json``) of the
    run files edited by hand since findings wrote them (their seal fails).
    """
    runs_rel = PurePosixPath(store_rel, store.RUNS) if store_rel != "." else PurePosixPath(store.RUNS)
    try:
        listing = _git(top, "ls-tree", "-r", "-z", "--full-tree", commit, "--", runs_rel.as_posix())
    except _GitFailed as exc:
        raise FindingsError(f"cannot list {runs_rel} at {commit[:12]}: {exc.message}") from None
    wanted: list[tuple[str, str]] = []  # (object id, file name)
    for entry in listing.split(b"\0"):
        if not entry:
            continue
        meta, _, raw_path = entry.partition(b"\t")
        mode, kind, oid = meta.decode().split(" ")
        path = PurePosixPath(raw_path.decode("utf-8", "surrogateescape"))
        if kind != "blob" or mode not in ("100644", "100755") or path.parent != runs_rel:
            continue
        if path.name.startswith(".") or not path.name.endswith((".json", SIDECAR_SUFFIX)):
            continue
        wanted.append((oid, path.name))
    if not wanted:
        return []
    try:
        out = _git(top, "cat-file", "--batch", stdin="".join(f"{oid}\n" for oid, _ in wanted).encode())
    except _GitFailed as exc:
        raise FindingsError(f"cannot read {runs_rel} at {commit[:12]}: {exc.message}") from None
    pos = 0
    runs: list[Run] = []
    bodies: dict[str, bytes] = {}
    for oid, name in wanted:
        end = out.index(b"\n", pos)
        header = out[pos:end].decode().split(" ")
        if len(header) != 3 or header[0] != oid:
            raise FindingsError(f"git cat-file: unexpected answer for {runs_rel}/{name} at {commit[:12]}")
        size = int(header[2])
        bodies[name] = out[end + 1:end + 1 + size]
        pos = end + 1 + size + 1  # the content is followed by a newline
    for name in sorted(bodies):  # file-name order, as store.load_runs reads them
        if not name.endswith(".json"):
            continue
        label = f"{commit[:12]}:{runs_rel}/{name}"
        if edited is not None and seal_state(bodies[name]) == "edited":
            edited.append(f"{store.RUNS}/{name}")
        run = store.parse_run(bodies[name], label, name[:-len(".json")])
        sidecar = run.sidecar
        if sidecar is not None:
            where = f"{commit[:12]}:{runs_rel}/{sidecar.file}"
            if sidecar.file not in bodies:
                raise FindingsError(f"{label}: its per-request records {where} are missing at that commit")
            side = bodies[sidecar.file]
            if store.wants_records(run, rendercache.needs_records):
                run = rendercache.derived_run(store.with_requests(
                    run, store.parse_sidecar(side, sidecar, run.run_id, label, where)))
            else:
                store.verify_sidecar(side, sidecar, label, where)
        runs.append(run)
    return runs


# ---------------------------------------------------------------- the two sides

@dataclass(frozen=True)
class Side:
    data: Dataset
    json: dict[str, Any]
    cells: dict[CellKey, Cell]
    tables: dict[CellKey, Comparison]
    #: Its run files edited by hand since findings wrote them (``runs/NAME.json``).
    edited: tuple[str, ...] = ()


def derive(data: Dataset, settings: Settings, edited: Sequence[str] = (),
           replay_aside: aside.Aside = aside.forked) -> Side:
    """One side of the diff: the one derivation of its store (its JSON is
    ``conclusions --json``'s), and its cells of every point, valid or not.
    ``replay_aside``: where the history's replay runs (D137; ``aside.inline``
    in a side derived aside itself)."""
    d = derive_all(data, settings.rules, aside=replay_aside)
    try:
        as_json = d.to_json()
    finally:
        d.close()
    return Side(
        edited=tuple(edited),
        data=data,
        json=as_json,
        cells={(c.campaign, c.workload, c.config, c.concurrency): c for c in cells(data)},
        tables={
            (campaign, workload, comp.a.config, comp.concurrency): comp
            for (campaign, workload), comps in d.comparisons().items()
            for comp in comps
        },
    )


def _label(top: Path, base: Base) -> str:
    short = base.commit[:7]
    try:
        short = _git(top, "rev-parse", "--short", base.commit).decode().strip() or short
    except _GitFailed:
        pass
    return f"{fmt.code(base.ref)} ({'merge base ' if base.merge_base else ''}{short})"


def diff_markdown(settings: Settings, base_ref: str | None = None, head_ref: str | None = None) -> str:
    """The markdown summary of what the working tree's store (or, with
    ``head_ref``, the store at that revision) changes against ``base_ref``.
    Both sides are derived with the working tree's settings."""
    top = _toplevel(settings.store)
    store_rel = _store_in_repo(top, settings.store)
    if head_ref is not None and base_ref is None:
        raise FindingsError("findings diff A B: name both revisions")
    base = resolve_base(top, base_ref)
    if head_ref is not None:
        # The head revision is read and derived in a forked process while
        # this one reads and derives the base (core/aside.py: where that
        # cannot be done, or fails there, it is done here instead, and any
        # error is raised here, after the base's, as before; D166).
        def head_side() -> tuple[Base, list[Run], list[str], Side | None]:
            head = resolve_base(top, head_ref)
            edited: list[str] = []
            runs = runs_at(top, head.commit, store_rel, edited)
            return head, runs, edited, (derive(store.merge(runs), settings, edited, aside.inline) if runs else None)

        pending = aside.forked(head_side)
        try:
            base_runs = runs_at(top, base.commit, store_rel)
            before = derive(store.merge(base_runs), settings)
            head, head_runs, head_edited, after = pending.result()
        finally:
            pending.close()
        if not base_runs and not head_runs:
            raise FindingsError(f"{store_rel}: no run files at {base.ref} nor at {head.ref}; "
                                f"check --store or findings.toml")
        if after is None:  # the store did not exist at the head
            after = derive(store.merge(head_runs), settings, head_edited)
        return summary(before, after, _label(top, base), settings, _label(top, head))
    base_runs = runs_at(top, base.commit, store_rel)
    before = derive(store.merge(base_runs), settings)
    if not base_runs or (settings.store / store.RUNS).is_dir():
        # As a render reads it (the render cache's points table, or two
        # processes), the records left out as runs_at leaves them out. Not a
        # store on either side: a typo'd --store, exit 2.
        data = rendercache.load(settings.store, rendercache.scan(settings.store))
    else:
        data = store.merge([])  # the change removes the store
    after = derive(data, settings, [f"{store.RUNS}/{p.name}" for p in storecheck.edited(settings.store)])
    return summary(before, after, _label(top, base), settings)


# ---------------------------------------------------------------- the summary

def _c_sorted(keys: set[str]) -> list[str]:
    return sorted(keys, key=lambda k: (int(k) if k.lstrip("-").isdigit() else 0, k))


def _policy(cand: dict[str, Any] | None) -> str:
    if cand is None:
        return "(not compared)"
    threshold = cand.get("threshold")
    return fmt.code(cand["policy"]) + (f" (threshold C={threshold})" if threshold is not None else "")


def _ratio(x: Any) -> str:
    return fmt.ratio(float(x)) if isinstance(x, (int, float)) else "—"


def _verdict(x: Any) -> str:
    return str(x) if isinstance(x, str) else "—"


def _workloads(side: Side) -> dict[str, Any]:
    w = side.json.get("workloads", {})
    return w if isinstance(w, dict) else {}


def _candidates(workload: dict[str, Any] | None) -> dict[str, Any]:
    if not workload:
        return {}
    c = workload.get("candidates", {})
    return c if isinstance(c, dict) else {}


def policies_section(before: Side, after: Side) -> list[str]:
    lines: list[str] = []
    wb, wa = _workloads(before), _workloads(after)
    for w in sorted(set(wb) | set(wa)):
        cb, ca = _candidates(wb.get(w)), _candidates(wa.get(w))
        for cfg in sorted(set(cb) | set(ca)):
            old, new = cb.get(cfg), ca.get(cfg)
            changed = old is None or new is None or (old["policy"], old.get("threshold")) != (
                new["policy"], new.get("threshold"))
            vb: dict[str, Any] = old.get("verdicts", {}) if old else {}
            va: dict[str, Any] = new.get("verdicts", {}) if new else {}
            rb: dict[str, Any] = old.get("ratios", {}) if old else {}
            ra: dict[str, Any] = new.get("ratios", {}) if new else {}
            flips = [c for c in _c_sorted(set(vb) | set(va)) if vb.get(c) != va.get(c)]
            if old is None or new is None:
                flips = []  # a candidate compared on one side only: every verdict is new or gone
            if not changed and not flips:
                continue
            head = f"- {fmt.code(w)} / {fmt.code(cfg)}: "
            if changed:
                head += f"{_policy(old)} → {_policy(new)}"
            else:
                head += f"policy unchanged ({_policy(new)}); verdicts flipped"
            lines.append(head)
            for c in flips:
                lines.append(
                    f"  - C={c}: {_verdict(vb.get(c))} → {_verdict(va.get(c))}, "
                    f"ratio {_ratio(rb.get(c))} → {_ratio(ra.get(c))}"
                )
            moved = new.get("baseline_moved") if new else None
            if isinstance(moved, str) and moved != (old or {}).get("baseline_moved"):
                lines.append(f"  - {fmt.text(moved)}")
    return lines


def _step_key(item: dict[str, Any]) -> tuple[str, ...]:
    return tuple(str(item.get(k)) for k in ("workload", "config", "previous_campaign", "campaign", "direction"))


def _facts(changed: Any) -> str:
    if not isinstance(changed, dict):
        return ""
    return regressions.describe_facts([(k, v[0], v[1]) for k, v in sorted(changed.items())
                                       if isinstance(v, list) and len(v) == 2])


def regressions_section(before: Side, after: Side) -> list[str]:
    """Steps found in the working tree that the base did not have."""
    old = {_step_key(x) for x in before.json.get("regressions", []) if isinstance(x, dict)}
    lines: list[str] = []
    for item in after.json.get("regressions", []):
        if not isinstance(item, dict) or _step_key(item) in old:
            continue
        cs = [int(c) for c in item.get("concurrency", [])]
        of = len(item.get("ratios", {})) or len(cs)
        facts = _facts(item.get("facts_changed"))
        lines.append(
            f"- {fmt.code(item['config'])} on {fmt.code(item['workload'])}: {item['direction']} "
            f"{fmt.pct(float(item['ratio']) - 1)} at {regressions.c_range(cs, of)}, "
            f"{fmt.code(item['previous_campaign'])} → {fmt.code(item['campaign'])}"
            + (f"; recorded: {fmt.text(facts)}" if facts else f"; {fmt.text(str(item.get('evidence', '')))}"))
    return lines


def _provenance_line(entry: dict[str, Any]) -> str | None:
    prov = entry.get("provenance")
    if not isinstance(prov, dict):
        return None
    parts = []
    for config, item in prov.items():
        if not isinstance(item, dict):
            continue
        facts = _facts(item.get("facts_changed"))
        if item.get("versus"):
            parts.append(f"{config} vs {item['versus']}: {facts or 'no recorded fact differs'}")
        elif facts:
            parts.append(f"{config}: {facts}")
    return "; ".join(parts) or None


def _best_label(b: dict[str, Any] | None) -> str:
    if not b:
        return "(none)"
    return f"{fmt.code(b['best'])} ({'beyond noise' if b.get('decisive') else 'within noise'})"


def _best_numbers(old: dict[str, Any] | None, new: dict[str, Any] | None) -> str:
    def one(b: dict[str, Any] | None) -> str:
        if not b:
            return "—"
        t = b.get("throughput_tok_s")
        tput = fmt.tput(float(t)) if isinstance(t, (int, float)) else "—"
        return f"{tput} tok/s at C={b.get('concurrency')}"
    return f"{one(old)} → {one(new)}"


def bests_section(before: Side, after: Side) -> list[str]:
    lines: list[str] = []
    wb, wa = _workloads(before), _workloads(after)
    for w in sorted(set(wb) | set(wa)):
        for regime in ("latency", "throughput"):
            old = (wb.get(w) or {}).get(regime)
            new = (wa.get(w) or {}).get(regime)
            key_old = (old["best"], bool(old.get("decisive"))) if old else None
            key_new = (new["best"], bool(new.get("decisive"))) if new else None
            if key_old == key_new:
                continue
            lines.append(
                f"- {fmt.code(w)} {regime}: {_best_label(old)} → {_best_label(new)}; {_best_numbers(old, new)}"
            )
    return lines


def _campaigns(side: Side) -> dict[str, dict[str, Any]]:
    history = side.json.get("history", [])
    return {str(e["campaign"]): e for e in history if isinstance(e, dict) and "campaign" in e}


def _points_per_campaign(side: Side) -> dict[str, int]:
    counts: dict[str, int] = {}
    for p in side.data.points:
        counts[p.campaign] = counts.get(p.campaign, 0) + 1
    return counts


def campaigns_section(before: Side, after: Side) -> list[str]:
    lines: list[str] = []
    old, new = _campaigns(before), _campaigns(after)
    counts_b, counts_a = _points_per_campaign(before), _points_per_campaign(after)
    for name, entry in new.items():  # replay order
        if name in old:
            continue
        date = entry.get("date")
        when = f", {date}" if date else ""
        changes = [str(c) for c in entry.get("changes", [])]
        what = f"changed {len(changes)} conclusion{'s' if len(changes) != 1 else ''}" if changes \
            else "changed no conclusion"
        n = counts_a.get(name, 0)
        lines.append(f"- {fmt.code(name)} ({n} point{'s' if n != 1 else ''}{when}): {what}")
        for text in changes[:MAX_CHANGES_LISTED]:
            lines.append(f"  - {fmt.text(text)}")
        if len(changes) > MAX_CHANGES_LISTED:
            lines.append(f"  - and {len(changes) - MAX_CHANGES_LISTED} more")
        facts = _provenance_line(entry) if changes else None
        if facts:
            lines.append(f"  - recorded facts: {fmt.text(facts)}")
    for name in new:
        if name in old and counts_a.get(name, 0) > counts_b.get(name, 0):
            extra = counts_a.get(name, 0) - counts_b.get(name, 0)
            lines.append(f"- {fmt.code(name)} (existing campaign): {extra} more point{'s' if extra != 1 else ''}")
    return lines


def store_edits_section(before: Side, after: Side) -> list[str]:
    """Removed campaigns, removed or rewritten run files: the store is append-only."""
    items: list[str] = []
    old, new = _campaigns(before), _campaigns(after)
    counts_b, counts_a = _points_per_campaign(before), _points_per_campaign(after)
    for name in old:
        if name not in new:
            n = counts_b.get(name, 0)
            items.append(f"removed campaign {fmt.code(name)} ({n} point{'s' if n != 1 else ''} at the base)")
        elif counts_a.get(name, 0) < counts_b.get(name, 0):
            items.append(f"campaign {fmt.code(name)} lost points: {counts_b.get(name, 0)} → {counts_a.get(name, 0)}")
    runs_b = {r.run_id: replace(r, path=None) for r in before.data.runs}
    runs_a = {r.run_id: replace(r, path=None) for r in after.data.runs}
    for run_id in sorted(runs_b):
        if run_id not in runs_a:
            items.append(f"removed run file {fmt.code(f'{store.RUNS}/{run_id}.json')}")
        elif runs_a[run_id] != runs_b[run_id]:
            items.append(f"rewritten run file {fmt.code(f'{store.RUNS}/{run_id}.json')}")
    if not items:
        return []
    return [
        "> [!WARNING]",
        "> **The store was edited, not appended to.** Run files are written once and never changed "
        "(docs/store.md); these changes rewrite history:",
        *(f"> - {item}" for item in items),
    ]


def _cell_name(key: CellKey) -> str:
    campaign, workload, config, conc = key
    return f"{fmt.code(campaign)} / {fmt.code(workload)} / {fmt.code(config)} C={conc}"


def numbers_section(before: Side, after: Side, settings: Settings) -> list[str]:
    lines: list[str] = []
    floor = settings.rules.noise_floor
    for key in sorted(set(before.cells) & set(after.cells)):
        old, new = before.cells[key], after.cells[key]
        if old.mean <= 0:
            moved = new.mean != old.mean
            delta = 0.0
        else:
            delta = new.mean / old.mean - 1
            moved = abs(delta) > floor
        if not moved:
            continue
        repeats = f", repeats {old.n} → {new.n}" if old.n != new.n else ""
        lines.append(
            f"- cell {_cell_name(key)}: {fmt.tput(old.mean)} → {fmt.tput(new.mean)} tok/s "
            f"({fmt.pct(delta)}, floor {fmt.band(floor)}){repeats}"
        )
    wb, wa = _workloads(before), _workloads(after)
    for w in sorted(set(wb) & set(wa)):
        cb, ca = _candidates(wb[w]), _candidates(wa[w])
        for cfg in sorted(set(cb) & set(ca)):
            vb, va = cb[cfg].get("verdicts", {}), ca[cfg].get("verdicts", {})
            rb, ra = cb[cfg].get("ratios", {}), ca[cfg].get("ratios", {})
            bands = ca[cfg].get("bands", {})
            for c in _c_sorted(set(rb) & set(ra)):
                if vb.get(c) != va.get(c):
                    continue  # listed with the policies
                band, r0, r1 = bands.get(c), rb[c], ra[c]
                if not all(isinstance(x, (int, float)) for x in (band, r0, r1)):
                    continue
                if abs(float(r1) - float(r0)) <= float(band):
                    continue
                lines.append(
                    f"- ratio {fmt.code(w)} / {fmt.code(cfg)} C={c}: {_ratio(rb[c])} → {_ratio(ra[c])} "
                    f"(band {fmt.band(float(band))}; verdict still {_verdict(va.get(c))})"
                )
    return lines


def tables_section(before: Side, after: Side) -> list[str]:
    """Verdicts in the per-campaign tables that changed (e.g. a new campaign widened the band)."""
    lines: list[str] = []
    for key in sorted(set(before.tables) & set(after.tables)):
        old, new = before.tables[key], after.tables[key]
        if old.verdict == new.verdict:
            continue
        lines.append(
            f"- {_cell_name(key)}: {old.verdict} → {new.verdict} "
            f"(ratio {fmt.ratio(old.ratio)} → {fmt.ratio(new.ratio)}, band {fmt.band(old.band)} → {fmt.band(new.band)})"
        )
    return lines


def _size(side: Side) -> str:
    nc, npts = len(side.data.campaigns), len(side.data.points)
    return f"{nc} campaign{'s' if nc != 1 else ''}, {npts} point{'s' if npts != 1 else ''}"


def _edited_line(side: Side, label: str) -> str | None:
    """One line when run files of ``side`` were edited by hand (D94), else None."""
    n = len(side.edited)
    if not n:
        return None
    names = ", ".join(fmt.code(e) for e in side.edited[:3]) + (f" and {n - 3} more" if n > 3 else "")
    return (f"> **Warning: the store was edited by hand** ({label}): {'1 run file' if n == 1 else f'{n} run files'} "
            f"({names}) no longer match{'es' if n == 1 else ''} what findings wrote; `findings store check` says "
            f"what changed and how to repair it.")


def summary(before: Side, after: Side, base_label: str, settings: Settings, head_label: str = "working tree") -> str:
    """The markdown summary of two derived sides; deterministic. Nothing
    changed: one line."""
    out = [f"### findings diff: {base_label} → {head_label}", ""]
    sections = [
        ("", store_edits_section(before, after)),
        ("**Regressions and improvements (new)**", regressions_section(before, after)),
        ("**Policies changed**", policies_section(before, after)),
        ("**Bests changed**", bests_section(before, after)),
        ("**New campaigns**", campaigns_section(before, after)),
        (f"**Numbers that moved beyond noise** (floor {fmt.band(settings.rules.noise_floor)}, or a ratio "
         "beyond its band)", numbers_section(before, after, settings)),
        ("**Campaign tables re-judged**", tables_section(before, after)),
    ]
    flag = _edited_line(after, head_label)
    if not any(lines for _, lines in sections):
        at = "" if head_label == "working tree" else f" at {head_label}"
        return f"findings diff: no change{at} against {base_label} ({_size(after)}).\n" + \
            (f"{flag}\n" if flag else "")
    out.append(f"Store: {_size(before)} → {_size(after)}.")
    if flag:
        out += ["", flag]
    for title, lines in sections:
        if not lines:
            continue
        out.append("")
        if title:
            out.append(title)
            out.append("")
        out.extend(lines)
    return "\n".join(out) + "\n"
