"""The document's content as plain data: prose, tables and facts. Pure.

``build`` takes the dataset and rules and returns a dict that the templates
only format. Table cells are raw strings; the renderer escapes them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from findings import fmt, prose
from findings.analysis import Comparison, Conclusions, Rules, analysis_workload, campaign_comparisons, cells, conclude
from findings.history import Entry, replay
from findings.model import Dataset, Point, Scalar


@dataclass(frozen=True)
class Table:
    headers: tuple[str, ...]
    rows: tuple[tuple[str, ...], ...]
    align: tuple[str, ...]


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


def _verdict_table(conclusions: Conclusions, workload: str) -> Table | None:
    wc = conclusions.workload(workload)
    if wc is None or not wc.candidates:
        return None
    headers = ("C",) + tuple(f"{c.config} vs {conclusions.rules.baseline}" for c in wc.candidates)
    rows = []
    for conc in wc.concurrencies:
        row = [str(conc)]
        for cand in wc.candidates:
            comp = next((c for c in cand.comparisons if c.concurrency == conc), None)
            row.append(f"{prose.verdict_cell(comp)} ({comp.a.campaign})" if comp else "—")
        rows.append(tuple(row))
    return Table(headers, tuple(rows), ("right",) + ("left",) * len(wc.candidates))


def _campaign_table(data: Dataset, rules: Rules, campaign: str, workload: str,
                    comps: list[Comparison]) -> Table:
    mine = [c for c in cells(data) if c.campaign == campaign and c.workload == workload]
    configs = sorted({c.config for c in mine}, key=lambda n: (n != rules.baseline, n))
    concs = sorted({c.concurrency for c in mine})
    by = {(c.config, c.concurrency): c for c in mine}
    cands = [n for n in configs if n != rules.baseline and any(x.a.config == n for x in comps)]
    by_comp = {(x.a.config, x.concurrency): x for x in comps}
    headers = ("C",) + tuple(f"{n} tok/s" for n in configs) + tuple(f"{n} vs {rules.baseline}" for n in cands)
    rows = []
    for conc in concs:
        row = [str(conc)]
        for n in configs:
            cell = by.get((n, conc))
            if cell is None:
                row.append("—")
            elif cell.n > 1:
                row.append(f"{fmt.tput(cell.mean)} (n={cell.n}, range {cell.spread * 100:.1f}%)")
            else:
                row.append(fmt.tput(cell.mean))
        for n in cands:
            comp = by_comp.get((n, conc))
            row.append(prose.verdict_cell(comp) if comp else "—")
        rows.append(tuple(row))
    return Table(headers, tuple(rows), ("right",) + ("right",) * len(configs) + ("left",) * len(cands))


def _sources(points: list[Point], data: Dataset) -> list[str]:
    by_run: dict[str, list[Point]] = {}
    for p in points:
        by_run.setdefault(p.run_id, []).append(p)
    runs = {r.run_id: r for r in data.runs}
    out = []
    for run_id in sorted(by_run):
        pts = by_run[run_id]
        run = runs.get(run_id)
        lines = [p.source_line for p in pts if p.source_line is not None]
        where = f", lines {_ranges(lines)}" if lines else ""
        what = f"{run.source} via {run.importer} v{run.importer_version}" if run else "?"
        src = run.source_file if run and run.source_file else "(no file)"
        out.append(f"run {run_id}: {what}, {src}{where}, {len(pts)} points")
    return out


def _environment(data: Dataset) -> Table:
    facts: dict[str, dict[str, set[str]]] = {}
    run_campaigns = {r.run_id: sorted({c.name for c in r.campaigns}) for r in data.runs}
    for run in data.runs:
        for k, v in run.environment.items():
            facts.setdefault(k, {}).setdefault(_scalar(v), set()).update(run_campaigns[run.run_id])
    rows = []
    for k in sorted(facts):
        for value in sorted(facts[k]):
            rows.append((k, value, ", ".join(sorted(facts[k][value]))))
    return Table(("Fact", "Value", "Campaigns"), tuple(rows), ("left", "left", "left"))


#: Facts kept in the store but too long or too minor for the document's table.
QUIET_FACTS = frozenset({
    "launch", "launch_command", "attention_backend", "chunked_prefill_size", "cuda_graph_max_bs", "dp_size",
    "ep_size", "pp_size", "mem_fraction_static", "enable_metrics", "served_model_name", "kv_cache_dtype",
})


def _configs(data: Dataset, rules: Rules) -> Table:
    names = sorted({p.config for p in data.points}, key=lambda n: (n != rules.baseline, n))
    rows = []
    for n in names:
        facts = data.configs.get(n, {})
        text = "; ".join(f"{k}: {_scalar(v)}" for k, v in sorted(facts.items())
                         if _scalar(v) != "" and k not in QUIET_FACTS)
        rows.append((n, text or "(no facts recorded)"))
    return Table(("Config", "Facts"), tuple(rows), ("left", "left"))


def _history(entries: list[Entry]) -> tuple[list[dict[str, Any]], list[str]]:
    changed, unchanged = [], []
    for e in entries:
        if e.changes:
            changed.append({"campaign": e.campaign.name, "when": e.campaign.when,
                            "changes": [c.text for c in e.changes]})
        else:
            unchanged.append(e.campaign.name)
    return changed, unchanged


def build(data: Dataset, rules: Rules, title: str, store_label: str) -> dict[str, Any]:
    conclusions = conclude(data, rules)
    entries = replay(data, rules)
    comps = campaign_comparisons(data, rules)
    workloads = []
    for wc in conclusions.workloads:
        workloads.append({
            "name": wc.workload,
            "simulated": wc.simulated,
            "baseline_measured": wc.baseline_measured,
            "latency": prose.latency(wc),
            "throughput": prose.throughput(wc),
            "policies": [prose.policy(c) for c in wc.candidates],
            "cross_checks": [x for c in wc.candidates if (x := prose.cross_check(c))],
            "verdicts": _verdict_table(conclusions, wc.workload),
        })
    campaigns = []
    for c in data.campaigns:
        pts = [p for p in data.points if p.campaign == c.name]
        wnames = sorted({analysis_workload(p.workload, p.simulated) for p in pts})
        sections = []
        for w in wnames:
            wpts = [p for p in pts if analysis_workload(p.workload, p.simulated) == w]
            notes = sorted({f"{p.config} at C={p.concurrency}: {p.note}" for p in wpts if p.note})
            sections.append({
                "name": w,
                "table": _campaign_table(data, rules, c.name, w, comps.get((c.name, w), [])),
                "notes": notes,
            })
        campaigns.append({
            "name": c.name,
            "when": c.when,
            "simulated": any(p.simulated for p in pts),
            "workloads": sections,
            "sources": _sources(pts, data),
        })
    history, unchanged = _history(entries)
    return {
        "title": title,
        "store": store_label,
        "n_points": len(data.points),
        "n_campaigns": len(data.campaigns),
        "n_runs": len(data.runs),
        "any_simulated": any(p.simulated for p in data.points),
        "baseline": rules.baseline,
        "floor": fmt.band(rules.noise_floor),
        "floor_pct": f"{rules.noise_floor * 100:.1f}%",
        "workloads": workloads,
        "history": history,
        "unchanged": unchanged,
        "environment": _environment(data),
        "configs": _configs(data, rules),
        "campaigns": campaigns,
    }
