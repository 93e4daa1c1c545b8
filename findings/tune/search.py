"""The search: which config to try next, the trials' bookkeeping, and the
store (D115). The driver alone writes the store; trials run through an
executor (findings/tune/cluster.py: in this process, or as Ray tasks).

- A grid when the space fits the budget (or ``search = "grid"``), the start
  config first; Optuna's TPE sampler, seeded, otherwise. Optuna is imported
  here only (the ``tune`` extra).
- Every trial measures the C values in the order that decides most: the
  objective's weight times how much the trials so far differ there. A trial
  that cannot beat the best one any more, even at the best value seen at
  each C it has left (plus the noise floor), is stopped and stored as pruned.
- The budget is trials and/or wall minutes; a killed tune, run again,
  continues from the store: the trials stored there are not run again, and
  Optuna is told their scores before it proposes the next.
"""

from __future__ import annotations

import glob
import json
import shlex
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

from findings import store
from findings.bench.matrix import ConfigSpec, Matrix
from findings.bench.runner import stop_signals
from findings.core.errors import FindingsError
from findings.core.model import Campaign, Run, Scalar
from findings.derive import tuning
from findings.derive.analysis import Rules, cells
from findings.derive.validity import flagged
from findings.store.files import read_run
from findings.store.schema import run_from_dict
from findings.tune import space as space_mod
from findings.tune import trial as trial_mod
from findings.tune.space import Candidate, TuneSpec

Say = Callable[[str], None]


@dataclass
class TuneReport:
    spec: TuneSpec
    method: str
    grid_size: int
    refused: int
    written: list[Path] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)
    resumed: int = 0
    result: tuning.Tuning | None = None
    wall_s: float = 0.0
    interrupted: bool = False
    #: The signal that interrupted the tune (SIGINT: Ctrl-C; SIGTERM, SIGHUP).
    signal: int = 2

    def summary(self) -> str:
        lines = [f"tune {self.spec.name}: {self.method} over {self.grid_size} configs "
                 f"({self.refused} combinations the engine refuses left out); "
                 f"{len(self.written)} trials stored this run"
                 + (f", {self.resumed} found in the store" if self.resumed else "")
                 + f", {len(self.failed)} failed; {self.wall_s:.1f} s"]
        if self.interrupted:
            lines.append("interrupted: the trials stored so far are kept; run the same command to continue")
        t = self.result
        if t is not None:
            best, base = t.best, t.baseline
            if best is not None:
                vs = ""
                if base is not None and base.score and best.score is not None:
                    vs = f" ({best.score / base.score - 1:+.1%} vs the baseline's {base.score:.4g})"
                lines.append(f"best: {best.config} (trial {best.number}): {best.score:.4g} {t.objective.unit}{vs}")
                lines.append(f"flags: {best.args}")
            pruned = sum(1 for x in t.trials if x.state == tuning.PRUNED)
            lines.append(f"trials: {t.tried} of {t.space} configs ({pruned} stopped early as beaten)")
        lines += [f"failed: {f}" for f in self.failed]
        return "\n".join(lines)


def _tune_runs(store_path: Path, spec: TuneSpec) -> list[Run]:
    """The tune's runs: a trial's run is named for its campaign (trial.merge),
    so the store's other runs are not read."""
    if not store.is_store(store_path):
        return []
    paths = sorted((store_path / store.RUNS).glob(f"{glob.escape(spec.campaign)}-t*.json"))
    runs = (read_run(p, requests=False) for p in paths if not p.name.startswith("."))
    return [r for r in runs if r.provenance.get(tuning.NAME) == spec.name
            and any(c.name == spec.campaign for c in r.campaigns)]


def stored(store_path: Path, spec: TuneSpec, rules: Rules) -> tuning.Tuning | None:
    """The tune's campaign as the store holds it, scored by the derivation
    (its runs only: the rest of the store does not change a trial's score)."""
    runs = _tune_runs(store_path, spec)
    if not runs:
        return None
    data = store.merge(runs)
    flags = flagged(data, rules.gates)
    found = tuning.tunings(data, cells(data, rules, flags), flags, rules.objective)
    return next((t for t in found if t.campaign == spec.campaign), None)


def order(objective: tuning.Objective, done: tuning.Tuning | None, sweep_cs: tuple[int, ...]) -> tuple[int, ...]:
    """The C values to measure, the most decisive first: the objective's
    weight times the relative spread of the trials' values there so far."""
    cs = objective.concurrencies() or sweep_cs
    weight = dict(objective.weights) if objective.kind == "throughput" else {c: 1.0 for c in cs}

    def spread(c: int) -> float:
        vals = [v for t in (done.trials if done else ()) for cc, v in t.tput if cc == c]
        if len(vals) < 2 or max(vals) <= 0:
            return 1.0
        return (max(vals) - min(vals)) / max(vals)

    return tuple(sorted(cs, key=lambda c: (-weight.get(c, 0.0) * spread(c), cs.index(c))))


class Proposer:
    """Grid or Optuna; ``next`` gives a candidate not yet tried nor in flight."""

    def __init__(self, spec: TuneSpec, grid: space_mod.Grid, method: str, objective: tuning.Objective,
                 done: tuning.Tuning | None) -> None:
        self.spec, self.grid, self.method, self.objective = spec, grid, method, objective
        self.names = {c.name for c in grid.candidates}
        self.taken: set[str] = {t.config for t in (done.trials if done else ())}
        #: config -> its score once known (None: pruned, failed or infeasible): told again to Optuna
        #: when it proposes the same config by other coordinates (topk 1 with another draft count, say).
        self.scores: dict[str, float | None] = {t.config: (t.score if t.state == tuning.COMPLETE and t.feasible
                                                            else None) for t in (done.trials if done else ())}
        self.study: Any = None
        self.pending: dict[str, Any] = {}
        #: the grid's order: the start config first
        start = space_mod.candidate(spec, dict(spec.start)).name if spec.start is not None else None
        self.grid_order = sorted(grid.candidates, key=lambda c: c.name != start)
        if method == "optuna":
            self._optuna(done)

    def _optuna(self, done: tuning.Tuning | None) -> None:
        import optuna  # the tune extra; imported here only

        optuna.logging.set_verbosity(optuna.logging.WARNING)
        self._optuna_mod = optuna
        self.dists = {d.name: optuna.distributions.CategoricalDistribution(list(d.choices)) for d in self.spec.dims}
        sampler = optuna.samplers.TPESampler(seed=self.spec.seed, n_startup_trials=min(8, max(2, len(self.names) // 6)))
        self.study = optuna.create_study(direction="maximize" if self.objective.higher_is_better else "minimize",
                                         sampler=sampler)
        for t in done.trials if done else ():
            asked = dict(t.params)  # what was asked for (the search's own coordinates)
            if t.state == tuning.BASELINE or not all(k in self.dists and v in self.dists[k].choices
                                                      for k, v in asked.items()):
                continue
            state = optuna.trial.TrialState.COMPLETE if t.state == tuning.COMPLETE and t.score is not None \
                else optuna.trial.TrialState.PRUNED
            self.study.add_trial(optuna.trial.create_trial(
                params=asked, distributions={k: self.dists[k] for k in asked},
                value=t.score if state == optuna.trial.TrialState.COMPLETE else None, state=state))
        if self.spec.start is not None and not self.taken:
            self.study.enqueue_trial(dict(self.spec.start))

    def next(self) -> Candidate | None:
        if self.method == "grid":
            return self._next_of(self.grid_order)
        optuna = self._optuna_mod
        for _ in range(500):  # proposals that repeat a tried config or that the engine refuses are skipped
            if len(self.taken) >= len(self.names):
                return None
            trial = self.study.ask(self.dists)
            asked = {d.name: trial.params[d.name] for d in self.spec.dims}
            try:
                c = space_mod.candidate(self.spec, asked)
            except ValueError:
                self.study.tell(trial, state=optuna.trial.TrialState.FAIL)
                continue
            if c.name in self.taken:
                known = self.scores.get(c.name)
                if known is not None:  # the same config, already measured: its score, not a new measurement
                    self.study.tell(trial, known)
                else:
                    self.study.tell(trial, state=optuna.trial.TrialState.FAIL)
                continue
            self.taken.add(c.name)
            self.pending[c.name] = trial
            return c
        # TPE keeps proposing what is done: the rest of the grid, in order.
        return self._next_of(self.grid.candidates)

    def _next_of(self, candidates: Sequence[Candidate]) -> Candidate | None:
        for c in candidates:
            if c.name not in self.taken:
                self.taken.add(c.name)
                return c
        return None

    def tell(self, c: Candidate, score: float | None, pruned: bool) -> None:
        self.scores[c.name] = None if pruned else score
        trial = self.pending.pop(c.name, None)
        if trial is None or self.study is None:
            return
        optuna = self._optuna_mod
        if pruned or score is None:
            self.study.tell(trial, state=optuna.trial.TrialState.PRUNED)
        else:
            self.study.tell(trial, score)

    def failed(self, c: Candidate) -> None:
        trial = self.pending.pop(c.name, None)
        if trial is not None and self.study is not None:
            self.study.tell(trial, state=self._optuna_mod.trial.TrialState.FAIL)


def _provenance(spec: TuneSpec, c: Candidate | None, grid: space_mod.Grid, method: str) -> dict[str, Scalar]:
    prov: dict[str, Scalar] = {tuning.NAME: spec.name, tuning.SPACE: len(grid.candidates), tuning.SEARCH: method,
                               tuning.SEED: spec.seed, tuning.ENGINE: spec.engine}
    if len(grid.candidates) <= tuning.GRID_NAMES:
        prov[tuning.GRID] = json.dumps([c.name for c in grid.candidates])
    if c is not None:
        prov[tuning.PARAMS] = json.dumps(dict(c.asked), sort_keys=True)
        prov[tuning.ARGS] = shlex.join(c.args)  # as a shell takes them: copied into a launch line
        prov[tuning.ENV] = " ".join(f"{k}={v}" for k, v in c.env)
        prov[tuning.NOTES] = "; ".join(c.notes)
    return prov


def run(spec: TuneSpec, matrix: Matrix, rules: Rules, *, store_path: Path, home_simulated: bool | None,
        executor: Any, date: str, log_dir: Path, say: Say, budget_trials: int | None = None,
        budget_minutes: float | None = None) -> TuneReport:
    """The tune: baseline, then trials until the budget or the space runs out."""
    started = time.monotonic()
    grid = space_mod.grid(spec)
    if not grid.candidates:
        raise FindingsError(f"{spec.path}: the engine refuses every config of [tune.space] "
                            f"({grid.refused[0][1] if grid.refused else 'empty'})")
    trials_budget = budget_trials if budget_trials is not None else spec.trials
    minutes = budget_minutes if budget_minutes is not None else spec.minutes
    method = spec.search
    if method == "auto":
        method = "grid" if trials_budget is None or len(grid.candidates) <= trials_budget else "optuna"
    limit = len(grid.candidates) if trials_budget is None else min(trials_budget, len(grid.candidates))
    report = TuneReport(spec=spec, method=method, grid_size=len(grid.candidates), refused=len(grid.refused))
    objective = rules.objective
    done = stored(store_path, spec, rules)
    report.resumed = done.tried if done else 0
    campaign = _campaign(store_path, spec, date)
    base_sweep = matrix.defaults
    sweep_cs = base_sweep.concurrency
    proposer = Proposer(spec, grid, method, objective, done)
    say(f"tune {spec.name}: {method} over {len(grid.candidates)} configs of {grid.combinations} combinations "
        f"({len(grid.refused)} refused by {spec.engine}'s rules); budget {limit} trials"
        + (f" or {minutes:g} min" if minutes else "")
        + (f"; {report.resumed} trials already stored, continuing" if report.resumed else ""))

    def sweep_for(d: tuning.Tuning | None) -> Any:
        return replace(base_sweep, concurrency=order(objective, d, sweep_cs))

    def submit(number: int, c: Candidate | None, d: tuning.Tuning | None) -> None:
        if c is None:
            config = replace(matrix.configs[spec.baseline])
            state = tuning.BASELINE
        else:
            config = ConfigSpec(name=c.name, launch=f"{spec.launch} {shlex.join(c.args)}",
                                env={**dict(c.env)}, facts={})
            state = tuning.COMPLETE
        best = d.best if d else None
        best_at: dict[int, float] = {}
        for t in d.trials if d else ():
            for cc, v in t.tput:
                best_at[cc] = max(best_at.get(cc, 0.0), v)
        executor.submit(c.name if c else spec.baseline, trial_mod.payload(
            matrix=matrix, config=config, workload=spec.workload, sweep=sweep_for(d), campaign=campaign,
            number=number, state=state, provenance=_provenance(spec, c, grid, method), log_dir=str(log_dir),
            date=date, best=best.score if best and spec.prune else None, best_at=best_at, slack=rules.noise_floor,
            objective=objective))

    def store_result(result: Mapping[str, Any]) -> Path:
        run_ = run_from_dict(result["run"], "<trial>")
        if home_simulated is not None:
            store.check_home_kind(store_path, run_.source == "simulated", home_simulated, f"trial {run_.run_id}",
                                  "is")
        return store.add_run(store_path, run_, create=True)

    in_flight: dict[str, Candidate | None] = {}
    numbers = iter(range((max((t.number for t in done.trials), default=0) if done else 0) + 1, 10**9))
    tried = done.tried if done else 0
    try:
        with stop_signals():
            if done is None or done.baseline is None:
                say(f"trial 0: the baseline {spec.baseline}")
                submit(0, None, done)
                in_flight[spec.baseline] = None
                _collect(executor, in_flight, proposer, report, store_result, say)
                done = stored(store_path, spec, rules)
                if done is None or done.baseline is None:
                    raise FindingsError(f"tune {spec.name}: the baseline {spec.baseline!r} could not be measured; "
                                        f"{report.failed[-1] if report.failed else ''}".rstrip("; "))
            while True:
                out_of_time = minutes is not None and time.monotonic() - started > minutes * 60
                while not out_of_time and tried + len(in_flight) < limit and \
                        len(in_flight) < max(1, executor.capacity()):
                    c = proposer.next()
                    if c is None:
                        break
                    n = next(numbers)
                    say(f"trial {n}: {c.name}: {shlex.join(c.args)}" + (f" ({'; '.join(c.notes)})" if c.notes else ""))
                    submit(n, c, done)
                    in_flight[c.name] = c
                if not in_flight:
                    break
                finished = _collect(executor, in_flight, proposer, report, store_result, say)
                tried += 1  # a failed trial counts against the budget too
                done = stored(store_path, spec, rules)
                t = next((t for t in done.trials if t.config == finished), None) if done else None
                cand = next((c for c in grid.candidates if c.name == finished), None)
                if t is not None and cand is not None:
                    proposer.tell(cand, t.score if t.feasible else None, t.state == tuning.PRUNED)
    except KeyboardInterrupt as exc:
        report.interrupted = True
        report.signal = getattr(exc, "signum", 2)
    finally:
        executor.close()
    report.result = stored(store_path, spec, rules)
    report.wall_s = time.monotonic() - started
    return report


def _collect(executor: Any, in_flight: dict[str, Candidate | None], proposer: Proposer, report: TuneReport,
             store_result: Callable[[Mapping[str, Any]], Path], say: Say) -> str | None:
    """Wait for one trial; store it whole, or count it failed. Returns the
    config name of a stored trial."""
    outcome = None
    while outcome is None:
        outcome = executor.wait(timeout=5.0)
    c = in_flight.pop(outcome.key, None)
    where = f" on {outcome.node}" if outcome.node and outcome.node != "local" else ""
    if outcome.error is not None or outcome.result is None:
        report.failed.append(f"{outcome.key}{where}: {outcome.error}")
        kept = "" if "nothing" in str(outcome.error) else " (nothing stored)"
        say(f"  {outcome.key}: FAILED{where}: {outcome.error}{kept}")
        if c is not None:
            proposer.failed(c)
        return None
    path = store_result(outcome.result)
    report.written.append(path)
    say(f"  {outcome.key}: stored{where} in {outcome.seconds:.1f} s"
        + (" (stopped early: it cannot beat the best)" if outcome.result.get("pruned") else ""))
    return str(outcome.key)


def _campaign(store_path: Path, spec: TuneSpec, date: str) -> Campaign:
    """The tune's campaign: the one its stored trials name (a resumed tune), else a new one."""
    for run in _tune_runs(store_path, spec):
        for c in run.campaigns:
            if c.name == spec.campaign:
                return c
    return Campaign(name=spec.campaign, date=date, order=None)
