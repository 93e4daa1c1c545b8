"""Open-loop conclusions as the document's plain data: sentences and tables
(headers, rows, alignment), formatted, never derived again. Pure."""

from __future__ import annotations

from typing import Any, Mapping, Sequence

from findings.core import fmt
from findings.load.spec import phase_key
from findings.load.spec import parse_phases
from findings.derive import caveats
from findings.derive.analysis import SIMULATED_SUFFIX
from findings.derive.openloop import JUDGED, OpenLoopConclusion, RateCandidate, Replay, Sustained

NAMES = {"median_tpot_ms": "TPOT p50", "p99_ttft_ms": "TTFT p99", "goodput_req_s": "goodput"}
POLICY_WORDS = {
    "always-on": "speculate at every measured rate",
    "off": "never speculate",
    "no-difference": "no difference at any measured rate",
    "on-below": "speculate up to the threshold rate, not above",
    "on-above": "speculate from the threshold rate up",
    "inconclusive": "wins and losses do not split at one rate: no policy is safe",
}


def _n(v: float | None, digits: int = 1) -> str:
    return "–" if v is None else f"{v:,.{digits}f}"


def _rate(r: float | None) -> str:
    return "–" if r is None else f"{r:g}"


def slo_sentence(slo: Mapping[str, float]) -> str | None:
    parts = []
    if "slo_ttft_ms" in slo:
        parts.append(f"TTFT ≤ {slo['slo_ttft_ms']:g} ms")
    if "slo_tpot_ms" in slo:
        parts.append(f"TPOT ≤ {slo['slo_tpot_ms']:g} ms")
    if not parts:
        return None
    share = slo.get("slo_attainment")
    tail = f"; a rate is sustained when at least {share:.0%} of its requests meet it" if share is not None else ""
    return "per request " + " and ".join(parts) + tail


def policy_sentence(c: RateCandidate) -> str:
    head = f"{fmt.code(c.config)}: **{c.policy}**"
    if c.threshold_rate is not None:
        head += f" (threshold {c.threshold_rate:g} req/s"
        head += (f"; {c.config}'s server ran {c.threshold_batch:.2f} requests there on average, so an engine "
                 f"switches at a running batch of {max(1, round(c.threshold_batch))})" if c.threshold_batch is not None
                 else "; the running batch there was not recorded)")
    verdicts = ", ".join(f"{v.rate:g}: {v.verdict}" for v in c.verdicts)
    why = reasons(c)
    mark = f" {caveats.MARK} Measured {fmt.text(caveats.describe(why))}: not a deployment fact." if why else ""
    return f"{head}: {POLICY_WORDS[c.policy]}. Verdicts by rate (req/s): {verdicts}.{mark}"


def reasons(c: RateCandidate) -> tuple[str, ...]:
    """Why a candidate's rate verdicts are not deployment facts (derived with
    each verdict, findings/derive/caveats.py), over all its rates."""
    return tuple(sorted({r for v in c.verdicts for r in v.caveats}))


def sustained_sentence(s: Sustained, target: float | None) -> str:
    share = f"{target:.0%}" if target is not None else "the share"
    if s.rate is None:
        first = min(s.attainment) if s.attainment else None
        return (f"{fmt.code(s.config)} sustains none of the measured rates: at {_rate(first)} req/s only "
                f"{s.attainment.get(first, 0):.0%} of requests met the SLO (needed {share})." if first is not None
                else f"{fmt.code(s.config)}: no SLO share was measured.")
    if s.failed_at is None:
        return (f"{fmt.code(s.config)} sustains every measured rate, up to {s.rate:g} req/s: the limit lies above "
                "it (measure higher rates to find it).")
    return (f"{fmt.code(s.config)} sustains {s.rate:g} req/s, not {s.failed_at:g} req/s "
            f"({s.attainment[s.failed_at]:.0%} met the SLO there, needed {share}): its maximum lies between.")


def _rate_table(oc: OpenLoopConclusion) -> dict[str, Any]:
    headers = ("config", "rate (req/s)", "offered", "achieved", "TTFT p50 ms", "TTFT p99 ms", "TPOT p50 ms",
               "TPOT p99 ms", "goodput (req/s)", "SLO met", "running batch", "repeats", "campaign")
    rows = []
    for config in oc.configs:
        for r in oc.rates:
            cell = oc.latest.get((config, r))
            if cell is None:
                continue
            att = cell.mean("slo_attainment")
            rows.append((config, _rate(r), _n(cell.mean("offered_rate_req_s"), 2), _n(cell.mean("achieved_rate_req_s"), 2),
                         _n(cell.mean("median_ttft_ms")), _n(cell.mean("p99_ttft_ms")),
                         _n(cell.mean("median_tpot_ms")), _n(cell.mean("p99_tpot_ms")),
                         _n(cell.mean("goodput_req_s"), 2), "–" if att is None else f"{att:.0%}",
                         _n(cell.mean("server_running_mean"), 2), str(cell.n), cell.campaign))
    return {"headers": headers, "rows": tuple(rows), "align": ("left",) + ("right",) * 11 + ("left",)}


def _verdict_table(oc: OpenLoopConclusion) -> dict[str, Any]:
    headers = ("candidate", "rate (req/s)", *(NAMES[m] for m in JUDGED), "verdict")
    rows = []
    for c in oc.candidates:
        for v in c.verdicts:
            cells = []
            for m in JUDGED:
                comp = v.by_metric.get(m)
                cells.append("–" if comp is None else
                             f"{fmt.pct(comp.ratio - 1)} {comp.verdict} (band {fmt.band(comp.band)})")
            rows.append((c.config, _rate(v.rate), *cells, v.verdict + (f" {caveats.MARK}" if v.caveats else "")))
    return {"headers": headers, "rows": tuple(rows), "align": ("left", "right") + ("right",) * len(JUDGED) + ("left",)}


PHASE_HEADERS = ("phase", "seconds", "offered (req/s)", "config", "requests", "TTFT p50 ms", "TTFT p99 ms",
                 "TPOT p50 ms", "TPOT p99 ms", "output tok/s", "goodput (req/s)", "SLO met", "running batch")


def phases(p: Mapping[str, Any]) -> int:
    """How many phases a point's metrics hold."""
    n = 0
    while phase_key(n + 1, "requests") in p:
        n += 1
    return n


def _replay_table(replays: Sequence[Replay]) -> dict[str, Any]:
    rows = []
    prof = next((r.params.get("profile") for r in replays if isinstance(r.params.get("profile"), str)), None)
    spans = parse_phases(prof) if isinstance(prof, str) else ()
    count = max((phases(r.metrics) for r in replays), default=0)
    for i in range(1, count + 1):
        for r in replays:
            m = r.metrics

            def k(name: str, m: Mapping[str, float] = m, i: int = i) -> float | None:
                return m.get(phase_key(i, name))
            att = k("slo_attainment")
            secs = spans[i - 1].duration_s if i <= len(spans) else k("duration")
            rows.append((str(i), _n(secs, 0), _n(k("offered_rate_req_s"), 2), r.config, _n(k("requests"), 0),
                         _n(k("median_ttft_ms")), _n(k("p99_ttft_ms")), _n(k("median_tpot_ms")),
                         _n(k("p99_tpot_ms")), _n(k("output_throughput_tok_s")), _n(k("goodput_req_s"), 2),
                         "–" if att is None else f"{att:.0%}", _n(k("server_running_mean"), 2)))
    for r in replays:
        m = r.metrics
        att = m.get("slo_attainment")
        rows.append(("all", _n(m.get("duration"), 0), _n(m.get("offered_rate_req_s"), 2), r.config,
                     _n(m.get("planned"), 0), _n(m.get("median_ttft_ms")), _n(m.get("p99_ttft_ms")),
                     _n(m.get("median_tpot_ms")), _n(m.get("p99_tpot_ms")), _n(m.get("output_throughput_tok_s")),
                     _n(m.get("goodput_req_s"), 2), "–" if att is None else f"{att:.0%}",
                     _n(m.get("server_running_mean"), 2)))
    return {"headers": PHASE_HEADERS, "rows": tuple(rows), "align": ("left", "right", "right", "left") + ("right",) * 9}


def _replay_sentences(oc: OpenLoopConclusion) -> list[str]:
    out = []
    names = [r.config for r in oc.replays]
    for a in names:
        parts = []
        for b in names:
            if a == b:
                continue
            mine = {c.metric: c for c in oc.replay_comparisons if c.config == a and c.against == b}
            bits = [f"{NAMES[m]} {fmt.pct(c.ratio - 1)} ({c.verdict})" for m, c in mine.items()]
            if bits:
                parts.append(f"against {fmt.code(b)}: " + ", ".join(bits))
        if parts:
            out.append(f"{fmt.code(a)} " + "; ".join(parts) + ".")
    return out


def versus_all(oc: OpenLoopConclusion, config: str) -> str | None:
    """Does ``config`` beat every other config over the replay? One plain
    sentence with the verdict against each (None: it was not replayed)."""
    others = [r.config for r in oc.replays if r.config != config]
    if config not in {r.config for r in oc.replays} or not others:
        return None
    vs = {b: oc.replay_verdicts.get((config, b), "not compared") for b in others}
    against = "; ".join(f"against {fmt.code(b)}: {v}" for b, v in vs.items())
    if all(v == "win" for v in vs.values()):
        head = f"**Yes**: {fmt.code(config)} beats every other config over the replay"
    elif all(v in ("win", "tie") for v in vs.values()):
        head = f"**Not strictly**: {fmt.code(config)} beats or ties every other config over the replay, beating not all"
    else:
        head = f"**No**: {fmt.code(config)} does not beat every other config over the replay"
    return f"{head} ({against}; a loss when goodput under the SLO loses, else the median-TPOT verdict)."


def sections(conclusions: Sequence[OpenLoopConclusion]) -> list[dict[str, Any]]:
    """One section per open-loop workload."""
    out = []
    for oc in conclusions:
        target = oc.slo.get("slo_attainment")
        best = oc.replay_best
        out.append({
            "key": oc.workload,
            "name": oc.workload.removesuffix(SIMULATED_SUFFIX),
            "simulated": oc.simulated,
            "mode": oc.mode,
            "slo": slo_sentence(oc.slo),
            "rates": [_rate(r) for r in oc.rates],
            "rate_table": _rate_table(oc) if oc.rates else None,
            "verdict_table": _verdict_table(oc) if oc.candidates and oc.rates else None,
            "policies": [policy_sentence(c) for c in oc.candidates],
            "sustained": [sustained_sentence(s, target) for s in oc.sustained],
            "replay_table": _replay_table(oc.replays) if oc.replays else None,
            "replay_profile": next((str(r.params.get("profile") or r.params.get("trace_file"))
                                    for r in oc.replays), None),
            "replay_repeats": sorted({len(r.points) for r in oc.replays}),
            "replay_campaigns": sorted({r.campaign for r in oc.replays}),
            "replay_comparisons": _replay_sentences(oc),
            "versus_all": {r.config: versus_all(oc, r.config) for r in oc.replays},
            "replay_best": (f"Over the whole replay, {fmt.code(best)} beats or ties every other config on the "
                            "verdict rule (goodput under the SLO, then median TPOT), and beats at least one."
                            if best else ("No config beats or ties every other over the whole replay on the verdict "
                                          "rule (goodput under the SLO, then median TPOT)." if len(oc.replays) > 1
                                          else None)),
        })
    return out
