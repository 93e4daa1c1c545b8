"""``findings bench --append`` resumes: which points of a campaign the store
already holds, so that only the missing ones are measured (docs/bench.md,
docs/decisions.md D96). Pure: the caller reads the store's runs.

*The same point* is the same campaign, config and workload name, the same
workload definition (the keys the store compares across a workload name,
findings/store/identity.py: lengths, prompt set, ``ignore_eos``, API), the
same load (the concurrency C; for an open loop also its rate, burstiness,
profile or trace, cap and SLO, as each point records them) and the same
repeat index (a point's ``provenance.repeat``). Other options (the request
count, warm-up, transport) are not part of it. Only points that
``findings bench`` measured count: an imported point records no repeat.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Mapping, Sequence

from findings.bench.matrix import CampaignSpec, Sweep
from findings.bench.workload import Workload
from findings.core.model import Point, Run, Scalar
from findings.load.spec import next_search_rate
from findings.store import identity

#: The store's importer name for runs of ``findings bench`` (findings/bench/runner.py).
IMPORTER = "findings-bench"

Where = tuple[str, str, int, int]  # (config, workload, C, repeat)


def load_axis(w: Workload, sweep: Sweep) -> list[tuple[int, float | None]]:
    """The points of one workload in a sweep, as (concurrency, rate): each C
    of a closed loop; each rate of an open loop (its cap as C), or its one
    profile or trace."""
    if w.load is None:
        return [(c, None) for c in sweep.concurrency]
    return [(w.load.cap, r) for r in w.load.axis]


@dataclass(frozen=True)
class Stored:
    """A campaign's stored bench points, by (config, workload, C, repeat)."""

    campaign: str
    points: Mapping[Where, tuple[Point, ...]]


def stored(runs: Iterable[Run], campaign: str) -> Stored:
    """The points ``findings bench`` stored in ``campaign``."""
    out: dict[Where, list[Point]] = {}
    for run in runs:
        repeat = run.provenance.get("repeat")
        if run.importer != IMPORTER or not isinstance(repeat, int) or isinstance(repeat, bool):
            continue
        for p in run.points:
            if p.campaign == campaign:
                out.setdefault((p.config, p.workload, p.concurrency, repeat), []).append(p)
    return Stored(campaign, {k: tuple(v) for k, v in out.items()})


def _expected(w: Workload, api: str, rate: float | None) -> tuple[dict[str, Scalar], dict[str, Scalar]]:
    """What a point of ``w`` at ``rate`` records: its definition's parameters, and its load's."""
    params: dict[str, Scalar] = {**w.params(), "api": api}
    load: dict[str, Scalar] = dict(w.load.params(rate)) if w.load is not None else {}
    params.update(load)
    if w.load is not None and w.load.mode == "trace":
        for key in ("input_len", "output_len"):
            params.pop(key, None)
    return params, load


def find(have: Stored, config: str, w: Workload, api: str, c: int, rate: float | None,
         repeat: int) -> Point | None:
    """The stored point that is this one (the module docstring), or None."""
    candidates = have.points.get((config, w.name, c, repeat), ())
    if not candidates:
        return None
    params, load = _expected(w, api, rate)
    definition = identity.definition(IMPORTER, params)
    keys = set(load) | {"load", "request_rate"}
    for p in candidates:
        got = p.workload_params
        if identity.definition(IMPORTER, got) == definition and all(got.get(k) == load.get(k) for k in keys):
            return p
    return None


def _search_stored(have: Stored, config: str, w: Workload, sweep: Sweep) -> bool:
    """Whether every point of ``w``'s rate search is stored: the search
    replayed on the stored attainments, as the sweep would run it."""
    load = w.load
    if load is None or not load.rate_search:
        return True
    attained: dict[float, list[float]] = {}
    for c, rate in load_axis(w, sweep):
        for repeat in range(1, sweep.repeats + 1):
            p = find(have, config, w, sweep.api, c, rate, repeat)
            if p is None:
                return False
            if rate is not None:
                attained.setdefault(rate, []).append(p.metrics.get("slo_attainment", 0.0))
    for _ in range(load.rate_search):
        rate = next_search_rate({r: sum(v) / len(v) for r, v in attained.items()}, load.slo.attainment)
        if rate is None:
            return True
        for repeat in range(1, sweep.repeats + 1):
            p = find(have, config, w, sweep.api, load.cap, rate, repeat)
            if p is None:
                return False
            attained.setdefault(rate, []).append(p.metrics.get("slo_attainment", 0.0))
    return True


@dataclass(frozen=True)
class Resume:
    """What ``--append`` finds of one campaign: its points (the sweep's, a
    rate search's not counted: they depend on the measurements) and how
    many are stored."""

    campaign: str
    total: int
    stored: int
    #: Configs with every point stored (their servers are not even started).
    done: tuple[str, ...]
    #: Configs whose rate search may still lack points.
    searching: tuple[str, ...]

    @property
    def complete(self) -> bool:
        return self.stored == self.total and not self.searching

    def line(self) -> str | None:
        """The one line ``bench --append`` prints (None: nothing stored yet)."""
        if self.complete:
            return (f"campaign {self.campaign}: all {self.total} point{'' if self.total == 1 else 's'} already "
                    f"stored, nothing to measure")
        if not self.stored:
            return None
        search = " (and the rate search's points it lacks)" if self.searching else ""
        return (f"resuming campaign {self.campaign}: {self.stored} of {self.total} points already stored, "
                f"measuring {self.total - self.stored}{search}")


def plan(have: Stored, spec: CampaignSpec, workloads: Sequence[Workload]) -> Resume:
    """The campaign's points against those stored."""
    sweep = spec.sweep
    total = found = 0
    done: list[str] = []
    searching: list[str] = []
    for config in spec.configs:
        mine = have_all = 0
        for w in workloads:
            for c, rate in load_axis(w, sweep):
                for repeat in range(1, sweep.repeats + 1):
                    have_all += 1
                    mine += find(have, config, w, sweep.api, c, rate, repeat) is not None
        total += have_all
        found += mine
        search_done = all(_search_stored(have, config, w, sweep) for w in workloads)
        if mine == have_all and search_done:
            done.append(config)
        elif not search_done:
            searching.append(config)
    return Resume(have.campaign, total, found, tuple(done), tuple(searching))
