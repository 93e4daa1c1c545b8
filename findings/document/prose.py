"""Plain-language sentences from conclusions, with the numbers. Pure.

Markdown is produced here only through fmt.code/fmt.text, so every data
value is escaped.
"""

from __future__ import annotations

from findings.core import fmt
from findings.derive.analysis import LOSS, NOT_COMPARABLE, TIE, WIN, Best, Candidate, Comparison, WorkloadConclusion
from findings.core.fmt import code


def _vs(comp: Comparison) -> str:
    return f"{fmt.tput(comp.a.mean)} vs {fmt.tput(comp.b.mean)} tok/s"


def _where(cell_campaign: str) -> str:
    return f"campaign {code(cell_campaign)}"


def _band(comp: Comparison) -> str:
    """The comparison's band, with the digits its delta needs (fmt.pct_band)."""
    return fmt.pct_band(comp.delta, comp.band)[1]


def _not_decisive(lead: Comparison) -> str:
    """Why a lead is no lead: inside the band, or beyond it with an interval that includes no difference."""
    if abs(lead.delta) <= lead.band or lead.ci is None:
        return f"inside the {_band(lead)} noise band"
    lo, hi = lead.ci
    return (f"beyond the {_band(lead)} noise band, but its bootstrap interval "
            f"({fmt.pct(lo - 1)}…{fmt.pct(hi - 1)}) includes no difference")


def _lead(b: Best) -> str:
    """The difference between the two, in the verdicts' direction (the
    candidate against the baseline) when the baseline is one of them, and
    saying which way it reads."""
    assert b.lead is not None
    x = b.versus if b.versus is not None else b.lead
    return f"{code(x.a.config)} {fmt.pct_band(x.delta, x.band)[0]} against {code(x.b.config)}"


def _judged(b: Best) -> Comparison:
    """The comparison whose band and interval the sentence quotes."""
    assert b.lead is not None
    return b.versus if b.versus is not None else b.lead


def latency(wc: WorkloadConclusion) -> str:
    b = wc.latency
    if b is None:
        return "Nothing measured."
    c = b.concurrency
    if b.lead is None:
        return (f"Only {code(b.config)} was measured at C={c} ({fmt.tput(b.cell.mean)} tok/s, "
                f"{_where(b.cell.campaign)}); there is nothing to compare it with.")
    lead, judged = b.lead, _judged(b)
    unpaired = "" if judged.paired else " (measured in different campaigns, so the band is widened)"
    if b.decisive:
        return (f"{code(b.config)} is best at C={c}: {fmt.tput(lead.a.mean)} tok/s against "
                f"{fmt.tput(lead.b.mean)} tok/s for the runner-up {code(lead.b.config)} "
                f"({_lead(b)}), beyond the {_band(judged)} noise band{unpaired}.")
    return (f"No config leads beyond noise at C={c}: {code(b.config)} measures "
            f"{fmt.tput(lead.a.mean)} tok/s and {code(lead.b.config)} {fmt.tput(lead.b.mean)} tok/s "
            f"({_lead(b)}), {_not_decisive(judged)}{unpaired}.")


def throughput(wc: WorkloadConclusion) -> str:
    b = wc.throughput
    if b is None:
        return "Nothing measured."
    only_one_c = len(wc.concurrencies) == 1
    caveat = (f" Only C={wc.concurrencies[0]} was measured, so this is not a saturation figure."
              if only_one_c else "")
    if b.lead is None:
        return (f"Only {code(b.config)} was measured: it peaks at {fmt.tput(b.cell.mean)} tok/s "
                f"(C={b.concurrency}).{caveat}")
    lead, judged = b.lead, _judged(b)
    peaks = (f"{code(b.config)} peaks at {fmt.tput(lead.a.mean)} tok/s (C={lead.a.concurrency}, "
             f"{_where(lead.a.campaign)}) and the runner-up {code(lead.b.config)} at "
             f"{fmt.tput(lead.b.mean)} tok/s (C={lead.b.concurrency}, {_where(lead.b.campaign)})")
    unpaired = "" if judged.paired else "; the peaks come from different campaigns, so the band is widened"
    apart = ""
    if lead.a.concurrency != lead.b.concurrency:
        at = lead.a.concurrency
        unmeasured = lead.b.config not in {x.a.config for x in _at(wc, at)} | {x.b.config for x in _at(wc, at)}
        apart = (f" The peaks come from different concurrencies (C={lead.a.concurrency} and C={lead.b.concurrency}"
                 + (f"; {code(lead.b.config)} was not measured at C={at}" if unmeasured else "")
                 + "): this compares each config's best figure, not the two at one C; the policies below "
                   "compare them C by C.")
    if b.decisive:
        return (f"{code(b.config)} has the highest peak: {peaks}, {_lead(b)}, beyond the "
                f"{_band(judged)} noise band{unpaired}.{apart}{caveat}")
    # A tie of the peaks says nothing of each C: a candidate may still win
    # (always-on) where the peaks tie, and the sentence must not read as
    # contradicting its policy.
    each_c = "" if apart or only_one_c else (" This compares each config's highest figure only; the policies "
                                             "below judge the configs C by C.")
    return (f"No config's peak leads beyond noise: {peaks}, {_lead(b)}, "
            f"{_not_decisive(judged)}{unpaired}.{apart}{each_c}{caveat}")


def _at(wc: WorkloadConclusion, conc: int) -> list[Comparison]:
    """Every candidate's comparison with the baseline at ``conc``."""
    return [x for cand in wc.candidates for x in cand.comparisons if x.concurrency == conc]


def _concs(cand: Candidate, verdict: str) -> list[Comparison]:
    return [c for c in cand.comparisons if c.verdict == verdict]


def _range(comps: list[Comparison]) -> str:
    deltas = sorted((c.delta for c in comps), key=abs)
    if len(deltas) == 1:
        return fmt.pct(deltas[0])
    return f"{fmt.pct(deltas[0])} to {fmt.pct(deltas[-1])}"


def _detail(comps: list[Comparison], word: str) -> str:
    if not comps:
        return ""
    return f"{word} at {fmt.conc_list([c.concurrency for c in comps])} ({_range(comps)})"


def _c(x: float) -> str:
    """An estimated C: whole from 10 on, one decimal below."""
    return f"{x:.0f}" if x >= 10 else f"{x:.1f}".rstrip("0").rstrip(".")


def _crossing(cand: Candidate) -> str:
    """Where the ratio crosses the baseline (findings/derive/crossover.py),
    and whether the sweep measured anything around it."""
    x = cand.crossover
    if x is None:
        return ""
    a, b = x.between
    measured = sorted(c.concurrency for c in cand.comparisons)
    gap = (f"; nothing was measured between C={a} and C={b}"
           if a != b and not any(a < c < b for c in measured) and b - a > 1 else "")
    return (f" (the ratio crosses the baseline near C≈{_c(x.estimate)}, between {_c(x.low)} and {_c(x.high)}, "
            f"interpolated on log C{gap})")


def crossover_short(cand: Candidate) -> str:
    """The crossover in a table cell: ``C≈3.6 (1.8–7.2)``, or "—"."""
    x = cand.crossover
    if x is None:
        return "—"
    return f"C≈{_c(x.estimate)} ({_c(x.low)}–{_c(x.high)})"


def policy(cand: Candidate) -> str:
    wins, losses, ties = _concs(cand, WIN), _concs(cand, LOSS), _concs(cand, TIE)
    wild = _concs(cand, NOT_COMPARABLE)
    groups = sorted((g for g in (wins, losses, ties) if g), key=lambda g: g[0].concurrency)
    words = {id(wins): "wins", id(losses): "loses", id(ties): "ties"}
    evidence = "; ".join(_detail(g, words[id(g)]) for g in groups)
    if wild:
        worst = max(c.drift for c in wild)
        evidence += ("; " if evidence else "") + (
            f"is not comparable at {fmt.conc_list([c.concurrency for c in wild])}, where the baseline's own "
            f"campaigns drift by up to {fmt.band(worst)}, beyond the drift cap (left out of the policy)")
    name = code(cand.config)
    t = cand.threshold
    one = len(cand.judged) == 1
    if cand.policy == "always-on":
        rule = (f"keep speculation on at the one concurrency measured (C={cand.judged[0].concurrency})" if one
                else "keep speculation on at every measured concurrency")
    elif cand.policy == "off":
        rule = "keep it off: it never wins"
    elif cand.policy == "no-difference":
        rule = (f"no measurable difference at the one concurrency measured (C={cand.judged[0].concurrency}): "
                "enabling it neither gains nor costs there" if one else
                "no measurable difference at any concurrency: enabling it neither gains nor costs")
    elif cand.policy == "on-below":
        rule = f"keep speculation on while C ≤ {t} and disable it above" + _crossing(cand)
    elif cand.policy == "on-above":
        rule = f"disable speculation below C = {t} and enable it from C ≥ {t}" + _crossing(cand)
    elif not cand.comparisons:
        rule = "never measured against the baseline at the same concurrency"
    elif len(wild) == len(cand.comparisons):
        rule = "no comparison can be made: the baseline drifts beyond the cap at every concurrency"
    else:
        rule = "wins and losses alternate across concurrency, so no single threshold is safe; measure more"
    label = f"**{cand.policy}**" + (f", threshold C={t}" if t is not None else "") + \
        (" (from one measured C)" if one else "")
    base = cand.comparisons[0].b.config if cand.comparisons else None
    against = f" (against {code(base)})" if base else ""
    out = f"{name}: {label}: {rule}." + (f" Evidence{against}: it {evidence}." if evidence else "")
    return out + _rests_on(cand, base)


def _rests_on(cand: Candidate, base: str | None) -> str:
    """What the policy does not rest on: Cs one side measured alone, and
    noise that was never measured."""
    out = ""
    missing = []
    if cand.candidate_only:
        missing.append(f"{code(cand.config)} at {fmt.conc_list(list(cand.candidate_only))} (no "
                       f"{code(base) if base else 'baseline'} there)")
    if cand.baseline_only and base:
        missing.append(f"{code(base)} at {fmt.conc_list(list(cand.baseline_only))} (no {code(cand.config)} there)")
    if missing:
        out += " Not compared: " + "; ".join(missing) + "."
    if cand.judged and not cand.noise_measured:
        out += (f" No noise was measured (one run of each config at each C, no repeats, no earlier campaign of "
                f"the baseline): the band is the {fmt.band(min(c.band for c in cand.judged))} floor alone.")
    return out


def interval(comp: Comparison) -> str:
    """The band, or the bootstrap interval of the ratio when there is one."""
    if comp.ci is None:
        return _band(comp)
    lo, hi = comp.ci
    return f"CI {fmt.pct(lo - 1)}…{fmt.pct(hi - 1)}, band {_band(comp)}"


def verdict_cell(comp: Comparison) -> str:
    mark = "" if comp.paired else ", unpaired"
    return f"{fmt.pct_band(comp.delta, comp.band)[0]} ({interval(comp)}) {comp.verdict}{mark}"


def best_summary(b: Best | None) -> str:
    if b is None:
        return "none"
    return b.config


def cross_check(cand: Candidate) -> str | None:
    """Which verdicts survive being set against the baseline of other campaigns."""
    if not cand.cross:
        return None
    paired = cand.verdicts
    flipped = [x for x in cand.cross if x.verdict != paired.get(x.concurrency)]
    name = code(cand.config)
    if not flipped:
        concs = sorted({x.concurrency for x in cand.cross})
        return (f"{name}: every verdict at {fmt.conc_list(concs)} holds against the baseline "
                f"measured in other campaigns.")
    items = [
        f"at C={x.concurrency} its {paired[x.concurrency]} becomes a {x.verdict}: "
        f"{fmt.tput(x.a.mean)} vs {fmt.tput(x.b.mean)} tok/s from {code(x.b.campaign)}, "
        f"{fmt.pct_band(x.delta, x.band)[0]} against an unpaired band of {_band(x)}"
        for x in flipped
    ]
    return f"{name}: " + "; ".join(items) + "."
