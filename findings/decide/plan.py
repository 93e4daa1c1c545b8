"""What to measure next: the conclusions' open questions, each with the
measurements that would settle it, and the benchmark matrix that takes them.
Pure: the caller reads the store and the source matrix, and writes the file.

Kinds of question (docs/plan.md, docs/decisions.md D73):

- ``threshold``: an ``on-below``/``on-above`` policy whose switch lies
  between two measured C. Both configs, in one new campaign, at C strictly
  inside the bracket: the baseline's own measured C there where it has
  some (the study's grid, and the candidate's missing pairs), else a
  geometric grid, three points at most.
- ``undecided``: a tie whose interval straddles a band edge (or, without an
  interval, a ratio nearer the edge than the middle of the band; or a win
  or loss without an interval within half a band beyond the edge), an
  ``inconclusive`` policy, or a verdict that flips against another
  campaign's baseline. Repeats, as many as the observed spread needs at the
  configured confidence, at most ``max_repeats``.
- ``missing-pair``: a C measured for only one of the candidate and the
  baseline.
- ``stale``: a config whose recorded facts changed (a new engine version)
  since it was last measured on the workload.

Ordered by how much an answer can change a deployment decision: thresholds,
then questions about a current best, then the rest.
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass, replace
from itertools import compress, repeat
from operator import attrgetter
from statistics import NormalDist
from typing import TYPE_CHECKING, Any, Iterable, Mapping, Sequence

from findings.derive import regressions
from findings.derive.analysis import SIMULATED_SUFFIX, TIE, Candidate, Cell, Comparison, Rules, Table
from findings.datasets.model import REGISTRY
from findings.core.model import Dataset, Point

if TYPE_CHECKING:  # the bench package imports aiohttp: kept off the render path
    from findings.bench.matrix import Matrix, Sweep
    from findings.bench.workload import Workload

KINDS = ("threshold", "undecided", "missing-pair", "stale")
#: Repeats proposed for one point, at most (and at least 2: an interval needs two).
MAX_REPEATS = 10
#: Points inside a threshold's bracket, at most.
BRACKET_POINTS = 3


@dataclass(frozen=True)
class Question:
    workload: str  # the analysis workload ("W (simulated)" for simulated results)
    config: str
    kind: str
    concurrency: tuple[int, ...]
    repeats: int
    why: str
    configs: tuple[str, ...]  # what to measure, the baseline first
    priority: int = 2  # 0 threshold, 1 about a current best, 2 the rest
    requests: int | None = None
    minutes: float | None = None

    @property
    def base_workload(self) -> str:
        return self.workload[:-len(SIMULATED_SUFFIX)] if self.workload.endswith(SIMULATED_SUFFIX) else self.workload


@dataclass(frozen=True)
class Plan:
    questions: tuple[Question, ...]
    left_out: tuple[Question, ...] = ()  # beyond the budget
    notes: tuple[str, ...] = ()

    @property
    def requests(self) -> int | None:
        values = [q.requests for q in self.questions]
        return sum(v for v in values if v is not None) if values and None not in values else None

    @property
    def minutes(self) -> float | None:
        values = [q.minutes for q in self.questions]
        return round(sum(v for v in values if v is not None), 1) if values and None not in values else None


# ---------------------------------------------------------------- questions

def _geometric(lo: int, hi: int, n: int) -> list[int]:
    out = sorted({round(lo * (hi / lo) ** (k / (n + 1))) for k in range(1, n + 1)})
    return [c for c in out if lo < c < hi]


def bracket_points(lo: int, hi: int, measured: Sequence[int], taken: Sequence[int] = ()) -> list[int]:
    """C strictly inside (lo, hi), never one of ``taken`` (the C already
    measured for every config compared): the grid's own C there (at most
    three, spread out), else a geometric grid of three, each C moved to the
    nearest one not taken. Empty when every C inside is taken."""
    skip = set(taken)
    inside = sorted(c for c in set(measured) if lo < c < hi and c not in skip)
    if len(inside) > BRACKET_POINTS:
        idx = sorted({round(i * (len(inside) - 1) / (BRACKET_POINTS - 1)) for i in range(BRACKET_POINTS)})
        inside = [inside[i] for i in idx]
    if inside:
        return inside
    free = [c for c in range(lo + 1, hi) if c not in skip]
    if len(free) <= BRACKET_POINTS:
        return free
    chosen: list[int] = []
    for g in _geometric(lo, hi, BRACKET_POINTS):
        left = [c for c in free if c not in chosen]
        chosen.append(min(left, key=lambda c: (abs(c - g), c)))
    return sorted(chosen)


def _bracket(cand: Candidate) -> tuple[int, int] | None:
    """The C around the estimated crossover's range (findings/derive/crossover.py):
    the whole Cs just outside [low, high]."""
    x = cand.crossover
    if x is None or cand.threshold is None:
        return None
    return max(1, math.floor(x.low)), math.ceil(x.high)


#: Each cell of repeats' share of a pooled variance (in the cells' order), and their degrees of freedom.
Terms = tuple[list[float], int]


_N = attrgetter("n")
_RANK = attrgetter("rank")


def _terms(cells: Iterable[Cell]) -> Terms:
    terms, dof = [], 0
    cells = list(cells)
    # The cells of repeats picked out at C speed (most cells hold one run), in their order.
    for c in compress(cells, map((2).__le__, map(_N, cells))):
        if c.mean > 0:
            var = sum((v - c.mean) ** 2 for v in c.values) / (c.n - 1)
            terms.append(var / c.mean ** 2 * (c.n - 1))
            dof += c.n - 1
    return terms, dof


def _pooled(parts: Sequence[Terms]) -> float | None:
    """The relative standard deviation pooled over ``parts``, the terms added
    one by one in order (the same bits as one pass over the cells)."""
    num, dof = 0.0, 0
    for terms, d in parts:
        for t in terms:
            num += t
        dof += d
    return math.sqrt(num / dof) if dof else None


class _Spread:
    """A table's ``_terms`` per (config, C), each found once: every candidate
    of a workload pools its own repeats with the baseline's, across every
    campaign (issue 38: thousands of campaigns)."""

    def __init__(self, table: Table) -> None:
        self.table = table
        self._found: dict[tuple[str, int], Terms] = {}

    def __call__(self, config: str, conc: int) -> Terms:
        found = self._found.get((config, conc))
        if found is None:
            found = self._found[(config, conc)] = _terms(self.table.cells_of(config, conc).values())
        return found


def repeats_needed(cv: float, margin: float, confidence: float) -> int:
    """Repeats per config for the interval of the ratio of means to be as
    narrow as ``margin`` on each side: n = 2 (z cv / margin)^2 (the variance
    of a ratio of two means of n, each with relative spread cv), within
    [2, MAX_REPEATS]."""
    z = NormalDist().inv_cdf(1 - (1 - confidence) / 2)
    n = math.ceil(2 * (z * cv / max(margin, 0.01)) ** 2)
    return max(2, min(MAX_REPEATS, n))


def _noise(table: Table, config: str, baseline: str, conc: int, rules: Rules,
           spread: _Spread) -> tuple[float, str]:
    cv = _pooled([spread(config, conc), spread(baseline, conc)])
    if cv is not None:
        return cv, f"the observed spread of the repeats ({cv * 100:.1f}%)"
    drift = table.drift.get(conc, 0.0)
    if drift > 0:
        return drift / 2, f"half the baseline's drift across campaigns ({drift * 50:.1f}%; no repeats recorded)"
    return rules.noise_floor / 2, f"half the noise floor ({rules.noise_floor * 50:.1f}%; no repeats recorded)"


def _undecided(cand: Candidate, table: Table, rules: Rules, spread: _Spread) -> tuple[list[int], list[str], int]:
    concs: list[int] = []
    why: list[str] = []
    repeats = 2
    for comp in cand.comparisons:
        reason = None
        margin = abs(abs(comp.delta) - comp.band)
        if cand.policy == "inconclusive" and comp.verdict != TIE:
            reason = f"C={comp.concurrency} {comp.verdict} in an inconclusive policy"
        elif comp.verdict == TIE and comp.ci is not None and (
                comp.ci[0] < 1 - comp.band < comp.ci[1] or comp.ci[0] < 1 + comp.band < comp.ci[1]):
            reason = (f"C={comp.concurrency} tie whose interval ({(comp.ci[0] - 1) * 100:+.1f}%…"
                      f"{(comp.ci[1] - 1) * 100:+.1f}%) straddles the band edge (±{comp.band * 100:.1f}%)")
        elif comp.verdict == TIE and comp.ci is None and abs(comp.delta) > comp.band / 2:
            reason = (f"C={comp.concurrency} tie at {comp.delta * 100:+.1f}%, nearer the band edge "
                      f"(±{comp.band * 100:.1f}%) than no change, with no interval")
        elif comp.verdict != TIE and comp.ci is None and abs(comp.delta) < 1.5 * comp.band:
            reason = (f"C={comp.concurrency} {comp.verdict} at {comp.delta * 100:+.1f}%, within half a band of "
                      f"the edge (±{comp.band * 100:.1f}%), with no interval")
        elif (flip := cand.flip_at(comp.concurrency)) is not None:
            # (the cross-checks grow with the campaigns: made only for the Cs no reason above took)
            own, x = flip
            reason = (f"C={comp.concurrency} {own.verdict} becomes a {x.verdict} against the baseline of "
                      f"{x.b.campaign}")
            margin = abs(abs(x.delta) - x.band)
        if reason is None:
            continue
        cv, source = _noise(table, cand.config, rules.baseline, comp.concurrency, rules, spread)
        n = repeats_needed(cv, margin, rules.confidence)
        repeats = max(repeats, n)
        concs.append(comp.concurrency)
        why.append(f"{reason}; {n} repeats for a {rules.confidence * 100:.0f}% interval from {source}")
    return concs, why, repeats


def questions(data: Dataset, rules: Rules, done: regressions.Concluded) -> list[Question]:
    """Every open question of the current conclusions, most decisive first."""
    out: list[Question] = []
    base = rules.baseline
    known = _latest_facts(data)
    for wc in done.conclusions.workloads:
        if not wc.baseline_measured:
            continue
        table = done.tables[wc.workload]
        spread = _Spread(table)
        base_cs = [c for c in table.concurrencies if table.cells_of(base, c)]
        best = {b.config for b in (wc.latency, wc.throughput) if b is not None} | \
               {b.lead.b.config for b in (wc.latency, wc.throughput) if b is not None and b.lead is not None}
        for cand in wc.candidates:
            covered: set[int] = set()
            mine = [c for c in table.concurrencies if table.cells_of(cand.config, c)]
            bracket = _bracket(cand)
            both = [c for c in base_cs if c in mine]  # measured for both configs: never proposed again
            cs = bracket_points(*bracket, base_cs, both) if bracket is not None else []
            if bracket is not None and bracket[1] - bracket[0] > 1 and cand.crossover is not None and cs:
                lo, hi = bracket
                x = cand.crossover
                a, b = x.between
                n = max((cell.n for c in (a, b) for cell in table.cells_of(cand.config, c).values()), default=1)
                gap = (f"; nothing was measured between C={a} and C={b}"
                       if not any(a < c < b for c in mine) and b - a > 1 else "")
                out.append(Question(wc.workload, cand.config, "threshold", tuple(cs), n,
                                    f"the {cand.policy} switch (threshold C={cand.threshold}): the ratio crosses "
                                    f"the baseline near C≈{x.estimate:.1f}, between {x.low:.1f} and {x.high:.1f}"
                                    f"{gap}", (base, cand.config), priority=0))
                covered.update(cs)
            concs, why, n = _undecided(cand, table, rules, spread)
            if concs:
                out.append(Question(wc.workload, cand.config, "undecided", tuple(concs), n, "; ".join(why),
                                    (base, cand.config)))
                covered.update(concs)
            only_base = sorted(set(base_cs) - set(mine) - covered)
            only_cand = sorted(set(mine) - set(base_cs) - covered)
            if only_base or only_cand:
                parts = []
                if only_base:
                    parts.append(f"{cand.config} was never measured at C={', '.join(map(str, only_base))}")
                if only_cand:
                    parts.append(f"{base} was never measured at C={', '.join(map(str, only_cand))}")
                out.append(Question(wc.workload, cand.config, "missing-pair", tuple(only_base + only_cand), 1,
                                    "; ".join(parts), (base, cand.config)))
        for config in table.configs:
            stale = _stale(data, table, config, wc.workload, known)
            if stale is not None:
                configs = (base,) if config == base else (base, config)
                out.append(Question(wc.workload, config, "stale", stale[0], 1, stale[1], configs))
        for i, q in enumerate(out):
            if q.workload == wc.workload and q.priority > 0 and q.config in best:
                out[i] = replace(q, priority=1)
    return sorted(out, key=lambda q: (q.priority, KINDS.index(q.kind), q.workload, q.config))


def _latest_facts(data: Dataset) -> tuple[dict[str, int], dict[str, str]]:
    """Each campaign's rank, and each config's latest campaign with recorded
    facts (the first of the latest, in the order of ``data.facts``): once per
    ``questions``, not once per config and workload."""
    rank = {c.name: i for i, c in enumerate(data.campaigns)}
    latest: dict[str, str] = {}
    for config, campaign in data.facts:
        now = latest.get(config)
        if now is None or rank.get(campaign, -1) > rank.get(now, -1):
            latest[config] = campaign
    return rank, latest


def _stale(data: Dataset, table: Table, config: str, workload: str,
           known: tuple[dict[str, int], dict[str, str]]) -> tuple[tuple[int, ...], str] | None:
    """A config whose facts changed between its last campaign on this
    workload and its latest campaign anywhere (``known``: ``_latest_facts``)."""
    rank, latest_of = known
    # Its latest cell at each C, not every cell of every campaign (a pass over
    # each of them for every config took 0.37 s of a million points' plan).
    ends = [cell for cell in map(table.latest, repeat(config), table.concurrencies) if cell is not None]
    if not ends:
        return None
    last_here = max(ends, key=_RANK).campaign
    latest = latest_of.get(config)
    if latest is None:
        return None
    if rank.get(latest, -1) <= rank.get(last_here, -1):
        return None
    changed = regressions.facts_changed(data.facts_of(config, last_here), data.facts_of(config, latest))
    if not changed:
        return None
    cs = tuple(sorted(c for c in table.concurrencies if last_here in table.cells_of(config, c)))
    return cs, (f"{config}'s recorded facts changed since it was measured on this workload "
                f"({last_here} → {latest}): {regressions.describe_facts(changed)}")


# ---------------------------------------------------------------- estimate

def _durations(points: Sequence[Point]) -> dict[tuple[str, str, int], list[float]]:
    out: dict[tuple[str, str, int], list[float]] = {}
    for p in points:
        d = p.metrics.get("duration")
        if d is not None and d > 0:
            w = p.workload + (SIMULATED_SUFFIX if p.simulated else "")
            out.setdefault((w, p.config, p.concurrency), []).append(d)
    return out


def _means(known: Mapping[tuple[str, str, int], list[float]]) -> dict[tuple[str, str], dict[int, float]]:
    """(workload, config) -> C -> the mean seconds of its points there."""
    out: dict[tuple[str, str], dict[int, float]] = {}
    for (w, cfg, c), v in known.items():
        out.setdefault((w, cfg), {})[c] = sum(v) / len(v)
    return out


def _duration(means: Mapping[tuple[str, str], Mapping[int, float]], workload: str, config: str,
              conc: int) -> float | None:
    """Seconds for one point: measured at that C, else interpolated in log C
    between the nearest measured C of the config (held flat beyond them)."""
    mine = means.get((workload, config))
    if not mine:
        return None
    if conc in mine:
        return mine[conc]
    below = [c for c in mine if c < conc]
    above = [c for c in mine if c > conc]
    if not below:
        return mine[min(above)]
    if not above:
        return mine[max(below)]
    lo, hi = max(below), min(above)
    t = (math.log(conc) - math.log(lo)) / (math.log(hi) - math.log(lo))
    return mine[lo] + t * (mine[hi] - mine[lo])


def _planned_counts(points: Sequence[Point]) -> dict[tuple[str, int], int]:
    """(workload, C) -> the most requests a point there planned: found in
    one pass, not one per question (at 100k points and 292 questions that
    was 29M steps, issue 38)."""
    out: dict[tuple[str, int], int] = {}
    for p in points:
        planned = p.metrics.get("planned")
        if planned is not None:
            key, n = (p.workload, p.concurrency), int(planned)
            if n > out.get(key, n - 1):
                out[key] = n
    return out


def _planned(counts: Mapping[tuple[str, int], int], workloads: Mapping[str, Workload], q: Question,
             conc: int) -> int | None:
    w = workloads.get(q.base_workload)
    if w is not None:
        return round(w.requests_at(conc) * w.turns_per_prompt())
    return counts.get((q.base_workload, conc))


def estimate(qs: Sequence[Question], data: Dataset, workloads: Mapping[str, Workload]) -> list[Question]:
    """Each question with its requests and minutes (None where the store
    records no durations or request counts to go by)."""
    means = _means(_durations(data.points))
    counts = _planned_counts(data.points) if qs else {}
    out = []
    for q in qs:
        reqs: int | None = 0
        secs: float | None = 0.0
        for config in q.configs:
            for c in q.concurrency:
                n = _planned(counts, workloads, q, c)
                reqs = None if reqs is None or n is None else reqs + n * q.repeats
                d = _duration(means, q.workload, config, c)
                secs = None if secs is None or d is None else secs + d * q.repeats
        out.append(replace(q, requests=reqs, minutes=round(secs / 60, 1) if secs is not None else None))
    return out


def within_budget(qs: Sequence[Question], minutes: float | None) -> Plan:
    """Fewer repeats (down to 2), then the least decisive questions left out,
    until the estimate fits ``minutes``. Unknown durations cannot be budgeted."""
    if minutes is None:
        return Plan(tuple(qs))
    if any(q.minutes is None for q in qs):
        return Plan(tuple(qs), notes=("the store records no durations for some points: the budget was not applied",))
    kept = list(qs)
    total = sum(q.minutes or 0.0 for q in kept)
    notes: list[str] = []
    for i in sorted(range(len(kept)), key=lambda i: -kept[i].priority):
        q = kept[i]
        if total <= minutes or q.repeats <= 2:
            continue
        scaled = replace(q, repeats=2, minutes=round((q.minutes or 0) * 2 / q.repeats, 1),
                         requests=q.requests * 2 // q.repeats if q.requests is not None else None)
        total -= (q.minutes or 0) - (scaled.minutes or 0)
        notes.append(f"{q.workload} / {q.config} ({q.kind}): {q.repeats} → 2 repeats for the budget")
        kept[i] = scaled
    left: list[Question] = []
    while kept and total > minutes:
        q = max(kept, key=lambda q: (q.priority, KINDS.index(q.kind)))
        kept.remove(q)
        left.append(q)
        total -= q.minutes or 0
    return Plan(tuple(kept), tuple(left), tuple(notes))


# ---------------------------------------------------------------- the matrix

def _toml(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_toml(v) for v in value) + "]"
    raise TypeError(value)


def campaign_name(q: Question) -> str:
    raw = f"plan-{q.kind}-{q.base_workload}-{q.config}"
    return "".join(ch if ch.isalnum() or ch in "-_." else "-" for ch in raw)[:100]


def matrix_toml(plan: Plan, source: Matrix, header: str) -> str:
    """A matrix for ``findings bench``: the source matrix's configs, workloads
    and sweep settings, one campaign per question."""
    used_configs = sorted({c for q in plan.questions for c in q.configs})
    used_workloads = sorted({q.base_workload for q in plan.questions})
    missing = [c for c in used_configs if c not in source.configs] + \
        [w for w in used_workloads if w not in source.workloads]
    if missing:
        raise KeyError(", ".join(missing))
    sweep = _source_sweep(source, used_workloads)
    lines = [f"# {line}" if line else "#" for line in header.splitlines()] + ["", "[defaults]"]
    for key in ("api", "transport", "warmup", "health_timeout_s", "read_timeout_s", "flush_cache"):
        lines.append(f"{key} = {_toml(getattr(sweep, key))}")
    for name in used_workloads:
        w = source.workloads[name]
        ps = w.prompt_set
        if ps is None:
            lines += ["", f"[workloads.{name}]", f"prompts = {_toml(w.kind)}", f"input_len = {w.input_len}"]
        else:
            # The same prompt set: a registry set by name, a file by its absolute path (the
            # plan's matrix is written elsewhere), a split's category by name.
            lines += ["", f"[workloads.{name}]",
                      f"prompts = {_toml(ps.format)}" if ps.format in REGISTRY else
                      f"dataset = {_toml(os.path.abspath(ps.source))}"]
            if w.category is not None:
                lines.append(f"category = {_toml(w.category)}")
            if w.max_turns is not None:
                lines.append(f"max_turns = {w.max_turns}")
        lines += [f"output_len = {w.output_len}", f"num_prompts = {w.num_prompts}",
                  f"prompts_per_concurrency = {w.per_concurrency}", f"ignore_eos = {_toml(w.ignore_eos)}",
                  f"seed = {w.seed}"]
        if w.vocab_size is not None:
            lines.append(f"vocab_size = {w.vocab_size}")
    for name in used_configs:
        spec = source.configs[name]
        lines += ["", f"[configs.{name}]"]
        lines.append(f"launch = {_toml(spec.launch)}" if spec.launch else f"url = {_toml(spec.url)}")
        if spec.env:
            lines.append("env = { " + ", ".join(f"{k} = {_toml(v)}" for k, v in sorted(spec.env.items())) + " }")
        if spec.facts:
            lines.append("facts = { " + ", ".join(f"{k} = {_toml(v)}" for k, v in sorted(spec.facts.items())) + " }")
    for q in plan.questions:
        lines += ["", "[[campaigns]]", f"# {q.kind}: {q.why}", f"name = {_toml(campaign_name(q))}",
                  f"configs = {_toml(list(q.configs))}", f"workloads = {_toml([q.base_workload])}",
                  f"concurrency = {_toml(list(q.concurrency))}", f"repeats = {q.repeats}"]
    return "\n".join(lines) + "\n"


def _source_sweep(source: Matrix, workloads: Sequence[str]) -> Sweep:
    for c in source.campaigns:
        if any(w in c.workloads for w in workloads):
            return c.sweep
    return source.campaigns[0].sweep


# ---------------------------------------------------------------- shapes

def to_json(plan: Plan, matrix: str | None, matrix_missing: str | None = None) -> dict[str, Any]:
    """The shape of ``findings plan --json`` (docs/plan.md)."""
    def item(q: Question) -> dict[str, Any]:
        return {"workload": q.workload, "config": q.config, "kind": q.kind, "concurrency": list(q.concurrency),
                "repeats": q.repeats, "why": q.why, "configs": list(q.configs),
                "requests": q.requests, "minutes": q.minutes}
    return {"questions": [item(q) for q in plan.questions],
            "estimate": {"requests": plan.requests, "minutes": plan.minutes},
            "left_out": [item(q) for q in plan.left_out],
            "notes": list(plan.notes),
            "matrix": matrix,
            **({"matrix_missing": matrix_missing} if matrix_missing else {})}


def line(q: Question) -> str:
    """One line: ``threshold: eagle3-topk1-v2 on diverse-prompts at C=2, 5, 10 (1 repeat): why``."""
    rep = f"{q.repeats} repeat{'s' if q.repeats != 1 else ''}"
    return (f"{q.kind}: {q.config} on {q.workload} at C={', '.join(map(str, q.concurrency))} ({rep}, "
            f"with {', '.join(q.configs)}): {q.why}")


def keep(q: Question, workload: str | None = None, config: str | None = None, kind: str | None = None) -> bool:
    return ((workload is None or workload in (q.workload, q.base_workload))
            and (config is None or config == q.config) and (kind is None or kind == q.kind))
