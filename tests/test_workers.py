"""`findings bench --workers N` (issue 39): a point measured by N worker
processes against a real `findings emulate` process over real sockets.

- a 2-worker closed loop holds exactly C requests in flight at the server
  (the emulator's ground-truth log of arrivals and last writes);
- a 2-worker Poisson schedule passes the KS test at the server (the
  emulator's own arrival times), and each worker's lateness is recorded;
- a conversation's turns stay on one worker;
- a killed worker fails its point: nothing is stored;
- the split and the merge, pure: the shares sum to C, every Nth arrival,
  percentiles from the raw samples of every worker.
The signal tests (SIGTERM, Ctrl-C with workers running) are in
tests/test_bench_e2e.py beside the others.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import numpy as np
import pytest
from scipy import stats

from conftest import FIXTURES, ROOT, cli, run_docs
from test_bench_e2e import PY, emulator  # noqa: F401 (the fixture: an emulator process per test)

from findings.bench.client import PointPlan
from findings.bench.metrics import derive, percentile
from findings.bench.records import PointOutcome, RequestRecord, WorkerStats
from findings.bench.workers import default_workers, resolve_workers, shares
from findings.bench.workers.split import merge, split
from findings.bench.workload import Prompt


# ------------------------------------------------------------------ pure: split and merge

def test_shares_sum_to_the_total_and_differ_by_at_most_one():
    for total in (1, 2, 7, 64, 250, 1000):
        for n in range(1, min(total, 9) + 1):
            s = shares(total, n)
            assert sum(s) == total and len(s) == n and max(s) - min(s) <= 1


def test_the_default_is_from_the_cores_and_the_load():
    assert default_workers(64, None, cpus=2) == 1  # this machine: one core for the client
    assert default_workers(1000, None, cpus=16) == 4  # 250 streams a worker
    assert default_workers(1000, None, cpus=3) == 2  # at most the cores less one
    assert default_workers(2, None, cpus=64) == 1
    assert default_workers(64, 1000.0, cpus=16) == 2  # an open loop: 500 requests/s a worker
    assert resolve_workers(8, 4, None, cpus=2) == 4  # asked: at most one per slot
    assert resolve_workers(2, 64, None, cpus=1) == 2  # asked: whatever the cores


def _plan(n: int, offsets: bool) -> PointPlan:
    prompts = tuple(Prompt(index=i, input_len=4, text="x") for i in range(n))
    return PointPlan(api="native", concurrency=7, prompts=prompts, warmup=prompts[:3], output_len=4, model="m",
                     rid_prefix="r", offsets=tuple(i * 0.01 for i in range(n)) if offsets else None)


def test_an_open_loop_is_dealt_every_nth_arrival_and_a_closed_loop_shares_one_queue():
    parts = split(_plan(10, offsets=True), 3)
    assert [p.concurrency for p in parts] == [3, 2, 2]
    assert [[q.index for q in p.prompts] for p in parts] == [[0, 3, 6, 9], [1, 4, 7], [2, 5, 8]]
    assert [p.offsets for p in parts][1] == (0.01, 0.04, 0.07)  # absolute due times kept
    assert sorted(q.index for p in parts for q in p.warmup) == [0, 1, 2]
    closed = split(_plan(10, offsets=False), 2)
    assert [p.concurrency for p in closed] == [4, 3]
    assert all(len(p.prompts) == 10 for p in closed)  # taken through the shared queue


def _rec(i: int, worker: int, ttft: float) -> RequestRecord:
    r = RequestRecord(index=i * 1000, input_len=4, sent=1.0 + i * 0.001, first_token=1.0 + i * 0.001 + ttft,
                      end=2.0 + i * 0.001, output_tokens=4, worker=worker)
    r.events = [(r.first_token or 0.0, 1), (r.end or 0.0, 4)]
    return r


def test_percentiles_come_from_the_raw_samples_of_every_worker():
    # Worker 1 fast (90 requests, TTFT 10 ms), worker 2 slow (10 requests, TTFT 500 ms).
    fast = [_rec(i, 0, 0.010) for i in range(90)]
    slow = [_rec(90 + i, 1, 0.500) for i in range(10)]
    parts = []
    for w, recs, lag in ((0, fast, (1.0, 2.0)), (1, slow, (30.0, 40.0))):
        o = PointOutcome(records=tuple(recs), started=1.0, finished=3.0, planned=len(recs), lag_samples_ms=lag,
                         cpu_s=0.5, window=(1.0, 3.0))
        parts.append((WorkerStats(index=w, pid=100 + w, concurrency=4, requests=len(recs), cpu_s=0.4 + w,
                                  window_s=2.0, lag_samples_ms=lag), o))
    plan = _plan(100, offsets=False)
    m = derive(merge(plan, parts, 1.0, 3.0, None, None, (), (), None))
    union = [r.first_token - r.sent for r in fast + slow]  # type: ignore[operator]
    assert m["p99_ttft_ms"] == pytest.approx(percentile(union, 99) * 1000)
    assert m["median_ttft_ms"] == pytest.approx(10.0)
    # Not a merge of the workers' summaries: their p99s average to about 255 ms.
    assert m["p99_ttft_ms"] == pytest.approx(500.0)
    assert m["completed"] == 100 and m["client_workers"] == 2
    # The point is as client-bound as its worst worker.
    assert m["client_cpu_fraction"] == pytest.approx(1.4 / 2.0)
    assert m["client_loop_lag_p99_ms"] == pytest.approx(percentile([30.0, 40.0], 99))
    assert m["client_worker1_cpu_fraction"] == pytest.approx(0.2)
    assert m["client_worker2_requests"] == 10 and m["client_cpu_s"] == pytest.approx(1.8)


# ------------------------------------------------------------------ end to end, against the emulator

def _bench(store: Path, url: str, *extra: str, workload: str = "w"):
    return cli("bench", "--url", url, "--config", "baseline", "--campaign", "c", "--workload", workload,
               "--input-len", "16", "--no-progress", "--create", "--workers", "2", *extra, store=store)


def _in_flight(truth: Path) -> tuple[int, list[tuple[float, int]]]:
    """The most requests the server held at once, and the step function."""
    edges = []
    for line in truth.read_text().splitlines():
        d = json.loads(line)
        edges += [(d["arrival"], 1), (d["events"][-1], -1)]
    level, top, steps = 0, 0, []
    for t, step in sorted(edges, key=lambda e: (e[0], e[1])):
        level += step
        top = max(top, level)
        steps.append((t, level))
    return top, steps


def test_two_workers_hold_exactly_c_in_flight_at_the_server(emulator, store, tmp_path):
    truth = tmp_path / "truth.jsonl"
    url = emulator("--profile", "baseline", "--speed", "10", "--ground-truth-log", str(truth))
    r = _bench(store, url, "--concurrency", "8", "--num-prompts", "48", "--output-len", "32", "--warmup", "0",
               "--running-sample", "0.2")
    assert r.exit_code == 0, r.output
    [doc] = run_docs(store)
    p = doc["points"][0]
    m, req = p["metrics"], p["requests"]
    assert m["completed"] == 48 and m["failed"] == 0
    assert m["client_workers"] == 2 and doc["provenance"]["workers"] == 2
    assert m["client_worker1_concurrency"] + m["client_worker2_concurrency"] == 8
    assert m["client_worker1_requests"] + m["client_worker2_requests"] == 48
    assert sorted(set(req["worker"])) == [1, 2]
    # The server's own log: never more than C at once, and C reached; the
    # first C all arrive before any request ends (one start for both workers).
    top, steps = _in_flight(truth)
    assert top == 8
    assert [level for _, level in steps[:8]] == list(range(1, 9))
    # Every one of the 48 requests reached the server, and each after the
    # first C only once an earlier one had ended (the slots drain one queue).
    assert len(steps) == 2 * 48
    # The running gauge, read by the parent during the point, never saw more than C.
    assert 0 < m["server_running_max"] <= 8
    for i in (1, 2):
        assert 0 < m[f"client_worker{i}_cpu_fraction"] and f"client_worker{i}_loop_lag_p99_ms" in m


def test_two_workers_send_one_poisson_schedule_that_passes_at_the_server(emulator, store):
    rate, n = 20.0, 300
    url = emulator("--profile", "baseline", "--speed", "20", "--ground-truth")
    r = _bench(store, url, "--request-rate", str(rate), "--num-prompts", str(n), "--output-len", "4",
               "--running-sample", "0")
    assert r.exit_code == 0, r.output
    [doc] = run_docs(store)
    p = doc["points"][0]
    m, req = p["metrics"], p["requests"]
    assert m["completed"] == n and m["client_workers"] == 2
    # Every Nth arrival: the workers alternate along the schedule.
    order = np.argsort(np.asarray(req["due_s"], dtype=float))
    workers = np.asarray(req["worker"])[order]
    assert set(workers[0::2]) | set(workers[1::2]) == {1, 2} and len(set(workers[0::2])) == 1
    arrivals = np.sort(np.asarray(req["sent_s"], dtype=float) + np.asarray(req["server_arrival_minus_sent_s"]))
    p_server = stats.kstest(np.diff(arrivals), "expon", args=(0, 1 / rate)).pvalue
    assert p_server > 0.01, p_server
    assert m["achieved_rate_req_s"] == pytest.approx(m["offered_rate_req_s"], rel=0.05)
    assert len([x for x in req["send_lateness_s"] if x is not None]) == n
    assert "client_worker1_send_lateness_p99_ms" in m and "client_worker2_send_lateness_p99_ms" in m
    # The point's lateness percentiles are those of every request's lateness.
    late = [x * 1000 for x in req["send_lateness_s"]]
    assert m["send_lateness_p99_ms"] == pytest.approx(percentile(late, 99), abs=1e-3)


def test_a_conversation_stays_on_one_worker(emulator, store):
    url = emulator("--profile", "baseline", "--speed", "25")
    r = cli("bench", "--url", url, "--config", "baseline", "--campaign", "c", "--workload", "w", "--concurrency",
            "2", "--num-prompts", "6", "--output-len", "8", "--api", "openai-chat", "--warmup", "0",
            "--dataset", str(FIXTURES / "datasets" / "question.jsonl"), "--workers", "2", "--no-progress",
            "--create", store=store)
    assert r.exit_code == 0, r.output
    [doc] = run_docs(store)
    req, m = doc["points"][0]["requests"], doc["points"][0]["metrics"]
    assert m["completed"] == 12 and m["client_workers"] == 2  # two turns of 6 conversations
    # Records sort by conversation then turn: each pair (turn 1, turn 2) on one worker.
    pairs = list(zip(req["turn"], req["worker"]))
    assert [t for t, _ in pairs] == [1, 2] * 6
    assert all(pairs[i][1] == pairs[i + 1][1] for i in range(0, 12, 2))


def _workers_of(pid: int) -> list[int]:
    """The worker processes (multiprocessing's spawned children) of ``pid``."""
    out = []
    try:
        kids = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    except OSError:
        return out
    for k in kids:
        try:
            cmd = Path(f"/proc/{k}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if "spawn_main" in cmd:
            out.append(int(k))
    return out


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def test_a_killed_worker_fails_its_point_and_nothing_is_stored(emulator, store, tmp_path):
    truth = tmp_path / "truth.jsonl"
    url = emulator("--profile", "baseline", "--speed", "1", "--ground-truth-log", str(truth))
    proc = subprocess.Popen([str(Path(PY).parent / "findings"), "--store", str(store), "bench", "--url", url,
                             "--config", "baseline", "--campaign", "c", "--workload", "w", "--concurrency", "4",
                             "--num-prompts", "200", "--input-len", "16", "--output-len", "64", "--warmup", "0",
                             "--workers", "2", "--no-progress", "--create"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT)
    deadline = time.monotonic() + 60
    # Kill a worker once the point is under way (the server has finished a request).
    while time.monotonic() < deadline and not (truth.exists() and truth.read_text().count("\n") >= 2):
        time.sleep(0.05)
    workers = _workers_of(proc.pid)
    assert len(workers) == 2, workers
    os.kill(workers[1], signal.SIGKILL)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 1, (out, err)
    assert "killed by SIGKILL" in out and "the point was not stored" in out, out
    assert "stored 0 points" in out
    assert not list((store / "runs").glob("*.json")) if (store / "runs").is_dir() else True
    time.sleep(0.2)
    assert not any(_alive(w) for w in workers)
