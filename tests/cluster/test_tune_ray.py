"""`findings tune --ray ADDRESS` on a real 2-node Ray cluster on this machine
(issue 40's Done-means): the trials run in parallel, the wall time against a
serial tune of the same space; a node killed in the middle of a trial fails
that trial, the tune finishes, and the store holds only complete trials.

The driver is the real command, in its own process; the cluster (raycluster.py)
is Ray's own utilities, one CPU per node, so each node runs one trial (a
trial asks for one CPU). Skipped unless FINDINGS_CLUSTER=1 (make test-cluster).
"""

from __future__ import annotations

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
except ImportError:
    pytest.skip("ray is not installed: pip install '.[cluster]' (make test-cluster does)", allow_module_level=True)

sys.path.insert(0, str(Path(__file__).resolve().parent))
from raycluster import cluster  # noqa: E402,F401  (the fixture)

ROOT = Path(__file__).resolve().parents[2]
FINDINGS = str(Path(sys.executable).parent / "findings")
REPORT = ROOT / "build" / "cluster" / "tune-ray.md"

# Eight configs and the baseline; each trial about 4 s of the emulated model's time at speed 2.
MATRIX = """
[defaults]
concurrency = [1, 4]
warmup = 0
health_timeout_s = 120
running_sample_s = 0

[workloads.w]
prompts = "diverse"
input_len = 32
output_len = 64
num_prompts = 8
prompts_per_concurrency = 1

[configs.baseline]
launch = "{python} -m findings emulate --port {port} --profile baseline --speed 2 --seed 5"

[tune]
name = "ray"
engine = "sglang"
launch = "{python} -m findings emulate --port {port} --speed 2 --seed 5"
baseline = "baseline"
workload = "w"
search = "grid"
prune = false

[tune.space]
speculative-algorithm = ["EAGLE3"]
speculative-num-steps = [1, 2, 3, 4]
speculative-eagle-topk = [1]
disable-overlap-schedule = [false, true]
max-running-requests = [64]
"""

SETTINGS = """
[findings]
store = "results"
simulated = true

[tune]
weights = { "1" = 0.5, "4" = 0.5 }
"""


def _setup(folder: Path) -> tuple[Path, Path]:
    folder.mkdir(parents=True)
    (folder / "tune.toml").write_text(MATRIX)
    (folder / "findings.toml").write_text(SETTINGS)
    return folder / "tune.toml", folder / "findings.toml"


def _start(folder: Path, *extra: str) -> subprocess.Popen[str]:
    matrix, settings = folder / "tune.toml", folder / "findings.toml"
    return subprocess.Popen([FINDINGS, "--settings", str(settings), "tune", str(matrix), "--date", "2026-12-03",
                             *extra], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=folder)


def _runs(folder: Path) -> list[dict[str, object]]:
    runs = folder / "results" / "runs"
    return [json.loads(p.read_text()) for p in sorted(runs.glob("*.json"))] if runs.is_dir() else []


def _check(folder: Path) -> str:
    out = subprocess.run([FINDINGS, "--store", str(folder / "results"), "store", "check"], capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 0, out.stdout + out.stderr
    return out.stdout.strip().splitlines()[0].replace(str(folder / "results"), "store")


def test_a_tune_over_two_nodes_runs_trials_in_parallel(cluster, tmp_path: Path) -> None:
    _setup(tmp_path / "ray")
    _setup(tmp_path / "serial")
    t0 = time.monotonic()
    par = _start(tmp_path / "ray", "--ray", cluster.address)
    out, err = par.communicate(timeout=600)
    par_s = time.monotonic() - t0
    assert par.returncode == 0, err[-3000:]
    t0 = time.monotonic()
    ser = _start(tmp_path / "serial")
    sout, serr = ser.communicate(timeout=600)
    ser_s = time.monotonic() - t0
    assert ser.returncode == 0, serr[-3000:]
    runs = _runs(tmp_path / "ray")
    assert len(runs) == 9 and len(_runs(tmp_path / "serial")) == 9
    nodes = {line.rsplit(" on ", 1)[1].split(" in ")[0] for line in err.splitlines()
             if ": stored on " in line}
    assert len(nodes) == 2, err  # both nodes ran trials
    checked = _check(tmp_path / "ray")
    REPORT.parent.mkdir(parents=True, exist_ok=True)
    REPORT.write_text(
        "# findings tune --ray on a 2-node Ray cluster (tests/cluster/test_tune_ray.py)\n\n"
        "The same tune (8 configs and the baseline, the emulator at speed 2, C=1 and 4, no pruning) run by "
        "`findings tune --ray ADDRESS` on a local 2-node cluster (ray.cluster_utils.Cluster, one CPU per node, "
        f"a trial asks for one) and by `findings tune` in one process. {os.cpu_count()} cores in all.\n\n"
        "| way | trials | wall time (s) |\n|---|---:|---:|\n"
        f"| --ray, 2 nodes | 9 | {par_s:.1f} |\n| serial | 9 | {ser_s:.1f} |\n\n"
        f"Parallel / serial: {par_s / ser_s:.2f}. The baseline runs first and alone in both (the trials are "
        f"scored against it); the eight trials then run two at a time. Ray's start-up in the driver counts in "
        f"the parallel time.\n\nThe store the driver wrote: `{checked}`.\n", encoding="utf-8")
    print(REPORT.read_text())
    assert par_s < 0.8 * ser_s, (par_s, ser_s)


def test_a_node_killed_mid_trial_fails_that_trial_and_the_tune_finishes(cluster, tmp_path: Path) -> None:
    folder = tmp_path / "kill"
    _setup(folder)
    [added] = [n for n in cluster.list_all_nodes() if not n.head]
    proc = _start(folder, "--ray", cluster.address)
    # The baseline runs alone; then two trials at once, one per node: kill the added node 2 s into them.
    deadline = time.monotonic() + 300
    while len(_runs(folder)) < 1:
        assert time.monotonic() < deadline and proc.poll() is None, "the baseline was never stored"
        time.sleep(0.2)
    time.sleep(2.0)
    cluster.remove_node(added)
    out, err = proc.communicate(timeout=600)
    assert proc.returncode == 0, err[-3000:]
    failed = [line for line in err.splitlines() if "FAILED" in line]
    assert len(failed) == 1, err
    assert added.node_id in failed[0] and "nothing" in failed[0], failed[0]
    assert "1 failed" in out
    runs = _runs(folder)
    assert len(runs) == 8  # the baseline and seven trials: the lost one left nothing
    for r in runs:  # and each stored trial is whole: both C values
        assert sorted(p["concurrency"] for p in r["points"]) == [1, 4]  # type: ignore[union-attr, index]
    _check(folder)
    with REPORT.open("a", encoding="utf-8") as fh:
        fh.write(f"\nA node removed 2 s into a trial (test_a_node_killed_mid_trial...): the tune's line for "
                 f"it:\n\n```\n{failed[0].strip()}\n```\n\nand the tune finished with {len(runs) - 1} "
                 f"trials stored, each whole.\n")
    # No emulator of the lost node is left serving nobody (it died with its worker).
    time.sleep(1.0)
    ps = subprocess.run(["pgrep", "-f", "findings emulate --port .* --speed 2 --seed 5"], capture_output=True,
                        text=True)
    assert not ps.stdout.strip(), ps.stdout
