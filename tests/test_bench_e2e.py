"""The runner against the emulator, end to end over real loopback sockets."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import ROOT, cli, run_docs

from findings import store as store_mod

PY = sys.executable
SPEED = "25"


def start_emulator(*args: str) -> tuple[subprocess.Popen[str], str]:
    proc = subprocess.Popen([PY, "-m", "findings", "emulate", "--port", "0", *args],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    assert proc.stdout is not None
    line = proc.stdout.readline()
    assert "listening on" in line, line
    url = line.split("listening on ", 1)[1].split()[0]
    return proc, url


@pytest.fixture
def emulator(request):
    procs = []

    def start(*args: str) -> str:
        proc, url = start_emulator(*args)
        procs.append(proc)
        return url

    yield start
    for p in procs:
        p.terminate()
        try:
            p.wait(10)
        except subprocess.TimeoutExpired:
            p.kill()


def runs(store: Path) -> list[dict]:
    return run_docs(store)


def attach(store: Path, url: str, *extra: str, config: str = "baseline", campaign: str = "c1",
           concurrency: str = "1,4", workload: str = "w"):
    return cli("bench", "--url", url, "--config", config, "--campaign", campaign, "--workload", workload,
               "--concurrency", concurrency, "--num-prompts", "8", "--input-len", "16", "--output-len", "12",
               "--warmup", "1", "--no-progress", "--create", *extra, store=store)


def test_attach_sweep_lands_in_store_as_simulated(emulator, store):
    url = emulator("--profile", "eagle3-topk1-v2", "--speed", SPEED)
    r = attach(store, url, config="eagle3-topk1-v2")
    assert r.exit_code == 0, r.output
    docs = runs(store)
    assert len(docs) == 2
    for doc in docs:
        assert doc["source"] == "simulated"
        assert doc["configs"]["eagle3-topk1-v2"]["speculative_algorithm"] == "EAGLE3"
        assert doc["configs"]["eagle3-topk1-v2"]["emulated"] is True
        assert doc["provenance"]["url"] == url
        p = doc["points"][0]
        m = p["metrics"]
        assert m["completed"] == m["planned"] == 8 and m["failed"] == 0
        assert m["output_throughput_tok_s"] > 0
        assert m["total_output_tokens"] == 8 * 12
        assert 1.0 < m["accept_length"] <= 3.0  # scoped to the point, from spec_verify_ct
        assert "client_loop_lag_p99_ms" in m and "p99_ttft_ms" in m and "median_itl_ms" in m
        req = p["requests"]
        assert len(req["ttft_s"]) == 8 and all(n == 12 for n in req["output_len"])
        assert all(ev[-1] == 12 for ev in req["event_tokens"])
    assert sorted(d["points"][0]["concurrency"] for d in docs) == [1, 4]
    # The analysis keeps it apart from real data.
    out = json.loads(cli("conclusions", "--json", store=store).output)
    assert list(out["workloads"]) == ["w (simulated)"]


@pytest.mark.parametrize("api", ["openai-chat", "openai-completions"])
def test_openai_apis(emulator, store, api):
    url = emulator("--profile", "baseline", "--speed", SPEED)
    r = attach(store, url, "--api", api, concurrency="2")
    assert r.exit_code == 0, r.output
    m = runs(store)[0]["points"][0]["metrics"]
    assert m["completed"] == 8 and m["total_output_tokens"] == 96


def test_httpx_transport(emulator, store):
    url = emulator("--profile", "baseline", "--speed", SPEED)
    r = attach(store, url, "--transport", "httpx", concurrency="3")
    assert r.exit_code == 0, r.output
    assert runs(store)[0]["points"][0]["metrics"]["completed"] == 8


def test_errors_are_counted_by_type(emulator, store):
    url = emulator("--profile", "baseline", "--speed", SPEED, "--error-rate", "0.5", "--seed", "3")
    r = attach(store, url, concurrency="4")
    assert r.exit_code == 0, r.output
    m = runs(store)[0]["points"][0]["metrics"]
    assert m["failed"] >= 1 and m["completed"] + m["failed"] == 8
    counted = sum(v for k, v in m.items() if k.startswith("errors_"))
    assert counted == m["failed"]


def test_stall_is_a_read_timeout_not_a_hang(emulator, store):
    url = emulator("--profile", "baseline", "--speed", SPEED, "--stall-rate", "0.3", "--stall-s", "30")
    t = time.monotonic()
    r = attach(store, url, "--read-timeout", "1", concurrency="4")
    assert r.exit_code == 0, r.output
    assert time.monotonic() - t < 25
    m = runs(store)[0]["points"][0]["metrics"]
    assert m.get("errors_timeout", 0) >= 1


def test_simulated_results_never_enter_the_real_store(emulator, project):
    url = emulator("--profile", "baseline", "--speed", SPEED)
    r = cli("--settings", str(project / "findings.toml"), "bench", "--url", url, "--config", "baseline",
            "--campaign", "c", "--workload", "w", "--concurrency", "1", "--num-prompts", "2", "--no-progress",
            "--create")
    assert r.exit_code == 1
    assert "never go into the real store" in r.output
    assert not (project / "benchmarks" / "results" / "runs").exists()


def test_unreachable_server_is_one_clear_error(store):
    r = attach(store, "http://127.0.0.1:9")
    assert r.exit_code == 1 and "no server answers at http://127.0.0.1:9" in r.output


MATRIX = """
[defaults]
api = "native"
concurrency = [1, 30, 100]
warmup = 2
health_timeout_s = 30
[workloads.diverse-prompts]
prompts = "diverse"
input_len = 64
output_len = 48
num_prompts = 8
prompts_per_concurrency = 1
[configs.baseline]
launch = "{python} -m findings emulate --port {port} --profile baseline --speed SPEED"
env = { HF_TOKEN = "hf_secret_value", FINDINGS_TEST_VAR = "visible" }
[configs.eagle3-topk4-v1]
launch = "{python} -m findings emulate --port {port} --profile eagle3-topk4-v1 --speed SPEED"
[configs.eagle3-topk1-v2]
launch = "{python} -m findings emulate --port {port} --profile eagle3-topk1-v2 --speed SPEED"
[[campaigns]]
name = "parallel-sweep"
configs = ["baseline", "eagle3-topk4-v1"]
[[campaigns]]
name = "overlap-topk1"
configs = ["baseline", "eagle3-topk1-v2", "eagle3-topk4-v1"]
"""


def test_matrix_launch_mode_reproduces_the_seed_policies(tmp_path, store):
    matrix = tmp_path / "m.toml"
    matrix.write_text(MATRIX.replace("SPEED", "1"))  # inside the emulator's schedule limit (docs/performance.md)
    r = cli("bench", str(matrix), "--no-progress", "--log-dir", str(tmp_path / "logs"), store=store)
    assert r.exit_code == 0, r.output
    docs = runs(store)
    assert len(docs) == 2 * 3 + 3 * 3
    assert all(d["provenance"]["server_log"].startswith(str(tmp_path / "logs")) for d in docs)
    base = [d for d in docs if d["points"][0]["config"] == "baseline"]
    assert base[0]["provenance"]["env.HF_TOKEN"] == "<redacted>"
    assert base[0]["provenance"]["env.FINDINGS_TEST_VAR"] == "visible"
    assert not any("hf_secret_value" in p.read_text() for p in (store / "runs").glob("*.json"))
    out = json.loads(cli("conclusions", "--json", store=store).output)
    w = out["workloads"]["diverse-prompts (simulated)"]
    assert w["candidates"]["eagle3-topk4-v1"]["policy"] == "off"
    topk1 = w["candidates"]["eagle3-topk1-v2"]
    assert topk1["verdicts"]["1"] == "loss", topk1
    assert topk1["verdicts"]["30"] in ("win", "tie") and topk1["verdicts"]["100"] in ("win", "tie"), topk1
    assert [h["campaign"] for h in out["history"]] == ["parallel-sweep", "overlap-topk1"]


def test_server_failing_to_start_quotes_its_log(tmp_path, store):
    matrix = tmp_path / "m.toml"
    matrix.write_text(MATRIX.replace("--profile baseline", "--profile no-such-profile").replace("SPEED", "8"))
    r = cli("bench", str(matrix), "--no-progress", "--log-dir", str(tmp_path / "logs"), store=store)
    assert r.exit_code == 1
    assert "config baseline: the server exited with code" in r.output
    assert "no-such-profile" in r.output  # the log's tail is quoted


def test_health_timeout(tmp_path, store):
    matrix = tmp_path / "m.toml"
    text = MATRIX.replace("SPEED", "8").replace("health_timeout_s = 30", "health_timeout_s = 1.5")
    matrix.write_text(text.replace("--profile baseline", "--profile baseline --startup-delay 20"))
    t = time.monotonic()
    r = cli("bench", str(matrix), "--no-progress", "--log-dir", str(tmp_path / "logs"), store=store)
    assert r.exit_code == 1 and "/health did not answer 200 within 1.5 s" in r.output
    assert time.monotonic() - t < 20


def test_server_dying_mid_sweep(tmp_path, store):
    matrix = tmp_path / "m.toml"
    text = MATRIX.replace("SPEED", "8").replace("--profile baseline", "--profile baseline --die-after 20")
    matrix.write_text(text.split('[[campaigns]]\nname = "overlap-topk1"')[0])  # one campaign is enough
    t = time.monotonic()
    r = cli("bench", str(matrix), "--no-progress", "--log-dir", str(tmp_path / "logs"), store=store)
    assert time.monotonic() - t < 60
    assert r.exit_code == 1
    assert "config baseline: the server died mid-sweep" in r.output
    docs = [d for d in runs(store) if d["points"][0]["config"] == "baseline"]
    assert docs, "the points measured before the death are stored"
    failed = sum(d["points"][0]["metrics"]["failed"] for d in docs)
    assert failed >= 1
    store_mod.load(store)  # the store is intact and readable


def _tagged(tag: str) -> dict[str, str]:
    """The environment of a bench whose launched servers are to be found
    again: each inherits ``FINDINGS_TEST_TAG`` (launch.py passes the bench's
    environment on), which no other test's server, in this checkout or
    another, carries (the tests may run side by side: make test)."""
    return {**os.environ, "FINDINGS_TEST_TAG": tag}


def _left_running(tag: str) -> list[str]:
    """The command lines of the emulators still running (not zombies) that
    a bench started under ``_tagged(tag)`` launched."""
    from test_workers import _alive

    mark = f"FINDINGS_TEST_TAG={tag}".encode()
    ps = subprocess.run(["pgrep", "-f", "findings emulate --port"], capture_output=True, text=True)
    left = []
    for pid in ps.stdout.split():
        try:
            env = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue  # gone meanwhile
        if mark in env and _alive(int(pid)):
            left.append(cmd)
    return left


def test_the_leftover_check_finds_a_tagged_emulator_and_only_it(tmp_path):
    """What the signal tests rely on: a running emulator launched under a
    tag is found, one under another tag or none is not, nor once stopped."""
    tagged = subprocess.Popen([PY, "-m", "findings", "emulate", "--port", "0", "--speed", "2"],
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                              env=_tagged(str(tmp_path)))
    other, _ = start_emulator("--speed", "2")
    try:
        assert tagged.stdout is not None and "listening on" in tagged.stdout.readline()
        left = _left_running(str(tmp_path))
        assert len(left) == 1 and "--speed 2" in left[0], left
        assert not _left_running(str(tmp_path / "another"))
    finally:
        for proc in (tagged, other):
            proc.terminate()
            proc.wait(timeout=10)
    assert not _left_running(str(tmp_path))


def _stored(store: Path) -> list[Path]:
    """Stored run files only: pathlib's glob also matches the writer's hidden temp files."""
    return [p for p in (store / "runs").glob("*.json") if not p.name.startswith(".")]


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM, signal.SIGHUP])
def test_a_signal_keeps_finished_points_and_stops_every_server(tmp_path, store, sig):
    """Ctrl-C, and what `timeout`, a CI cancel, Slurm and `docker stop` send
    (SIGTERM) or a closed terminal (SIGHUP): the finished points are kept,
    the summary printed, the exit code 128 + the signal (130 for Ctrl-C), and
    no launched server (or child of one) survives."""
    speed = {signal.SIGINT: "2"}.get(sig, "3")
    matrix = tmp_path / "m.toml"
    matrix.write_text(MATRIX.replace("SPEED", speed))
    proc = subprocess.Popen([str(Path(PY).parent / "findings"), "--store", str(store), "bench", str(matrix),
                             "--no-progress", "--log-dir", str(tmp_path / "logs")],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT,
                            env=_tagged(str(tmp_path)))
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and len(_stored(store)) < 2:
        time.sleep(0.1)
    proc.send_signal(sig)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 128 + sig, (proc.returncode, err)
    by = "" if sig == signal.SIGINT else f" by {signal.Signals(sig).name}"
    assert f"interrupted{by}: kept" in out and "every launched server stopped" in out
    assert len(_stored(store)) >= 2
    assert not list((store / "runs").glob(".tmp-*"))
    store_mod.load(store)
    time.sleep(0.5)
    left = _left_running(str(tmp_path))
    assert not left, f"emulator left running: {left}"


WORKERS_MATRIX = """
[defaults]
concurrency = [8]
warmup = 0
workers = 2
health_timeout_s = 30
[workloads.w]
input_len = 16
output_len = 64
num_prompts = 400
[configs.baseline]
launch = "{python} -m findings emulate --port {port} --profile baseline --speed 0.7"
[[campaigns]]
name = "workers"
configs = ["baseline"]
"""


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_a_signal_mid_point_stops_every_worker_and_server(tmp_path, store, sig):
    """``--workers 2``: a signal to the parent while both worker processes
    measure stops them (SIGTERM to each, SIGKILL after a grace) and the
    launched server; the point in flight is not stored."""
    from test_workers import _alive, _workers_of

    matrix = tmp_path / "m.toml"
    matrix.write_text(WORKERS_MATRIX)
    proc = subprocess.Popen([str(Path(PY).parent / "findings"), "--store", str(store), "bench", str(matrix),
                             "--no-progress", "--log-dir", str(tmp_path / "logs"), "--create"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT,
                            env=_tagged(str(tmp_path)))
    deadline = time.monotonic() + 90
    workers: list[int] = []
    while time.monotonic() < deadline and len(workers) < 2:
        time.sleep(0.1)
        workers = _workers_of(proc.pid)
    assert len(workers) == 2, workers
    logs = list((tmp_path / "logs").glob("*.log"))
    time.sleep(1.5)  # both started, the point under way
    proc.send_signal(sig)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 128 + sig, (proc.returncode, out, err)
    assert "every launched server stopped" in out and "kept 0 finished points" in out
    assert not list((store / "runs").glob("*.json")) if (store / "runs").is_dir() else True
    time.sleep(0.3)
    assert not any(_alive(w) for w in workers)
    left = _left_running(str(tmp_path))
    assert not left, f"emulator left running: {left} {logs}"


def test_the_stop_signal_handlers_are_put_back():
    from findings.bench.runner import STOP_SIGNALS, stop_signals
    before = [signal.getsignal(s) for s in STOP_SIGNALS]
    with stop_signals():
        assert all(signal.getsignal(s) is not b for s, b in zip(STOP_SIGNALS, before))
    assert [signal.getsignal(s) for s in STOP_SIGNALS] == before


def test_dropped_connections_are_counted_as_resets(emulator, store):
    url = emulator("--profile", "baseline", "--speed", SPEED, "--drop-rate", "0.4", "--seed", "5")
    r = attach(store, url, concurrency="4")
    assert r.exit_code == 0, r.output
    m = runs(store)[0]["points"][0]["metrics"]
    assert m.get("errors_reset", 0) >= 1
    assert m["completed"] + m["failed"] == 8


def test_error_events_and_http_500_are_told_apart(emulator, store):
    url = emulator("--profile", "baseline", "--speed", SPEED, "--error-rate", "0.6", "--seed", "11")
    r = attach(store, url, "--num-prompts", "20", concurrency="4")
    assert r.exit_code == 0, r.output
    m = runs(store)[0]["points"][0]["metrics"]
    assert m.get("errors_http_500", 0) >= 1 and m.get("errors_server_error", 0) >= 1


def test_points_record_their_prompts_and_ignore_eos(emulator, store):
    url = emulator("--profile", "eagle3-topk1-v2", "--speed", SPEED)
    r = attach(store, url, "--prompts", "random-ids", config="eagle3-topk1-v2", concurrency="1")
    assert r.exit_code == 0, r.output
    r = attach(store, url, "--no-ignore-eos", "--prompts", "diverse", "--api", "openai-completions",
               config="eagle3-topk1-v2", campaign="c2", workload="w-chat", concurrency="1")
    assert r.exit_code == 0, r.output
    params = {d["campaigns"][0]["name"]: d["points"][0]["workload_params"] for d in runs(store)}
    assert params["c1"]["prompts"] == "random-ids" and params["c1"]["ignore_eos"] is True
    assert params["c2"]["prompts"] == "diverse" and params["c2"]["ignore_eos"] is False


def test_a_point_where_every_request_failed_has_no_throughput(emulator, store):
    url = emulator("--speed", SPEED, "--fail-share", "1", "--fail-how", "http:503")
    r = attach(store, url, "--warmup", "0", concurrency="4")
    assert r.exit_code == 0, r.output
    (doc,) = runs(store)
    m = doc["points"][0]["metrics"]
    assert "output_throughput_tok_s" not in m and "mean_ttft_ms" not in m
    assert (m["planned"], m["completed"], m["failed"], m["errors_http_503"]) == (8, 0, 8, 8)
    got = json.loads(cli("conclusions", "--json", store=store).output)
    assert got["flagged"] == {doc["run_id"] + "/0": ["all 8 requests failed"]}


def test_points_record_the_servers_running_batch(emulator, store):
    url = emulator("--profile", "baseline", "--speed", "10")
    r = cli("bench", "--url", url, "--config", "baseline", "--campaign", "c1", "--workload", "w",
            "--concurrency", "1,8", "--num-prompts", "32", "--input-len", "16", "--output-len", "64",
            "--warmup", "1", "--running-sample", "0.2", "--no-progress", store=store)
    assert r.exit_code == 0, r.output
    by_c = {d["points"][0]["concurrency"]: d["points"][0]["metrics"] for d in runs(store)}
    assert {d["provenance"]["running_sample_s"] for d in runs(store)} == {0.2}
    for c, m in by_c.items():
        # sglang:num_running_reqs, sampled every 0.2 s during the point.
        assert m["server_running_samples"] >= 1 and 0 <= m["server_running_max"] <= c
        assert m["server_running_interval_s"] == 0.2
        assert m["server_running_p50"] <= m["server_running_p90"] <= m["server_running_max"]
    assert by_c[8]["server_running_p50"] >= 4  # a closed loop of 8 keeps the batch near 8
    # 0: the gauge is never read, so the points say nothing of the server's batch.
    off = store.parent / "off"
    r = cli("bench", "--url", url, "--config", "baseline", "--campaign", "c2", "--workload", "w",
            "--concurrency", "8", "--num-prompts", "32", "--input-len", "16", "--output-len", "64",
            "--warmup", "1", "--running-sample", "0", "--no-progress", "--create", store=off)
    assert r.exit_code == 0, r.output
    [doc] = runs(off)
    assert doc["provenance"]["running_sample_s"] == 0.0
    assert not any(k.startswith("server_running") for k in doc["points"][0]["metrics"])
    assert doc["points"][0]["metrics"]["server_generation_tokens"] == 32 * 64  # the counters are still read


def _run_files(store: Path) -> int:
    return len([p for p in (store / "runs").glob("*.json") if not p.name.startswith(".")]) \
        if (store / "runs").is_dir() else 0


def test_campaign_checks_come_before_the_first_point(emulator, store):
    """Issue 26: the server's facts are read, and the store's refusals made,
    before anything is measured (a refusal once came after a point)."""
    url = emulator("--profile", "eagle3-topk1-v2", "--speed", SPEED)
    # a baseline whose server says it speculates
    r = attach(store, url, concurrency="1")
    assert r.exit_code == 1 and "config 'baseline' is the baseline, but its recorded facts" in r.output
    assert "nothing was measured" in r.output and "rep 1/1" not in r.output and _run_files(store) == 0
    # a simulated server into a campaign of real results
    real = Path(__file__).parent / "fixtures" / "sglang_bench" / "v0_5_23_baseline.jsonl"
    today = time.strftime("%Y-%m-%d", time.gmtime())
    assert cli("ingest", "sglang-bench", str(real), "--config", "real-base", "--campaign", "c1", "--workload", "w0",
               "--date", today, store=store).exit_code == 0
    r = attach(store, url, config="spec", concurrency="1")
    assert r.exit_code == 1 and "would mix simulated and real measurements" in r.output, r.output
    assert "nothing was measured" in r.output and "rep 1/1" not in r.output and _run_files(store) == 1
    # the same config again into the same campaign needs --append; another config does not
    assert attach(store, url, config="spec", campaign="c2", concurrency="1").exit_code == 0
    n = _run_files(store)
    r = attach(store, url, config="spec", campaign="c2", concurrency="1")
    assert r.exit_code == 1 and "campaign 'c2' already holds 1 point of config 'spec'" in r.output
    assert "--append" in r.output and _run_files(store) == n
    # --append resumes: a second repeat is a point the campaign lacks (the first is not measured again)
    assert attach(store, url, "--append", "--repeats", "2", config="spec", campaign="c2",
                  concurrency="1").exit_code == 0
    assert attach(store, url, config="spec-b", campaign="c2", concurrency="1").exit_code == 0
    assert _run_files(store) == n + 2
