"""The runner reads /metrics with prometheus_client's parser (issue 39,
item 4): a sample written with a timestamp (``name{labels} value ts``, as
Prometheus' text format allows) is read as its value, not its timestamp.
The page is served by a real HTTP server process (python -m http.server)
and fetched as the runner fetches it: the control plane's httpx client and
the streaming transport's aiohttp session."""

from __future__ import annotations

import asyncio
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from findings.bench.prometheus import parse_prometheus, running_gauge, running_gauge_text
from findings.bench.transport import Control, make_transport

PAGE = """# HELP sglang:num_running_reqs The number of running requests.
# TYPE sglang:num_running_reqs gauge
sglang:num_running_reqs{model_name="m",engine_type="unified"} 3 1764770000000
sglang:num_running_reqs{model_name="m",engine_type="other"} 2.0 1764770000000
# HELP sglang:generation_tokens_total Number of generation tokens processed.
# TYPE sglang:generation_tokens_total counter
sglang:generation_tokens_total{model_name="m"} 1234.0 1764770000123
sglang:prompt_tokens_total{model_name="m"} 56
vllm:spec_decode_num_accepted_tokens_per_pos_total{position="1",model_name="m"} 9 1764770000000
"""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def metrics_server(tmp_path: Path):
    (tmp_path / "metrics").write_text(PAGE, encoding="utf-8")
    port = _free_port()
    proc = subprocess.Popen([sys.executable, "-m", "http.server", str(port), "--bind", "127.0.0.1",
                             "--directory", str(tmp_path)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
            break
        except OSError:
            time.sleep(0.05)
    yield url
    proc.terminate()
    proc.wait(10)


def _check(text: str | None) -> None:
    assert text == PAGE
    m = parse_prometheus(text)
    assert m is not None
    # The values, never the timestamps (1764770000000 would have been read before).
    assert m["sglang:generation_tokens_total"] == 1234.0
    assert m["sglang:num_running_reqs"] == 5.0 == running_gauge(m) == running_gauge_text(text)
    assert m["sglang:prompt_tokens_total"] == 56.0
    assert m["vllm:spec_decode_num_accepted_tokens_per_pos_total{position=1}"] == 9.0


def test_a_timestamped_sample_is_read_as_its_value_over_the_control_plane(metrics_server):
    control = Control(metrics_server, None)
    try:
        _check(control.metrics_text())
    finally:
        control.close()


@pytest.mark.parametrize("transport", ["aiohttp", "raw", "httpx"])
def test_a_timestamped_sample_is_read_as_its_value_during_a_point(metrics_server, transport):
    async def fetch() -> str | None:
        t = make_transport(transport, metrics_server, 1, 10.0)
        await t.start()
        try:
            return await t.get_text("/metrics")
        finally:
            await t.close()

    _check(asyncio.run(fetch()))


def test_one_malformed_line_costs_only_itself():
    text = "ok_total 3 1764770000000\nbad line x\nother 4\n"
    assert parse_prometheus(text) == {"ok_total": 3.0, "other": 4.0}
