"""Pure analysis: points -> cells -> verdicts -> policies -> conclusions.

No I/O. The rules are those of docs/architecture.md and are restated in the
document's methodology section (templates/partials/methodology.md.j2):

- A *cell* is the mean of the repeats of one (campaign, config, workload, C).
- A *verdict* compares a candidate's cell with the baseline's at one C, taken
  from the latest campaign that measured both (paired). If none did, the
  latest cell of each is used (unpaired) and the band is widened.
- The *noise band* is the largest of: the floor; the relative spread
  (max-min)/mean of the repeats in either cell; the baseline's drift at that
  C, (max-min)/mean of its campaign means across campaigns. An unpaired
  comparison adds max(floor, drift) once more. A candidate's own change
  between campaigns is never noise.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Iterable, Mapping

import pandas as pd

from findings.model import THROUGHPUT, Dataset
from findings.stats import ratio_ci, window_series
from findings.validity import Gates, flagged

WIN, TIE, LOSS = "win", "tie", "loss"
POLICIES = ("always-on", "off", "no-difference", "on-below", "on-above", "inconclusive")
SIMULATED_SUFFIX = " (simulated)"


@dataclass(frozen=True)
class Rules:
    baseline: str = "baseline"
    noise_floor: float = 0.04
    #: Confidence level of the bootstrap intervals, and how many resamples.
    confidence: float = 0.95
    resamples: int = 2000
    #: Which intervals to use: "auto" (repeats, else time blocks of one run),
    #: "repeats" (only over repeats) or "band" (none: the noise band alone).
    interval: str = "auto"
    gates: Gates = field(default_factory=Gates)


@dataclass(frozen=True)
class Cell:
    workload: str
    campaign: str
    rank: int  # the campaign's place in replay order
    config: str
    concurrency: int
    mean: float
    lo: float
    hi: float
    n: int
    point_ids: tuple[str, ...]
    values: tuple[float, ...] = ()  # the repeats' throughputs
    series: tuple[float, ...] = ()  # one run's windowed throughput (stats.window_series), n == 1 only

    @property
    def spread(self) -> float:
        if self.n < 2 or self.mean <= 0:
            return 0.0
        return (self.hi - self.lo) / self.mean


@dataclass(frozen=True)
class Comparison:
    """``a`` measured against the reference ``b``."""

    a: Cell
    b: Cell
    ratio: float
    band: float
    paired: bool
    drift: float
    #: Bootstrap interval of the ratio, when repeats or per-request records allow one.
    ci: tuple[float, float] | None = None
    method: str = "band"  # "band" | "bootstrap-repeats" | "bootstrap-blocks"

    @property
    def delta(self) -> float:
        return self.ratio - 1.0

    @property
    def verdict(self) -> str:
        """Beyond the band, and (with an interval) the interval excludes 1."""
        if self.delta > self.band and (self.ci is None or self.ci[0] > 1.0):
            return WIN
        if self.delta < -self.band and (self.ci is None or self.ci[1] < 1.0):
            return LOSS
        return TIE

    @property
    def concurrency(self) -> int:
        return self.a.concurrency


@dataclass(frozen=True)
class Candidate:
    config: str
    policy: str
    threshold: int | None
    comparisons: tuple[Comparison, ...]  # sorted by C
    #: The same candidate cells against the baseline of *other* campaigns at
    #: that C (unpaired): how much of a verdict depends on which baseline run.
    cross: tuple[Comparison, ...] = ()

    @property
    def verdicts(self) -> dict[int, str]:
        return {c.concurrency: c.verdict for c in self.comparisons}


@dataclass(frozen=True)
class Best:
    """The best config of one regime, and its lead over the runner-up."""

    regime: str  # "latency" | "throughput"
    config: str
    cell: Cell
    lead: Comparison | None  # best against runner-up; None if alone

    @property
    def decisive(self) -> bool:
        return self.lead is not None and self.lead.verdict == WIN

    @property
    def concurrency(self) -> int:
        return self.cell.concurrency


@dataclass(frozen=True)
class WorkloadConclusion:
    workload: str
    simulated: bool
    concurrencies: tuple[int, ...]
    configs: tuple[str, ...]
    baseline_measured: bool
    latency: Best | None
    throughput: Best | None
    candidates: tuple[Candidate, ...]

    def candidate(self, config: str) -> Candidate | None:
        for c in self.candidates:
            if c.config == config:
                return c
        return None


@dataclass(frozen=True)
class Conclusions:
    rules: Rules
    workloads: tuple[WorkloadConclusion, ...]

    def workload(self, name: str) -> WorkloadConclusion | None:
        for w in self.workloads:
            if w.workload == name:
                return w
        return None


# ---------------------------------------------------------------- cells

def analysis_workload(workload: str, simulated: bool) -> str:
    """Simulated results are a workload of their own: never pooled with real ones."""
    return workload + SIMULATED_SUFFIX if simulated else workload


def frame(data: Dataset, rules: Rules | None = None) -> pd.DataFrame:
    """One row per point that passes the validity gates."""
    rank = {c.name: i for i, c in enumerate(data.campaigns)}
    skip = flagged(data, rules.gates) if rules is not None else {}
    rows = [
        {
            "workload": analysis_workload(p.workload, p.simulated),
            "campaign": p.campaign,
            "rank": rank[p.campaign],
            "config": p.config,
            "concurrency": p.concurrency,
            "throughput": p.metrics[THROUGHPUT],
            "point_id": p.id,
        }
        for p in data.points
        if p.id not in skip
    ]
    columns = ["workload", "campaign", "rank", "config", "concurrency", "throughput", "point_id"]
    return pd.DataFrame(rows, columns=columns)


def cells(data: Dataset, rules: Rules | None = None) -> list[Cell]:
    """Cells of the valid points (all points when no rules are given)."""
    df = frame(data, rules)
    by_id = {p.id: p for p in data.points}
    if df.empty:
        return []
    keys = ["workload", "campaign", "rank", "config", "concurrency"]
    df = df.sort_values(keys + ["point_id"], kind="stable")
    grouped = df.groupby(keys, sort=True).agg(
        mean=("throughput", "mean"),
        lo=("throughput", "min"),
        hi=("throughput", "max"),
        n=("throughput", "size"),
        point_ids=("point_id", tuple),
    )
    out = []
    for row in grouped.reset_index().to_dict("records"):
        out.append(
            Cell(
                workload=str(row["workload"]),
                campaign=str(row["campaign"]),
                rank=int(row["rank"]),
                config=str(row["config"]),
                concurrency=int(row["concurrency"]),
                mean=float(row["mean"]),
                lo=float(row["lo"]),
                hi=float(row["hi"]),
                n=int(row["n"]),
                point_ids=tuple(str(x) for x in row["point_ids"]),
                values=tuple(by_id[str(x)].throughput for x in row["point_ids"]),
                series=(window_series(by_id[str(row["point_ids"][0])].requests, concurrency=int(row["concurrency"]))
                        if int(row["n"]) == 1 else ()),
            )
        )
    return out


class Table:
    """Cells of one workload, indexed for the comparisons."""

    def __init__(self, cells: Iterable[Cell], rules: Rules) -> None:
        self.rules = rules
        self.by_key: dict[tuple[str, int], dict[str, Cell]] = {}
        for cell in cells:
            self.by_key.setdefault((cell.config, cell.concurrency), {})[cell.campaign] = cell
        self.configs = tuple(sorted({k[0] for k in self.by_key}, key=self.config_order))
        self.concurrencies = tuple(sorted({k[1] for k in self.by_key}))
        self.drift = {c: self._drift(c) for c in self.concurrencies}

    def config_order(self, name: str) -> tuple[int, str]:
        return (0 if name == self.rules.baseline else 1, name)

    def _drift(self, conc: int) -> float:
        means = [c.mean for c in self.by_key.get((self.rules.baseline, conc), {}).values()]
        if len(means) < 2:
            return 0.0
        avg = sum(means) / len(means)
        return (max(means) - min(means)) / avg if avg > 0 else 0.0

    def cells_of(self, config: str, conc: int) -> dict[str, Cell]:
        return self.by_key.get((config, conc), {})

    def latest(self, config: str, conc: int) -> Cell | None:
        found = self.cells_of(config, conc)
        return max(found.values(), key=lambda c: c.rank) if found else None

    def compare_cells(self, a: Cell, b: Cell) -> Comparison | None:
        if b.mean <= 0:
            return None
        floor = self.rules.noise_floor
        drift = max(self.drift.get(a.concurrency, 0.0), self.drift.get(b.concurrency, 0.0))
        band = max(floor, a.spread, b.spread, drift)
        paired = a.campaign == b.campaign
        ci, method = None, "band"
        mode = self.rules.interval
        if mode != "band" and a.n >= 2 and b.n >= 2:
            ci, method = self._ci(a.values, b.values, a, b), "bootstrap-repeats"
            band = max(floor, drift)  # the interval, not the range, carries the repeat noise
        elif mode == "auto" and a.series and b.series:
            ci, method = self._ci(a.series, b.series, a, b), "bootstrap-blocks"
        if not paired:
            band += max(floor, drift)
        return Comparison(a=a, b=b, ratio=a.mean / b.mean, band=band, paired=paired, drift=drift,
                          ci=ci, method=method)

    def _ci(self, a: tuple[float, ...], b: tuple[float, ...], ca: Cell, cb: Cell) -> tuple[float, float] | None:
        lo, hi = ratio_ci(a, b, self.rules.confidence, self.rules.resamples,
                          "|".join(ca.point_ids + cb.point_ids))
        return (lo, hi) if math.isfinite(lo) and math.isfinite(hi) else None

    def compare(self, a: str, b: str, conc: int) -> Comparison | None:
        """``a`` against ``b`` at one C: paired in their latest common campaign if any."""
        ca, cb = self.cells_of(a, conc), self.cells_of(b, conc)
        if not ca or not cb:
            return None
        common = set(ca) & set(cb)
        if common:
            campaign = max(common, key=lambda n: ca[n].rank)
            return self.compare_cells(ca[campaign], cb[campaign])
        la, lb = self.latest(a, conc), self.latest(b, conc)
        assert la is not None and lb is not None
        return self.compare_cells(la, lb)

    def peak(self, config: str) -> Cell | None:
        """The config's highest current throughput: the latest cell at each C."""
        current = [self.latest(config, c) for c in self.concurrencies]
        found = [c for c in current if c is not None]
        return max(found, key=lambda c: (c.mean, -c.concurrency)) if found else None


# ---------------------------------------------------------------- policy

def policy(verdicts: list[tuple[int, str]]) -> tuple[str, int | None]:
    """The policy vocabulary of docs/architecture.md, from verdicts sorted by C."""
    seq = [v for _, v in verdicts]
    concs = [c for c, _ in verdicts]
    wins = [i for i, v in enumerate(seq) if v == WIN]
    losses = [i for i, v in enumerate(seq) if v == LOSS]
    if not seq:
        return "inconclusive", None
    if not wins and not losses:
        return "no-difference", None
    if wins and not losses:
        return "always-on", None
    if losses and not wins:
        return "off", None
    if max(wins) < min(losses):
        first_loss = min(losses)
        return "on-below", concs[first_loss - 1]
    if max(losses) < min(wins):
        last_loss = max(losses)
        return "on-above", concs[last_loss + 1]
    return "inconclusive", None


# ---------------------------------------------------------------- conclusions

def _best(table: Table, regime: str, scored: list[tuple[float, str, Cell]]) -> Best | None:
    if not scored:
        return None
    scored.sort(key=lambda s: (-s[0], table.config_order(s[1])))
    _, best, cell = scored[0]
    lead = None
    if len(scored) > 1:
        _, runner, runner_cell = scored[1]
        if regime == "latency":
            lead = table.compare(best, runner, cell.concurrency)
        else:
            lead = table.compare_cells(cell, runner_cell)
    return Best(regime=regime, config=best, cell=cell, lead=lead)


def conclude_workload(workload: str, wcells: list[Cell], rules: Rules) -> WorkloadConclusion:
    table = Table(wcells, rules)
    base = rules.baseline
    candidates = []
    for config in table.configs:
        if config == base:
            continue
        comps = [table.compare(config, base, c) for c in table.concurrencies]
        found = tuple(c for c in comps if c is not None)
        pol, threshold = policy([(c.concurrency, c.verdict) for c in found])
        cross = tuple(
            x
            for comp in found
            for other in sorted(table.cells_of(base, comp.concurrency).values(), key=lambda c: c.rank)
            if other.campaign != comp.b.campaign and (x := table.compare_cells(comp.a, other)) is not None
        )
        candidates.append(Candidate(config=config, policy=pol, threshold=threshold, comparisons=found, cross=cross))

    latency = None
    if table.concurrencies:
        low = table.concurrencies[0]
        scored: list[tuple[float, str, Cell]] = []
        base_cell = table.latest(base, low)
        for config in table.configs:
            cell = table.latest(config, low)
            if cell is None:
                continue
            if base_cell is None:
                score = cell.mean
            elif config == base:
                score = 1.0
            else:
                comp = table.compare(config, base, low)
                score = comp.ratio if comp else 0.0
                cell = comp.a if comp else cell
            scored.append((score, config, cell))
        latency = _best(table, "latency", scored)

    peaks = [(p.mean, cfg, p) for cfg in table.configs if (p := table.peak(cfg)) is not None]
    throughput = _best(table, "throughput", peaks)
    return WorkloadConclusion(
        workload=workload,
        simulated=workload.endswith(SIMULATED_SUFFIX),
        concurrencies=table.concurrencies,
        configs=table.configs,
        baseline_measured=any(k[0] == base for k in table.by_key),
        latency=latency,
        throughput=throughput,
        candidates=tuple(candidates),
    )


def conclude(data: Dataset, rules: Rules) -> Conclusions:
    by_workload: dict[str, list[Cell]] = {}
    for cell in cells(data, rules):
        by_workload.setdefault(cell.workload, []).append(cell)
    return Conclusions(
        rules=rules,
        workloads=tuple(conclude_workload(w, cs, rules) for w, cs in sorted(by_workload.items())),
    )


def campaign_comparisons(data: Dataset, rules: Rules) -> Mapping[tuple[str, str], list[Comparison]]:
    """Within-campaign comparisons of every candidate with the baseline.

    Keyed by (campaign, workload). The noise band uses everything known now,
    so an old campaign's table shows its numbers judged by today's noise
    estimate.
    """
    all_cells = cells(data, rules)
    tables: dict[str, Table] = {}
    for w in sorted({c.workload for c in all_cells}):
        tables[w] = Table([c for c in all_cells if c.workload == w], rules)
    out: dict[tuple[str, str], list[Comparison]] = {}
    for cell in all_cells:
        if cell.config == rules.baseline:
            continue
        table = tables[cell.workload]
        base = table.cells_of(rules.baseline, cell.concurrency).get(cell.campaign)
        if base is None:
            continue
        comp = table.compare_cells(cell, base)
        if comp is not None:
            out.setdefault((cell.campaign, cell.workload), []).append(comp)
    return out


def finite(x: float) -> float | None:
    return x if math.isfinite(x) else None
