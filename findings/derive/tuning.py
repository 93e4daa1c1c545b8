"""A tune's trials, scored by the one derivation (D115). Pure: no I/O.

`findings tune` (findings/tune/) stores each trial as one run file of the
tune's campaign, with its search facts in the run's provenance (the keys
``tune_*`` below). Here the derivation's valid cells of that campaign are
turned into each trial's score under the objective of findings.toml, so the
search, the document and ``findings conclusions`` read one number per trial.

Objectives (docs/tune.md):

- ``throughput``: the output throughput at the team's mix of C,
  ``sum(w_C * tput_C) / sum(w_C)`` (tok/s; higher is better);
- ``latency``: the median TPOT at one C (ms; lower is better), among the
  trials whose throughput at ``floor_concurrency`` reaches ``floor_tok_s``;
- ``goodput``: requests per second within the SLO at one open-loop rate
  (req/s; higher is better).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Iterable, Mapping, Sequence

from findings.core.model import THROUGHPUT, Dataset

KINDS = ("throughput", "latency", "goodput")
#: The provenance keys a trial's run carries (findings/tune/trial.py writes them).
NAME, TRIAL, STATE, PARAMS, ARGS, ENV, SPACE, SEARCH, SEED, ENGINE, NOTES, GRID = (
    "tune_name", "tune_trial", "tune_state", "tune_params", "tune_args", "tune_env", "tune_space",
    "tune_search", "tune_seed", "tune_engine", "tune_notes", "tune_grid")
COMPLETE, PRUNED, BASELINE = "complete", "pruned", "baseline"
TPOT = "median_tpot_ms"
GOODPUT = "goodput_req_s"
#: The most config names a trial records of its space (for the document's "untried" list).
GRID_NAMES = 500


@dataclass(frozen=True)
class Objective:
    """What a tune maximises (or, for latency, minimises): findings.toml's [tune]."""

    kind: str = "throughput"
    #: throughput: (C, weight) pairs, the team's mix of concurrency.
    weights: tuple[tuple[int, float], ...] = ((1, 1.0),)
    #: latency: the C whose median TPOT is scored ...
    concurrency: int = 1
    #: ... among trials reaching this throughput (tok/s) at floor_concurrency.
    floor_tok_s: float | None = None
    floor_concurrency: int | None = None
    #: goodput: the open-loop rate (req/s) it is judged at.
    rate: float | None = None

    @property
    def higher_is_better(self) -> bool:
        return self.kind != "latency"

    @property
    def unit(self) -> str:
        return {"throughput": "tok/s", "latency": "ms", "goodput": "req/s"}[self.kind]

    def concurrencies(self) -> tuple[int, ...]:
        """The closed-loop C values a trial must measure, most weighted first."""
        if self.kind == "throughput":
            return tuple(c for c, _ in sorted(self.weights, key=lambda cw: (-cw[1], cw[0])))
        if self.kind == "latency":
            floor = (self.floor_concurrency,) if self.floor_concurrency not in (None, self.concurrency) else ()
            return (self.concurrency, *floor)
        return ()

    def line(self) -> str:
        if self.kind == "throughput":
            mix = ", ".join(f"C={c}: {w:g}" for c, w in sorted(self.weights))
            return f"output throughput at the team's mix of concurrency ({mix}), tok/s, higher is better"
        if self.kind == "latency":
            floor = (f", among configs reaching {self.floor_tok_s:g} tok/s at C={self.floor_concurrency}"
                     if self.floor_tok_s is not None else "")
            return f"median TPOT at C={self.concurrency}, ms, lower is better{floor}"
        return f"goodput at {self.rate:g} req/s under the SLO, req/s, higher is better"

    def better(self, a: float, b: float) -> bool:
        return a > b if self.higher_is_better else a < b


def score(objective: Objective, tput: Mapping[int, float], tpot: Mapping[int, float],
          goodput: float | None = None) -> float | None:
    """A trial's score from its per-C means; None while a needed C is missing
    (or, for latency, when the throughput floor is missed: ``feasible``)."""
    if objective.kind == "throughput":
        if any(c not in tput for c, _ in objective.weights):
            return None
        total = math.fsum(w for _, w in objective.weights)
        return math.fsum(w * tput[c] for c, w in objective.weights) / total
    if objective.kind == "latency":
        return tpot.get(objective.concurrency)
    return goodput


def feasible(objective: Objective, tput: Mapping[int, float]) -> bool:
    if objective.kind != "latency" or objective.floor_tok_s is None:
        return True
    got = tput.get(objective.floor_concurrency or objective.concurrency)
    return got is not None and got >= objective.floor_tok_s


def bound(objective: Objective, tput: Mapping[int, float], best_at: Mapping[int, float],
          slack: float) -> float | None:
    """The best score a partly measured trial could still reach: each C not
    yet measured at the best value any trial reached there, plus ``slack``
    (the noise floor). None: nothing can be said yet."""
    if objective.kind != "throughput":
        return None
    total = math.fsum(w for _, w in objective.weights)
    parts = []
    for c, w in objective.weights:
        if c in tput:
            parts.append(w * tput[c])
        elif c in best_at:
            parts.append(w * best_at[c] * (1 + slack))
        else:
            return None
    return math.fsum(parts) / total


@dataclass(frozen=True)
class Trial:
    config: str
    number: int  # 0: the baseline
    state: str  # complete | pruned | baseline
    params: tuple[tuple[str, object], ...]
    args: str  # the engine flags it was launched with
    env: str
    notes: str  # what the engine's rules changed (e.g. draft tokens forced to steps + 1)
    tput: tuple[tuple[int, float], ...]  # C -> mean output throughput of its valid cells
    tpot: tuple[tuple[int, float], ...]
    goodput: float | None
    score: float | None
    feasible: bool


@dataclass(frozen=True)
class Tuning:
    name: str
    campaign: str
    workload: str
    engine: str
    search: str
    seed: int | None
    space: int | None  # valid configs in the space (the grid's size)
    objective: Objective
    trials: tuple[Trial, ...]  # by trial number
    #: every config of the space by name, when the trials recorded it (findings tune does up to GRID_NAMES)
    grid: tuple[str, ...] = ()

    @property
    def scored(self) -> tuple[Trial, ...]:
        """Complete, feasible trials with a score, best first (the baseline included)."""
        ok = [t for t in self.trials if t.state != PRUNED and t.score is not None and t.feasible]
        sign = -1.0 if self.objective.higher_is_better else 1.0
        return tuple(sorted(ok, key=lambda t: (sign * (t.score or 0.0), t.number)))

    @property
    def best(self) -> Trial | None:
        ranked = [t for t in self.scored if t.state != BASELINE]
        return ranked[0] if ranked else None

    @property
    def baseline(self) -> Trial | None:
        return next((t for t in self.trials if t.state == BASELINE), None)

    @property
    def tried(self) -> int:
        return sum(1 for t in self.trials if t.state != BASELINE)

    @property
    def untried(self) -> int | None:
        return None if self.space is None else max(0, self.space - self.tried)

    @property
    def untried_names(self) -> tuple[str, ...]:
        tried = {t.config for t in self.trials}
        return tuple(n for n in self.grid if n not in tried)


def _mean(values: Sequence[float]) -> float:
    return math.fsum(values) / len(values)


#: campaign -> (tune name, config -> the tune provenance of its run)
Tunes = dict[str, tuple[str, dict[str, Mapping[str, object]]]]


def tune_campaigns(data: Dataset) -> Tunes:
    """The store's tune campaigns, from its runs' provenance: one pass over
    every run, which ``derive`` makes before the history's replay is forked
    (D173)."""
    tunes: Tunes = {}
    for run in data.runs:
        name = run.provenance.get(NAME)
        if isinstance(name, str):
            for c in run.campaigns:
                by_config = tunes.setdefault(c.name, (name, {}))[1]
                for config in run.configs:
                    by_config[config] = run.provenance
    return tunes


def tunings(data: Dataset, cells: Iterable[object], flags: Mapping[str, tuple[str, ...]],
            objective: Objective, tunes: Tunes | None = None) -> tuple[Tuning, ...]:
    """Every tune campaign of the store, its trials scored from ``cells``
    (the derivation's valid cells: analysis.Cell) and the valid points. A
    tune measures one workload, so a trial is its (campaign, config).
    ``tunes``: ``tune_campaigns(data)``, where the caller found it before."""
    if tunes is None:
        tunes = tune_campaigns(data)
    if not tunes:
        return ()
    tput: dict[tuple[str, str], dict[int, float]] = {}
    for cell in cells:
        key = (getattr(cell, "campaign"), getattr(cell, "config"))
        if key[0] in tunes:
            tput.setdefault(key, {})[getattr(cell, "concurrency")] = getattr(cell, "mean")
    tpots: dict[tuple[str, str], dict[int, list[float]]] = {}
    good: dict[tuple[str, str], list[float]] = {}
    workload: dict[str, str] = {}
    for p in data.points:
        if p.campaign not in tunes:
            continue
        workload.setdefault(p.campaign, p.workload)
        if p.id in flags:
            continue
        load = p.workload_params.get("load")
        if load is None and TPOT in p.metrics and THROUGHPUT in p.metrics:
            tpots.setdefault((p.campaign, p.config), {}).setdefault(p.concurrency, []).append(p.metrics[TPOT])
        rate = p.workload_params.get("request_rate")
        if load is not None and objective.rate is not None and rate == objective.rate and GOODPUT in p.metrics:
            good.setdefault((p.campaign, p.config), []).append(p.metrics[GOODPUT])
    out = []
    for campaign, (name, by_config) in sorted(tunes.items()):
        trials = []
        for config, prov in by_config.items():
            per_c = tput.get((campaign, config), {})
            tp = {c: _mean(v) for c, v in tpots.get((campaign, config), {}).items()}
            gp_values = good.get((campaign, config))
            gp = _mean(gp_values) if gp_values else None
            trials.append(Trial(config=config, number=_int(prov.get(TRIAL)), state=str(prov.get(STATE, COMPLETE)),
                                params=tuple(sorted(_params(prov.get(PARAMS)).items())),
                                args=str(prov.get(ARGS, "")), env=str(prov.get(ENV, "")),
                                notes=str(prov.get(NOTES, "")),
                                tput=tuple(sorted(per_c.items())), tpot=tuple(sorted(tp.items())),
                                goodput=gp, score=score(objective, per_c, tp, gp),
                                feasible=feasible(objective, per_c)))
        trials.sort(key=lambda t: (t.number, t.config))
        latest = by_config[trials[-1].config]  # the latest trial's record of the space and the search
        space, seed = latest.get(SPACE), latest.get(SEED)
        out.append(Tuning(name=name, campaign=campaign, workload=workload.get(campaign, ""),
                          engine=str(latest.get(ENGINE, "")), search=str(latest.get(SEARCH, "")),
                          seed=seed if isinstance(seed, int) else None,
                          space=space if isinstance(space, int) else None, objective=objective,
                          trials=tuple(trials), grid=_names(latest.get(GRID))))
    return tuple(out)


def _int(v: object) -> int:
    return v if isinstance(v, int) and not isinstance(v, bool) else 0


def _params(text: object) -> dict[str, object]:
    if not isinstance(text, str):
        return {}
    try:
        found = json.loads(text)
    except ValueError:
        return {}
    return found if isinstance(found, dict) else {}


def _names(text: object) -> tuple[str, ...]:
    if not isinstance(text, str):
        return ()
    try:
        found = json.loads(text)
    except ValueError:
        return ()
    return tuple(str(n) for n in found) if isinstance(found, list) else ()
