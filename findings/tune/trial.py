"""One trial of a tune: launch the server with the trial's config, measure it
with the findings client, and hand the records back as ONE run (D115).

``run_trial`` is what a Ray task runs on a node (findings/tune/cluster.py)
and what the local search calls in this process: it writes nothing but a
staging store in a temporary folder, and returns the run in its stored JSON
form. The driver alone validates it and writes the tune's store, so a trial
that does not come back (a lost node, a killed process) leaves nothing
behind, and one that comes back is stored whole, in one atomic file.
"""

from __future__ import annotations

import hashlib
import json
import signal
import socket
import tempfile
from pathlib import Path
from typing import Any, Mapping

from findings import store
from findings.bench import runner
from findings.bench.matrix import CampaignSpec, ConfigSpec, Matrix, Sweep
from findings.core.errors import FindingsError
from findings.core.model import Campaign, Point, Run, Scalar
from findings.derive import tuning
from findings.store.schema import point_id, run_to_dict


class TrialFailed(FindingsError):
    """The trial measured nothing it can stand by (its server died, every request failed, ...)."""


def payload(*, matrix: Matrix, config: ConfigSpec, workload: str, sweep: Sweep, campaign: Campaign,
            number: int, state: str, provenance: Mapping[str, Scalar], log_dir: str, date: str,
            best: float | None, best_at: Mapping[int, float], slack: float,
            objective: tuning.Objective) -> dict[str, Any]:
    """What a trial needs, in one picklable dict (it may run on another node)."""
    return {"matrix": matrix, "config": config, "workload": workload, "sweep": sweep, "campaign": campaign,
            "number": number, "state": state, "provenance": dict(provenance), "log_dir": log_dir, "date": date,
            "best": best, "best_at": dict(best_at), "slack": slack, "objective": objective}


def run_trial(p: Mapping[str, Any]) -> dict[str, Any]:
    """Measure one trial; return {"run": the run's JSON, "pruned": bool,
    "node": host name}. Raises TrialFailed (one line) when it has no
    complete result."""
    config: ConfigSpec = p["config"]
    campaign: Campaign = p["campaign"]
    objective: tuning.Objective = p["objective"]
    measured: dict[int, float] = {}
    pruned = [False]

    def keep_going(name: str, c: int, metrics: Mapping[str, float]) -> bool:
        if "output_throughput_tok_s" in metrics:
            measured[c] = metrics["output_throughput_tok_s"]
        best = p["best"]
        if best is None or p["state"] != tuning.COMPLETE:
            return True
        reach = tuning.bound(objective, measured, p["best_at"], p["slack"])
        if reach is not None and len(measured) < len(p["sweep"].concurrency) and not objective.better(reach, best):
            pruned[0] = True
            return False
        return True

    matrix = Matrix(path=p["matrix"].path, configs={config.name: config},
                    workloads={p["workload"]: p["matrix"].workloads[p["workload"]]},
                    campaigns=(CampaignSpec(name=campaign.name, configs=(config.name,), workloads=(p["workload"],),
                                            sweep=p["sweep"]),))
    with tempfile.TemporaryDirectory(prefix="findings-trial-") as tmp:
        staging = Path(tmp) / "store"
        log_dir = Path(p["log_dir"])
        try:
            log_dir.mkdir(parents=True, exist_ok=True)
        except OSError:
            log_dir = Path(tmp) / "logs"
        opts = runner.BenchOptions(store=staging, home_store=None, log_dir=log_dir, date=p["date"], progress=False,
                                   create=True, keep_going=keep_going, matrix=Path(p["matrix"].path),
                                   servers_die_with_launcher=True)
        report = runner.run_matrix(matrix, opts)
        if report.interrupted:  # Ctrl-C or SIGTERM: the tune stops, this trial is not stored
            raise runner.Terminated(report.signal) if report.signal != signal.SIGINT else KeyboardInterrupt()
        if report.problems or not report.written:
            why = report.problems[0] if report.problems else "no point was measured"
            raise TrialFailed(f"trial {p['number']} ({config.name}): {why}")
        runs = store.load_runs(staging, requests=True)
    run = merge(runs, campaign, config.name, {**p["provenance"], tuning.TRIAL: p["number"],
                                               tuning.STATE: tuning.PRUNED if pruned[0] else p["state"]})
    return {"run": run_to_dict(run), "pruned": pruned[0], "node": socket.gethostname()}


def merge(runs: list[Run], campaign: Campaign, config: str, extra: Mapping[str, Scalar]) -> Run:
    """The staging store's runs (one per point) as one run of the tune's campaign."""
    if not runs:
        raise TrialFailed(f"{config}: no run was written")
    first = runs[0]
    points: list[Point] = [p for r in runs for p in r.points]
    body = json.dumps([[p.config, p.workload, p.concurrency, sorted(p.metrics.items())] for p in points]
                      + [campaign.name, sorted(extra.items(), key=lambda kv: kv[0])], default=str)
    sha = hashlib.sha256(body.encode()).hexdigest()
    run_id = f"{campaign.name}-t{int(extra.get(tuning.TRIAL) or 0):03d}-{sha[:10]}"
    fixed = tuple(p._replace(id=point_id(run_id, i), run_id=run_id, campaign=campaign.name)
                  for i, p in enumerate(points))
    provenance = {**first.provenance, **extra}
    provenance.pop("repeat", None)
    return Run(schema_version=first.schema_version, run_id=run_id, source=first.source, importer=first.importer,
               importer_version=first.importer_version, tool_version=first.tool_version,
               created_at=first.created_at, source_file=None, source_sha256=sha, environment=first.environment,
               campaigns=(campaign,), configs={config: first.configs.get(config, {})}, points=fixed,
               provenance=provenance, extra_inputs=first.extra_inputs)
