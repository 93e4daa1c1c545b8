"""Open-loop verdicts: configs compared on a request-rate axis. Pure.

Under an open loop every config serves the offered load until it saturates,
so throughput says nothing below saturation. What differs is latency and
goodput under the SLO, and the highest rate a config sustains. The rules
(docs/decisions.md D87), with the noise band and intervals of
findings.derive.analysis:

- A *rate cell* is the mean of the repeats of one (campaign, config,
  workload, rate) for each judged metric: median TPOT, TTFT p99, goodput
  under the SLO (requests/s meeting every limit), and the server's running
  batch (its gauge, sampled during the point).
- A comparison is the candidate's improvement over the baseline, > 1 better:
  baseline / candidate for a latency, candidate / baseline for goodput;
  paired in the latest campaign that measured both at that rate, else the
  latest of each with the band widened, as for throughput.
- The verdict at a rate is a loss if goodput loses (the SLO is what users
  asked for), else the median-TPOT verdict (what speculation changes for
  each user). TTFT p99 is compared and shown, and decides through the SLO.
- The policy on the rate axis uses the vocabulary of analysis.policy; its
  threshold is a rate, and the batch size it maps to is the candidate's
  measured running batch at that rate (what an engine's schedule switches
  on), not the client's concurrency.
- A config *sustains* a rate when its share of requests meeting the SLO is
  at least the workload's attainment (0.9 by default). Its max sustainable
  rate is the highest measured rate it sustains with every lower measured
  rate sustained too, with the next measured rate above as the bracket.
- Profile and trace points are compared over the whole replay on the same
  metrics and rule: each config's repeats in its latest campaign (the same
  schedule for every config, seeded by the repeat) averaged, with the band
  the floor or the repeats' spread, widened when the campaigns differ.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from operator import attrgetter, methodcaller
from typing import Mapping, Sequence

from findings.derive import caveats
from findings.derive.analysis import LOSS, SIMULATED_SUFFIX, TIE, WIN, Rules, policy
from findings.core.model import Dataset, Point
from findings.derive.stats import ratio_ci

#: Metric -> True when higher is better.
JUDGED = {"median_tpot_ms": False, "p99_ttft_ms": False, "goodput_req_s": True}
SHOWN = ("offered_rate_req_s", "achieved_rate_req_s", "median_ttft_ms", "p99_ttft_ms", "median_tpot_ms",
         "p99_tpot_ms", "output_throughput_tok_s", "goodput_req_s", "slo_attainment", "server_running_mean",
         "inflight_mean", "send_lateness_p99_ms")


def open_loop(p: Point) -> str | None:
    """The point's load mode ("rate", "profile", "trace"), None for a closed loop."""
    v = p.workload_params.get("load")
    return v if isinstance(v, str) else None


_PARAMS = attrgetter("workload_params")
_LOAD = methodcaller("get", "load")


def closed_loop(points: Sequence[Point]) -> Sequence[Point]:
    """``[p for p in points if open_loop(p) is None]``, each point's load
    read at C speed (a Python call per point took 0.4 s at a million):
    ``points`` itself where none is open-loop (no list of a million made,
    nor of their loads)."""
    if not any(issubclass(t, str) for t in set(map(type, map(_LOAD, map(_PARAMS, points))))):
        return points
    return [p for p, v in zip(points, map(_LOAD, map(_PARAMS, points))) if not isinstance(v, str)]


@dataclass(frozen=True)
class RateCell:
    workload: str
    campaign: str
    rank: int
    config: str
    rate: float
    n: int
    point_ids: tuple[str, ...]
    #: metric -> the repeats' values (only metrics every repeat measured).
    values: Mapping[str, tuple[float, ...]]

    def mean(self, metric: str) -> float | None:
        v = self.values.get(metric)
        return math.fsum(v) / len(v) if v else None

    def spread(self, metric: str) -> float:
        v = self.values.get(metric)
        if not v or len(v) < 2:
            return 0.0
        m = math.fsum(v) / len(v)
        return (max(v) - min(v)) / m if m > 0 else 0.0


@dataclass(frozen=True)
class RateComparison:
    metric: str
    rate: float
    a: RateCell  # the candidate
    b: RateCell  # the reference
    #: The candidate's improvement: > 1 is better (for either direction of metric).
    ratio: float
    band: float
    paired: bool
    ci: tuple[float, float] | None = None

    @property
    def verdict(self) -> str:
        d = self.ratio - 1.0
        if d > self.band and (self.ci is None or self.ci[0] > 1.0):
            return WIN
        if d < -self.band and (self.ci is None or self.ci[1] < 1.0):
            return LOSS
        return TIE


@dataclass(frozen=True)
class RateVerdict:
    rate: float
    verdict: str
    by_metric: Mapping[str, RateComparison]
    #: Why: "goodput" when the goodput loss decided, else "median_tpot_ms".
    decided_by: str
    #: Why the verdict is not a deployment fact (caveats.pair_reasons), from
    #: the points of the comparison that decided it; empty: nothing known.
    caveats: tuple[str, ...] = ()


@dataclass(frozen=True)
class Sustained:
    config: str
    #: The highest rate sustained (with every lower one), None: not even the lowest.
    rate: float | None
    #: The next measured rate, which it did not sustain (None: none measured above).
    failed_at: float | None
    #: The SLO share at each measured rate (latest cell).
    attainment: Mapping[float, float]


@dataclass(frozen=True)
class RateCandidate:
    config: str
    policy: str
    threshold_rate: float | None
    #: The candidate's measured running batch at the threshold rate (None: not sampled).
    threshold_batch: float | None
    verdicts: tuple[RateVerdict, ...]


@dataclass(frozen=True)
class Replay:
    """A config's profile or trace replays in its latest campaign: every
    repeat (the same schedule for every config: the seed is the repeat's),
    and the mean of each metric all of them measured."""

    config: str
    campaign: str
    points: tuple[Point, ...]
    metrics: Mapping[str, float]

    def spread(self, metric: str) -> float:
        v = [p.metrics[metric] for p in self.points if metric in p.metrics]
        if len(v) < 2:
            return 0.0
        m = math.fsum(v) / len(v)
        return (max(v) - min(v)) / m if m > 0 else 0.0

    @property
    def params(self) -> Mapping[str, object]:
        return self.points[0].workload_params


@dataclass(frozen=True)
class ReplayComparison:
    config: str
    against: str
    metric: str
    ratio: float  # > 1: ``config`` better
    band: float

    @property
    def verdict(self) -> str:
        return WIN if self.ratio - 1 > self.band else LOSS if self.ratio - 1 < -self.band else TIE


@dataclass(frozen=True)
class OpenLoopConclusion:
    workload: str
    simulated: bool
    mode: str  # "rate" | "profile" | "trace"
    configs: tuple[str, ...]
    rates: tuple[float, ...]
    #: (config, rate) -> the latest cell.
    latest: Mapping[tuple[str, float], RateCell]
    candidates: tuple[RateCandidate, ...]
    sustained: tuple[Sustained, ...]
    slo: Mapping[str, float]  # slo_ttft_ms / slo_tpot_ms / slo_attainment as recorded
    replays: tuple[Replay, ...] = ()
    #: Every config against every other over the whole replay, per judged metric.
    replay_comparisons: tuple[ReplayComparison, ...] = ()
    #: (config, other) -> the config's verdict against the other over the replay.
    replay_verdicts: Mapping[tuple[str, str], str] = field(default_factory=dict)
    #: The config best over the replay (wins or ties against every other on
    #: the verdict rule, with a win somewhere); None: no such config.
    replay_best: str | None = None


def _slo(points: Sequence[Point]) -> dict[str, float]:
    for p in points:
        out = {k: float(v) for k in ("slo_ttft_ms", "slo_tpot_ms", "slo_attainment")
               if isinstance(v := p.workload_params.get(k), (int, float)) and not isinstance(v, bool)}
        if out:
            return out
    return {}


def rate_cells(points: Sequence[Point], rank: Mapping[str, int]) -> list[RateCell]:
    groups: dict[tuple[str, int, str, float], list[Point]] = {}
    for p in points:
        rate = p.workload_params.get("request_rate")
        if not isinstance(rate, (int, float)):
            continue
        groups.setdefault((p.campaign, rank[p.campaign], p.config, float(rate)), []).append(p)
    out = []
    for (campaign, r, config, rate), pts in sorted(groups.items(), key=lambda kv: (kv[0][1], kv[0][2], kv[0][3])):
        pts.sort(key=lambda p: p.id)
        keys = set(JUDGED) | set(SHOWN)
        values = {k: tuple(p.metrics[k] for p in pts) for k in keys if all(k in p.metrics for p in pts)}
        out.append(RateCell(workload=pts[0].workload, campaign=campaign, rank=r, config=config, rate=rate,
                            n=len(pts), point_ids=tuple(p.id for p in pts), values=values))
    return out


class _Rates:
    def __init__(self, cells: Sequence[RateCell], rules: Rules) -> None:
        self.rules = rules
        self.by: dict[tuple[str, float], dict[str, RateCell]] = {}
        for c in sorted(cells, key=lambda c: c.rank):
            self.by.setdefault((c.config, c.rate), {})[c.campaign] = c
        self.rates = tuple(sorted({c.rate for c in cells}))
        configs = {c.config for c in cells}
        self.configs = tuple(sorted(configs, key=lambda n: (n != rules.baseline, n)))

    def latest(self, config: str, rate: float) -> RateCell | None:
        mine = self.by.get((config, rate))
        return max(mine.values(), key=lambda c: c.rank) if mine else None

    def drift(self, rate: float, metric: str) -> float:
        """(max - min) / mean of the baseline's campaign means at this rate
        (its latest ``rules.drift_window`` campaigns)."""
        mine = sorted(self.by.get((self.rules.baseline, rate), {}).values(), key=lambda c: c.rank)
        if self.rules.drift_window:
            mine = mine[-self.rules.drift_window:]
        means = [m for c in mine if (m := c.mean(metric)) is not None]
        if len(means) < 2:
            return 0.0
        avg = math.fsum(means) / len(means)
        return (max(means) - min(means)) / avg if avg > 0 else 0.0

    def compare(self, a: str, b: str, rate: float, metric: str) -> RateComparison | None:
        ca, cb = self.by.get((a, rate), {}), self.by.get((b, rate), {})
        common = [k for k in ca if k in cb and ca[k].mean(metric) is not None and cb[k].mean(metric) is not None]
        if common:
            name = max(common, key=lambda k: ca[k].rank)
            x, y, paired = ca[name], cb[name], True
        else:
            la, lb = self.latest(a, rate), self.latest(b, rate)
            if la is None or lb is None:
                return None
            x, y, paired = la, lb, False
        return compare_cells(x, y, metric, self.rules, self.drift(rate, metric), paired)


def compare_cells(x: RateCell, y: RateCell, metric: str, rules: Rules, drift: float,
                  paired: bool) -> RateComparison | None:
    mx, my = x.mean(metric), y.mean(metric)
    if mx is None or my is None:
        return None
    higher = JUDGED[metric]
    num, den = (mx, my) if higher else (my, mx)
    if den <= 0:
        # Both zero (no goodput at all): no difference to judge; else the
        # candidate has goodput where the reference has none: a win of no
        # finite ratio.
        return RateComparison(metric, x.rate, x, y, 1.0 if num <= 0 else math.inf, rules.noise_floor, paired)
    floor = rules.noise_floor
    ci = None
    vx, vy = x.values[metric], y.values[metric]
    if rules.interval != "band" and x.n >= 2 and y.n >= 2:
        band = max(floor, drift)
        a, b = (vx, vy) if higher else (vy, vx)
        lo, hi = ratio_ci(a, b, rules.confidence, rules.resamples, "|".join(x.point_ids + y.point_ids) + metric)
        ci = (lo, hi) if math.isfinite(lo) and math.isfinite(hi) else None
    else:
        band = max(floor, x.spread(metric), y.spread(metric), drift)
    if not paired:
        band += max(floor, drift)
    return RateComparison(metric, x.rate, x, y, num / den, band, paired, ci)


def _rate_verdict(comps: Mapping[str, RateComparison], rate: float) -> RateVerdict | None:
    good = comps.get("goodput_req_s")
    tpot = comps.get("median_tpot_ms")
    if good is not None and good.verdict == LOSS:
        return RateVerdict(rate, LOSS, comps, "goodput_req_s")
    if tpot is None:
        if good is None:
            return None
        return RateVerdict(rate, good.verdict, comps, "goodput_req_s")
    return RateVerdict(rate, tpot.verdict, comps, "median_tpot_ms")


def sustained(table: _Rates, config: str, target: float) -> Sustained:
    att: dict[float, float] = {}
    for r in table.rates:
        cell = table.latest(config, r)
        v = cell.mean("slo_attainment") if cell is not None else None
        if v is not None:
            att[r] = v
    best: float | None = None
    failed: float | None = None
    for r in sorted(att):
        if att[r] >= target:
            best = r
        else:
            failed = r
            break
    return Sustained(config=config, rate=best, failed_at=failed, attainment=att)


def _replays(points: Sequence[Point], rank: Mapping[str, int], baseline: str) -> list[Replay]:
    latest: dict[str, str] = {}
    for p in points:
        if p.config not in latest or rank[p.campaign] > rank[latest[p.config]]:
            latest[p.config] = p.campaign
    out = []
    for config in sorted(latest, key=lambda n: (n != baseline, n)):
        mine = tuple(sorted((p for p in points if p.config == config and p.campaign == latest[config]),
                            key=lambda p: p.id))
        keys = set.intersection(*(set(p.metrics) for p in mine))
        means = {k: math.fsum(p.metrics[k] for p in mine) / len(mine) for k in sorted(keys)}
        out.append(Replay(config=config, campaign=latest[config], points=mine, metrics=means))
    return out


def _replay_comparisons(replays: Sequence[Replay], rules: Rules) -> list[ReplayComparison]:
    out = []
    for x in replays:
        for y in replays:
            if x is y:
                continue
            for metric, higher in JUDGED.items():
                mx, my = x.metrics.get(metric), y.metrics.get(metric)
                if mx is None or my is None:
                    continue
                num, den = (mx, my) if higher else (my, mx)
                if den <= 0 and num <= 0:
                    ratio = 1.0
                else:
                    ratio = num / den if den > 0 else math.inf
                band = max(rules.noise_floor, x.spread(metric), y.spread(metric))
                if x.campaign != y.campaign:
                    band += rules.noise_floor
                out.append(ReplayComparison(x.config, y.config, metric, ratio, band))
    return out


def _replay_verdicts(configs: Sequence[str], comps: Sequence[ReplayComparison]) -> dict[tuple[str, str], str]:
    """(a, b) -> a's verdict against b over the replay, on the rate verdict's
    rule: a loss when goodput loses, else the median-TPOT verdict."""
    out = {}
    for a in configs:
        for b in configs:
            mine = {c.metric: c for c in comps if c.config == a and c.against == b}
            if "goodput_req_s" in mine and mine["goodput_req_s"].verdict == LOSS:
                out[(a, b)] = LOSS
            elif "median_tpot_ms" in mine:
                out[(a, b)] = mine["median_tpot_ms"].verdict
            elif "goodput_req_s" in mine:
                out[(a, b)] = mine["goodput_req_s"].verdict
    return out


def _replay_best(configs: Sequence[str], verdicts: Mapping[tuple[str, str], str]) -> str | None:
    for a in configs:
        vs = [verdicts.get((a, b)) for b in configs if b != a]
        if vs and all(v in (WIN, TIE) for v in vs) and WIN in vs:
            return a
    return None


def conclude(data: Dataset, rules: Rules, flags: Mapping[str, tuple[str, ...]], *,
             spec: frozenset[str] | None = None,
             points: Mapping[str, Point] | None = None) -> tuple[OpenLoopConclusion, ...]:
    """Every open-loop workload's conclusion (simulated points a workload of
    their own, as in findings.derive.analysis); flagged points left out.
    ``spec`` and ``points``: the speculative configs and the points by id,
    where the caller has them already (derive does); else found here."""
    rank = {c.name: i for i, c in enumerate(data.campaigns)}
    if spec is None:
        spec = caveats.speculative_configs(data.configs, data.points)
    if points is None:
        points = data.points_by_id
    by: dict[str, list[Point]] = {}
    for p in data.points:
        if open_loop(p) is None or p.id in flags:
            continue
        by.setdefault(p.workload + (SIMULATED_SUFFIX if p.simulated else ""), []).append(p)
    out = []
    for name, pts in sorted(by.items()):
        modes = sorted({m for p in pts if (m := open_loop(p))})
        mode = modes[0] if len(modes) == 1 else "rate"
        slo = _slo(pts)
        table = _Rates(rate_cells([p for p in pts if open_loop(p) == "rate"], rank), rules)
        latest = {(c, r): cell for c in table.configs for r in table.rates if (cell := table.latest(c, r))}
        cands = []
        for config in table.configs:
            if config == rules.baseline:
                continue
            vs = []
            for r in table.rates:
                comps = {m: c for m in JUDGED if (c := table.compare(config, rules.baseline, r, m)) is not None}
                if (v := _rate_verdict(comps, r)) is not None:
                    d = v.by_metric[v.decided_by]
                    vs.append(replace(v, caveats=caveats.pair_reasons(
                        data, spec, points, d.a.config, d.a.campaign, d.a.point_ids,
                        d.b.config, d.b.campaign, d.b.point_ids)))
            # The policy of analysis.policy over the rates in order; its
            # threshold is an index into them (on at rates up to, or from, it).
            # One threshold rule for both axes (D90, D104): each rate's ratio
            # is the deciding metric's, so a tie that measured against
            # speculation is never the switch.
            pol, at = policy([(i, v.verdict) for i, v in enumerate(vs)],
                             [v.by_metric[v.decided_by].ratio for v in vs])
            threshold = batch = None
            if at is not None:
                threshold = vs[at].rate
                cell = table.latest(config, threshold)
                batch = cell.mean("server_running_mean") if cell is not None else None
            cands.append(RateCandidate(config, pol, threshold, batch, tuple(vs)))
        attain = slo.get("slo_attainment")
        sus = tuple(sustained(table, c, attain) for c in table.configs) if attain is not None and table.rates else ()
        replays = _replays([p for p in pts if open_loop(p) in ("profile", "trace")], rank, rules.baseline)
        rcomps = _replay_comparisons(replays, rules)
        rverdicts = _replay_verdicts([r.config for r in replays], rcomps)
        configs = table.configs or tuple(r.config for r in replays)
        out.append(OpenLoopConclusion(
            workload=name, simulated=name.endswith(SIMULATED_SUFFIX), mode=mode, configs=configs,
            rates=table.rates, latest=latest, candidates=tuple(cands), sustained=sus, slo=slo,
            replays=tuple(replays), replay_comparisons=tuple(rcomps), replay_verdicts=rverdicts,
            replay_best=_replay_best([r.config for r in replays], rverdicts)))
    return tuple(out)
