"""Where a tune's trials run: one at a time here (LocalTrials), or spread over a
Ray cluster (RayTrials, ``findings tune --ray ADDRESS``).

Both have one interface: ``submit(key, payload)`` hands a trial over, ``wait()``
gives back the next finished one as an :class:`Outcome`. A trial is a
:data:`TrialFn`, a module-level function that every node can import (Ray sends
it by reference): it launches the server with the payload's config, measures
it with the findings client and returns the measured run records. It writes
nothing to the results store; the driver, which alone writes the store, gets
the records in the Outcome.

A trial either comes back whole or not at all: a node lost in the middle of
a trial (its raylet or worker killed, the machine gone) makes an Outcome with
``error`` set and ``result`` None, never part of a result; so does an
exception raised by the trial itself (its one-line message). Each trial is a
Ray task with ``max_retries=0``: whether to run a failed config again is the
search's decision, not Ray's.

The only module of the project that imports ``ray`` (the ``cluster`` extra,
D114), and only when a RayTrials is made.
"""

from __future__ import annotations

import math
import re
import time
from collections import deque
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Protocol

from findings.core.errors import FindingsError, one_line

TrialFn = Callable[[dict[str, Any]], dict[str, Any]]

NEEDS_EXTRA = "findings tune --ray needs the cluster extra: pip install 'findings[cluster]'"

#: Ray's errors that mean the trial's node or worker went away (not the trial's own failure).
_NODE_LOSS = ("NodeDiedError", "WorkerCrashedError", "LocalRayletDiedError", "ObjectLostError",
              "OwnerDiedError", "ObjectReconstructionFailedError", "ObjectFetchTimedOutError",
              "ActorDiedError", "RaySystemError")
_NODE_ID = re.compile(r"node ID: ([0-9a-f]{8,})", re.IGNORECASE)
_NODE_IP = re.compile(r"Node IP: ([0-9A-Fa-f.:]+[0-9A-Fa-f])")


@dataclass(frozen=True)
class Outcome:
    """One finished trial: its TrialFn's return value, or one line saying why there is none."""

    key: str
    result: dict[str, Any] | None
    error: str | None
    node: str | None
    seconds: float

    @property
    def ok(self) -> bool:
        return self.error is None


class Trials(Protocol):
    """What the search sees of LocalTrials and RayTrials."""

    def capacity(self) -> int: ...
    def submit(self, key: str, payload: dict[str, Any]) -> None: ...
    def in_flight(self) -> int: ...
    def wait(self, timeout: float | None = None) -> Outcome | None: ...
    def close(self) -> None: ...


def _message(exc: BaseException) -> str:
    """An exception's first line (its type's name when it has no message)."""
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    return one_line(lines[0]) if lines else type(exc).__name__


def _on_node(fn: TrialFn, payload: dict[str, Any]) -> dict[str, Any]:
    """The Ray task: runs the trial on its node and says which node that was.
    The trial's own exception comes back as its one-line message, so that any
    exception the driver sees from a task is Ray's (node lost, cancelled, ...)."""
    import ray

    node = ray.get_runtime_context().get_node_id()
    try:
        return {"node": node, "result": fn(payload), "error": None}
    except Exception as exc:  # noqa: BLE001 - any failure of the trial is its outcome
        return {"node": node, "result": None, "error": _message(exc)}


class LocalTrials:
    """The serial stand-in: one trial at a time, in this process, when wait() is
    called. No Ray."""

    def __init__(self, fn: TrialFn) -> None:
        self._fn = fn
        self._queue: deque[tuple[str, dict[str, Any], float]] = deque()

    def __enter__(self) -> LocalTrials:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def capacity(self) -> int:
        return 1

    def submit(self, key: str, payload: dict[str, Any]) -> None:
        self._queue.append((key, payload, time.perf_counter()))

    def in_flight(self) -> int:
        return len(self._queue)

    def wait(self, timeout: float | None = None) -> Outcome | None:
        """Runs the oldest submitted trial to its end (``timeout`` cannot cut a
        trial short here); None when nothing was submitted."""
        if not self._queue:
            return None
        key, payload, start = self._queue.popleft()
        try:
            result, error = self._fn(payload), None
        except Exception as exc:  # noqa: BLE001 - any failure of the trial is its outcome
            result, error = None, _message(exc)
        return Outcome(key=key, result=result, error=error, node="local",
                       seconds=time.perf_counter() - start)

    def close(self) -> None:
        self._queue.clear()


@dataclass
class _Flight:
    key: str
    start: float
    nodes: frozenset[str]  # the nodes alive at submit: a lost one is named even when Ray's error does not


class RayTrials:
    """Each trial a Ray task on a node with the resources it asks for."""

    def __init__(self, address: str, fn: TrialFn, *, gpus_per_trial: float = 0.0, cpus_per_trial: float = 1.0,
                 resources: Mapping[str, float] | None = None) -> None:
        try:
            import ray
        except ImportError:
            raise FindingsError(NEEDS_EXTRA) from None
        self._ray: Any = ray
        self._fn = fn
        self._address = address
        request = {"CPU": float(cpus_per_trial), "GPU": float(gpus_per_trial)}
        for name, amount in (resources or {}).items():
            request[str(name)] = float(amount)
        for name, amount in request.items():
            if not math.isfinite(amount) or amount < 0:
                raise FindingsError(f"a trial's request for {name} must be a number >= 0, not {amount}")
        self._request = {name: amount for name, amount in request.items() if amount > 0}
        self._flights: dict[Any, _Flight] = {}
        try:
            self._ray.init(address=address)
        except Exception as exc:  # noqa: BLE001 - ConnectionError, ValueError, RuntimeError: all one line
            raise FindingsError(f"--ray {address}: cannot connect to a Ray cluster there: {_message(exc)}") from None
        if self.capacity() == 0:
            have = {k: v for k, v in self._ray.cluster_resources().items() if k in self._request}
            self._ray.shutdown()
            raise FindingsError(
                f"no node of the Ray cluster at {address} can fit one trial: each asks for "
                f"{_resources(self._request)}, the cluster has {_resources(have) or 'none of these'} "
                f"(nothing was run)")
        custom = {k: v for k, v in self._request.items() if k not in ("CPU", "GPU")}
        self._task = self._ray.remote(_on_node).options(
            num_cpus=float(cpus_per_trial), num_gpus=float(gpus_per_trial), resources=custom, max_retries=0)

    def __enter__(self) -> RayTrials:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _nodes(self) -> list[dict[str, Any]]:
        return [n for n in self._ray.nodes() if n.get("Alive")]

    def capacity(self) -> int:
        """How many trials fit at once on the cluster's live nodes now (by their
        total resources, whatever runs there)."""
        total = 0
        for node in self._nodes():
            have = node.get("Resources", {})
            fits = [math.floor(have.get(name, 0.0) / amount + 1e-9) for name, amount in self._request.items()]
            total += min(fits) if fits else max(1, int(have.get("CPU", 1)))
        return total

    def submit(self, key: str, payload: dict[str, Any]) -> None:
        if any(f.key == key for f in self._flights.values()):
            raise FindingsError(f"trial {key} is already in flight")
        nodes = frozenset(str(n["NodeID"]) for n in self._nodes())
        ref = self._task.remote(self._fn, payload)
        self._flights[ref] = _Flight(key=key, start=time.perf_counter(), nodes=nodes)

    def in_flight(self) -> int:
        return len(self._flights)

    def wait(self, timeout: float | None = None) -> Outcome | None:
        """The next finished trial, whole or failed; None when none finished
        within ``timeout`` seconds (or nothing is in flight)."""
        if not self._flights:
            return None
        ready, _ = self._ray.wait(list(self._flights), num_returns=1, timeout=timeout)
        if not ready:
            return None
        ref = ready[0]
        flight = self._flights.pop(ref)
        try:
            out = self._ray.get(ref)
        except Exception as exc:  # noqa: BLE001 - whatever Ray raises, the trial failed
            node, error = self._why(exc, flight)
            return Outcome(key=flight.key, result=None, error=error, node=node,
                           seconds=time.perf_counter() - flight.start)
        seconds = time.perf_counter() - flight.start
        if out["error"] is not None:
            return Outcome(key=flight.key, result=None, error=out["error"], node=out["node"], seconds=seconds)
        return Outcome(key=flight.key, result=out["result"], error=None, node=out["node"], seconds=seconds)

    def _why(self, exc: BaseException, flight: _Flight) -> tuple[str | None, str]:
        """The lost node (when known) and one line for a task that Ray failed."""
        cause = exc
        # A RayTaskError wraps what happened on the worker (a system error there).
        inner = getattr(exc, "cause", None)
        if type(exc).__name__.startswith("RayTaskError") and isinstance(inner, BaseException):
            cause = inner
        kind = type(cause).__name__
        text = str(cause)
        node_id = _NODE_ID.search(text)
        node_ip = _NODE_IP.search(text)
        node = node_id.group(1) if node_id else None
        lost = any(kind.startswith(name) for name in _NODE_LOSS)
        if lost and node is None:
            try:
                gone = sorted(flight.nodes - {str(n["NodeID"]) for n in self._nodes()})
            except Exception:  # noqa: BLE001 - the GCS itself may be gone
                gone = []
            if len(gone) == 1:
                node = gone[0]
        if kind == "TaskCancelledError":
            return node, "cancelled before it finished"
        if lost:
            where = f"node {node}" + (f" ({node_ip.group(1)})" if node_ip else "") if node else "its node or worker"
            return node, one_line(f"{where} was lost in the middle of the trial ({kind}); nothing of it was kept")
        return node, one_line(f"{kind}: {_message(cause)}")

    def close(self) -> None:
        """Cancels (force: kills the workers) what is in flight, and disconnects."""
        for ref in list(self._flights):
            try:
                self._ray.cancel(ref, force=True)
            except Exception:  # noqa: BLE001 - already finished or its node is gone
                pass
        self._flights.clear()
        if self._ray.is_initialized():
            self._ray.shutdown()


def _resources(amounts: Mapping[str, float]) -> str:
    return ", ".join(f"{name}={amount:g}" for name, amount in sorted(amounts.items()))
