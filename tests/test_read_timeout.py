"""The read timeout (`--read-timeout`) of both transports, against real
server processes (tests/badserver.py) over real sockets: a request that
gets no byte for that long fails as a timeout, whether the server never
answers or stops mid-stream; a stream that never pauses that long
completes, however long it takes in all. The aiohttp transport times the
silences with a watch of its own, not aiohttp's per-read timer (D158)."""

from __future__ import annotations

import asyncio
import time

import pytest
from conftest import run_docs
from test_faults_security import bad_server  # noqa: F401 (the fixture)
from test_faults_security import bench, metrics

from findings.bench import transport as transport_mod
from findings.bench.protocol import Parser, Request
from findings.bench.records import RequestRecord

TRANSPORTS = ["aiohttp", "raw"]


@pytest.mark.parametrize("transport", TRANSPORTS)
@pytest.mark.parametrize("mode", ["silent", "stall"])
def test_a_silent_request_is_a_timeout(bad_server, store, mode, transport):
    url = bad_server(mode)
    t = time.monotonic()
    r = bench(store, url, "--read-timeout", "1", "--transport", transport)
    took = time.monotonic() - t
    assert r.exit_code == 0, r.output
    m = metrics(store)
    # 6 requests, 2 at a time: three rounds of one read timeout each (and
    # at most one look of the watch later), not the server's hour of silence.
    assert m["failed"] == 6 and m.get("errors_timeout") == 6, m
    assert 3.0 <= took < 20, took
    req = run_docs(store)[-1]["points"][0]["requests"]
    assert req["error_type"] == ["timeout"] * 6
    # What came before the silence is kept: two events of each stalled stream.
    assert req["output_len"] == ([2] * 6 if mode == "stall" else [0] * 6), req["output_len"]


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_a_slow_stream_that_never_pauses_that_long_completes(bad_server, store, transport):
    url = bad_server("drip")
    t = time.monotonic()
    r = bench(store, url, "--read-timeout", "1", "--transport", transport)
    took = time.monotonic() - t
    assert r.exit_code == 0, r.output
    m = metrics(store)
    assert m["completed"] == 6 and m["failed"] == 0 and not m.get("errors_timeout"), m
    assert took >= 3 * 1.6  # three rounds of a 1.6 s stream: longer than the read timeout in all


def test_the_aiohttp_session_sets_no_read_timer_and_the_watch_stops_with_it(bad_server):
    """aiohttp's own sock_read is off (no timer per read); a request cancelled
    for another reason than the read timeout (a stop) stays cancelled."""
    url = bad_server("silent")

    async def main() -> tuple[float | None, bool, bool]:
        t = transport_mod.AiohttpTransport(url, read_timeout_s=30.0)
        await t.start()
        assert t.session is not None and t.watchdog is not None
        sock_read = t.session.timeout.sock_read
        rec = RequestRecord(index=0, input_len=1)
        task = asyncio.ensure_future(t.send(Request("/generate", {"text": "x", "stream": True}),
                                            rec, Parser("native", rec)))
        await asyncio.sleep(0.3)
        assert len(t.watching) == 1
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        watchdog = t.watchdog
        await t.close()
        return sock_read, len(t.watching), rec.error, watchdog.done()

    sock_read, watched, error, stopped = asyncio.run(main())
    assert sock_read is None
    assert (watched, error, stopped) == (0, "", True)
