"""Worker processes: one point measured by N OS processes, each with its own
event loop and connection pool (``findings bench --workers N``).

``split`` (pure) shares a point's load among the workers and merges their raw
records into one point; ``process`` runs them (docs/decisions.md D120).
"""

from __future__ import annotations

from findings.bench.workers.process import WorkerDied, cpus, run_point_workers
from findings.bench.workers.split import default_workers, resolve_workers, shares

__all__ = ["WorkerDied", "cpus", "default_workers", "resolve_workers", "run_point_workers", "shares"]
