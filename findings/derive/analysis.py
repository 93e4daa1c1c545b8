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

import bisect
import collections
import functools
import math
import operator
from dataclasses import dataclass, field
from typing import Collection, Iterable, Iterator, Mapping, NamedTuple, Sequence, overload

from findings.derive import crossover as crossover_mod
from findings.core.model import THROUGHPUT, Dataset, Point
from findings.core.series import window_series
from findings.derive.stats import codes, group_runs, ratio_bounds, ratio_ci
from findings.derive.tuning import Objective
from findings.derive.validity import Gates, flagged

WIN, TIE, LOSS = "win", "tie", "loss"
#: A comparison whose band is the baseline's drift beyond ``Rules.drift_cap``:
#: a tie there would only say the baseline wanders too far to judge (D89).
NOT_COMPARABLE = "not comparable"
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
    #: The baseline's drift is measured over its latest this many campaigns
    #: at each C (0: all of them). Years of nightly campaigns would otherwise
    #: widen every band until nothing can win (docs/decisions.md D52).
    drift_window: int = 10
    #: The widest drift band a verdict is given under: beyond it (the
    #: baseline's campaign means at a C spread more than this), a comparison
    #: is "not comparable" rather than a tie (D89). The llama.cpp tier's
    #: widest real drift is 37%.
    drift_cap: float = 0.5
    #: What `findings tune` scores its trials by (findings.toml's [tune]; D115).
    objective: Objective = field(default_factory=Objective)


class Cell(NamedTuple):
    """One (workload, campaign, config, C): the mean of its valid points.
    A named tuple, not a frozen dataclass: a store of a million points makes
    as many cells, and a tuple is made at C speed (a frozen dataclass sets
    each field through object.__setattr__; issue 38)."""

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


class Comparison(NamedTuple):
    """``a`` measured against the reference ``b``. A named tuple, as ``Cell``:
    the history's replay makes one per candidate and C at every campaign."""

    a: Cell
    b: Cell
    ratio: float
    band: float
    paired: bool
    drift: float
    #: Bootstrap interval of the ratio, when repeats or per-request records allow one;
    #: None as well in a comparison made for its verdict only (the history, the
    #: cross-checks, a best's lead) where no interval could change the verdict:
    #: the ratio inside the band, or every resampled ratio on one side of 1.
    ci: tuple[float, float] | None = None
    method: str = "band"  # "band" | "bootstrap-repeats" | "bootstrap-blocks"
    #: The drift is beyond Rules.drift_cap: no verdict.
    capped: bool = False

    @property
    def delta(self) -> float:
        return self.ratio - 1.0

    @property
    def verdict(self) -> str:
        """Beyond the band, and (with an interval) the interval excludes 1;
        no verdict at all under a drift band beyond the cap."""
        if self.capped:
            return NOT_COMPARABLE
        delta, band, ci = self.ratio - 1.0, self.band, self.ci  # read once: hundreds of thousands a render
        if delta > band and (ci is None or ci[0] > 1.0):
            return WIN
        if delta < -band and (ci is None or ci[1] < 1.0):
            return LOSS
        return TIE

    @property
    def concurrency(self) -> int:
        return self.a.concurrency

    @property
    def bounds(self) -> tuple[float, float]:
        """The ratio's lower and upper bound as the verdict judges it: a win
        is "lower bound above 1", a loss "upper bound below 1"."""
        lo, hi = self.ratio - self.band, self.ratio + self.band
        if self.ci is not None:
            lo, hi = min(lo, self.ci[0]), max(hi, self.ci[1])
        return lo, hi


class CrossChecks(Sequence[Comparison]):
    """A candidate's cross-checks (``Candidate.cross``): each of its
    comparisons' candidate cell against the baseline of every other campaign
    at that C (``Table.cross_of``), made when first read (D132). A store of
    years holds hundreds of thousands of them; a render reads those of the
    campaigns it shows (``Candidate.cross_in``) and the first flip at each C
    (``Candidate.flip_at``), ``conclusions --json`` their ratios
    (``Candidate.cross_ratios``). Equal to the tuple of them; the table it
    reads is never changed after the conclusion is made."""

    __slots__ = ("_table", "_comps", "_made")

    def __init__(self, table: Table, comps: tuple[Comparison, ...]) -> None:
        self._table = table
        self._comps = comps
        self._made: tuple[Comparison, ...] | None = None

    def made(self) -> tuple[Comparison, ...]:
        if self._made is None:
            self._made = tuple(x for comp in self._comps for x in self._table.cross_of(comp))
        return self._made

    def __len__(self) -> int:
        return len(self.made())

    @overload
    def __getitem__(self, i: int) -> Comparison: ...

    @overload
    def __getitem__(self, i: slice) -> tuple[Comparison, ...]: ...

    def __getitem__(self, i: int | slice) -> Comparison | tuple[Comparison, ...]:
        return self.made()[i]

    def __iter__(self) -> Iterator[Comparison]:
        return iter(self.made())

    def __bool__(self) -> bool:
        return any(True for comp in self._comps for _ in self._table.cross_ratios(comp))

    def __eq__(self, other: object) -> bool:
        if isinstance(other, (CrossChecks, tuple)):
            return self.made() == tuple(other)
        return NotImplemented

    def __hash__(self) -> int:
        return hash(self.made())

    def __repr__(self) -> str:
        return repr(self.made())

    def __reduce__(self) -> tuple[object, ...]:
        return (tuple, (self.made(),))


@dataclass(frozen=True)
class Candidate:
    config: str
    policy: str
    threshold: int | None
    comparisons: tuple[Comparison, ...]  # sorted by C
    #: The same candidate cells against the baseline of *other* campaigns at
    #: that C (unpaired): how much of a verdict depends on which baseline run.
    cross: Sequence[Comparison] = ()
    #: Where the ratio crosses the baseline, for a threshold policy
    #: (findings/derive/crossover.py).
    crossover: crossover_mod.Crossover | None = None
    #: Cs the candidate measured where the baseline never was, and the other way round.
    candidate_only: tuple[int, ...] = ()
    baseline_only: tuple[int, ...] = ()

    @property
    def noise_measured(self) -> bool:
        """Whether any band rests on measured noise (repeats, an interval, the
        baseline's drift) rather than on the floor alone."""
        return any(c.ci is not None or c.a.n > 1 or c.b.n > 1 or c.drift > 0 for c in self.comparisons)

    @property
    def judged(self) -> tuple[Comparison, ...]:
        """The comparisons with a verdict (not ``not comparable``)."""
        return tuple(c for c in self.comparisons if c.verdict != NOT_COMPARABLE)

    def cross_in(self, campaigns: Collection[str]) -> tuple[Comparison, ...]:
        """The cross-checks against the baselines of ``campaigns`` only, in order."""
        cross = self.cross
        if isinstance(cross, CrossChecks) and cross._made is None:
            return tuple(x for comp in cross._comps for x in cross._table._cross(comp, campaigns))
        return tuple(x for x in cross if x.b.campaign in campaigns)

    def cross_ratios(self) -> Iterator[tuple[int, str, float]]:
        """(C, the other campaign, the ratio) of each cross-check, in order."""
        cross = self.cross
        if isinstance(cross, CrossChecks) and cross._made is None:
            for comp in cross._comps:
                for campaign, ratio in cross._table.cross_ratios(comp):
                    yield comp.concurrency, campaign, ratio
        else:
            for x in cross:
                yield x.concurrency, x.b.campaign, x.ratio

    def flip_at(self, conc: int) -> tuple[Comparison, Comparison] | None:
        """(the candidate's comparison at that C, the first of its cross-checks
        there whose verdict differs from it), or None: made at that C alone
        (the cross-checks at the other Cs are not made)."""
        own = next((c for c in self.comparisons if c.concurrency == conc), None)
        if own is None:
            return None
        cross = self.cross
        if isinstance(cross, CrossChecks) and cross._made is None:
            for comp in cross._comps:
                if comp.concurrency == conc:
                    x = next(cross._table._cross(comp, unlike=own.verdict), None)
                    if x is not None:
                        return own, x
            return None
        for x in cross:
            if x.concurrency == conc and x.verdict != own.verdict:
                return own, x
        return None

    @functools.cached_property
    def verdicts(self) -> Mapping[int, str]:
        """C -> verdict (computed once and shared: the history reads it at
        every campaign after; a plain dict, so that the render cache can
        pickle it, and never to be changed)."""
        return {c.concurrency: c.verdict for c in self.comparisons}


@dataclass(frozen=True)
class Best:
    """The best config of one regime, and its lead over the runner-up."""

    regime: str  # "latency" | "throughput"
    config: str
    cell: Cell
    lead: Comparison | None  # best against runner-up; None if alone
    #: When the baseline is one of the two: the candidate of the pair against
    #: the baseline, the same cells in the verdicts' direction. Prose quotes
    #: it, and it decides ``decisive``, so a best line never reads -7.6%
    #: where the policy reads +8.2%, nor leads where the verdict ties.
    versus: Comparison | None = None

    @property
    def decisive(self) -> bool:
        if self.versus is not None:
            return self.versus.verdict == (WIN if self.versus.a.config == self.config else LOSS)
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


def cells(data: Dataset, rules: Rules | None = None,
          flags: Mapping[str, tuple[str, ...]] | None = None) -> list[Cell]:
    """Cells of the valid points (all points when no rules are given).

    Sorted by (workload, campaign, rank, config, concurrency); a cell's
    points are in point-id order. ``flags``: ``flagged(data, rules.gates)``,
    if the caller has it.

    In columns (issue 38): each key's values coded in their sort order,
    the points grouped by a stable sort of the codes (stats.group_runs),
    one step per cell, not per point."""
    rank = {c.name: i for i, c in enumerate(data.campaigns)}
    skip = (flagged(data, rules.gates) if flags is None else flags) if rules is not None else {}
    # Open-loop points (workload_params "load") are judged on a rate axis
    # (findings/derive/openloop.py): under an open loop throughput is the offered load.
    pts = [p for p in data.points
           if THROUGHPUT in p.metrics and "load" not in p.workload_params and p.id not in skip]
    if not pts:
        return []
    workloads = [p.workload + SIMULATED_SUFFIX if p.source == "simulated" else p.workload for p in pts]
    campaigns = list(map(_CAMPAIGN, pts))
    configs = list(map(_CONFIG, pts))
    concs = list(map(_CONCURRENCY, pts))
    order, starts = group_runs([codes(column)[0] for column in (workloads, campaigns, configs, concs)])
    out: list[Cell] = []
    append = out.append
    new = tuple.__new__  # Cell(...) without its __new__'s Python frame (most cells hold one point, D173)
    for k in range(len(starts) - 1):
        lo, hi = starts[k], starts[k + 1]
        i = order[lo]
        p = pts[i]
        workload, campaign, config, conc = workloads[i], campaigns[i], configs[i], concs[i]
        if hi - lo == 1:
            value = p.metrics[THROUGHPUT]
            append(new(Cell, (workload, campaign, rank[campaign], config, conc, value, value, value, 1, (p.id,),
                              (value,), point_series(p))))
            continue
        group = sorted((pts[j] for j in order[lo:hi]), key=_ID)
        values = tuple(q.metrics[THROUGHPUT] for q in group)
        append(Cell(workload, campaign, rank[campaign], config, conc, _mean(values), min(values), max(values),
                    len(values), tuple(map(_ID, group)), values))
    return out


_ID, _CAMPAIGN, _CONFIG, _CONCURRENCY = (operator.attrgetter(name) for name in ("id", "campaign", "config",
                                                                               "concurrency"))


def point_series(p: Point) -> tuple[float, ...]:
    """A point's throughput per time window (stats.window_series): the cached
    value when the point carries one, else computed from its records."""
    if p.series is not None:
        return p.series
    return window_series(p.requests, concurrency=p.concurrency) if p.requests else ()


def _mean(values: tuple[float, ...]) -> float:
    """The correctly rounded sum over n: the same bits in any order, on any
    platform (for one or two values, exactly what pandas gave)."""
    return math.fsum(values) / len(values)


_RANK = operator.attrgetter("rank")
_CAMPAIGN_OF, _MEAN_OF = operator.attrgetter("campaign"), operator.attrgetter("mean")


class Table:
    """Cells of one workload, indexed for the comparisons.

    Cells can be added campaign by campaign (``add``), which is how the
    history replays a store without re-deriving everything before each
    campaign: every lookup below costs the same however many campaigns the
    table holds.
    """

    def __init__(self, cells: Iterable[Cell], rules: Rules, verdicts_only: bool = False,
                 breaks: Mapping[int, Collection[int]] | None = None) -> None:
        self.rules = rules
        #: C -> the ranks at which the baseline stepped (findings/derive/regressions.py):
        #: its drift is measured within the stretches between them.
        self.breaks: Mapping[int, Collection[int]] = breaks or {}
        #: Comparisons for their verdicts only (see compare_cells): the history's.
        self.verdicts_only = verdicts_only
        self.by_key: dict[tuple[str, int], dict[str, Cell]] = {}
        self.configs: tuple[str, ...] = ()
        self.concurrencies: tuple[int, ...] = ()
        self.drift: dict[int, float] = {}
        self._latest: dict[tuple[str, int], Cell] = {}
        #: (config, C) -> the ranks of its cells and the cells, in rank order (``before``: a bisection).
        self._ranked: dict[tuple[str, int], tuple[list[int], list[Cell]]] = {}
        #: config -> its ``peak``, until one of its latest cells changes.
        self._peak: dict[str, Cell | None] = {}
        #: (config a, config b, C) -> a cell of the latest campaign that measured
        #: both there (None: none did), found when first asked for (``_latest_common``)
        #: and kept true as cells are added: only the pairs asked for, not every
        #: pair of configs measured together (a million cells make millions).
        self._common: dict[tuple[str, str, int], Cell | None] = {}
        #: (config, C) -> the configs it has a ``_common`` entry with there.
        self._partners: dict[tuple[str, int], set[str]] = {}
        #: C -> the baseline's (rank, campaign mean) in replay order (the
        #: latest ``rules.drift_window`` of them, or all).
        self._base: dict[int, collections.deque[tuple[int, float]]] = {}
        self.add(cells)

    def add(self, cells: Iterable[Cell]) -> None:
        """Add cells, each (config, C, campaign) once: a campaign's cells
        after those of the campaigns before it, as the history does (the
        baseline's drift is summed in the order cells arrive). Only what the
        new cells touch is computed again: the config and C lists when a new
        (config, C) appears, the drift at the Cs the baseline was measured at."""
        base = self.rules.baseline
        commons, partners_of = self._common, self._partners
        by_key, latest_of, ranked, peaks = self.by_key, self._latest, self._ranked, self._peak
        new_key = False
        drift_at: set[int] = set()
        ordered = sorted(cells, key=_RANK)
        if not by_key and self._fill(ordered):
            return
        for cell in ordered:
            _, campaign, rank, config, conc, mean, _, _, _, _, _, _ = cell  # every field: no list made
            key = (config, conc)
            mine = by_key.get(key)
            if mine is None:
                mine = by_key[key] = {}
                new_key = True
            mine[campaign] = cell
            latest = latest_of.get(key)
            if latest is None or rank > latest.rank:
                latest_of[key] = cell
                peaks.pop(config, None)
                found = ranked.get(key)
                if found is None:
                    ranked[key] = ([rank], [cell])
                else:
                    found[0].append(rank)
                    found[1].append(cell)
            else:  # keep each key's cells in rank order (``before``)
                if rank < latest.rank:
                    mine = by_key[key] = dict(sorted(mine.items(), key=lambda kv: kv[1].rank))
                ranked[key] = ([c.rank for c in mine.values()], list(mine.values()))
            partners = partners_of.get(key)
            if partners:  # the pairs asked for that this campaign may make more recent
                for other in partners:
                    if campaign in by_key.get((other, conc), ()):
                        common = commons[(config, other, conc)]
                        if common is None or rank > common.rank:
                            commons[(config, other, conc)] = commons[(other, config, conc)] = cell
            if config == base:
                means = self._base.get(conc)
                if means is None:
                    means = self._base[conc] = collections.deque(maxlen=self.rules.drift_window or None)
                means.append((rank, mean))
                drift_at.add(conc)
        if new_key:
            self.configs = tuple(sorted({k[0] for k in self.by_key}, key=self.config_order))
            self.concurrencies = tuple(sorted({k[1] for k in self.by_key}))
            # every C, in order (a new C has a drift of 0.0 until the baseline is measured twice there)
            self.drift = {c: self.drift[c] if c in self.drift and c not in drift_at else self._drift(c)
                          for c in self.concurrencies}
        else:
            for c in drift_at:
                self.drift[c] = self._drift(c)

    def _fill(self, ordered: list[Cell]) -> bool:
        """``add`` into an empty table, key by key rather than cell by cell
        (the whole store's cells at once: a million of them); ``ordered`` in
        rank order. False, with nothing changed, if a (config, C, campaign)
        comes twice (``add`` then keeps the last, as it always has)."""
        groups: dict[tuple[str, int], list[Cell]] = {}
        for cell in ordered:
            key = (cell.config, cell.concurrency)
            found = groups.get(key)
            if found is None:
                groups[key] = [cell]
            else:
                found.append(cell)
        by_key = {key: dict(zip(map(_CAMPAIGN_OF, cs), cs)) for key, cs in groups.items()}
        if any(len(by_key[key]) != len(cs) for key, cs in groups.items()):
            return False
        self.by_key = by_key
        # What was found of the empty table before (a peak, a common campaign) is found again.
        self._peak, self._common, self._partners = {}, {}, {}
        self._latest = {key: cs[-1] for key, cs in groups.items()}
        self._ranked = {key: (list(map(_RANK, cs)), cs) for key, cs in groups.items()}
        window = self.rules.drift_window or None
        base = self.rules.baseline
        self._base = {conc: collections.deque(zip(map(_RANK, cs), map(_MEAN_OF, cs)), maxlen=window)
                      for (config, conc), cs in groups.items() if config == base}
        self.configs = tuple(sorted({k[0] for k in by_key}, key=self.config_order))
        self.concurrencies = tuple(sorted({k[1] for k in by_key}))
        self.drift = {c: self._drift(c) for c in self.concurrencies}
        return True

    def config_order(self, name: str) -> tuple[int, str]:
        return (0 if name == self.rules.baseline else 1, name)

    def set_breaks(self, breaks: Mapping[int, Collection[int]]) -> None:
        """New baseline steps (the history learns them campaign by campaign)."""
        if breaks != self.breaks:
            self.breaks = breaks
            self.drift = {c: self._drift(c) for c in self.concurrencies}

    def _drift(self, conc: int) -> float:
        """(max - min) / mean of the baseline's campaign means at C, over the
        window (summed in replay order); with steps, the largest such spread
        within one stretch between steps (a step is a change, not noise)."""
        means = self._base.get(conc)
        if means is None or len(means) < 2:
            return 0.0
        cuts = self.breaks.get(conc, ())
        if not cuts:
            return _spread([m for _, m in means])
        stretches: list[list[float]] = [[]]
        for rank, m in means:
            if rank in cuts and stretches[-1]:
                stretches.append([])
            stretches[-1].append(m)
        return max(_spread(s) for s in stretches)

    def cells_of(self, config: str, conc: int) -> dict[str, Cell]:
        """campaign -> cell, in rank order."""
        return self.by_key.get((config, conc), {})

    def before(self, config: str, conc: int, rank: int) -> Cell | None:
        """The config's cell at ``conc`` in the latest campaign before ``rank``."""
        found = self._ranked.get((config, conc))
        if found is None:
            return None
        i = bisect.bisect_left(found[0], rank)
        return found[1][i - 1] if i > 0 else None

    def latest(self, config: str, conc: int) -> Cell | None:
        return self._latest.get((config, conc))

    def compare_cells(self, a: Cell, b: Cell, verdict_only: bool | None = None) -> Comparison | None:
        """``verdict_only`` (default: the table's): skip the bootstrap where its
        interval cannot change the verdict (see _verdict_settled); the
        comparison then has no ``ci``."""
        b_mean = b.mean
        if b_mean <= 0:
            return None
        rules = self.rules
        floor = rules.noise_floor
        drifts = self.drift
        drift = drifts.get(a.concurrency, 0.0)
        if b.concurrency != a.concurrency:
            drift = max(drift, drifts.get(b.concurrency, 0.0))
        band = max(floor, a.spread, b.spread, drift)
        paired = a.campaign == b.campaign
        ci, method = None, "band"
        samples: tuple[tuple[float, ...], tuple[float, ...]] | None = None
        mode = rules.interval
        if mode != "band" and a.n >= 2 and b.n >= 2:
            samples, method = (a.values, b.values), "bootstrap-repeats"
            band = max(floor, drift)  # the interval, not the range, carries the repeat noise
        elif mode == "auto" and a.series and b.series:
            samples, method = (a.series, b.series), "bootstrap-blocks"
        if not paired:
            band += max(floor, drift)
        ratio = a.mean / b_mean
        if samples is not None:
            lazy = self.verdicts_only if verdict_only is None else verdict_only
            if not (lazy and _verdict_settled(samples, ratio - 1.0, band)):
                ci = self._ci(samples[0], samples[1], a, b)
        return Comparison(a, b, ratio, band, paired, drift, ci, method, drift > rules.drift_cap)

    def cross_of(self, comp: Comparison, campaigns: Collection[str] | None = None) -> list[Comparison]:
        """The comparison's candidate cell against the baseline of every other
        campaign at its C, in rank order, for their verdicts only (a
        candidate's ``cross``): ``compare_cells(comp.a, other, verdict_only=True)``
        of each, with what they share (the candidate's cell, the C's drift)
        looked up once. A store of years holds thousands per candidate.
        ``campaigns``: only the baselines of those campaigns."""
        return list(self._cross(comp, campaigns))

    def _cross(self, comp: Comparison, campaigns: Collection[str] | None = None,
               unlike: str | None = None) -> Iterator[Comparison]:
        """``cross_of``, one at a time. ``unlike``: only those whose verdict
        differs from it (a comparison made only for those: the verdict of a
        band-only one is arithmetic on its ratio and band, the same as
        ``Comparison.verdict``'s)."""
        a, skip = comp.a, comp.b.campaign
        rules = self.rules
        others = self.by_key.get((rules.baseline, a.concurrency), {})  # in rank order
        floor = rules.noise_floor
        drift = self.drift.get(a.concurrency, 0.0)  # every other is at a's C
        capped = drift > rules.drift_cap
        widen = max(floor, drift)
        a_spread, a_mean, a_campaign = a.spread, a.mean, a.campaign
        repeats = rules.interval != "band" and a.n >= 2
        blocks = rules.interval == "auto" and bool(a.series)
        # Of ``campaigns`` only: each looked up (a document shows a few of
        # thousands), then in rank order, as ``others`` holds them.
        cells = others.values() if campaigns is None else \
            sorted((others[k] for k in set(campaigns) if k in others), key=_RANK)
        for b in cells:
            b_mean = b.mean
            if b.campaign == skip or b_mean <= 0:
                continue
            band = max(floor, a_spread, b.spread, drift)
            samples: tuple[tuple[float, ...], tuple[float, ...]] | None = None
            method = "band"
            if repeats and b.n >= 2:
                samples, method = (a.values, b.values), "bootstrap-repeats"
                band = widen  # max(floor, drift): the interval carries the repeat noise
            elif blocks and b.series:
                samples, method = (a.series, b.series), "bootstrap-blocks"
            paired = a_campaign == b.campaign
            if not paired:
                band += widen
            ratio = a_mean / b_mean
            if unlike is not None and samples is None:
                delta = ratio - 1.0
                verdict = NOT_COMPARABLE if capped else WIN if delta > band else LOSS if delta < -band else TIE
                if verdict == unlike:
                    continue
            ci = None
            if samples is not None and not _verdict_settled(samples, ratio - 1.0, band):
                ci = self._ci(samples[0], samples[1], a, b)
            made = Comparison(a, b, ratio, band, paired, drift, ci, method, capped)
            if unlike is None or made.verdict != unlike:
                yield made

    def cross_ratios(self, comp: Comparison) -> Iterator[tuple[str, float]]:
        """(campaign, ratio) of each of ``cross_of(comp)``, in its order, without
        judging them (``conclusions --json`` lists the ratios)."""
        a, skip = comp.a, comp.b.campaign
        a_mean = a.mean
        for b in self.by_key.get((self.rules.baseline, a.concurrency), {}).values():
            if b.campaign != skip and b.mean > 0:
                yield b.campaign, a_mean / b.mean

    def _ci(self, a: tuple[float, ...], b: tuple[float, ...], ca: Cell, cb: Cell) -> tuple[float, float] | None:
        lo, hi = ratio_ci(a, b, self.rules.confidence, self.rules.resamples,
                          "|".join(ca.point_ids + cb.point_ids))
        return (lo, hi) if math.isfinite(lo) and math.isfinite(hi) else None

    def compare(self, a: str, b: str, conc: int, verdict_only: bool | None = None) -> Comparison | None:
        """``a`` against ``b`` at one C: paired in their latest common campaign if any."""
        ca, cb = self.cells_of(a, conc), self.cells_of(b, conc)
        if not ca or not cb:
            return None
        common = self.latest(a, conc) if a == b else self._latest_common(a, b, conc)
        if common is not None:
            return self.compare_cells(ca[common.campaign], cb[common.campaign], verdict_only)
        la, lb = self.latest(a, conc), self.latest(b, conc)
        assert la is not None and lb is not None
        return self.compare_cells(la, lb, verdict_only)

    def _latest_common(self, a: str, b: str, conc: int) -> Cell | None:
        """A cell of the latest campaign that measured both ``a`` and ``b`` at
        ``conc`` (None: none did): looked for once per pair, then kept true by
        ``add``. The few latest cells of the config measured less often are
        tried first; most pairs were measured together lately."""
        key = (a, b, conc)
        commons = self._common
        if key in commons:
            return commons[key]
        found: Cell | None = None
        ra, rb = self._ranked.get((a, conc)), self._ranked.get((b, conc))
        if ra is not None and rb is not None:
            mine, theirs = (ra[1], self.by_key[(b, conc)]) if len(ra[1]) <= len(rb[1]) else \
                (rb[1], self.by_key[(a, conc)])
            for cell in reversed(mine[-8:]):
                if cell.campaign in theirs:
                    found = cell
                    break
            else:
                both = theirs.keys() & {c.campaign for c in mine[:-8]}
                if both:
                    found = max((c for c in mine[:-8] if c.campaign in both), key=_RANK)
        commons[key] = commons[(b, a, conc)] = found
        self._partners.setdefault((a, conc), set()).add(b)
        self._partners.setdefault((b, conc), set()).add(a)
        return found

    def peak(self, config: str) -> Cell | None:
        """The config's highest current throughput: the latest cell at each C
        (kept until one of the config's latest cells changes)."""
        if config in self._peak:
            return self._peak[config]
        current = [self.latest(config, c) for c in self.concurrencies]
        found = [c for c in current if c is not None]
        best = self._peak[config] = max(found, key=lambda c: (c.mean, -c.concurrency)) if found else None
        return best

    def compare_at(self, a: str, b: str, concs: Iterable[int]) -> list[Comparison | None]:
        """``[compare(a, b, c) for c in concs]``, with the lookups they share made once."""
        by_key, latest = self.by_key, self._latest
        out: list[Comparison | None] = []
        for conc in concs:
            ca, cb = by_key.get((a, conc)), by_key.get((b, conc))
            if not ca or not cb:
                out.append(None)
                continue
            common = latest.get((a, conc)) if a == b else self._latest_common(a, b, conc)
            if common is not None:
                out.append(self.compare_cells(ca[common.campaign], cb[common.campaign]))
            else:
                out.append(self.compare_cells(latest[(a, conc)], latest[(b, conc)]))
        return out


def _spread(means: list[float]) -> float:
    if len(means) < 2:
        return 0.0
    total = 0.0
    for m in means:
        total += m
    avg = total / len(means)
    return (max(means) - min(means)) / avg if avg > 0 else 0.0


def _verdict_settled(samples: tuple[tuple[float, ...], tuple[float, ...]], delta: float, band: float) -> bool:
    """Whether the verdict is known without the bootstrap: inside the band it
    is a tie whatever the interval; beyond it, a win (loss) needs the
    interval above (below) 1, which it is for certain when every resampled
    ratio is (stats.ratio_bounds)."""
    if -band <= delta <= band:
        return True
    bounds = ratio_bounds(*samples)
    return bounds is not None and (bounds[0] > 1.0 if delta > band else bounds[1] < 1.0)


# ---------------------------------------------------------------- policy

def policy(verdicts: list[tuple[int, str]], ratios: list[float] | None = None) -> tuple[str, int | None]:
    """The policy vocabulary of docs/architecture.md, from verdicts sorted by C
    (a C whose comparison is not comparable counts as not compared).

    The threshold rule (D90): a switch is never placed at a C that measured
    against it. ``on-below`` T: the last C before the first loss whose
    ratio is at least 1 (a win, or a tie that measured for speculation);
    ``on-above`` T: the first C after the last loss whose ratio is at least 1.
    The open loop passes its rates with the deciding metric's ratio (D104).
    Without ``ratios``, the C next to the losses."""
    keep = [i for i, (_, v) in enumerate(verdicts) if v != NOT_COMPARABLE]
    rs = [ratios[i] for i in keep] if ratios is not None else None
    verdicts = [verdicts[i] for i in keep]
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
        t = min(losses) - 1
        while rs is not None and rs[t] < 1 and seq[t] != WIN:
            t -= 1  # a tie below the baseline measured against speculation there
        return "on-below", concs[t]
    if max(losses) < min(wins):
        t = max(losses) + 1
        while rs is not None and rs[t] < 1 and seq[t] != WIN:
            t += 1
        return "on-above", concs[t]
    return "inconclusive", None


# ---------------------------------------------------------------- conclusions

def _best(table: Table, regime: str, scored: list[tuple[float, str, Cell]]) -> Best | None:
    if not scored:
        return None
    scored.sort(key=lambda s: (-s[0], table.config_order(s[1])))
    _, best, cell = scored[0]
    lead = versus = None
    if len(scored) > 1:
        _, runner, runner_cell = scored[1]
        base = table.rules.baseline
        if regime == "latency":
            lead = table.compare(best, runner, cell.concurrency, verdict_only=True)
            if best == base:
                versus = table.compare(runner, best, cell.concurrency, verdict_only=True)
        else:
            lead = table.compare_cells(cell, runner_cell, verdict_only=True)
            if best == base:
                versus = table.compare_cells(runner_cell, cell, verdict_only=True)
        if runner == base:
            versus = lead
    return Best(regime=regime, config=best, cell=cell, lead=lead, versus=versus)


def conclude_workload(workload: str, wcells: list[Cell], rules: Rules) -> WorkloadConclusion:
    return conclude_table(workload, Table(wcells, rules))


def conclude_table(workload: str, table: Table, cross: bool = True, detail: bool = True) -> WorkloadConclusion:
    """The conclusion of one workload's table. Without ``cross``, candidates
    are not set against the baseline of every other campaign (the history
    does not need it, and it grows with the number of campaigns). Without
    ``detail``, neither a crossover estimate nor the Cs measured on one side
    only (the history's replay reads only the verdicts, policies,
    thresholds and bests)."""
    rules = table.rules
    base = rules.baseline
    candidates = []
    concs = table.concurrencies
    #: config -> its comparison with the baseline at the lowest C (the latency best's score).
    at_low: dict[str, Comparison | None] = {}
    for config in table.configs:
        if config == base:
            continue
        comps = table.compare_at(config, base, concs)
        if concs:
            at_low[config] = comps[0]
        found = tuple(c for c in comps if c is not None)
        verdicts = [c.verdict for c in found]  # each computed once
        pol, threshold = policy([(c.concurrency, v) for c, v in zip(found, verdicts)], [c.ratio for c in found])
        where = None
        if detail:
            levels = [crossover_mod.Level(c.concurrency, c.ratio, *c.bounds, v) for c, v in zip(found, verdicts)
                      if v != NOT_COMPARABLE]
            where = crossover_mod.estimate(levels, pol)
        others: Sequence[Comparison] = CrossChecks(table, found) if cross else ()
        mine_only: tuple[int, ...] = ()
        theirs_only: tuple[int, ...] = ()
        if detail:
            mine = {c for c in concs if table.latest(config, c) is not None}
            theirs = {c for c in concs if table.latest(base, c) is not None}
            mine_only, theirs_only = tuple(sorted(mine - theirs)), tuple(sorted(theirs - mine))
        candidates.append(Candidate(config=config, policy=pol, threshold=threshold, comparisons=found, cross=others,
                                    crossover=where, candidate_only=mine_only, baseline_only=theirs_only))

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
                # The candidate's comparison at the lowest C: its ratio and cell
                # are those of a verdict-only one (only the interval may differ).
                comp = at_low[config]
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


def workload_tables(all_cells: Iterable[Cell], rules: Rules,
                    breaks: Mapping[str, Mapping[int, Collection[int]]] | None = None) -> dict[str, Table]:
    """One Table per workload, in workload order. ``breaks``: workload -> C ->
    the ranks of the baseline's steps (regressions.baseline_breaks)."""
    by_workload: dict[str, list[Cell]] = {}
    for cell in all_cells:
        by_workload.setdefault(cell.workload, []).append(cell)
    return {w: Table(cs, rules, breaks=(breaks or {}).get(w)) for w, cs in sorted(by_workload.items())}


def conclude_tables(rules: Rules, tables: Mapping[str, Table]) -> Conclusions:
    """The current conclusions of ``tables`` (``workload_tables`` of the cells,
    the baseline's steps found by findings.derive.regressions)."""
    return Conclusions(rules=rules, workloads=tuple(conclude_table(w, t) for w, t in sorted(tables.items())))


def comparisons_in_campaigns(rules: Rules, all_cells: list[Cell], tables: Mapping[str, Table],
                             campaigns: Collection[str] | None = None) -> Mapping[tuple[str, str], list[Comparison]]:
    """Within-campaign comparisons of every candidate with the baseline.

    Keyed by (campaign, workload); only of ``campaigns``, if given. The
    noise band uses everything known now, so an old campaign's table shows
    its numbers judged by today's noise estimate.
    """
    out: dict[tuple[str, str], list[Comparison]] = {}
    for cell in all_cells:
        if cell.config == rules.baseline or (campaigns is not None and cell.campaign not in campaigns):
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
