"""What `make perf` relies on: the emulator's firehose fast path, its ground
truth (log, first-bytes arrival, step lateness), the client's timing figures,
the reference client and the template tables. Real subprocesses and sockets.
Speed targets are not asserted here: they live in benchmarks/perf/.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import math
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from conftest import ROOT, cli
from findings.core.model import Campaign, Dataset, Point
from findings.document.pivot import lookup, measurements, pivot
from findings.derive.validity import Gates, reasons

from test_bench_e2e import emulator, runs, start_emulator  # noqa: F401 (emulator is a fixture)

PY = sys.executable


def _stop(proc: subprocess.Popen[str]) -> None:
    proc.terminate()
    try:
        proc.wait(10)
    except subprocess.TimeoutExpired:
        proc.kill()


def _sse(client: httpx.Client, body: dict[str, Any]) -> list[dict[str, Any]]:
    out = []
    with client.stream("POST", "/generate", json=body) as resp:
        assert resp.status_code == 200
        for line in resp.iter_lines():
            if line.startswith("data: ") and line != "data: [DONE]":
                out.append(json.loads(line[6:]))
    return out


def test_firehose_fast_path_events_and_ground_truth_log(tmp_path: Path) -> None:
    log = tmp_path / "truth.jsonl"
    proc, url = start_emulator("--profile", "firehose", "--ground-truth", "--ground-truth-log", str(log))
    try:
        with httpx.Client(base_url=url, timeout=10) as client:
            t0 = time.time()
            first = _sse(client, {"input_ids": [5, 6, 7], "rid": "a", "stream": True,
                                  "sampling_params": {"max_new_tokens": 40}})
            second = _sse(client, {"text": "x y", "stream": True, "sampling_params": {"max_new_tokens": 3}})
            metrics = client.get("/metrics").text
    finally:
        _stop(proc)
    assert [e["meta_info"]["completion_tokens"] for e in first] == list(range(1, 41))
    assert [len(e["output_ids"]) for e in first] == list(range(1, 41))  # cumulative, as SGLang streams them
    assert all(e["meta_info"]["id"] == "a" and e["meta_info"]["prompt_tokens"] == 3 for e in first)
    assert all(e["meta_info"]["finish_reason"] is None for e in first[:-1])
    assert first[-1]["meta_info"]["finish_reason"] == {"type": "length", "length": 40}
    assert first[-1]["meta_info"]["e2e_latency"] >= 0
    marker_a, marker_b = first[-1]["text"].split()[0], second[-1]["text"].split()[0]
    assert marker_a.startswith("r") and marker_a != marker_b  # unique per request: the peer's texts match
    stamps = [e["meta_info"]["emulator_event_ts"] for e in first]
    arrival = first[0]["meta_info"]["emulator_arrival_ts"]
    assert t0 <= arrival <= stamps[0] and stamps == sorted(stamps)
    lines = [json.loads(x) for x in log.read_text().splitlines()]
    assert [x["rid"] for x in lines][0] == "a" and len(lines) == 2
    assert lines[0]["text_sha1"] == hashlib.sha1(first[-1]["text"].encode()).hexdigest()
    assert len(lines[0]["events"]) == 40 and lines[0]["arrival"] == pytest.approx(arrival, abs=1e-5)
    assert "sglang:generation_tokens_total" in metrics and " 43.0" in metrics


def test_engine_path_ground_truth_log_matches_the_streamed_text(tmp_path: Path) -> None:
    log = tmp_path / "truth.jsonl"
    proc, url = start_emulator("--profile", "baseline", "--speed", "50", "--ground-truth-log", str(log))
    try:
        with httpx.Client(base_url=url, timeout=10) as client:
            events = _sse(client, {"text": "hello there", "stream": True, "sampling_params": {"max_new_tokens": 9}})
    finally:
        _stop(proc)
    (line,) = [json.loads(x) for x in log.read_text().splitlines()]
    assert line["text_sha1"] == hashlib.sha1(events[-1]["text"].encode()).hexdigest()
    assert len(line["events"]) == len(events) and line["arrival"] <= line["events"][0]


def test_arrival_is_when_the_first_bytes_were_read_not_when_the_body_completed() -> None:
    proc, url = start_emulator("--profile", "baseline", "--speed", "50", "--ground-truth")
    host, port = url.removeprefix("http://").split(":")
    try:
        body = json.dumps({"text": "a", "stream": False, "sampling_params": {"max_new_tokens": 2}}).encode()
        with socket.create_connection((host, int(port)), timeout=10) as s:
            t_head = time.time()
            s.sendall(b"POST /generate HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                      b"Content-Length: %d\r\nConnection: close\r\n\r\n" % len(body))
            time.sleep(0.3)
            t_body = time.time()
            s.sendall(body)
            data = b""
            while chunk := s.recv(65536):
                data += chunk
    finally:
        _stop(proc)
    meta = json.loads(data.split(b"\r\n\r\n", 1)[1])["meta_info"]
    assert t_head - 0.01 <= meta["emulator_arrival_ts"] < t_body - 0.2


def test_server_info_reports_step_lateness_and_flush_resets_it() -> None:
    proc, url = start_emulator("--profile", "baseline", "--speed", "50")
    try:
        with httpx.Client(base_url=url, timeout=10) as client:
            _sse(client, {"text": "a", "stream": True, "sampling_params": {"max_new_tokens": 16}})
            sched = client.get("/server_info").json()["emulator_schedule"]
            assert sched["steps"] >= 16
            assert 0 <= sched["lateness_p50_ms"] <= sched["lateness_p99_ms"] <= sched["lateness_max_ms"]
            assert client.post("/flush_cache").status_code == 200
            assert client.get("/server_info").json()["emulator_schedule"] == {"steps": 0}
    finally:
        _stop(proc)


def test_bench_records_itl_error_cpu_and_a_clock_that_starts_before_the_server_reads(emulator, store) -> None:
    url = emulator("--profile", "firehose", "--ground-truth")
    r = cli("bench", "--url", url, "--config", "baseline", "--campaign", "c1", "--workload", "w",
            "--concurrency", "4", "--num-prompts", "12", "--input-len", "8", "--output-len", "30",
            "--warmup", "1", "--no-progress", store=store)
    assert r.exit_code == 0, r.output
    (doc,) = runs(store)
    p = doc["points"][0]
    m, req = p["metrics"], p["requests"]
    for k in ("ttft_client_error_p50_ms", "ttft_client_error_p99_ms", "itl_client_error_p50_ms",
              "itl_client_error_p99_ms", "client_cpu_fraction"):
        assert k in m, k
    assert 0 < m["client_cpu_fraction"] <= 1.5
    # The clock starts when the body goes to the socket: never after the server read it.
    assert min(req["server_arrival_minus_sent_s"]) >= -0.002
    assert [len(x) for x in req["server_event_minus_sent_s"]] == [len(x) for x in req["event_s"]]


def test_client_cpu_gate_flags_a_busy_client() -> None:
    def point(cpu: float) -> Point:
        return Point(id="p", run_id="r", campaign="c", config="x", workload="w", concurrency=8,
                     metrics={"output_throughput_tok_s": 1.0, "client_cpu_fraction": cpu}, source="runner",
                     source_file=None, source_line=None)

    assert reasons(point(0.5), {}, Gates()) == ()
    (why,) = reasons(point(0.97), {}, Gates())
    assert "97%" in why and "client-bound" in why
    assert reasons(point(0.97), {}, Gates(max_client_cpu=0.99)) == ()


def test_reference_client_against_the_firehose(tmp_path: Path) -> None:
    proc, url = start_emulator("--profile", "firehose", "--ground-truth")
    try:
        out = tmp_path / "ref.json"
        subprocess.run([PY, str(ROOT / "benchmarks" / "perf" / "refclient.py"), url, "--concurrency", "3",
                        "--num-prompts", "7", "--output-len", "16", "--keep-requests", "--out", str(out)],
                       check=True, timeout=60)
    finally:
        _stop(proc)
    d = json.loads(out.read_text())
    assert d["completed"] == 7 and d["tokens"] == 7 * 16 and d["events"] == 7 * 16
    assert sorted(r["index"] for r in d["requests"]) == list(range(7))
    assert all(r["events"][0][2] >= r["server_arrival_wall"] for r in d["requests"])


def _floor(url: str, mode: str, out: Path, n: int = 9) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run([PY, str(ROOT / "benchmarks" / "perf" / "floorclient.py"), url, "--mode", mode,
                           "--concurrency", "3", "--num-prompts", str(n), "--output-len", "16", "--out", str(out)],
                          timeout=60)


def test_floor_clients_read_every_response_to_its_end(tmp_path: Path) -> None:
    """The yardsticks of the efficiency section (D159) send what ours sends
    and wait for each response's end before the next: the emulator's log
    has every request, each streamed whole, the warm-up ones included."""
    log = tmp_path / "truth.jsonl"
    proc, url = start_emulator("--profile", "firehose", "--ground-truth-log", str(log))
    got = {}
    try:
        for mode in ("aiohttp", "protocol"):
            out = tmp_path / f"{mode}.json"
            assert _floor(url, mode, out).returncode == 0
            got[mode] = json.loads(out.read_text())
    finally:
        _stop(proc)
    assert [d["completed"] for d in got.values()] == [9, 9]
    recs = [json.loads(line) for line in log.read_text().splitlines()]
    assert len(recs) == 2 * (9 + 2) and all(len(r["events"]) == 16 for r in recs)
    # aiohttp's reader gives the body alone; the protocol reads the heads and the chunk sizes too
    assert got["protocol"]["bytes"] > got["aiohttp"]["bytes"] > 11 * 16 * 100


@pytest.mark.parametrize("mode", ["aiohttp", "protocol"])
def test_a_floor_client_fails_when_responses_are_errors(tmp_path: Path, mode: str) -> None:
    """An error response (sized, not chunked) ends the request, and the run
    fails: a yardstick that was refused measures nothing."""
    proc, url = start_emulator("--profile", "firehose", "--fail-share", "1", "--fail-how", "http:500")
    out = tmp_path / "floor.json"
    try:
        done = _floor(url, mode, out, n=4)
    finally:
        _stop(proc)
    assert done.returncode == 1
    assert json.loads(out.read_text())["completed"] < 4


def _perf_module() -> Any:
    spec = importlib.util.spec_from_file_location("perf_harness", ROOT / "benchmarks" / "perf" / "perf.py")
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_perf_error_metrics_leave_the_first_burst_out_of_the_steady_state() -> None:
    perf = _perf_module()
    per = [(0, 0.050, [0.010]), (1, 0.040, [0.0]), (2, 0.001, [0.0, 0.001]), (3, 0.002, [0.002])]
    m = perf.error_metrics(per, 2)
    assert m["ttft_client_error_p50_ms"] == pytest.approx(1.5)
    assert m["ttft_client_error_all_p99_ms"] > 40
    assert m["matched_requests"] == 4
    assert perf.error_metrics(per[:2], 2)["ttft_client_error_p50_ms"] == pytest.approx(45)


def _data() -> Dataset:
    pts = []
    for camp in ("old", "new"):
        for cfg, scale in (("ours", 2.0), ("peer", 1.0)):
            for c in (64, 250):
                pts.append(Point(id=f"{camp}{cfg}{c}", run_id="r", campaign=camp, config=cfg, workload="fh",
                                 concurrency=c, metrics={"output_throughput_tok_s": scale * c * (3 if camp == "new" else 1),
                                                         "size": float(c)},
                                 source="runner", source_file=None, source_line=None))
    return Dataset(campaigns=(Campaign("old", "2026-01-01"), Campaign("new", "2026-02-01")), points=tuple(pts),
                   configs={})


def test_pivot_tables_use_the_latest_campaign_and_ratios() -> None:
    rows = measurements(_data())
    t = pivot(rows, "fh", "output_throughput_tok_s", order=["peer", "ours"])
    assert t.headers == ("config", "C=64", "C=250")
    assert t.rows == (("peer", "192.0", "750.0"), ("ours", "384.0", "1,500"))
    r = pivot(rows, "fh", "output_throughput_tok_s", relative_to="peer")
    assert r.rows == (("ours", "2.00x", "2.00x"),)
    old = pivot(rows, "fh", "output_throughput_tok_s", campaign="old", cols_by="size", col_prefix="")
    assert old.headers == ("config", "64", "250") and old.rows[0] == ("ours", "128.0", "500.0")
    assert lookup(rows, "fh", "ours", "output_throughput_tok_s", 250) == 1500
    assert lookup(rows, "fh", "ours", "output_throughput_tok_s", where={"size": 64.0}) == 384
    assert lookup(rows, "nope", "ours", "output_throughput_tok_s") is None


def test_table_rows_marked_na_store_points_the_analysis_leaves_out(tmp_path: Path, store: Path) -> None:
    csv = tmp_path / "perf.csv"
    csv.write_text("campaign,date,workload,config,concurrency,output_throughput_tok_s,wall_s\n"
                   "p1,2026-11-30,w,baseline,1,100,\n"
                   "p1,2026-11-30,render-scaling,render,1,n/a,0.5\n")
    r = cli("ingest", "table", str(csv), store=store)
    assert r.exit_code == 0, r.output
    (doc,) = runs(store)
    assert [sorted(p["metrics"]) for p in doc["points"]] == [["output_throughput_tok_s"], ["wall_s"]]
    out = cli("conclusions", "--json", store=store)
    assert out.exit_code == 0, out.output
    assert "render-scaling" not in json.loads(out.output)["workloads"]
    bad = tmp_path / "bad.csv"
    bad.write_text("campaign,workload,config,concurrency,output_throughput_tok_s\nq,w,baseline,1,\n")
    r = cli("ingest", "table", str(bad), store=tmp_path / "other")
    assert r.exit_code != 0 and "output_throughput_tok_s" in r.output


def test_drift_is_measured_over_the_latest_campaigns_only() -> None:
    from findings.derive.analysis import Cell, Rules, Table

    def cell(rank: int, mean: float) -> Cell:
        return Cell(workload="w", campaign=f"c{rank}", rank=rank, config="baseline", concurrency=8, mean=mean,
                    lo=mean, hi=mean, n=1, point_ids=(f"p{rank}",), values=(mean,))

    # An old, very different baseline campaign, then ten steady ones.
    cells = [cell(0, 50.0)] + [cell(r, 100.0 + r % 2) for r in range(1, 11)]
    assert Table(cells, Rules(drift_window=0)).drift[8] > 0.4  # all campaigns: the old one dominates
    assert Table(cells, Rules(drift_window=10)).drift[8] == pytest.approx(1 / 100.5)
    assert Table(cells[:3], Rules(drift_window=10)).drift[8] == Table(cells[:3], Rules(drift_window=0)).drift[8]


def test_drift_window_setting(tmp_path: Path) -> None:
    from findings.core.errors import FindingsError
    from findings.document.settings import load

    f = tmp_path / "findings.toml"
    f.write_text("[findings]\ndrift_window = 3\n")
    assert load(str(f)).rules.drift_window == 3
    f.write_text("[findings]\ndrift_window = 0\n")
    assert load(str(f)).rules.drift_window == 0
    for bad in ("2.5", "-1", "true"):
        f.write_text(f"[findings]\ndrift_window = {bad}\n")
        with pytest.raises(FindingsError):
            load(str(f))


def test_llamacpp_timings_give_the_points_draft_acceptance() -> None:
    from findings.bench.metrics import derive
    from findings.bench.protocol import Parser
    from findings.bench.records import PointOutcome, RequestRecord

    recs = []
    for i, (n, a) in enumerate(((8, 6), (4, 0))):
        rec = RequestRecord(index=i, input_len=4, sent=0.0)
        parser = Parser("openai-completions", rec)
        parser.feed({"choices": [{"text": "ab", "index": 0}]}, 0.01)
        parser.feed({"choices": [{"text": "", "index": 0, "finish_reason": "length"}],
                     "usage": {"completion_tokens": 5, "prompt_tokens": 4},
                     "timings": {"draft_n": n, "draft_n_accepted": a, "predicted_n": 5}}, 0.02)
        parser.finish(0.03)
        recs.append(rec)
    assert (recs[0].draft_n, recs[0].draft_accepted) == (8, 6)
    before = {"llamacpp:spec_decode_num_draft_tokens_total": 10.0, "llamacpp:spec_decode_num_accepted_tokens_total": 2.0,
              "llamacpp:tokens_predicted_total": 100.0}
    after = {"llamacpp:spec_decode_num_draft_tokens_total": 22.0, "llamacpp:spec_decode_num_accepted_tokens_total": 8.0,
             "llamacpp:tokens_predicted_total": 110.0}
    m = derive(PointOutcome(records=tuple(recs), started=0.0, finished=0.03, planned=2, lag_samples_ms=(),
                            metrics_before=before, metrics_after=after))
    assert m["draft_tokens"] == 12 and m["draft_accepted_tokens"] == 6 and m["draft_acceptance"] == 0.5
    assert m["draft_acceptance_metrics"] == 0.5 and m["server_generation_tokens"] == 10


def test_tree_cpu_counts_every_process_of_the_client(tmp_path: Path) -> None:
    """make perf's efficiency section reads a client's whole process tree
    from /proc (AIPerf is several processes): a parent and its child that
    each burn 0.3 s of CPU, then wait, add up to at least 0.6 s."""
    perf = _perf_module()
    burn = "import time\nwhile time.process_time() < 0.3:\n    pass\n"
    child = tmp_path / "child.py"
    child.write_text(burn + f"open({str(tmp_path / 'ready')!r}, 'w').close()\ntime.sleep(60)\n")
    parent = tmp_path / "parent.py"
    parent.write_text(burn + "import subprocess, sys\n"
                      f"c = subprocess.Popen([sys.executable, {str(child)!r}])\n"
                      f"open({str(tmp_path / 'child.pid')!r}, 'w').write(str(c.pid))\nc.wait()\n")
    proc = subprocess.Popen([PY, str(parent)])
    try:
        deadline = time.monotonic() + 60
        while not (tmp_path / "ready").exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert (tmp_path / "ready").exists()
        assert perf.tree_cpu_s(proc.pid) >= 0.58  # /proc counts in ticks of 10 ms
    finally:
        pid_file = tmp_path / "child.pid"
        if pid_file.exists():
            subprocess.run(["kill", pid_file.read_text().strip()])
        _stop(proc)  # type: ignore[arg-type]


def test_streaming_window_cpu_and_in_flight_from_the_ground_truth_log(tmp_path: Path) -> None:
    perf = _perf_module()
    log = tmp_path / "truth.jsonl"
    reqs = [(10.0, [10.1, 10.5]), (10.2, [10.3, 11.7]), (10.6, [10.7, 12.0]), (11.5, [11.6, 11.9])]
    log.write_text("".join(json.dumps({"arrival": a, "events": e}) + "\n" for a, e in reqs))
    assert perf.streaming_window(log) == (10.0, 12.0, 4)
    assert perf._inflight_max(log, 0) == 3.0  # 11.5 to 11.7 holds three
    assert perf._inflight_max(log, 2) == 2.0  # the first two (by arrival) left out
    watch = [(9.99, 1.0), (10.5, 1.5), (12.01, 3.0)]
    assert perf.window_cpu_s(watch, 10.0, 12.0) == pytest.approx(2.0)
    assert perf.window_cpu_s(watch, 9.0, 12.0) is None  # no sample before the window


def test_open_loop_gap_figures_from_our_writes_and_the_servers_stamps() -> None:
    """What make perf says about an open loop's gaps (D148): the share under
    SHORT_GAP_S between our writes and the schedule's share, the server's
    stamp delay beyond its median, and the same share at the server."""
    perf = _perf_module()
    assert perf.SHORT_GAP_S == 50e-6
    sent = [0.0, 0.00002, 0.001, 0.00103, 0.004]  # gaps 20 us, 980 us, 30 us, 2.97 ms: two short
    delay = [0.0001] * 98 + [0.0021, 0.0031]  # two late stamps in a hundred
    point = {"requests": {"sent_s": [*sent, None], "server_arrival_minus_sent_s": [*delay, None]}}
    got = perf._send_ks(point, 1000.0)
    assert got["client_short_gaps"] == pytest.approx(0.5)
    assert got["expected_short_gaps"] == pytest.approx(1 - math.exp(-0.05))
    assert 0.0 <= got["client_send_ks_p"] <= 1.0
    # p99 of the delays (perf.pct: linear between ranks, 98.01 of 0..99) less their median, in ms
    assert got["server_stamp_delay_p99_ms"] == pytest.approx((0.0021 + 0.01 * 0.001 - 0.0001) * 1e3)
    assert perf._short_gaps([0.0, 1.0]) == 0.0 and math.isnan(perf._short_gaps([1.0]))
    assert "server_stamp_delay_p99_ms" not in perf._send_ks({"requests": {"sent_s": sent}}, 1000.0)
    assert perf._send_ks({"requests": {"sent_s": [1.0]}}, 1000.0) == {}


def test_workers_on_paper_scale_one_workers_efficiency() -> None:
    perf = _perf_module()
    one = {"completed": 100.0, "output_len": 256.0, "worker_cpu_s": 0.5}
    two = {"completed": 100.0, "output_len": 256.0, "parent_cpu_s": 0.256}
    rows = perf.paper_capacity({(1000, 1): one, (1000, 2): two}, 1000, {perf.OURS: 60000.0, perf.AIPERF: 12000.0})
    ours = {r["concurrency"]: r for r in rows if r["config"] == perf.OURS}
    assert ours[4]["output_throughput_tok_s"] == 240000.0
    assert ours[1]["merge_cpu_s_per_million_tokens"] == pytest.approx(10.0)
    assert ours[8]["merge_share_of_window"] == pytest.approx(8 * 60000 * 1e-5)
    assert {r["concurrency"]: r["output_throughput_tok_s"] for r in rows if r["config"] == perf.AIPERF}[2] == 24000.0
    assert perf.paper_capacity({(1000, 1): one}, 1000, {}) == []


def test_an_open_loop_row_pivots_by_its_rate(tmp_path: Path, store: Path) -> None:
    """D103: a rate row leaves concurrency empty and its rate is a workload
    parameter; the perf template still pivots and looks it up by rate."""
    csv = tmp_path / "perf.csv"
    csv.write_text("campaign,date,workload,config,concurrency,output_throughput_tok_s,request_rate,late_ms\n"
                   "p1,2026-12-03,wo,1 worker,,10,100,0.5\n"
                   "p1,2026-12-03,wo,1 worker,,10,1000,2.5\n"
                   "p1,2026-12-03,wo,2 workers,,10,1000,1.5\n")
    r = cli("ingest", "table", str(csv), store=store)
    assert r.exit_code == 0, r.output
    from findings import store as store_mod
    rows = measurements(store_mod.merge(store_mod.load_runs(store)))
    t = pivot(rows, "wo", "late_ms", cols_by="request_rate", col_prefix="R=", digits=1)
    assert t.headers == ("config", "R=100", "R=1,000")
    assert t.rows == (("1 worker", "0.5", "2.5"), ("2 workers", "—", "1.5"))
    assert lookup(rows, "wo", "2 workers", "late_ms", where={"request_rate": 1000}) == 1.5


def test_paper_figures_come_from_the_latest_efficiency_run(tmp_path: Path) -> None:
    perf = _perf_module()
    (tmp_path / "inputs").mkdir()
    head = "campaign,date,workload,config,concurrency,output_throughput_tok_s,tokens_per_client_cpu_s\n"
    (tmp_path / "inputs" / "perf-20261201-000000.csv").write_text(
        head + "a,2026-12-01,efficiency,aiperf,1000,1,100\na,2026-12-01,efficiency,findings-bench,1000,1,500\n")
    (tmp_path / "inputs" / "perf-20261202-000000.csv").write_text(
        head + "b,2026-12-02,efficiency,aiperf,1000,1,200\nb,2026-12-02,efficiency,aiperf,64,1,900\n")
    (tmp_path / "inputs" / "perf-20261203-000000.csv").write_text(head + "c,2026-12-03,firehose,x,1000,1,\n")
    assert perf.stored_efficiency(tmp_path, 1000) == {"aiperf": 200.0}
    assert perf.stored_efficiency(tmp_path / "none", 1000) == {}


def test_perf_asks_for_the_peer_and_aiperf_venvs_only_where_a_chosen_section_runs_them() -> None:
    """`make perf PERF_ARGS="--sections render"` builds and checks neither the
    peer's venv nor AIPerf's: no section it runs uses them (perf.py
    clients_for, whose ``--setups`` the Makefile runs)."""
    perf = _perf_module()
    every = [perf.OURS, perf.PEER, perf.REF, perf.AIPERF]
    assert perf.clients_for(["render"], every) == [perf.OURS, perf.REF]
    assert perf.clients_for(["render", "emulator", "workers"], every) == [perf.OURS, perf.REF]
    assert perf.clients_for(["clients", "render"], every) == [perf.OURS, perf.PEER, perf.REF]
    assert perf.clients_for(["openloop"], every) == [perf.OURS, perf.PEER, perf.REF]
    assert perf.clients_for(["efficiency"], every) == every
    assert perf.clients_for(["efficiency"], [perf.OURS]) == [perf.OURS]

    def setups(args: str) -> set[str]:
        out = subprocess.run(["make", "-n", "perf", f"PERF_ARGS={args}"], cwd=ROOT, text=True,
                             capture_output=True, check=True).stdout
        return {name for name in ("peer", "aiperf") if f"benchmarks/{name}/setup.sh" in out}

    assert setups("") == {"peer", "aiperf"}
    assert setups("--sections render") == set()
    assert setups("--sections render --efficiency-rounds 1") == set()
    assert setups("--sections clients,render") == {"peer"}
    assert setups("--sections openloop") == {"peer"}
    assert setups("--sections efficiency") == {"peer", "aiperf"}
    assert setups("--clients findings-bench,aiohttp-reference") == set()
