"""The client's event loop (findings/bench/eventloop.py, D135): uvloop where
installed, asyncio's on FINDINGS_EVENT_LOOP=asyncio; each point records
which; a value that cannot be had is one line and nothing measured. Against
a real emulator process over real sockets, with real worker processes."""

from __future__ import annotations

import asyncio
import multiprocessing
import os
import pickle
import signal
import socket
import struct
import time

import pytest
from conftest import cli, run_docs
from test_bench_e2e import SPEED, emulator  # noqa: F401 (the fixture)

from findings.bench import eventloop
from findings.bench.workers import process as wproc

uvloop = pytest.importorskip("uvloop", reason="uvloop is a core dependency on Linux; this venv lacks it")


def _bench(store, url, *extra):
    return cli("bench", "--url", url, "--config", "baseline", "--campaign", "c", "--workload", "w",
               "--input-len", "16", "--output-len", "8", "--num-prompts", "12", "--warmup", "1", "--no-progress",
               "--create", *extra, store=store)


@pytest.mark.parametrize("choice, transport, workers", [
    ("auto", "raw", "1"), ("auto", "aiohttp", "2"), ("asyncio", "raw", "2"), ("asyncio", "aiohttp", "1")])
def test_each_point_records_the_loop_it_ran_on(emulator, store, monkeypatch, choice, transport, workers):
    monkeypatch.setenv(eventloop.ENV, choice)
    url = emulator("--profile", "baseline", "--speed", SPEED)
    r = _bench(store, url, "--concurrency", "4", "--transport", transport, "--workers", workers)
    assert r.exit_code == 0, r.output
    [doc] = run_docs(store)
    p = doc["points"][0]
    assert p["metrics"]["completed"] == 12 and p["metrics"]["failed"] == 0
    want = "asyncio" if choice == "asyncio" else f"uvloop {uvloop.__version__}"
    assert doc["provenance"]["event_loop"] == want


def test_a_loop_that_cannot_be_had_is_one_line_and_nothing_is_measured(emulator, store, monkeypatch):
    url = emulator("--profile", "baseline", "--speed", SPEED)
    monkeypatch.setenv(eventloop.ENV, "tokio")
    r = _bench(store, url, "--concurrency", "2")
    assert r.exit_code == 1 and "FINDINGS_EVENT_LOOP='tokio': choose one of auto, uvloop, asyncio" in r.output
    assert not (store / "runs").exists() or not list((store / "runs").glob("*.json"))
    monkeypatch.setenv(eventloop.ENV, "uvloop")
    monkeypatch.setattr(eventloop, "_installed", lambda: None)
    with pytest.raises(eventloop.EventLoopError, match="uvloop is not installed here"):
        eventloop.check()
    monkeypatch.setenv(eventloop.ENV, "auto")
    assert eventloop.name() == "asyncio"  # auto without uvloop: asyncio's, and said so


def _send_slowly(conn, size: int) -> None:
    """A message as Connection.send frames it (a length, then the pickle),
    its second half written 0.3 s after the first."""
    data = pickle.dumps(("result", b"x" * size))
    framed = struct.pack("!i", len(data)) + data
    half = len(framed) // 2
    fd = conn.fileno()
    for part in (framed[:half], framed[half:]):
        view = memoryview(part)
        while view:
            view = view[os.write(fd, view):]
        time.sleep(0.3)
    conn.close()


@pytest.mark.parametrize("choice", ["auto", "asyncio"])
def test_a_worker_message_written_in_two_goes_arrives_whole(monkeypatch, choice):
    """The parent waits for a worker's message with the loop watching the
    pipe; libuv leaves a watched fd non-blocking, and a message larger than
    the pipe's buffer then failed mid-read as if the worker had died."""
    monkeypatch.setenv(eventloop.ENV, choice)
    ctx = multiprocessing.get_context("spawn")
    here, there = ctx.Pipe()
    proc = ctx.Process(target=_send_slowly, args=(there, 1 << 16))
    proc.start()
    there.close()
    w = wproc._Worker(0, 1, proc, here)

    async def go():
        return await wproc._message(w)

    try:
        msg = eventloop.run(go())
    finally:
        proc.join(10)
        here.close()
    assert msg[0] == "result" and len(msg[1]) == 1 << 16
    assert proc.exitcode == 0


def test_run_uses_the_chosen_loop(monkeypatch):
    async def which():
        return type(asyncio.get_running_loop()).__module__

    monkeypatch.setenv(eventloop.ENV, "asyncio")
    assert eventloop.run(which()).startswith("asyncio")
    monkeypatch.setenv(eventloop.ENV, "auto")
    assert eventloop.run(which()).startswith("uvloop")
    assert os.environ[eventloop.ENV] == "auto"


class _SignalOnData(asyncio.Protocol):
    """Sends the process a signal from inside ``data_received``: where a
    handler that raised was reported to uvloop's exception handler and
    lost (D138)."""

    def __init__(self, sig: int) -> None:
        self.sig = sig

    def data_received(self, data: bytes) -> None:
        os.kill(os.getpid(), self.sig)
        sum(range(1000))  # the handler runs here, between bytecodes


@pytest.mark.parametrize("choice", ["auto", "asyncio"])
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM, signal.SIGHUP])
def test_a_stop_signal_inside_a_transport_callback_stops_the_measurement(monkeypatch, choice, sig):
    """A stop signal while the loop is inside a protocol's callback: the
    measurement's task is cancelled (it sees CancelledError and unwinds) and
    ``Terminated`` is raised once the loop is done, on either loop."""
    from findings.bench.runner import Terminated, stop_signals

    monkeypatch.setenv(eventloop.ENV, choice)
    seen: list[str] = []

    async def measure() -> str:
        loop = asyncio.get_running_loop()
        a, b = socket.socketpair()
        transport, _ = await loop.create_connection(lambda: _SignalOnData(sig), sock=a)
        try:
            b.send(b"x")
            await asyncio.sleep(20)
            return "finished"
        except asyncio.CancelledError:
            seen.append("cancelled")
            raise
        finally:
            transport.close()
            b.close()

    before = signal.getsignal(sig)
    t = time.monotonic()
    with pytest.raises(Terminated) as caught, stop_signals():
        eventloop.run(measure())
    assert caught.value.signum == sig
    assert seen == ["cancelled"]
    assert time.monotonic() - t < 15
    assert signal.getsignal(sig) == before and not eventloop._flights  # the handler put back; no loop left


@pytest.mark.parametrize("choice", ["auto", "asyncio"])
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_a_stop_signal_is_not_lost_when_the_measurement_swallows_the_cancel(monkeypatch, choice, sig):
    """D147: a measurement whose task catches the cancel and finishes (as
    asyncio.wait_for can on Python 3.11) still stops: ``Terminated`` is
    raised once the loop is done. Ctrl-C went through asyncio's runner,
    which then returned the task's result and measured on."""
    from findings.bench.runner import Terminated, stop_signals

    monkeypatch.setenv(eventloop.ENV, choice)

    async def measure() -> str:
        asyncio.get_running_loop().call_later(0.05, os.kill, os.getpid(), sig)
        try:
            await asyncio.sleep(20)
        except asyncio.CancelledError:
            return "swallowed"
        return "finished"

    t = time.monotonic()
    with pytest.raises(Terminated) as caught, stop_signals():
        eventloop.run(measure())
    assert caught.value.signum == sig and time.monotonic() - t < 15
