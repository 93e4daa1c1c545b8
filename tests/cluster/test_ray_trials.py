"""findings.tune.cluster on a real 2-node Ray cluster on this machine (issue 40).

Skipped unless FINDINGS_CLUSTER=1 (``make test-cluster`` installs the cluster
extra and sets it). Each test starts its own cluster with Ray's own utilities
(ray.cluster_utils.Cluster: a head and one added node, separate raylets on
this machine), each node with one CPU and one ``trial_slot``, and each trial asking
for a slot, so each node runs one trial at a time. The trial is real
(trialfn.run_trial): the emulator launched on the node, ``findings bench``
against it, the run files sent back to the driver.
"""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

if os.environ.get("FINDINGS_CLUSTER") != "1":
    pytest.skip("the Ray cluster tests run with FINDINGS_CLUSTER=1 (make test-cluster)", allow_module_level=True)
try:
    import ray  # noqa: F401
    from ray.cluster_utils import Cluster
except ImportError:
    pytest.skip("ray is not installed: pip install '.[cluster]' (make test-cluster does)", allow_module_level=True)

import trialfn

from findings.core.errors import FindingsError
from findings.tune.cluster import LocalTrials, Outcome, RayTrials

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
REPORT = ROOT / "build" / "cluster" / "ray-trials.md"
SLOT = {"trial_slot": 1.0}
from conftest import NODE  # noqa: E402  (and the cluster fixture)
# A trial: the emulator at 2x speed, 8 requests at C=1 and at C=4, 64 tokens out: about 5 s,
# most of it the emulated model's time, so that two trials share this 2-core machine.
TRIAL = {"speed": 2, "output_len": 64, "num_prompts": 8, "concurrency": "1,4"}


def payloads(n: int, tag: str, **extra) -> list[dict]:
    # One campaign per trial: each trial's own store numbers its campaigns from 1.
    return [{"key": f"t{i}", "config": f"cfg{i}", "campaign": f"tune-{tag}-{i}", "seed": 4000 + i, **TRIAL, **extra}
            for i in range(n)]


def run_all(trials, items: list[dict]) -> tuple[list[Outcome], float]:
    """Submit as many as fit, the next one whenever one finishes (the search's loop)."""
    start = time.perf_counter()
    todo, out = list(items), []
    while todo or trials.in_flight():
        while todo and trials.in_flight() < trials.capacity():
            p = todo.pop(0)
            trials.submit(p["key"], p)
        o = trials.wait(timeout=120)
        assert o is not None, "no trial finished within 120 s"
        out.append(o)
    return out, time.perf_counter() - start


def check_complete(result: dict, payload: dict) -> None:
    """A whole trial: one run per concurrency level, each with its point and its records."""
    levels = [int(c) for c in payload["concurrency"].split(",")]
    assert len(result["runs"]) == len(levels)
    got = []
    for run in result["runs"]:
        doc = json.loads(run["text"])
        [point] = doc["points"]
        got.append(point["concurrency"])
        assert point["config"] == payload["config"]
        assert doc["requests"]["file"] in result["sidecars"]
    assert sorted(got) == levels


def write_store(store: Path, outcomes: list[Outcome]) -> int:
    """The driver's part: only whole trials' run files go into the store."""
    runs = store / "runs"
    runs.mkdir(parents=True, exist_ok=True)
    n = 0
    for o in outcomes:
        if o.result is None:
            continue
        for name, data in o.result["sidecars"].items():
            (runs / name).write_bytes(base64.b64decode(data))
        for run in o.result["runs"]:
            (runs / run["file"]).write_text(run["text"], encoding="utf-8")
            n += 1
    return n


def store_check(store: Path) -> str:
    out = subprocess.run([sys.executable, "-m", "findings", "--store", str(store), "store", "check"],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stdout + out.stderr
    return out.stdout.strip().replace(str(store), "store")


def test_trials_run_in_parallel_on_two_nodes(cluster, tmp_path):
    items = payloads(4, "par")
    with RayTrials(cluster.address, trialfn.run_trial, cpus_per_trial=1, resources=SLOT) as trials:
        assert trials.capacity() == 2
        par, par_s = run_all(trials, items)
    with LocalTrials(trialfn.run_trial) as local:
        ser, ser_s = run_all(local, payloads(4, "ser"))
    assert all(o.ok for o in par + ser), [o.error for o in par + ser]
    by_key = {p["key"]: p for p in items}
    for o in par:
        check_complete(o.result, by_key[o.key])
    nodes = {o.node for o in par}
    assert len(nodes) == 2, nodes  # both nodes ran trials
    assert write_store(tmp_path / "store", par) == 8
    checked = store_check(tmp_path / "store")
    REPORT.parent.mkdir(parents=True, exist_ok=True)
    rows = "\n".join(f"| {o.key} | {o.node[:12]} | {o.seconds:.2f} |" for o in sorted(par, key=lambda o: o.key))
    REPORT.write_text(
        "# Trials on a 2-node Ray cluster (tests/cluster)\n\n"
        "Generated by tests/cluster/test_ray_trials.py (make test-cluster): 4 real trials (the emulator "
        f"launched on the node, `findings bench` against it: {TRIAL}), through RayTrials on a local "
        "2-node cluster (ray.cluster_utils.Cluster, one `trial_slot` per node) and through LocalTrials "
        "(serial, in the driver). Both nodes and the driver share this machine "
        f"({os.cpu_count()} cores).\n\n"
        "| way | trials | wall time (s) |\n|---|---:|---:|\n"
        f"| RayTrials, 2 nodes | 4 | {par_s:.2f} |\n| LocalTrials, serial | 4 | {ser_s:.2f} |\n\n"
        f"Parallel / serial: {par_s / ser_s:.2f} (the test asks for < 0.8).\n\n"
        "| trial | node | submit to outcome (s) |\n|---|---|---:|\n" + rows + "\n\n"
        f"The driver's store of the parallel trials: `{checked}`.\n", encoding="utf-8")
    print(f"parallel {par_s:.2f} s, serial {ser_s:.2f} s")
    assert par_s < 0.8 * ser_s, (par_s, ser_s)


def test_a_node_lost_mid_trial_fails_that_trial_only(cluster, tmp_path):
    markers = tmp_path / "markers"
    markers.mkdir()
    [added] = [n for n in cluster.list_all_nodes() if not n.head]
    # Longer trials, so that the one on the added node is surely still running when it goes.
    items = payloads(4, "kill", marker_dir=str(markers), output_len=96)
    by_key = {p["key"]: p for p in items}
    seeds = {p["seed"] for p in items}
    with RayTrials(cluster.address, trialfn.run_trial, cpus_per_trial=1, resources=SLOT) as trials:
        todo, outcomes, victim = list(items), [], None
        while todo or trials.in_flight():
            while todo and trials.in_flight() < 2:
                p = todo.pop(0)
                trials.submit(p["key"], p)
            if victim is None:
                deadline = time.monotonic() + 120
                while victim is None:
                    assert time.monotonic() < deadline, "no trial started on the added node"
                    for m in markers.glob("*.start"):
                        if m.read_text() == added.node_id and not any(o.key == m.stem for o in outcomes):
                            victim = m.stem
                    if victim is None:
                        o = trials.wait(timeout=0.05)
                        if o is not None:
                            outcomes.append(o)
                time.sleep(1.0)  # the emulator is up and the client is measuring
                cluster.remove_node(added)
                continue
            o = trials.wait(timeout=180)
            assert o is not None, "no trial finished within 180 s"
            outcomes.append(o)
    assert sorted(o.key for o in outcomes) == sorted(by_key)
    failed = [o for o in outcomes if not o.ok]
    assert [o.key for o in failed] == [victim], [(o.key, o.error) for o in outcomes]
    [lost] = failed
    print(f"the lost trial's error: {lost.error}")
    assert lost.result is None and "\n" not in lost.error
    assert added.node_id in lost.error and lost.node == added.node_id
    for o in outcomes:
        if o.ok:
            check_complete(o.result, by_key[o.key])
    # The tune went on: the other three are whole, and the store holds only them.
    assert write_store(tmp_path / "store", outcomes) == 3 * 2
    store_check(tmp_path / "store")
    stored = {json.loads(p.read_text())["points"][0]["config"] for p in (tmp_path / "store" / "runs").glob("*.json")}
    assert stored == {p["config"] for p in items if p["key"] != victim}
    # The lost node's emulator went with its worker.
    time.sleep(1.0)
    ps = subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True).stdout
    left = [line for line in ps.splitlines() if "findings emulate" in line
            and any(f"--seed {s}" in line for s in seeds) and "--speed 2" in line]
    assert not left, left


def test_a_request_no_node_can_fit_is_refused_before_anything_runs(cluster, tmp_path):
    markers = tmp_path / "markers"
    markers.mkdir()
    with pytest.raises(FindingsError) as err:
        RayTrials(cluster.address, trialfn.run_trial, gpus_per_trial=1, resources=SLOT)
    message = str(err.value)
    print(f"refused: {message}")
    assert "\n" not in message and "no node of the Ray cluster" in message and "GPU=1" in message
    assert not ray.is_initialized()
    assert not list(markers.iterdir())
