"""The document's content as plain data: prose, tables and facts. Pure.

``build`` takes the dataset and rules and returns a dict that the templates
only format. Table cells are raw strings; the renderer escapes them.
"""

from __future__ import annotations

import json
import re
import shlex
from dataclasses import dataclass, replace
from itertools import compress
from operator import attrgetter
from typing import Any, Iterable, Iterator, Mapping, Sequence

from findings.core import fmt
from findings.core.model import THROUGHPUT, Dataset, Point, Run, Scalar
from findings.decide import Decided, deploy, plan
from findings.derive import caveats, categories, regressions, tuning
from findings.derive import openloop as load_verdicts
from findings.derive.analysis import Cell, Comparison, Conclusions, Rules, analysis_workload
from findings.derive.stats import by_rank
from findings.derive.derived import Derived
from findings.derive.history import Entry
from findings.derive.validity import Counts
from findings.document import openloop as load_present
from findings.document import prose, views


@dataclass(frozen=True)
class Table:
    headers: tuple[str, ...]
    rows: tuple[tuple[str, ...], ...]
    align: tuple[str, ...]
    #: The cells are markdown already, escaped where they hold data (a link
    #: to a Deploy block); the renderer escapes only the headers.
    markdown: bool = False


def _ranges(lines: list[int]) -> str:
    """[2, 3, 4, 7] -> "2–4, 7"."""
    spans: list[list[int]] = []
    for n in sorted(set(lines)):
        if spans and n == spans[-1][1] + 1:
            spans[-1][1] = n
        else:
            spans.append([n, n])
    return ", ".join(str(a) if a == b else f"{a}–{b}" for a, b in spans)


def _scalar(v: Scalar) -> str:
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, float):
        return f"{v:g}"
    return "" if v is None else str(v)


_point_id, _CAMPAIGN, _CONFIG = attrgetter("id"), attrgetter("campaign"), attrgetter("config")
_ALL_FAILED = attrgetter("all_failed")


class _Numbered(Mapping[str, str]):
    """point id -> ``P<n>``, made when asked for (a store of a million points
    cites a few hundred)."""

    def __init__(self, labels: Labels) -> None:
        self._labels = labels

    def __getitem__(self, point_id: str) -> str:
        return f"P{self._labels.place(point_id)}"

    def __iter__(self) -> Iterator[str]:
        return map(_point_id, self._labels.points)

    def __len__(self) -> int:
        return len(self._labels.all)


class Labels:
    """Short, stable labels P1, P2, ... for points, in document order (``key``),
    so that every number can be traced to the appendix and from there to the
    store.

    A point's number is how many points the campaigns before its own hold,
    then its place among its campaign's: each campaign's points are put in
    order when one of them is first labelled. A store of a million points
    cites a few hundred, from a few campaigns; putting all of them in order
    took 0.46 s there, and more in a render, whose every point id it touched
    after the history's fork (D171)."""

    def __init__(self, data: Dataset, rules: Rules, points: Mapping[str, Point]) -> None:
        self._rank = rank = {c.name: i for i, c in enumerate(data.campaigns)}
        self._baseline = rules.baseline
        self.all = data.points
        self._by_id = points
        #: The points' places in ``all``, campaign by campaign (stably), and
        #: rank -> where its points are in it: the first is the number of
        #: points of the campaigns before it (an array: at a million points
        #: 8 MB, not 38 MiB of ints, held while the document is built, D177).
        self._order, self._spans = by_rank(map(rank.__getitem__, map(_CAMPAIGN, data.points)), len(data.points))
        #: point id -> its number (its place in document order, from 1), campaign by campaign.
        self._place: dict[str, int] = {}
        self.of: Mapping[str, str] = _Numbered(self)
        #: The point ids the document cites, for an appendix of only those.
        self.cited: set[str] = set()

    def key(self, p: Point) -> tuple[Any, ...]:
        """A point's place in document order: campaign, workload, the baseline
        first, config, C, id."""
        return (self._rank[p.campaign], analysis_workload(p.workload, p.simulated), p.config != self._baseline,
                p.config, p.concurrency, p.id)

    def place(self, point_id: str) -> int:
        """The point's number (KeyError for a point not in the data)."""
        found = self._place.get(point_id)
        if found is None:
            lo, hi = self._spans[self._rank[self._by_id[point_id].campaign]]
            everyone = self.all
            mine = sorted((everyone[i] for i in self._order[lo:hi]), key=self.key)
            self._place.update(zip(map(_point_id, mine), range(lo + 1, hi + 1)))
            found = self._place[point_id]
        return found

    @property
    def points(self) -> list[Point]:
        """Every point, in document order (each one numbered)."""
        ordered = sorted(self.all, key=self.key)
        self._place = dict(zip(map(_point_id, ordered), range(1, len(ordered) + 1)))
        return ordered

    def in_order(self, ids: Iterable[str], points: Mapping[str, Point]) -> list[Point]:
        """The points of ``ids`` that are in the document (``points``: by id), in document order."""
        return sorted((points[i] for i in ids if i in points), key=self.key)

    def label(self, point_id: str) -> str:
        self.cited.add(point_id)
        return self.of[point_id]

    def cell(self, ids: tuple[str, ...]) -> str:
        self.cited.update(ids)
        nums = sorted(map(self.place, ids))
        if len(nums) > 2 and nums[-1] - nums[0] == len(nums) - 1:
            return f"P{nums[0]}–P{nums[-1]}"
        return ", ".join(f"P{n}" for n in nums)


class Marks:
    """Why verdicts are not deployment facts (caveats.py): per comparison,
    from the points on both sides; empty for configs that do not speculate."""

    def __init__(self, derived: Derived) -> None:
        self.derived = derived
        self.spec = derived.speculative
        self.seen: set[str] = set()  # every reason marked anywhere in the document

    def reasons(self, comp: Comparison) -> tuple[str, ...]:
        found = self.derived.caveats_of(comp)
        self.seen.update(found)
        return found

    def cell(self, comp: Comparison) -> str:
        """A verdict cell, with the mark when it applies."""
        return prose.verdict_cell(comp) + (f" {caveats.MARK}" if self.reasons(comp) else "")


def _verdict_table(conclusions: Conclusions, workload: str, labels: Labels, marks: Marks,
                   hidden: frozenset[str] = frozenset()) -> Table | None:
    """``hidden``: candidates left out (a tune's trials other than its best)."""
    wc = conclusions.workload(workload)
    cands = [c for c in wc.candidates if c.config not in hidden] if wc is not None else []
    if wc is None or not cands:
        return None
    headers = ("C",) + tuple(f"{c.config} vs {conclusions.rules.baseline}" for c in cands)
    rows = []
    for conc in wc.concurrencies:
        row = [str(conc)]
        for cand in cands:
            comp = next((c for c in cand.comparisons if c.concurrency == conc), None)
            row.append(f"{marks.cell(comp)} ({comp.a.campaign}: {labels.cell(comp.a.point_ids)} vs "
                       f"{labels.cell(comp.b.point_ids)})" if comp else "—")
        rows.append(tuple(row))
    return Table(headers, tuple(rows), ("right",) + ("left",) * len(cands))


#: Marks a throughput whose source does not record how many requests failed.
UNKNOWN_FAILURES = "†"


def _campaign_table(rules: Rules, pts: list[Point], mine: list[Cell], comps: list[Comparison],
                    flags: dict[str, tuple[str, ...]], labels: Labels, marks: Marks,
                    n_of: Mapping[str, Counts], vs: list[views.CellView], spec: set[str]) -> Table:
    """One campaign's table for one workload, a row per config and C it
    measured: throughput, the verdict against the baseline and, where the
    points record them, the latency views (TTFT, TPOT, tokens/s per user,
    accept length, the Pareto front of the workload), with the points.
    ``pts``: its points, ``mine``: its valid cells, ``vs``: their views."""
    configs = sorted({p.config for p in pts}, key=lambda n: (n != rules.baseline, n))
    concs = sorted({p.concurrency for p in pts})
    by = {(c.config, c.concurrency): c for c in mine}
    at: dict[tuple[str, int], list[Point]] = {}
    for p in pts:
        at.setdefault((p.config, p.concurrency), []).append(p)
    by_comp = {(x.a.config, x.concurrency): x for x in comps}
    compared = any(x.a.config != rules.baseline for x in comps)
    view = {(v.config, v.concurrency): v for v in vs}
    latency = views.has_latency(vs)
    front = views.pareto(vs) if latency else set()

    def ms(v: views.CellView | None, key: str) -> str:
        x = v.get(key) if v is not None else None
        return "—" if x is None else f"{x:.1f}"

    rows = []
    for conc in concs:
        for n in configs:
            here = at.get((n, conc), [])
            if not here:
                continue
            cell = by.get((n, conc))
            bad = [p for p in here if p.id in flags]
            mark = f" ⚠ {len(bad)} flagged" if bad else ""
            if cell is not None and any(n_of[p.id].failures_unknown for p in here if p.id in cell.point_ids):
                mark = f" {UNKNOWN_FAILURES}{mark}"
            if cell is None:
                failed = all(n_of[p.id].all_failed for p in here)
                tput = f"{'n/a, all failed' if failed else '—'}{mark}"
            elif cell.n > 1:
                tput = f"{fmt.tput(cell.mean)} (n={cell.n}, range {cell.spread * 100:.1f}%){mark}"
            else:
                tput = f"{fmt.tput(cell.mean)}{mark}"
            row = [str(conc), n, tput]
            if compared:
                comp = by_comp.get((n, conc))
                row.append("" if n == rules.baseline else marks.cell(comp) if comp else "—")
            if latency:
                v = view.get((n, conc))
                # Per-request verify counts where the server sends them (SGLang), else
                # the point's own /metrics window (llama.cpp's spec_decode counters).
                acc = v.get("accept_length") if v is not None else None
                if acc is None and v is not None:
                    acc = v.get("accept_length_metrics")
                row += ["—" if v is None or v.per_user is None else fmt.tput(v.per_user),
                        f"{ms(v, 'median_ttft_ms')} / {ms(v, 'p99_ttft_ms')}",
                        f"{ms(v, 'median_tpot_ms')} / {ms(v, 'p99_tpot_ms')}",
                        f"{acc:.2f}" if acc is not None else ("—" if n in spec else ""),
                        "yes" if (n, conc) in front else ""]
            row.append(labels.cell(tuple(p.id for p in here)))
            rows.append(tuple(row))
    headers = ["C", "config", "tok/s"] + ([f"vs {rules.baseline}"] if compared else [])
    align = ["right", "left", "right"] + (["left"] if compared else [])
    if latency:
        headers += ["tok/s per user", "TTFT p50 / p99 ms", "TPOT p50 / p99 ms", "accept length", "Pareto"]
        align += ["right", "right", "right", "right", "left"]
    return Table(tuple(headers + ["points"]), tuple(rows), tuple(align + ["left"]))


def _chart(campaign: str, workload: str, mine: list[Cell], rules: Rules) -> dict[str, Any] | None:
    """``mine``: the valid cells of this campaign and workload."""
    xs = sorted({c.concurrency for c in mine})
    if len(xs) < 2:
        return None
    by = {(c.config, c.concurrency): c.mean for c in mine}
    configs = sorted({c.config for c in mine}, key=lambda n: (n != rules.baseline, n))
    plotted = [n for n in configs if all((n, x) in by for x in xs)]
    if not plotted:
        return None
    series = [(n, [by[(n, x)] for x in xs]) for n in plotted]
    return {
        "block": views.mermaid_xychart(f"{campaign}: {workload}, output tok/s by concurrency", xs, series),
        "legend": plotted,
        "colours": views.colour_names(len(plotted)),
        "left_out": [n for n in configs if n not in plotted],
        # For the optional SVG plot: every config, gaps where it was not measured.
        "xs": xs,
        "all_series": [(n, [by.get((n, x)) for x in xs]) for n in configs],
        "title": f"{campaign}: {workload}",
    }


def _category_table(pts: list[Point], spec: frozenset[str]) -> Table | None:
    """Per dataset category of a mixed prompt set (more than one category at a point)."""
    rows = categories.rows(pts, spec)
    if len({r.category for r in rows}) < 2:
        return None
    return Table(categories.HEADERS, categories.table_rows(rows), categories.ALIGN)


def _latest_views(wc_cells: list[Cell], points: Mapping[str, Point]) -> list[views.CellView]:
    """Each config's latest valid cell at each C, as latency views."""
    latest: dict[tuple[str, int], Cell] = {}
    for c in wc_cells:
        key = (c.config, c.concurrency)
        if key not in latest or c.rank > latest[key].rank:
            latest[key] = c
    return views.cell_views(latest.values(), points)


def _goodput(vs: list[views.CellView], slo: views.Slo) -> list[str]:
    """Per config: the best throughput meeting the SLO."""
    out = []
    for g in views.goodput(vs, slo):
        if g.unknown:
            out.append(f"{fmt.code(g.config)}: no latency percentiles were measured, so the SLO cannot be judged.")
        elif g.best is None:
            out.append(f"{fmt.code(g.config)}: meets the SLO at no measured concurrency.")
        else:
            out.append(f"{fmt.code(g.config)}: best {fmt.tput(g.best.throughput)} tok/s within the SLO "
                       f"(C={g.best.concurrency}, campaign {fmt.code(g.best.campaign)}); largest C within the "
                       f"SLO: {g.largest_c}.")
    return out


def _slo_line(vs: list[views.CellView], slo: views.Slo) -> str | None:
    known = [g for g in views.goodput(vs, slo) if g.best is not None]
    if not known:
        return None
    ranked = sorted(known, key=lambda g: -(g.best.throughput if g.best else 0))
    top = ranked[0]
    assert top.best is not None
    text = (f"under the SLO ({slo.describe()}), {fmt.code(top.config)} delivers the most: "
            f"{fmt.tput(top.best.throughput)} tok/s at C={top.best.concurrency}")
    if len(ranked) > 1 and ranked[1].best is not None:
        text += (f", against {fmt.tput(ranked[1].best.throughput)} tok/s for {fmt.code(ranked[1].config)} "
                 f"(C={ranked[1].best.concurrency})")
    return text + "."


#: Run ids named in one grouped "Sources" line, at most (the appendix names every point's run).
SOURCE_RUNS_NAMED = 3


def _sources(points: list[Point], runs: Mapping[str, Run]) -> list[str]:
    """One line per source: the runs read the same way from the same file (a
    benchmark writes one run per point) share it, with their count, the
    first run ids and the file lines they came from. ``runs``: run id -> run."""
    by_run: dict[str, list[Point]] = {}
    for p in points:
        by_run.setdefault(p.run_id, []).append(p)
    groups: dict[tuple[str, str], list[str]] = {}
    for run_id in sorted(by_run):
        run = runs.get(run_id)
        what = f"{run.source} via {run.importer} v{run.importer_version}" if run else "?"
        src = run.source_file if run and run.source_file else "(no file)"
        groups.setdefault((what, src), []).append(run_id)
    out = []
    for (what, src), ids in groups.items():
        pts = [p for i in ids for p in by_run[i]]
        lines = [p.source_line for p in pts if p.source_line is not None]
        where = f", lines {_ranges(lines)}" if lines else ""
        if len(ids) == 1:
            out.append(f"run {ids[0]}: {what}, {src}{where}, {len(pts)} points")
            continue
        named = ", ".join(ids[:SOURCE_RUNS_NAMED]) + (f" and {len(ids) - SOURCE_RUNS_NAMED} more"
                                                       if len(ids) > SOURCE_RUNS_NAMED else "")
        out.append(f"{len(ids)} runs ({named}): {what}, {src}{where}, {len(pts)} points")
    return out


def _environment(data: Dataset, limit: int) -> Table:
    facts: dict[str, dict[str, set[str]]] = {}
    # The runs of one environment together: runs read in one process share
    # equal environments (a store of `findings bench` has a run per point).
    for environment, names in data.environments:
        for k, v in environment.items():
            facts.setdefault(k, {}).setdefault(_scalar(v), set()).update(names)
    rank = {c.name: i for i, c in enumerate(data.campaigns)}
    rows = []
    for k in sorted(facts):
        for value in sorted(facts[k]):
            rows.append((k, value, _campaign_names(facts[k][value], rank, limit)))
    return Table(("Fact", "Value", "Campaigns"), tuple(rows), ("left", "left", "left"))


def _campaign_names(names: set[str], rank: dict[str, int], limit: int) -> str:
    """All names, or beyond ``limit`` (0: no limit) the count and the first and last in replay order."""
    if not limit or len(names) <= limit:
        return ", ".join(sorted(names))
    ordered = sorted(names, key=lambda n: rank.get(n, -1))
    return f"{len(names)} campaigns, from {ordered[0]} to {ordered[-1]}"


#: Facts kept in the store but too long or too minor for the document's table.
QUIET_FACTS = frozenset({
    "launch", "launch_command", "attention_backend", "chunked_prefill_size", "cuda_graph_max_bs", "dp_size",
    "ep_size", "pp_size", "mem_fraction_static", "enable_metrics", "served_model_name", "kv_cache_dtype",
    "enable_dp_attention", "enable_multi_layer_eagle", "enable_two_batch_overlap", "enable_pdmux",
})


def _configs(data: Dataset, rules: Rules) -> Table:
    """One row per recorded fact, one column per config (the baseline
    first): the configs side by side, so what differs between them reads
    across a row; ``—`` where a config records no such fact."""
    names = sorted(set(map(_CONFIG, data.points)), key=lambda n: (n != rules.baseline, n))
    facts = {n: {k: _scalar(v) for k, v in data.configs.get(n, {}).items()
                 if _scalar(v) != "" and k not in QUIET_FACTS} for n in names}
    keys = sorted({k for f in facts.values() for k in f})
    if not keys:
        return Table(("Config", "Fact"), tuple((n, "(no facts recorded)") for n in names), ("left", "left"))
    rows = tuple((k,) + tuple(facts[n].get(k, "—") for n in names) for k in keys)
    return Table(("Fact",) + tuple(names), rows, ("left",) * (len(names) + 1))


def _history(entries: list[Entry], limit: int) -> tuple[list[dict[str, Any]], list[str], dict[str, Any] | None]:
    """The entries that changed something and the names of those that did not;
    beyond ``limit`` (0: no limit) only the latest of each, and a summary of
    the rest."""
    with_changes = [e for e in entries if e.changes]
    unchanged = [e.campaign.name for e in entries if not e.changes]
    whole = not limit or (len(with_changes) <= limit and len(unchanged) <= limit)
    # Each entry's sentences only for the entries shown (a long store's
    # history has thousands: most of them are counted, not shown).
    first = 0 if whole else max(0, len(with_changes) - limit)
    changed = [{"number": first + k + 1, "campaign": e.campaign.name, "when": e.campaign.when,
                "changes": [{"text": c.text, "facts": c.provenance_text} for c in e.changes]}
               for k, e in enumerate(with_changes[first:])]
    if whole:
        return changed, unchanged, None
    earlier = {"changed": max(0, len(with_changes) - limit), "unchanged": max(0, len(unchanged) - limit),
               "first": entries[0].campaign.name}
    return changed, unchanged[-limit:], earlier


def _regressions(moves: list[regressions.Move], earlier: int, cli: str) -> dict[str, Any]:
    """The "Regressions and improvements" section: the steps as a table, and
    the moves beyond the band left as drift, each with why."""
    steps = [m for m in moves if m.is_step]
    rows = tuple((m.workload, m.config, f"{m.kind} {fmt.pct(m.ratio - 1)}",
                  regressions.c_range(list(m.concurrency), len(m.ratios)),
                  f"{m.previous_campaign} → {m.campaign}",
                  regressions.describe_facts(m.facts_changed) or "none recorded",
                  m.reason) for m in steps)
    table = Table(("Workload", "Config", "Change", "C", "Campaigns", "Recorded facts that changed", "Called because"),
                  rows, ("left",) * 7)
    drifts = [m for m in moves if m.kind == regressions.DRIFT]
    latest = sorted(sorted(drifts, key=lambda m: -m.rank)[:DRIFT_LISTED],
                    key=lambda m: (m.workload, m.config, m.rank))
    drift = [f"{fmt.code(m.config)} on {fmt.code(m.workload)}, {fmt.code(m.previous_campaign)} → "
             f"{fmt.code(m.campaign)}: {m.per_c()}; {fmt.text(m.reason)}" for m in latest]
    return {"steps": table if steps else None, "drift": drift, "earlier": earlier,
            "drift_total": len(drifts),
            "suspect": [f"{fmt.code(m.workload)}: {regressions.suspect_sentence(m, fmt.code, cli)}"
                        for m in moves if m.suspect]}


def _questions(data: Dataset, questions: Sequence[plan.Question], cli: str) -> list[dict[str, str]]:
    """The "Open questions" section: each question in one line, and the
    commands that answer it (findings plan, then findings bench)."""
    recorded = data.from_matrix
    out = []
    for q in questions:
        src = "" if set(q.configs) <= recorded else " --from-matrix MATRIX.toml"
        until = " --until-decided" if q.kind == "undecided" else ""
        command = (f"{cli} plan --workload {shlex.quote(q.base_workload)} "
                   f"--config {shlex.quote(q.config)} --kind {q.kind}{src} --output build/plan.toml && "
                   f"{cli} bench build/plan.toml{until}")
        out.append({"line": plan.line(q), "command": command})
    return out


#: Moves left as drift listed in the document (the latest; the JSON has them all).
DRIFT_LISTED = 12


ENGINE_NAMES = {"sglang": "SGLang", "vllm": "vLLM"}
LAUNCH = {"sglang": "python -m sglang.launch_server --model-path MODEL", "vllm": "vllm serve MODEL"}


def _load_of(p: Point) -> str:
    rate = p.workload_params.get("request_rate")
    return f"{rate:g} req/s" if isinstance(rate, (int, float)) else str(p.workload_params.get("load"))


def _deploy_block(d: deploy.Deployment) -> dict[str, Any]:
    """One candidate's Deploy block: per engine its status and reason, and for
    flags a launch line to paste (``findings deploy`` emits the same)."""
    engines = []
    for e in d.engines:
        lines = [LAUNCH[e.engine]] + list(e.flags) if e.flags else []
        engines.append({
            "name": ENGINE_NAMES[e.engine], "status": e.status, "reason": e.reason,
            "launch": " \\\n    ".join(lines) if lines else None,
            "file": e.file,
            "file_sh": shlex.quote(e.file) if e.file else None,
            "json": json.dumps(dict(e.config), separators=(", ", ": ")) if e.config is not None and e.engine == "sglang"
            else None,
            "notes": list(e.notes),
        })
    c = d.threshold_concurrency
    where = (f"threshold running batch {d.threshold} (at {d.threshold_rate:g} req/s)"
             if d.threshold_rate is not None and d.threshold else
             f"threshold C={c}" + (f" (running batch {d.threshold})" if d.threshold != c else "")
             if c is not None and d.threshold else f"threshold C={d.threshold}" if d.threshold else None)
    return {"config": d.config, "policy": d.policy, "threshold": d.threshold, "threshold_text": where,
            "notes": list(d.notes), "engines": engines}


def _slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")


def _deploy_line(d: deploy.Deployment) -> str:
    """A Deploy block in a few words: each engine's status, engines of one
    status named together (``SGLang and vLLM: deploy``)."""
    by: dict[str, list[str]] = {}
    for e in d.engines:
        by.setdefault(e.status, []).append(ENGINE_NAMES[e.engine])
    return "; ".join(f"{' and '.join(names)}: {status}" for status, names in by.items()) or d.policy


def _tune_hidden(tunes: Sequence[tuning.Tuning], workload: str, candidates: set[str]) -> list[str]:
    """One line per tune whose trials this workload's conclusion leaves out."""
    out = []
    for t in tunes:
        others = [tr for tr in t.trials if tr.state != tuning.BASELINE and tr.config in candidates
                  and (t.best is None or tr.config != t.best.config)]
        if others:
            best = f"; its best, {fmt.code(t.best.config)}, is listed" if t.best else ""
            out.append(f"{len(others)} more configs were tried by tune {fmt.code(t.name)}{best}: every trial is "
                       f"in [Config search](#config-search-findings-tune)")
    return out


def _tune_score(t: tuning.Tuning, v: float | None) -> str:
    if v is None:
        return "—"
    return f"{v:.4g}"


def _tune(t: tuning.Tuning, blocks: Mapping[tuple[str, str], dict[str, Any]]) -> dict[str, Any]:
    """A tune's section: what was tried, the best config, what is left (D115)."""
    base = t.baseline
    best = t.best

    def vs(v: float | None) -> str:
        if v is None or base is None or not base.score:
            return "—"
        return f"{v / base.score - 1:+.1%}"

    def measured(tr: tuning.Trial) -> str:
        return ", ".join(str(c) for c, _ in tr.tput) or "—"

    def row(tr: tuning.Trial) -> tuple[str, ...]:
        state = {"baseline": "baseline", "complete": "complete", "pruned": "stopped early (beaten)"}.get(
            tr.state, tr.state)
        if tr.state != tuning.PRUNED and tr.score is not None and not tr.feasible:
            state += " (below the throughput floor)"
        score = _tune_score(t, tr.score) if tr.state != tuning.PRUNED else "—"
        short = tr.args.replace("--speculative-config ", "").replace("--speculative-", "").replace("--", "")
        return (str(tr.number), fmt.code(tr.config), fmt.code(short) if short else "(no speculation)",
                measured(tr), score, vs(tr.score) if tr.state != tuning.PRUNED else "—", state)

    headers = ("Trial", "Config", "Flags (--speculative- left out)", "C measured", f"Score ({t.objective.unit})", "vs baseline", "State")
    align = ("right", "left", "left", "left", "right", "right", "left")
    ranked = list(t.scored)
    top = Table(headers, tuple(row(tr) for tr in ranked[:10]), align, markdown=True)
    every = Table(headers, tuple(row(tr) for tr in t.trials), align, markdown=True)
    # The best so far after each trial: how fast the search got there.
    progress = []
    so_far: tuning.Trial | None = None
    for tr in t.trials:
        if tr.state == tuning.COMPLETE and tr.score is not None and tr.feasible and (
                so_far is None or so_far.score is None or t.objective.better(tr.score, so_far.score)):
            so_far = tr
            progress.append(f"trial {tr.number}: {fmt.code(tr.config)} ({_tune_score(t, tr.score)})")
    block = None
    if best is not None:
        for (w, config), b in blocks.items():
            if config == best.config and w.split(" (")[0] == t.workload:
                block = (b.get("same_as") or b)["anchor"]
                break
    return {
        "name": t.name, "campaign": t.campaign, "workload": t.workload, "engine": t.engine, "search": t.search,
        "seed": t.seed, "objective": t.objective.line(), "tried": t.tried, "space": t.space, "untried": t.untried,
        "pruned": sum(1 for tr in t.trials if tr.state == tuning.PRUNED),
        "best": None if best is None else {
            "config": best.config, "number": best.number, "score": _tune_score(t, best.score),
            "vs": vs(best.score), "notes": best.notes, "anchor": block,
            # the flags as a shell takes them (an environment first), in a fenced block: no backticks
            "command": " ".join(x for x in (best.env, best.args) if x).replace("`", "'")},
        "baseline": None if base is None else {"config": base.config, "score": _tune_score(t, base.score)},
        "unit": t.objective.unit, "top": top, "every": every, "progress": progress,
        "untried_names": [fmt.code(n) for n in t.untried_names],
    }


def _share_deploy_blocks(blocks: Sequence[tuple[str, dict[str, Any]]]) -> None:
    """Each Deploy block, (workload, block) in document order, gets an anchor
    of its own; a block identical to an earlier one is shown once: the later
    ones get ``same_as``, the anchor and the workload of the first."""
    first: dict[str, dict[str, str]] = {}
    taken: set[str] = set()
    for workload, b in blocks:
        key = json.dumps(b, sort_keys=True)
        anchor = stem = "deploy-" + _slug(f"{b['config']} {workload}")
        n = 1
        while anchor in taken:
            n += 1
            anchor = f"{stem}-{n}"
        taken.add(anchor)
        b["anchor"] = anchor
        b["same_as"] = first.get(key)
        first.setdefault(key, {"anchor": anchor, "workload": workload})


def _latest_change(entry: Entry | None, workload: str, config: str, measured: bool) -> str:
    """What the latest campaign's history entry says of this candidate."""
    if entry is None:
        return "—"
    for ch in entry.changes:
        if ch.workload != workload:
            continue
        if ch.subject == f"policy of {config}":
            return f"new: {ch.after}" if ch.before is None else f"policy {ch.before} → {ch.after}"
        if ch.subject == f"verdicts of {config}":
            n = len(ch.evidence)
            return f"{n} {'verdict' if n == 1 else 'verdicts'} changed, policy held"
    return "no change" if measured else "not measured"


def _closed_threshold(c: int | None, block: Mapping[str, Any] | None) -> str:
    """A closed-loop threshold in the summary: the client C, and the running
    batch the Deploy block switches at where that differs."""
    if c is None:
        return "—"
    batch = block.get("threshold") if block is not None else None
    return f"C={c}" + (f" (running batch {batch})" if batch is not None and batch != c else "")


def _summary(derived: Derived, blocks: Mapping[tuple[str, str], dict[str, Any]],
             lines: Mapping[tuple[str, str], str], hidden: frozenset[str] = frozenset()) -> dict[str, Any]:
    """The first screen: one row per workload and candidate, read from the
    conclusions and the Deploy blocks (never derived again), and what the
    latest campaign changed (its history entry)."""
    entry = derived.history[-1] if derived.history else None
    latest = entry.campaign.name if entry else None
    # (The latest campaign's points picked out at C speed: a few of a million.)
    mine = compress(derived.data.points, map(latest.__eq__, map(_CAMPAIGN, derived.data.points))) \
        if latest is not None else ()
    measured = {analysis_workload(p.workload, p.simulated) for p in mine}
    rows: list[dict[str, Any]] = []

    def deploy_of(workload: str, config: str) -> tuple[str, str | None]:
        b = blocks.get((workload, config))
        if b is None:
            return "—", None
        return lines[(workload, config)], (b["same_as"] or b)["anchor"]

    for wc in derived.concluded.conclusions.workloads:
        if not wc.candidates:
            rows.append({"workload": wc.workload, "candidate": "—", "policy": "no candidate compared",
                         "threshold": "—", "crossover": "—", "deploy": "—", "anchor": None, "marked": False,
                         "latest": "no change" if wc.workload in measured else "not measured"})
        for cand in wc.candidates:
            if cand.config in hidden:
                continue
            text, anchor = deploy_of(wc.workload, cand.config)
            why = [r for comp in cand.comparisons for r in derived.caveats_of(comp)]
            marked = bool(why)
            rows.append({"workload": wc.workload, "candidate": cand.config,
                         "policy": cand.policy + (f" {caveats.MARK}" if marked else ""), "marked": marked,
                         "unlike": caveats.unlike(why),
                         "threshold": _closed_threshold(cand.threshold, blocks.get((wc.workload, cand.config))),
                         "crossover": prose.crossover_short(cand), "deploy": text, "anchor": anchor,
                         "latest": _latest_change(entry, wc.workload, cand.config, wc.workload in measured)})
    for oc in derived.open_loop:
        if not oc.candidates:
            rows.append({"workload": oc.workload, "candidate": "—", "policy": "no candidate compared (open loop)",
                         "threshold": "—", "crossover": "—", "deploy": "—", "anchor": None, "marked": False,
                         "latest": "—"})
        for rc in oc.candidates:
            text, anchor = deploy_of(oc.workload, rc.config)
            where = "—" if rc.threshold_rate is None else f"{rc.threshold_rate:g} req/s" + (
                f" (running batch {max(1, round(rc.threshold_batch))})" if rc.threshold_batch is not None else "")
            why = list(load_present.reasons(rc))
            rows.append({"workload": oc.workload, "candidate": rc.config,
                         "policy": f"{rc.policy} (by rate)" + (f" {caveats.MARK}" if why else ""),
                         "threshold": where, "crossover": "—", "deploy": text, "anchor": anchor, "marked": bool(why),
                         "unlike": caveats.unlike(why), "latest": "—"})
    headers = ("Workload", "Candidate", "Policy", "Threshold", "Crossover", "Deploy", "Latest campaign")

    def table(linked: bool) -> Table:
        out = []
        for r in rows:
            deploy_cell = fmt.text(r["deploy"])
            if linked and r["anchor"]:
                deploy_cell = f"[{deploy_cell}](#{r['anchor']})"
            cand = fmt.code(r["candidate"]) if r["candidate"] != "—" else "—"
            out.append((fmt.text(r["workload"]), cand, fmt.text(r["policy"]), fmt.text(r["threshold"]),
                        fmt.text(r["crossover"]), deploy_cell, fmt.text(r["latest"])))
        return Table(headers, tuple(out), ("left",) * len(headers), markdown=True)

    changed = None
    if entry is not None:
        n = len(entry.changes)
        changed = {"campaign": latest, "when": entry.campaign.when, "changes": n,
                   "workloads": sorted({c.workload for c in entry.changes})}
    return {"rows": rows, "table": table(linked=True), "plain": table(linked=False), "latest": changed,
            "marked": any(r["marked"] for r in rows), "unlike": any(r.get("unlike") for r in rows)}


def _appendix(labels: Labels, flags: dict[str, tuple[str, ...]], data: Dataset, only_cited: bool,
              n_of: Mapping[str, Counts], points: Mapping[str, Point]) -> Table:
    runs = data.runs_by_id
    rows = []
    for p in labels.in_order(labels.cited, points) if only_cited else labels.points:
        run = runs.get(p.run_id)
        src = (run.source_file if run and run.source_file else p.source)
        where = f"{src}:{p.source_line}" if p.source_line is not None else str(src)
        rows.append((labels.of[p.id], p.id, p.campaign, analysis_workload(p.workload, p.simulated), p.config,
                     str(p.concurrency), fmt.tput(p.metrics[THROUGHPUT]) if THROUGHPUT in p.metrics else "n/a",
                     n_of[p.id].describe(), where, "; ".join(flags.get(p.id, ()))))
    return Table(("label", "point id", "campaign", "workload", "config", "C", "tok/s", "requests", "source",
                  "flagged"), tuple(rows),
                 ("left", "left", "left", "left", "left", "right", "right", "left", "left", "left"))


def build(derived: Derived, decided: Decided, title: str, store_label: str,
          slo: views.Slo = views.Slo(), detail: int = 0, amendments: Sequence[str] = (),
          cli: str | None = None, edited: Sequence[str] = ()) -> dict[str, Any]:
    """The document's content, from the one derivation (findings/derive/derived.py)
    and what is decided from it (findings/decide/). ``detail``: how many of the
    latest campaigns get a section of their own (0: all); lists that grow with
    the number of campaigns (history, campaign names, flagged points,
    cross-checks, the appendix) stop at the same number, so the document stays
    readable, and quick to render, however long the store's history. ``cli``:
    ``findings`` with the options that run the document's commands from the
    repository root (default: ``findings --store STORE``). ``edited``: the
    run files (``runs/NAME.json``) edited by hand since findings wrote them,
    which the banner flags in one line (D94)."""
    data, rules = derived.data, derived.rules
    cli = cli or f"findings --store {shlex.quote(store_label)}"
    shown = data.campaigns[-detail:] if detail else data.campaigns
    hidden = data.campaigns[:len(data.campaigns) - len(shown)]
    shown_names = {c.name for c in shown}
    done = derived.concluded
    flags, valid = dict(derived.flags), done.cells  # suspect levels: marked, in no verdict
    found, conclusions = done.moves, done.conclusions
    comps = derived.comparisons(shown_names)
    points = derived.points
    labels = Labels(data, rules, points)
    marks = Marks(derived)
    open_loop = derived.open_loop
    deployments = decided.deployments
    spec = {n for n, f in data.configs.items() if str(f.get("speculative_algorithm", "none")).lower()
            not in ("none", "", "null")}
    runs_by_id = data.runs_by_id
    # The closed loop's points of the campaigns shown, by workload (an open
    # loop's are judged on a rate axis: the open-loop sections).
    closed = load_verdicts.closed_loop(data.points)
    sources = set(map(attrgetter("source"), data.points))
    by_campaign: dict[str, dict[str, list[Point]]] = {}
    # (Those of the campaigns shown picked out at C speed: a few of thousands.)
    for p in compress(closed, map(shown_names.__contains__, map(attrgetter("campaign"), closed))):
        by_campaign.setdefault(p.campaign, {}).setdefault(analysis_workload(p.workload, p.simulated), []).append(p)
    # The valid cells of the campaigns shown (picked out at C speed), and,
    # for the SLO's lines only, every valid cell by workload.
    valid_at: dict[tuple[str, str], list[Cell]] = {}
    for cell in compress(valid, map(shown_names.__contains__, map(_CAMPAIGN, valid))):
        valid_at.setdefault((cell.campaign, cell.workload), []).append(cell)
    valid_of: dict[str, list[Cell]] = {}
    if slo.set:
        for cell in valid:
            valid_of.setdefault(cell.workload, []).append(cell)
    bad_points = labels.in_order(flags, points)
    # A tune's trials other than its best: in its Config search section, not
    # one policy and Deploy block each in the conclusion (D115).
    tune_hidden = frozenset(tr.config for t in derived.tuning for tr in t.trials
                            if tr.state != tuning.BASELINE) - {t.best.config for t in derived.tuning if t.best}
    workloads: list[dict[str, Any]] = []
    for wc in conclusions.workloads:
        latest = _latest_views(valid_of.get(wc.workload, []), points) if slo.set else []
        bad = [p for p in bad_points if analysis_workload(p.workload, p.simulated) == wc.workload]
        left_out = [f"{labels.label(p.id)} ({p.config}, C={p.concurrency}, campaign {p.campaign}): "
                    f"{'; '.join(flags[p.id])}"
                    for p in bad if p.campaign in shown_names]
        if len(left_out) < len(bad):
            more = len(bad) - len(left_out)
            left_out.append(f"{more} flagged {'point' if more == 1 else 'points'} of the {len(hidden)} earlier "
                            f"campaigns, not listed here (findings conclusions --json lists every flagged point)")
        cands = [replace(c, cross=c.cross_in(shown_names)) if hidden else c
                 for c in wc.candidates]
        policies = []
        for cand in wc.candidates:
            if cand.config in tune_hidden:
                continue
            why = sorted({r for comp in cand.comparisons for r in marks.reasons(comp)})
            policies.append(prose.policy(cand) + (f" {caveats.MARK} Measured {fmt.text(caveats.describe(why))}: "
                                               "not a deployment fact." if why else ""))
        workloads.append({
            "name": wc.workload,
            "simulated": wc.simulated,
            "baseline_measured": wc.baseline_measured,
            # Measured, but every such point failed a validity gate.
            "baseline_flagged": not wc.baseline_measured and any(p.config == rules.baseline for p in bad),
            "latency": prose.latency(wc),
            "throughput": prose.throughput(wc),
            "slo": _slo_line(latest, slo) if slo.set else None,
            "goodput": _goodput(latest, slo) if slo.set else [],
            "policies": policies,
            "baseline_moved": [done.baseline_moved[wc.workload][c.config].sentence(fmt.code, fmt.text)
                               for c in wc.candidates if c.config in done.baseline_moved.get(wc.workload, {})],
            "suspect": [regressions.suspect_sentence(m, fmt.code, cli) for m in done.suspect
                        if m.workload == wc.workload],
            "deploy": [_deploy_block(d) for d in deployments
                       if d.workload == wc.workload and d.config not in tune_hidden],
            "tune_hidden": _tune_hidden(derived.tuning, wc.workload, {c.config for c in wc.candidates}),
            "cross_checks": [x for c in cands if (x := prose.cross_check(c))],
            "verdicts": _verdict_table(conclusions, wc.workload, labels, marks, tune_hidden),
            "left_out": left_out,
        })
    campaigns = []
    for c in shown:
        mine_by_workload = by_campaign.get(c.name, {})
        pts = [p for wpts in mine_by_workload.values() for p in wpts]
        sections = []
        with_latency = False
        for w in sorted(mine_by_workload):
            wpts = mine_by_workload[w]
            notes = sorted({f"{p.config} at C={p.concurrency}: {p.note}" for p in wpts if p.note})
            mine = valid_at.get((c.name, w), [])
            table = _campaign_table(rules, wpts, mine, comps.get((c.name, w), []), flags, labels, marks,
                                    derived.counts, views.cell_views(mine, points), spec)
            with_latency = with_latency or "Pareto" in table.headers
            sections.append({
                "name": w,
                "table": table,
                "unknown_failures": any(derived.counts[p.id].failures_unknown for p in wpts),
                "caveat": caveats.describe(caveats.verdict_reasons(
                    [p.id for p in wpts if p.config in marks.spec], points)) if any(
                    caveats.MARK in cell for row in table.rows for cell in row) else None,
                "notes": notes,
                "flagged": [f"{labels.label(p.id)} ({p.config}, C={p.concurrency}): {'; '.join(flags[p.id])}"
                            for p in sorted(wpts, key=lambda p: labels.of[p.id]) if p.id in flags],
                "chart": _chart(c.name, w, mine, rules),
                "categories": _category_table(wpts, marks.spec),
            })
        campaigns.append({
            "name": c.name,
            "when": c.when,
            "latency": with_latency,
            "simulated": any(p.simulated for p in pts),
            "workloads": sections,
            "sources": _sources(pts, runs_by_id),
        })
    families = derived.families
    by_category = [d.sentence() for d in derived.by_category]
    category_tables = []
    rank = {c.name: i for i, c in enumerate(data.campaigns)}
    family_campaign = categories.latest_campaigns(data.points, families, rank)
    for label, members in sorted(families.items()):
        camp = family_campaign.get(label)
        rows = categories.family_rows(data.points, members, camp, marks.spec) if camp else ()
        if rows:
            category_tables.append({"set": label, "campaign": camp,
                                    "table": Table(categories.FAMILY_HEADERS, rows, categories.FAMILY_ALIGN)})
    hidden_campaigns = None
    if hidden:
        hidden_campaigns = {"count": len(hidden), "shown": len(shown), "first": hidden[0].name,
                            "first_when": hidden[0].when, "last": hidden[-1].name, "last_when": hidden[-1].when,
                            "points": len(closed) - sum(len(p) for w in by_campaign.values() for p in w.values())}
    appendix = _appendix(labels, flags, data, only_cited=bool(hidden), n_of=derived.counts, points=points)
    moves_shown = [m for m in found if m.campaign in shown_names]
    open_sections = [
        {**section, "deploy": [_deploy_block(d) for d in deployments if d.workload == section["key"]],
         "rate_table": Table(**section["rate_table"]) if section["rate_table"] else None,
         "verdict_table": Table(**section["verdict_table"]) if section["verdict_table"] else None,
         "replay_table": Table(**section["replay_table"]) if section["replay_table"] else None,
         "left_out": [f"{labels.label(p.id)} ({p.config}, {_load_of(p)}, campaign {p.campaign}): "
                      f"{'; '.join(flags[p.id])}" for p in bad_points
                      if analysis_workload(p.workload, p.simulated) == section["key"]]}
        for section in load_present.sections(open_loop)]
    # Deploy blocks in document order: identical ones are shown once (the first).
    in_order = [(w["name"], b) for w in workloads for b in w["deploy"]] + \
        [(o["key"], b) for o in open_sections for b in o["deploy"]]
    _share_deploy_blocks(in_order)
    blocks = {(w, b["config"]): b for w, b in in_order}
    n_unknown = len(derived.failures_unknown)
    # Every reason marked anywhere: the closed loop's, as the tables drew
    # them, and the open loop's, derived with each rate verdict.
    seen = set(marks.seen) | {r for oc in open_loop for rc in oc.candidates for r in load_present.reasons(rc)}
    # The history last: its replay may still run aside (D137).
    history, unchanged, earlier = _history(list(derived.history), detail)
    summary = _summary(derived, blocks, {(d.workload, d.config): _deploy_line(d) for d in deployments}, tune_hidden)
    return {
        "title": title,
        "store": store_label,
        "n_points": len(data.points),
        "n_campaigns": len(data.campaigns),
        "n_runs": len(data.runs),
        "n_flagged": len(flags),
        "n_failures_unknown": n_unknown,
        "n_all_failed": sum(map(_ALL_FAILED, derived.counts.values())),  # (at C speed: a bool per point)
        "caveat": (caveats.EXPLANATION + (" " + caveats.UNLIKE_EXPLANATION if caveats.unlike(seen) else "")
                   if seen else None),
        "caveat_mark": caveats.MARK,
        "unknown_mark": UNKNOWN_FAILURES,
        "any_simulated": "simulated" in sources,
        "all_simulated": sources <= {"simulated"},  # Point.simulated: source "simulated"
        "baseline": rules.baseline,
        "floor": fmt.band(rules.noise_floor),
        "floor_pct": f"{rules.noise_floor * 100:.1f}%",
        "confidence_pct": f"{rules.confidence * 100:g}%",
        "resamples": rules.resamples,
        "drift_window": rules.drift_window,
        "drift_cap": fmt.band(rules.drift_cap),
        "suspect_ratio": f"{regressions.SUSPECT_RATIO:g}",
        "amendments": list(amendments),
        "edited": _edited_line(edited),
        "interval": rules.interval,
        "gates": {"failed": f"{rules.gates.max_failed_fraction:.0%}", "lag": f"{rules.gates.max_client_lag_ms:g} ms",
                  "cpu": f"{rules.gates.max_client_cpu:.0%}"},
        "slo": slo.describe() if slo.set else None,
        "workloads": workloads,
        "open_loop": open_sections,
        "tunes": [_tune(t, blocks) for t in derived.tuning],
        "summary": summary,
        "by_category": by_category,
        "category_tables": category_tables,
        "history": history,
        "unchanged": unchanged,
        "history_earlier": earlier,
        "hidden_campaigns": hidden_campaigns,
        "environment": _environment(data, detail),
        "configs": _configs(data, rules),
        "campaigns": campaigns,
        "appendix": appendix,
        "appendix_left_out": len(data.points) - len(appendix.rows),
        "regressions": _regressions(moves_shown, len(found) - len(moves_shown), cli),
        "questions": _questions(data, decided.questions, cli),
    }


def _edited_line(edited: Sequence[str]) -> str | None:
    """The banner's flag for run files edited by hand, or None (no line)."""
    if not edited:
        return None
    n = len(edited)
    names = ", ".join(fmt.code(e) for e in edited[:3]) + (f" and {n - 3} more" if n > 3 else "")
    files = "1 run file" if n == 1 else f"{n} run files"
    return (f"**Warning: the store was edited by hand.** {files} ({names}) no longer "
            f"match{'es' if n == 1 else ''} what findings wrote; `findings store check` says what changed "
            f"and how to repair it.")


def versus_best(derived: Derived, workload: str, config: str, others: list[str]) -> Table:
    """``config`` against the better of ``others`` at each C, in the latest
    campaign that measured ``config`` on ``workload``: paired, judged like any
    verdict (same band, same intervals). For a document that checks a derived
    policy against the configs it was derived from (docs/vllm-cpu.md)."""
    mine = [c for c in derived.cells if c.workload == workload and c.config == config]
    if not mine:
        return Table(("C",), (), ("right",))
    camp = max(mine, key=lambda c: c.rank).campaign
    table = derived.tables[workload]
    names = [*others, config]
    rows = []
    for conc in table.concurrencies:
        here = {n: table.cells_of(n, conc).get(camp) for n in names}
        a = here[config]
        rivals = [c for o in others if (c := here[o]) is not None]
        if a is None or not rivals:
            continue
        best = max(rivals, key=lambda c: c.mean)
        comp = table.compare_cells(a, best)
        row = [str(conc)] + [fmt.tput(c.mean) if (c := here[n]) is not None else "—" for n in names]
        row += [best.config, prose.verdict_cell(comp) if comp else "—"]
        rows.append(tuple(row))
    return Table(("C",) + tuple(f"{n} tok/s" for n in names) + ("better of the others", f"{config} vs it"),
                 tuple(rows), ("right",) * (len(names) + 1) + ("left", "left"))


def template_functions(derived: Derived) -> dict[str, Any]:
    """Template globals that need the analysis: ``versus_best`` and ``fact``
    (a config's recorded fact, or None)."""
    def _versus(workload: str, config: str, others: list[str]) -> Table:
        return versus_best(derived, workload, config, others)

    def _fact(config: str, key: str) -> Scalar:
        return derived.data.configs.get(config, {}).get(key)

    return {"versus_best": _versus, "fact": _fact}
