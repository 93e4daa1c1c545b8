"""The findings document and the conclusions: store in, text out."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterator

from findings import store
from findings.core import aside, diskio, fmt, heap
from findings.core.errors import FindingsError
from findings.core.model import THROUGHPUT, Dataset
from findings.derive import caveats, regressions
from findings.derive import openloop as load_verdicts
from findings.derive.analysis import SIMULATED_SUFFIX
from findings.derive.derived import Derived, derive
from findings.document import cache as rendercache
from findings.document.settings import Settings

# The document's modules (numpy through the open-loop and pivot tables,
# jinja2 through the renderer) and the decisions are imported by the
# functions that build or decide, not here: a render the cache answers, and
# every other command's start, skip them (D161).

if TYPE_CHECKING:  # the bench package imports aiohttp: kept off the render path
    from findings.bench.matrix import Matrix


def _top(settings: Settings) -> Path:
    """The repository the settings live in (the nearest folder with .git at
    or above them), else the settings' folder: where rendered commands run."""
    for folder in (settings.root, *settings.root.parents):
        if (folder / ".git").exists():
            return folder
    return settings.root


def _rel(path: Path, top: Path) -> str:
    try:
        return str(Path(os.path.relpath(path.resolve(), top)))
    except ValueError:
        return str(path)


def _label(settings: Settings) -> str:
    """The store, as a path from the repository root."""
    return _rel(settings.store, _top(settings))


def _cli(settings: Settings) -> str:
    """``findings`` with the options that make a command in the document
    valid when pasted at the repository root: --settings unless it is the
    root's own findings.toml, and --store."""
    import shlex
    top = _top(settings)
    parts = ["findings"]
    if settings.file is not None and settings.file != (top / "findings.toml").resolve():
        parts += ["--settings", shlex.quote(_rel(settings.file, top))]
    return " ".join(parts + ["--store", shlex.quote(_label(settings))])


def _plots_dir(settings: Settings, document: Path) -> Path:
    return document.parent / f"{document.stem}-plots"


def settle() -> None:
    """What a command leaves to finish before it ends: the render cache's
    points table, written aside (D168)."""
    rendercache.settle()


def derived(settings: Settings, found: rendercache.Scan | None = None) -> Derived:
    """The one derivation of the settings' store (findings/derive/derived.py),
    its runs from the render cache. The history is replayed only if asked
    for (deploy, plan and the text conclusions never do), so the cache's
    replay state is not read here; a command that reads the history takes
    ``with_history``."""
    found = found if found is not None else rendercache.scan(settings.store)
    data = rendercache.load(settings.store, found)
    heap.large_blocks_apart()  # from the derivation on (D177)
    # millions of new objects, no cycles: a third of the time at 100k points
    with store.quiet_gc(), rendercache.intervals(found, keep=False):
        return _derive(settings, found, data)


def _derive(settings: Settings, found: rendercache.Scan, data: Dataset, **kwargs: Any) -> Derived:
    """``derive``, each campaign's flags, counts and cells taken from the
    render cache where it kept them, and those derived here kept (D174);
    likewise the moves, resumed from those kept (D175)."""
    given = rendercache.get_slices(found, data, settings.rules)
    moves = rendercache.get_moves(found)
    d = derive(data, settings.rules, slices=given, moves_cache=moves, **kwargs)
    try:
        rendercache.put_slices(found, given)
        rendercache.put_moves(found, moves)
    except BaseException:
        d.close()
        raise
    return d


@contextlib.contextmanager
def with_history(settings: Settings, found: rendercache.Scan | None = None) -> Iterator[Derived]:
    """``derived``, for a command that reads the history: its replay runs
    aside from the moment the moves are known, while the rest is derived and
    the command reads it (D137), resumed from the render cache, whose state
    is written back once the command has read the history."""
    found = found if found is not None else rendercache.scan(settings.store)
    data = rendercache.load(settings.store, found)
    heap.large_blocks_apart()  # from the derivation on (D177)
    with store.quiet_gc(), rendercache.intervals(found):
        cache = rendercache.get_history(found)  # (at a million points, 0.4 s less with the collector off)
        d = _derive(settings, found, data, history_cache=cache, aside=aside.forked)
        try:
            yield d
        finally:
            d.close()
    if d.replayed.known:
        rendercache.put_history(found, cache)


def _build(settings: Settings, document: Path) -> tuple[str, dict[str, Any]]:
    """The document text, and the plots it links to (file name -> chart data):
    from the render cache (findings/document/cache.py) when nothing it depends
    on changed."""
    from findings.store import amend
    found = rendercache.scan(settings.store)
    acts = [a.line() for a in amend.amendments(settings.store)]  # the methodology lists them
    slot = f"{document}|{settings.template}"
    key = rendercache.document_key(found, settings.templates, settings, str(document), acts)
    hit = rendercache.get_document(found, slot, key)
    if hit is not None:
        return hit  # type: ignore[no-any-return]
    with with_history(settings, found) as d:
        built = _document(settings, document, d, acts, tuple(f"{store.RUNS}/{n}" for n in found.edited),
                          rendercache.compiled_templates(found))
    rendercache.put_document(found, slot, key, built)
    return built


def _document(settings: Settings, document: Path, d: Derived, acts: list[str],
              edited: tuple[str, ...] = (), compiled: Path | None = None) -> tuple[str, dict[str, Any]]:
    """``compiled``: where the templates' compiled code is kept (the render
    cache's, D140), or None: compiled afresh."""
    from findings.decide import decide
    from findings.document import pivot, render, report
    if not d.data.points:
        raise FindingsError(f"{settings.store}: the store holds no points; ingest some first")
    doc = report.build(d, decide(d), settings.title, _label(settings), settings.slo,
                       settings.detail_campaigns, acts, _cli(settings), edited)
    plots: dict[str, Any] = {}
    if settings.plots:
        from findings.document.plots import file_name
        folder = _plots_dir(settings, document).name
        for c in doc["campaigns"]:
            for w in c["workloads"]:
                if w["chart"]:
                    name = file_name(c["name"], w["name"])
                    w["chart"]["svg"] = f"{folder}/{name}"
                    plots[name] = w["chart"]
    functions = {**pivot.template_functions(d.data), **report.template_functions(d)}
    return render.render(settings.templates, settings.template, doc, functions, compiled), plots


def render_text(settings: Settings) -> str:
    return _build(settings, settings.document)[0]


def _write_plots(settings: Settings, document: Path, plots: dict[str, Any]) -> None:
    from findings.document.plots import throughput_svg
    folder = _plots_dir(settings, document)
    done = 0
    for name, chart in sorted(plots.items()):
        try:
            throughput_svg(folder / name, chart["title"], chart["xs"], chart["all_series"])
        except diskio.DiskError as exc:
            raise exc.with_outcome(f"{done} of {len(plots)} plots written to {folder}; "
                                   f"the document {document} was not changed") from None
        done += 1


@dataclass(frozen=True)
class Rendered:
    path: Path
    changed: bool
    diff: str = ""
    #: ``--output -``: the document itself, for standard output (nothing written).
    text: str | None = None


def render_document(settings: Settings, output: str | None = None, check: bool = False) -> Rendered:
    """Write the document, or with ``check`` compare it with the file on disk."""
    if output == "-":
        return Rendered(Path("-"), changed=True, text=render_text(settings))
    path = Path(output) if output else settings.document
    text, plots = _build(settings, path)
    try:
        old = path.read_text(encoding="utf-8") if path.exists() else None
    except OSError as exc:
        raise FindingsError(f"{path}: cannot read: {exc.strerror}") from exc
    if check:
        if old == text:
            return Rendered(path, changed=False)
        from findings.document import render
        diff = render.short_diff(old or "", text, str(path)) if old is not None else f"{path} does not exist"
        return Rendered(path, changed=True, diff=diff)
    if plots:
        _write_plots(settings, path, plots)
    if old == text:
        return Rendered(path, changed=False)
    try:
        _write_atomic(path, text)
    except diskio.DiskError as exc:
        also = f" ({len(plots)} plots were written to {_plots_dir(settings, path)})" if plots else ""
        raise exc.with_outcome(f"the document was not changed{also}") from None
    return Rendered(path, changed=True)


def conclusions(settings: Settings) -> dict[str, Any]:
    with with_history(settings) as d:
        return d.to_json()


def conclusions_json(settings: Settings) -> str:
    return json.dumps(conclusions(settings), indent=2, ensure_ascii=False)


def conclusions_text(settings: Settings) -> str:
    """The conclusions as short plain text for a terminal."""
    from findings.document.prose import latency, policy, throughput
    d = derived(settings)
    data, flags, done = d.data, d.flags, d.concluded
    result = done.conclusions
    if not data.points:
        return "no points in the store"
    if not result.workloads:
        loops = sum(1 for p in data.points if load_verdicts.open_loop(p) is not None)
        latencies_only = sum(1 for p in data.points if THROUGHPUT not in p.metrics and p.id not in flags)
        why = [f"{loops} open-loop points (judged by request rate, below)"
               if loops else "", f"{latencies_only} with latencies only (throughput unknown)" if latencies_only else "",
               f"{len(flags)} flagged" if flags else ""]
        return "\n".join([f"{len(data.points)} points in the store, no closed-loop comparison"
                          + (": " + "; ".join(w for w in why if w) if any(why) else ""), *_open_loop_lines(d)])
    unknown = d.failures_unknown
    lines = [f"baseline: {settings.rules.baseline}; noise floor {fmt.band(settings.rules.noise_floor)}; "
             f"{len(flags)} of {len(data.points)} points flagged (left out), "
             f"{len(unknown)} with failures not recorded (unknown, still used)"]
    for wc in result.workloads:
        lines.append("")
        lines.append(f"workload {wc.workload}")
        lines.append(f"  latency:    {_plain(latency(wc))}")
        lines.append(f"  throughput: {_plain(throughput(wc))}")
        for cand in wc.candidates:
            why = sorted({r for c in cand.comparisons for r in d.caveats_of(c)})
            mark = f" [{caveats.MARK} measured {caveats.describe(why)}: not a deployment fact]" if why else ""
            lines.append(f"  policy      {_plain(policy(cand))}{mark}")
            moved = done.baseline_moved.get(wc.workload, {}).get(cand.config)
            if moved:
                lines.append(f"  note        {moved.sentence()}")
        for m in done.suspect:
            if m.workload == wc.workload:
                lines.append(f"  suspect     {regressions.suspect_sentence(m)}")
        for m in done.steps:
            if m.workload == wc.workload:
                facts = f"; {regressions.describe_facts(m.facts_changed)}" if m.facts_changed else ""
                lines.append(f"  {m.kind:<11} {m.config}: {fmt.pct(m.ratio - 1)} at "
                             f"{regressions.c_range(list(m.concurrency), len(m.ratios))}, "
                             f"{m.previous_campaign} → {m.campaign}{facts}")
    return "\n".join(lines + _open_loop_lines(d))


def _open_loop_lines(d: Derived) -> list[str]:
    """The open-loop workloads (judged by request rate), as the document's
    open-loop section says them: each candidate's policy, what each config
    sustains under the SLO, and the replay's verdicts."""
    from findings.document import openloop as present
    lines: list[str] = []
    for oc in d.open_loop:
        lines.append("")
        rates = ", ".join(f"{r:g}" for r in oc.rates)
        lines.append(f"workload {oc.workload} (open loop, {oc.mode}" + (f"; rates {rates} req/s)" if rates else ")"))
        for cand in oc.candidates:
            lines.append(f"  policy      {_plain(present.policy_sentence(cand))}")
        target = oc.slo.get("slo_attainment")
        for sus in oc.sustained:
            lines.append(f"  sustained   {_plain(present.sustained_sentence(sus, target))}")
        if oc.replay_best is not None:
            lines.append(f"  replay      best over the replay: {oc.replay_best}")
        for config in (r.config for r in oc.replays):
            said = present.versus_all(oc, config)
            if said:
                lines.append(f"  replay      {_plain(said)}")
    return lines


def _plain(markdown: str) -> str:
    return markdown.replace("**", "").replace("`", "")


def deploy(settings: Settings, *, workload: str | None = None, config: str | None = None, engine: str = "all",
           out: Path | None = None, as_json: bool = False, steps: int | None = None,
           draft_model: str | None = None, device: str | None = None) -> str:
    """``findings deploy``: the engine settings of every derived policy; the
    SGLang adaptive files are written under ``out`` (atomically)."""
    from findings.decide import deploy as deploy_lib
    d = derived(settings)
    data, conclusions_, open_loop = d.data, d.conclusions, d.open_loop
    engines = deploy_lib.ENGINES if engine == "all" else (engine,)
    shown = str(out) if out is not None else ""
    plans = deploy_lib.plan(data, conclusions_, workload=workload, config=config, engines=engines, steps=steps,
                            draft_model=draft_model, adaptive_dir=shown, device=device, open_loop=open_loop,
                            points=d.points)
    known = {w.workload for w in conclusions_.workloads} | {o.workload for o in open_loop}
    if workload is not None and workload not in known:
        raise FindingsError(f"--workload {workload!r}: no such workload (known: {', '.join(sorted(known)) or 'none'})")
    if config is not None and not plans:
        raise FindingsError(f"--config {config!r}: not a candidate of {'that workload' if workload else 'any workload'}")
    if out is not None:
        files = [(Path(e.file), e.config) for d in plans for e in d.engines
                 if e.config is not None and e.file is not None and e.engine == "sglang"]
        for i, (path, config_) in enumerate(files):
            try:
                _write_atomic(path, json.dumps(config_, indent=2) + "\n")
            except diskio.DiskError as exc:
                done = ", ".join(str(p) for p, _ in files[:i]) or "none"
                raise exc.with_outcome(f"{i} of {len(files)} adaptive files written ({done}); "
                                       f"no settings printed") from None
    if as_json:
        return json.dumps(deploy_lib.to_json(plans), indent=2, ensure_ascii=False)
    return deploy_lib.text(plans, written=out is not None)


def _write_atomic(path: Path, text: str) -> None:
    diskio.write_replace(path, text)


def _recorded_matrix(settings: Settings, data: Dataset, configs: set[str]) -> tuple[Path | None, str]:
    """The matrix file that measured ``configs`` most recently, as recorded
    in the store (path and sha256), if it is still there unchanged; else
    None and why."""
    rank = {c.name: i for i, c in enumerate(data.campaigns)}
    best: tuple[int, Any] | None = None
    for run in data.runs:
        m = next((i for i in run.extra_inputs if i.role == "matrix"), None)
        if m is None or not any(p.config in configs for p in run.points):
            continue
        r = max((rank.get(c.name, -1) for c in run.campaigns), default=-1)
        if best is None or r > best[0]:
            best = (r, m)
    if best is None:
        return None, ("no run of these configs records the matrix (or the `bench --url` options) that measured "
                      "it (an import): pass --from-matrix")
    m = best[1]
    for candidate in (Path(m.path), settings.root / m.path, Path.cwd() / m.path):
        if candidate.is_file():
            if hashlib.sha256(candidate.read_bytes()).hexdigest() != m.sha256:
                return None, (f"{m.path} changed since it measured these configs (sha256 differs): "
                              f"pass --from-matrix to use it anyway, or another")
            return candidate, ""
    return None, f"{m.path}, the matrix that measured these configs, is not there: pass --from-matrix"


#: What a plan's matrix built from ``findings bench --url`` runs names as its source.
ATTACH_SOURCE = "the options of the `findings bench --url` runs that measured these configs"


def _recorded_attach(data: Dataset, configs: set[str]) -> Matrix | None:
    """A Matrix of the configs measured by ``findings bench --url``, from the
    matrix each such run records (provenance ``bench_matrix``): for each
    config, its latest run's; None when no run of these configs records one."""
    from findings.bench.matrix import Matrix, parse
    rank = {c.name: i for i, c in enumerate(data.campaigns)}
    latest: dict[str, tuple[int, str, str]] = {}
    for run in data.runs:
        text = run.provenance.get("bench_matrix")
        if not isinstance(text, str):
            continue
        r = max((rank.get(c.name, -1) for c in run.campaigns), default=-1)
        for p in run.points:
            if p.config in configs and (p.config not in latest or r >= latest[p.config][0]):
                latest[p.config] = (r, run.run_id, text)
    if not latest:
        return None
    parsed = [parse(f"the options recorded by run {rid}", text) for _, rid, text in
              sorted(set(latest.values()))]
    return Matrix(path=ATTACH_SOURCE,
                  configs={k: v for m in parsed for k, v in m.configs.items() if k in latest},
                  workloads={k: v for m in parsed for k, v in m.workloads.items()},
                  campaigns=tuple(c for m in parsed for c in m.campaigns))


def plan(settings: Settings, *, workload: str | None = None, config: str | None = None, kind: str | None = None,
         budget_minutes: float | None = None, output: str | None = None, from_matrix: str | None = None,
         as_json: bool = False) -> str:
    """``findings plan``: the open questions, the estimate, and the matrix that answers them."""
    from findings.decide import plan as plan_lib
    d = derived(settings)
    data, done = d.data, d.concluded
    known = {w.workload for w in done.conclusions.workloads}
    if workload is not None and workload not in known and f"{workload}{SIMULATED_SUFFIX}" not in known:
        raise FindingsError(f"--workload {workload!r}: no such workload (known: {', '.join(sorted(known)) or 'none'})")
    qs = [q for q in plan_lib.questions(data, settings.rules, done)
          if plan_lib.keep(q, workload, config, kind)]
    source = None
    why_not = "no open question" if not qs else ""
    if qs:
        if from_matrix is not None:
            path: Path | None = Path(from_matrix)
        else:
            path, why_not = _recorded_matrix(settings, data, {c for q in qs for c in q.configs})
        if path is not None:
            from findings.bench.matrix import parse
            try:
                text = path.read_text(encoding="utf-8")
            except OSError as exc:
                raise FindingsError(f"{path}: cannot read: {diskio.cause(exc)}") from None
            source = parse(str(path), text)
        elif from_matrix is None:
            source = _recorded_attach(data, {c for q in qs for c in q.configs})
            if source is not None:
                why_not = ""
    qs = plan_lib.estimate(qs, data, source.workloads if source else {})
    result = plan_lib.within_budget(qs, budget_minutes)
    matrix = None
    if source is not None and result.questions:
        header = (f"findings plan: {len(result.questions)} open question(s) of the store {_label(settings)}, "
                  f"most decisive first,\nwith the configs and workloads of {source.path}.\n"
                  f"Run: {_cli(settings)} bench THIS-FILE"
                  f"{' --until-decided' if any(q.kind == 'undecided' for q in result.questions) else ''}")
        try:
            matrix = plan_lib.matrix_toml(result, source, header)
        except KeyError as exc:
            why_not = f"{source.path} has no {exc.args[0]}: pass --from-matrix with a matrix that has them"
    if output is not None:
        if matrix is None:
            raise FindingsError(f"--output {output}: no matrix to write: {why_not or 'nothing to measure'}")
        diskio.write_replace(Path(output), matrix)
    if as_json:
        return json.dumps(plan_lib.to_json(result, matrix, why_not or None), indent=2, ensure_ascii=False)
    return _plan_text(result, matrix, output, why_not, plan_lib)


def _plan_text(result: Any, matrix: str | None, output: str | None, why_not: str, plan_lib: Any) -> str:
    if not result.questions:
        return "no open question: nothing to measure" + (
            f" within the budget ({len(result.left_out)} left out)" if result.left_out else "")
    reqs = "unknown" if result.requests is None else str(result.requests)
    mins = "unknown (the store records no durations)" if result.minutes is None else f"{result.minutes:g}"
    lines = [f"{len(result.questions)} open question(s), most decisive first; estimate: {reqs} requests, "
             f"{mins} minutes of measurement (server start-up not included)"]
    lines += [f"- {plan_lib.line(q)}" for q in result.questions]
    lines += [f"left out for the budget: {plan_lib.line(q)}" for q in result.left_out]
    lines += [f"note: {n}" for n in result.notes]
    if output is not None:
        lines.append(f"matrix written to {output}")
    elif matrix is None:
        lines.append(f"no matrix: {why_not}")
    else:
        lines.append("matrix: pass --output FILE to write it")
    return "\n".join(lines)
