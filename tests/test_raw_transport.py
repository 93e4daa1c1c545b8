"""``--transport raw`` (HTTP/1.1 on asyncio's protocols, D125) against real
server processes over real sockets: the emulator (ground truth, faults, the
three APIs, an open loop) and tests/badserver.py (503, malformed SSE, a
server that closes each kept-alive connection after one stream). Each fault
is counted exactly as the aiohttp transport counts it."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from conftest import cli, run_docs
from test_bench_e2e import SPEED, emulator  # noqa: F401 (the fixture)
from test_faults_security import bad_server  # noqa: F401 (the fixture)
from test_faults_security import bench as fault_bench
from test_faults_security import metrics


def _bench(store: Path, url: str, *extra: str, workload: str = "w") -> dict:
    r = cli("bench", "--url", url, "--config", "baseline", "--campaign", "c", "--workload", workload,
            "--input-len", "16", "--output-len", "24", "--warmup", "1", "--no-progress", "--create",
            "--transport", "raw", *extra, store=store)
    assert r.exit_code == 0, r.output
    return run_docs(store)[-1]["points"][0]


@pytest.mark.parametrize("api", ["native", "openai-chat", "openai-completions"])
def test_every_api_streams_every_token(emulator, store, api):
    url = emulator("--profile", "baseline", "--speed", SPEED, "--ground-truth")
    p = _bench(store, url, "--concurrency", "4", "--num-prompts", "12", "--api", api)
    m, req = p["metrics"], p["requests"]
    assert m["completed"] == 12 and m["failed"] == 0
    assert req["output_len"] == [24] * 12 and all(len(e) >= 1 for e in req["event_s"])
    assert p["workload_params"]["transport"] == "raw"
    # The clock starts before the server reads the request: the client's TTFT
    # is never below the server's own first-bytes-to-first-write time.
    assert m["ttft_client_error_p50_ms"] >= 0


def test_an_open_loop_sends_on_schedule(emulator, store):
    url = emulator("--profile", "baseline", "--speed", SPEED, "--ground-truth")
    p = _bench(store, url, "--request-rate", "40", "--num-prompts", "40")
    m, req = p["metrics"], p["requests"]
    assert m["completed"] == 40 and len([x for x in req["send_lateness_s"] if x is not None]) == 40
    assert m["send_lateness_p99_ms"] >= m["send_lateness_p50_ms"] >= 0


def test_dropped_connections_and_errors_are_counted(emulator, store):
    url = emulator("--profile", "baseline", "--speed", SPEED, "--drop-rate", "0.4", "--error-rate", "0.3",
                   "--seed", "5")
    p = _bench(store, url, "--concurrency", "4", "--num-prompts", "30")
    m = p["metrics"]
    assert m["completed"] + m["failed"] == 30
    assert m.get("errors_reset", 0) >= 1
    assert m.get("errors_http_500", 0) + m.get("errors_server_error", 0) >= 1


def test_a_stalled_stream_times_out(emulator, store):
    url = emulator("--profile", "baseline", "--speed", SPEED, "--stall-rate", "1.0", "--stall-s", "30")
    t = time.monotonic()
    p = _bench(store, url, "--concurrency", "2", "--num-prompts", "2", "--warmup", "0", "--read-timeout", "1")
    assert time.monotonic() - t < 25
    assert p["metrics"]["errors_timeout"] == 2


def test_http_503_and_malformed_sse(bad_server, store, tmp_path):
    r = fault_bench(store, bad_server("503"), "--transport", "raw", "--create")
    assert r.exit_code == 0, r.output
    m = metrics(store)
    assert m["errors_http_503"] == 6 and m["completed"] == 0
    other = tmp_path / "other"
    r = fault_bench(other, bad_server("malformed"), "--transport", "raw", "--create")
    assert r.exit_code == 0, r.output
    assert metrics(other)["errors_sse"] == 6


def test_a_kept_alive_connection_dropped_by_the_server_is_retried_once(bad_server, store):
    r = fault_bench(store, bad_server("oneshot"), "--transport", "raw", "--create")
    assert r.exit_code == 0, r.output
    (doc,) = [json.loads(p.read_text()) for p in (store / "runs").glob("*.json")]
    m = doc["points"][0]["metrics"]
    assert m["completed"] == 6 and m["failed"] == 0, m
    assert 1 <= m["reconnects"] <= 2


def test_workers_with_the_raw_transport(emulator, store):
    url = emulator("--profile", "baseline", "--speed", SPEED)
    p = _bench(store, url, "--concurrency", "4", "--num-prompts", "16", "--workers", "2")
    assert p["metrics"]["completed"] == 16 and p["metrics"]["client_workers"] == 2
