"""findings tune: search serving configs toward the best deployment (docs/tune.md, D115).

``tune(settings, matrix_path, ...)`` is the library call behind ``findings tune``:
the matrix file's [tune] table (space.py) and findings.toml's [tune] objective
(findings/derive/tuning.py), searched (search.py) with one trial per config
(trial.py), run in this process or as Ray tasks over a cluster (cluster.py).
"""

from __future__ import annotations

import datetime as dt
import tomllib
from dataclasses import replace
from pathlib import Path
from typing import Callable

from findings.core.errors import FindingsError, InputError
from findings.document.settings import Settings
from findings.store.schema import valid_date
from findings.tune.search import TuneReport

__all__ = ["TuneReport", "tune"]


def tune(settings: Settings, matrix_path: str, *, ray: str | None = None, trials: int | None = None,
         minutes: float | None = None, search: str | None = None, seed: int | None = None,
         prune: bool | None = None,
         date: str | None = None, log_dir: str | None = None,
         say: Callable[[str], None] = print) -> TuneReport:
    from findings.bench import matrix as matrix_mod
    from findings.tune import cluster, space, trial
    from findings.tune import search as search_mod

    path = Path(matrix_path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise FindingsError(f"{matrix_path}: cannot read: {exc.strerror}") from None
    matrix = matrix_mod.parse(matrix_path, text, campaigns_required=False)
    doc = tomllib.loads(text)
    if "tune" not in doc:
        raise InputError(matrix_path, None, "tune", "the matrix has no [tune] table (docs/tune.md)")
    spec = space.parse(matrix_path, doc["tune"], matrix.configs, matrix.workloads, doc.get("vars", {}))
    if search is not None:
        spec = replace(spec, search=search)
    if seed is not None:
        spec = replace(spec, seed=seed)
    if prune is not None:
        spec = replace(spec, prune=prune)
    objective = settings.rules.objective
    if objective.kind == "goodput" and matrix.workloads[spec.workload].load is None:
        raise FindingsError(f"{matrix_path}: the objective is goodput at {objective.rate:g} req/s: workload "
                            f"{spec.workload!r} must be an open loop with request_rate = [{objective.rate:g}]")
    if objective.kind != "goodput" and matrix.workloads[spec.workload].load is not None:
        raise FindingsError(f"{matrix_path}: workload {spec.workload!r} is an open loop; the {objective.kind} "
                            f"objective is judged at closed-loop C values ({settings.file or 'findings.toml'} [tune])")
    day = date or dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d")
    if not valid_date(day):
        raise FindingsError(f"--date: expected YYYY-MM-DD, got {day!r}")
    if ray is not None:
        executor: object = cluster.RayTrials(ray, trial.run_trial, gpus_per_trial=spec.gpus_per_trial)
    else:
        executor = cluster.LocalTrials(trial.run_trial)
    home = settings.store.resolve() == settings.home_store.resolve()
    return search_mod.run(spec, matrix, settings.rules, store_path=settings.store,
                      home_simulated=settings.simulated_store if home else None, executor=executor, date=day,
                      log_dir=Path(log_dir) if log_dir else settings.root / "build" / "logs" / spec.campaign,
                      say=say, budget_trials=trials, budget_minutes=minutes)
