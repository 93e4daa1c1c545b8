"""The stable machine-readable shape of `findings conclusions --json`.

Documented in docs/conclusions.md. Keys listed there are stable; new keys may
be added, none are removed or renamed without a version bump of "shape".
"""

from __future__ import annotations

import math
from typing import Any, Callable, Iterable, Sequence

from findings.derive import regressions, tuning
from findings.derive.analysis import Best, Candidate, Comparison, Conclusions
from findings.derive.categories import Difference
from findings.derive.history import Entry
from findings.derive.openloop import JUDGED, OpenLoopConclusion

SHAPE_VERSION = 1


def _r(x: float) -> float:
    return round(x, 4)


def _best(b: Best | None, with_c: bool) -> dict[str, Any] | None:
    if b is None:
        return None
    d: dict[str, Any] = {}
    if with_c:
        d["concurrency"] = b.concurrency
    d["best"] = b.config
    d["decisive"] = b.decisive
    d["throughput_tok_s"] = round(b.cell.mean, 2)
    if not with_c:
        d["concurrency"] = b.concurrency
    d["runner_up"] = b.lead.b.config if b.lead else None
    d["lead"] = _r(b.lead.delta) if b.lead else None
    d["band"] = _r(b.lead.band) if b.lead else None
    return d


def _cross(cand: Candidate) -> dict[str, dict[str, float]]:
    out: dict[str, dict[str, float]] = {}
    for conc, campaign, ratio in cand.cross_ratios():
        out.setdefault(str(conc), {})[campaign] = _r(ratio)
    return out


def _provenance(entry: Entry) -> dict[str, Any]:
    """config -> the facts that differ behind the entry's changes (merged over them)."""
    out: dict[str, Any] = {}
    for change in entry.changes:
        for p in change.provenance:
            item = out.setdefault(p.config, {"facts_changed": {}, "between": [], "versus": None})
            item["facts_changed"].update(regressions.facts_json(p.facts_changed))
            if p.between is not None and list(p.between) not in item["between"]:
                item["between"].append(list(p.between))
            if p.versus is not None:
                item["versus"] = p.versus
    return out


def to_json(conclusions: Conclusions, history: Iterable[Entry],
            flagged: dict[str, tuple[str, ...]] | None = None,
            caveats: Callable[[Comparison], tuple[str, ...]] | None = None,
            failures_unknown: list[str] | None = None,
            steps: list[regressions.Move] | None = None,
            drift: list[regressions.Move] | None = None,
            suspect: list[regressions.Move] | None = None,
            baseline_moved: dict[str, dict[str, regressions.BaselineMoved]] | None = None,
            by_category: list[Difference] | None = None,
            open_loop: Sequence[OpenLoopConclusion] = (),
            tunes: Sequence[tuning.Tuning] = ()) -> dict[str, Any]:
    """``caveats``: why a comparison's verdict is not a deployment fact
    (findings/derive/caveats.py); ``failures_unknown``: ids of the points whose
    source does not record how many requests failed; ``steps``: the
    regressions and improvements; ``baseline_moved``: workload -> candidate
    -> the sentence saying its verdicts flipped because the baseline moved;
    ``by_category``: where a candidate's verdicts differ by prompt category;
    ``open_loop``: the open-loop workloads' conclusions (load.verdicts), whose
    verdicts are keyed by request rate (``load_axis``). ``history`` is read
    last (its replay may still run aside: D137)."""
    workloads: dict[str, Any] = {}
    for wc in conclusions.workloads:
        workloads[wc.workload] = {
            "load_axis": "concurrency",
            "latency": _best(wc.latency, with_c=True),
            "throughput": _best(wc.throughput, with_c=False),
            "candidates": {
                c.config: {
                    "policy": c.policy,
                    "threshold": c.threshold,
                    "crossover": c.crossover.to_json() if c.crossover is not None else None,
                    "not_compared": {"candidate_only": list(c.candidate_only), "baseline_only": list(c.baseline_only)},
                    "noise_measured": c.noise_measured,
                    "verdicts": {str(x.concurrency): x.verdict for x in c.comparisons},
                    "ratios": {str(x.concurrency): _r(x.ratio) for x in c.comparisons},
                    "bands": {str(x.concurrency): _r(x.band) for x in c.comparisons},
                    "campaigns": {str(x.concurrency): x.a.campaign for x in c.comparisons},
                    "cross_ratios": _cross(c),
                    "intervals": {str(x.concurrency): [_r(x.ci[0]), _r(x.ci[1])]
                                  for x in c.comparisons if x.ci is not None},
                    "caveats": {str(x.concurrency): list(why) for x in c.comparisons
                                if caveats is not None and (why := caveats(x))},
                    "baseline_moved": _sentence((baseline_moved or {}).get(wc.workload, {}).get(c.config)),
                }
                for c in wc.candidates
            },
            "simulated": wc.simulated,
        }
    for oc in open_loop:
        workloads[oc.workload] = _open_loop(oc)
    return {
        "shape": SHAPE_VERSION,
        "baseline": conclusions.rules.baseline,
        "noise_floor": conclusions.rules.noise_floor,
        "confidence": conclusions.rules.confidence,
        "flagged": {k: list(v) for k, v in sorted((flagged or {}).items())},
        "failures_unknown": sorted(failures_unknown or []),
        "workloads": workloads,
        "by_category": [d.to_json() for d in by_category or []],
        "tuning": [_tuning(t) for t in tunes],
        "regressions": [regressions.to_json(m) for m in steps or []],
        "drift": [regressions.to_json(m) for m in drift or []],
        "suspect": [regressions.to_json(m) for m in suspect or []],
        "history": [
            {
                "campaign": e.campaign.name,
                "date": e.campaign.date,
                "order": e.campaign.order,
                "policies": {w: dict(by) for w, by in e.policies.items()},
                "changes": [c.text for c in e.changes],
                "provenance": _provenance(e),
            }
            for e in history
        ],
    }


def _tuning(t: tuning.Tuning) -> dict[str, Any]:
    """A tune (findings tune): its trials scored under the objective, best first."""
    best = t.best
    return {
        "name": t.name, "campaign": t.campaign, "workload": t.workload, "engine": t.engine, "search": t.search,
        "seed": t.seed, "space": t.space, "tried": t.tried, "untried": t.untried,
        "objective": {"kind": t.objective.kind, "weights": {str(c): w for c, w in t.objective.weights},
                      "concurrency": t.objective.concurrency, "floor_tok_s": t.objective.floor_tok_s,
                      "floor_concurrency": t.objective.floor_concurrency, "rate": t.objective.rate,
                      "unit": t.objective.unit},
        "best": best.config if best is not None else None,
        "trials": [{"config": x.config, "trial": x.number, "state": x.state, "score": _r(x.score)
                    if x.score is not None else None, "feasible": x.feasible, "args": x.args, "env": x.env,
                    "asked": dict(x.params), "throughput": {str(c): _r(v) for c, v in x.tput},
                    "median_tpot_ms": {str(c): _r(v) for c, v in x.tpot}}
                   for x in t.trials],
    }


def _open_loop(oc: OpenLoopConclusion) -> dict[str, Any]:
    """An open-loop workload: verdicts keyed by rate (its ``g`` form, "0.5"),
    each with the judged metrics' improvement ratios (> 1 better), bands and
    verdicts; the policy's threshold as a rate and the running batch
    measured there; each config's max sustainable rate under the SLO."""
    def key(r: float) -> str:
        return f"{r:g}"

    return {
        "load_axis": "request_rate",
        "mode": oc.mode,
        "simulated": oc.simulated,
        "slo": dict(oc.slo),
        "rates": [key(r) for r in oc.rates],
        "candidates": {
            c.config: {
                "policy": c.policy,
                "threshold": c.threshold_rate,
                "threshold_running_batch": _r(c.threshold_batch) if c.threshold_batch is not None else None,
                "verdicts": {key(v.rate): v.verdict for v in c.verdicts},
                "decided_by": {key(v.rate): v.decided_by for v in c.verdicts},
                "caveats": {key(v.rate): list(v.caveats) for v in c.verdicts if v.caveats},
                "metrics": {key(v.rate): {m: {"ratio": _r(x.ratio) if math.isfinite(x.ratio) else None,
                                              "band": _r(x.band), "verdict": x.verdict,
                                              "paired": x.paired, "campaign": x.a.campaign,
                                              "interval": [_r(x.ci[0]), _r(x.ci[1])] if x.ci else None}
                                          for m, x in v.by_metric.items()} for v in c.verdicts},
            }
            for c in oc.candidates
        },
        "sustained": {s.config: {"rate": s.rate, "failed_at": s.failed_at,
                                 "attainment": {key(r): _r(a) for r, a in s.attainment.items()}}
                      for s in oc.sustained},
        "replay": {
            "configs": {r.config: {"campaign": r.campaign, "repeats": len(r.points),
                                   "metrics": {m: _r(r.metrics[m]) for m in JUDGED if m in r.metrics}}
                        for r in oc.replays},
            "comparisons": [{"config": c.config, "against": c.against, "metric": c.metric,
                             "ratio": _r(c.ratio) if math.isfinite(c.ratio) else None,
                             "band": _r(c.band), "verdict": c.verdict} for c in oc.replay_comparisons],
            "best": oc.replay_best,
        } if oc.replays else None,
    }


def _sentence(moved: regressions.BaselineMoved | None) -> str | None:
    return moved.sentence() if moved is not None else None
