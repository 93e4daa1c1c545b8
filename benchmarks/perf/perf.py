"""`make perf`: measure findings itself and publish the figures with findings.

Six sections (docs/performance.md is rendered from their results):

- ``clients``: client capacity and timing fidelity. Three load clients drive
  the findings emulator one after another, each against a FRESH emulator
  process, on the same machine, in the same run:
  ``findings bench`` (ours), ``python -m sglang.bench_serving`` 0.5.23 (the
  peer, in its own venv: benchmarks/peer/setup.sh) and a minimal reference
  client on aiohttp (benchmarks/perf/refclient.py). Workloads:
  ``firehose`` (the emulator's firehose profile: no model, tokens as fast as
  the socket takes them; 256 output tokens) at C = 64, 250, 1000, and
  ``paced`` (the calibrated baseline profile at speed 1, the seed's scale:
  about 1k tok/s in total at C=250) at C = 1 and 250. The emulator runs with
  --ground-truth-log, so every client's TTFT and ITL are compared request by
  request with the server's own write times (the peer's through its
  --output-details, matched by generated text).
- ``openloop``: send timing under an open loop at the seed's scale (Poisson
  at 10 requests/s against the paced emulator): our send lateness against
  our schedule, and for ours and the peer's ``--request-rate`` the
  emulator's own arrival times (achieved rate, KS test against the
  exponential) and the TTFT error.
- ``efficiency``: tokens per client CPU-second against the firehose at
  C = 64, 250 and 1000 for ours (one worker), sglang.bench_serving and
  AIPerf 0.13.0 (its own venv: benchmarks/aiperf/setup.sh), the CPU of each
  client's process tree over the emulator's streaming window (D122); and two
  yardsticks that read the responses and do nothing else (floorclient.py, D159).
- ``workers``: ``findings bench --workers`` 1 and 2: capacity against the
  firehose (and the most requests in flight at the emulator), open loops at
  100 and 1,000 requests/s (send lateness, achieved rate, KS at the
  emulator), and the capacity of N workers on paper (D120).
- ``emulator``: the emulator's own step schedule: p99 lateness of its model
  steps against their deadlines, over a sweep of speed and C.
- ``render``: ``findings render`` and ``findings conclusions`` on synthetic
  stores of 1k, 10k, 100k and 1M points (benchmarks/perf/render_scaling.py):
  without the render cache, into an empty one, after a new campaign, warm;
  write latency and bytes per point at each size; and the run files read
  and parsed, nothing else (parse_floor.py, D160).

With two or more cores, the emulator is pinned to core 0 and the client
under test to core 1 (taskset), so that each side has one core.

Every figure goes into one long CSV (one row per measured point), which is
ingested into the perf store (``findings ingest table``) and rendered with
the perf template (benchmarks/perf/findings.toml)::

    .venv/bin/python benchmarks/perf/perf.py [--quick] [--sections clients,openloop,efficiency,workers,emulator,render]
"""

from __future__ import annotations

import argparse
import csv
import datetime as dt
import hashlib
import json
import math
import os
import platform
import shlex
import shutil
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(ROOT / "benchmarks" / "peer"))
import crosscheck  # noqa: E402 (a sibling script: its emulator process wrapper)

from findings import store as store_mod  # noqa: E402

PY = ROOT / ".venv" / "bin" / "python"
FINDINGS = ROOT / ".venv" / "bin" / "findings"
PEER_PY = ROOT / "benchmarks" / "peer" / "peer-python"
PEER_VENV = Path(os.environ.get("PEER_VENV", ROOT / "build" / "peer" / "venv"))
TOKENIZER = ROOT / "build" / "peer" / "tokenizer"

AIPERF_VENV = Path(os.environ.get("AIPERF_VENV", ROOT / "build" / "aiperf" / "venv"))

OURS, PEER, REF, AIPERF = "findings-bench", "sglang.bench_serving", "aiohttp-reference", "aiperf"
OURS_RAW = "findings-bench-raw"  # findings bench --transport raw (D125)
#: Yardsticks, not clients (floorclient.py, D159): what a client on aiohttp's
#: streaming reader, and on the event loop alone, pays per event doing nothing.
FLOORS = {"floor-aiohttp": "aiohttp", "floor-protocol": "protocol"}  # name -> floorclient.py --mode


def log(msg: str) -> None:
    print(f"[perf {time.strftime('%H:%M:%S')}] {msg}", flush=True)


def pin(core: int) -> list[str]:
    """A taskset prefix when there are cores to pin to."""
    if (os.cpu_count() or 1) >= 2 and shutil.which("taskset"):
        return ["taskset", "-c", str(core)]
    return []


def pct(values: list[float], q: float) -> float | None:
    if not values:
        return None
    s = sorted(values)
    pos = (len(s) - 1) * q / 100.0
    lo = int(pos)
    hi = min(lo + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (pos - lo)


def http_json(url: str, method: str = "GET") -> Any:
    req = urllib.request.Request(url, method=method, data=b"" if method == "POST" else None)
    with urllib.request.urlopen(req, timeout=10) as r:  # noqa: S310 (loopback)
        text = r.read().decode()
    try:
        return json.loads(text)
    except ValueError:
        return text


# --------------------------------------------------------------------------- emulator process

class Emulator(crosscheck.Emulator):
    """One emulator process (benchmarks/peer/crosscheck.py), pinned to core 0,
    with its ground-truth log next to its own log."""

    def __init__(self, work: Path, tag: str, profile: str, speed: float = 1.0, truth: bool = True,
                 log_only: bool = False) -> None:
        """``truth``: the ground truth in-band and in the log; ``log_only``: in the log only
        (the clients read exactly what they would without it)."""
        self.truth_log = work / f"truth-{tag}.jsonl"
        extra = ("--ground-truth-log", str(self.truth_log)) if truth or log_only else ()
        super().__init__(profile, speed, 0, truth, work / f"emulator-{tag}.log", prefix=tuple(pin(0)), extra=extra)
        assert self.url

    def truth(self) -> dict[str, dict[str, Any]]:
        """Ground truth per request, keyed by the sha1 of its final text."""
        out: dict[str, dict[str, Any]] = {}
        if self.truth_log.exists():
            for line in self.truth_log.read_text(encoding="utf-8").splitlines():
                d = json.loads(line)
                out[d["text_sha1"]] = d
        return out


def tree_cpu_s(pid: int) -> float:
    """CPU seconds of a process and every descendant alive now (user +
    system, with what each has reaped of its own children), from /proc."""
    tick = os.sysconf("SC_CLK_TCK")
    total, todo, seen = 0.0, [pid], set()
    while todo:
        p = todo.pop()
        if p in seen:
            continue
        seen.add(p)
        try:
            fields = Path(f"/proc/{p}/stat").read_text().rsplit(")", 1)[1].split()
            total += sum(int(x) for x in fields[11:15]) / tick  # utime stime cutime cstime
            for task in Path(f"/proc/{p}/task").iterdir():
                todo += [int(c) for c in (task / "children").read_text().split()]
        except (OSError, ValueError, IndexError):
            continue
    return total


def run_client(cmd: list[str], logfile: Path, timeout: float,
               watch: list[tuple[float, float]] | None = None) -> tuple[int, float, float]:
    """Run a client to completion; (exit code, wall s, CPU s of the client process tree).
    ``watch``: filled with (time.time(), CPU s of the process tree so far) every 20 ms."""
    with open(logfile, "w", encoding="utf-8") as fh:
        fh.write("$ " + shlex.join(cmd) + "\n")
        fh.flush()
        t0 = time.perf_counter()
        proc = subprocess.Popen(cmd, cwd=ROOT, stdout=fh, stderr=subprocess.STDOUT)
        done = threading.Event()

        def sample() -> None:
            assert watch is not None
            while not done.wait(0.02):
                watch.append((time.time(), tree_cpu_s(proc.pid)))

        sampler = threading.Thread(target=sample, daemon=True) if watch is not None else None
        if sampler is not None:
            sampler.start()
        try:
            _, status, usage = os.wait4(proc.pid, 0)
        except KeyboardInterrupt:
            proc.kill()
            raise
        finally:
            done.set()
            if sampler is not None:
                sampler.join()
        proc.returncode = os.waitstatus_to_exitcode(status)
        wall = time.perf_counter() - t0
    if wall > timeout:
        log(f"warning: {cmd[0]} took {wall:.0f} s (> {timeout:.0f} s)")
    return proc.returncode, wall, usage.ru_utime + usage.ru_stime


def window_cpu_s(watch: list[tuple[float, float]], t0: float, t1: float) -> float | None:
    """The process tree's CPU seconds between wall times t0 and t1 (the
    samples just before t0 and just after t1: at most 20 ms more)."""
    before = [cpu for t, cpu in watch if t <= t0]
    after = [cpu for t, cpu in watch if t >= t1]
    if not before or not after:
        return None
    return after[0] - before[-1]


def streaming_window(truth_log: Path) -> tuple[float, float, int]:
    """From the emulator's ground-truth log: the first request's arrival, the
    last write of any request, and the requests it served (warm-up included)."""
    first, last, n = float("inf"), 0.0, 0
    for line in truth_log.read_text(encoding="utf-8").splitlines():
        d = json.loads(line)
        first = min(first, d["arrival"])
        last = max(last, d["events"][-1] if d["events"] else d["arrival"])
        n += 1
    return first, last, n


# --------------------------------------------------------------------------- the three clients

def error_metrics(per_request: list[tuple[int, float, list[float]]], c: int) -> dict[str, float]:
    """(request index, TTFT error s, ITL errors s) per request -> percentiles in ms.

    The first C requests of a closed loop are sent in one burst, which queues
    at the server's HTTP intake before its clock starts; the steady state
    (requests after the first C) is reported as ``*_p50_ms``/``*_p99_ms``, and
    all requests, burst included, as ``*_all_p99_ms``. With C or fewer
    requests, the steady state is all of them.
    """
    steady = [x for x in per_request if x[0] >= c] or per_request
    out: dict[str, float] = {"matched_requests": float(len(per_request))}
    for label, group in (("", steady), ("_all", per_request)):
        terr = [t for _, t, _ in group]
        ierr = [e for _, _, errs in group for e in errs]
        for name, vals in (("ttft_client_error", terr), ("itl_client_error", ierr)):
            for q in ((50, 99) if not label else (99,)):
                v = pct(vals, q)
                if v is not None:
                    out[f"{name}{label}_p{q}_ms"] = v * 1000
    return out


def _bench(emu: Emulator, work: Path, tag: str, load: list[str], n: int, out_len: int,
           timeout: float, cores: list[str] | None = None,
           watch: list[tuple[float, float]] | None = None) -> tuple[dict[str, Any], float, float]:
    """One `findings bench --url` point (``load``: its --concurrency or
    --request-rate option) pinned to core 1; (the stored point, wall s, CPU s)."""
    store = work / f"store-{tag}"
    cmd = [*(pin(1) if cores is None else cores), str(FINDINGS), "--store", str(store), "bench", "--url", emu.url,
           "--config", "perf", "--campaign", f"perf-{tag}", "--workload", "perf", *load, "--num-prompts", str(n),
           "--input-len", "32", "--output-len", str(out_len), "--prompts", "random-ids", "--warmup", "2",
           "--no-progress", "--read-timeout", "120", "--create"]
    rc, wall, cpu = run_client(cmd, work / f"client-{tag}.log", timeout, watch)
    files = sorted((store / "runs").glob("*.json")) if (store / "runs").is_dir() else []
    if rc != 0 or not files:
        raise SystemExit(f"perf: findings bench failed (exit {rc}); log {work / f'client-{tag}.log'}")
    return crosscheck.first_point(files[-1]), wall, cpu


def ours(emu: Emulator, work: Path, tag: str, c: int, n: int, out_len: int, timeout: float) -> dict[str, float]:
    point, wall, cpu = _bench(emu, work, tag, ["--concurrency", str(c)], n, out_len, timeout)
    m = point["metrics"]
    events = sum(len(e) for e in point["requests"]["event_s"])
    keep = ("output_throughput_tok_s", "client_loop_lag_p99_ms", "client_cpu_fraction", "completed",
            "failed", "duration", "median_ttft_ms")
    row = {k: float(m[k]) for k in keep if k in m}
    row["events_per_s"] = events / m["duration"]
    row["client_cpu_s"] = cpu
    row["client_wall_s"] = wall
    req = point["requests"]
    per: list[tuple[int, float, list[float]]] = []
    split: list[tuple[int, float, float]] = []
    for i, (ttft, arr, first, ev, sev) in enumerate(zip(req["ttft_s"], req["server_arrival_minus_sent_s"],
                                                         req["server_first_event_minus_sent_s"], req["event_s"],
                                                         req["server_event_minus_sent_s"])):
        if ttft is None or arr is None or first is None:
            continue
        itl = [(b - a) - (sb - sa) for a, b, sa, sb in zip(ev, ev[1:], sev, sev[1:])] if sev else []
        per.append((i, ttft - (first - arr), itl))
        split.append((i, arr, ttft - first))
    row.update(error_metrics(per, c))
    # Where the TTFT error lies (steady state): from our write to the server
    # reading the bytes ("to server"), and from the server's first write to
    # our reading it ("to client").
    steady = [x for x in split if x[0] >= c] or split
    for name, k in (("to_server", 1), ("to_client", 2)):
        for q in (50, 99):
            v = pct([x[k] for x in steady], q)
            if v is not None:
                row[f"ttft_error_{name}_p{q}_ms"] = v * 1000
    return row


def peer(emu: Emulator, work: Path, tag: str, c: int, n: int, out_len: int, timeout: float,
         watch: list[tuple[float, float]] | None = None) -> dict[str, float]:
    out = work / f"peer-{tag}.jsonl"
    cmd = [*pin(1), str(PEER_PY), "-m", "sglang.bench_serving", "--backend", "sglang", "--base-url", emu.url,
           "--dataset-name", "random-ids", "--tokenize-prompt", "--random-input-len", "32",
           "--random-output-len", str(out_len), "--random-range-ratio", "1.0", "--num-prompts", str(n),
           "--max-concurrency", str(c), "--request-rate", "inf", "--tokenizer", str(TOKENIZER),
           "--model", str(TOKENIZER), "--output-file", str(out), "--output-details", "--warmup-requests", "2",
           "--disable-tqdm", "--seed", "1"]
    rc, wall, cpu = run_client(cmd, work / f"client-{tag}.log", timeout, watch)
    if rc != 0 or not out.exists():
        raise SystemExit(f"perf: sglang.bench_serving failed (exit {rc}); log {work / f'client-{tag}.log'}")
    d = json.loads(out.read_text(encoding="utf-8").splitlines()[-1])
    ok = [i for i, e in enumerate(d["errors"]) if not e]
    events = sum(len(d["itls"][i]) + 1 for i in ok)
    truth = emu.truth()
    per: list[tuple[int, float, list[float]]] = []
    for i in ok:
        t = truth.get(hashlib.sha1(d["generated_texts"][i].encode()).hexdigest())
        if t is None or not t["events"]:
            continue
        ev = t["events"]
        gaps = d["itls"][i]
        server_gaps = [b - a for a, b in zip(ev, ev[1:])]
        itl = [g - sg for g, sg in zip(gaps, server_gaps)] if len(gaps) == len(server_gaps) else []
        per.append((i, d["ttfts"][i] - (ev[0] - t["arrival"]), itl))
    row = {"output_throughput_tok_s": float(d["output_throughput"]), "completed": float(d["completed"]),
           "duration": float(d["duration"]), "events_per_s": events / d["duration"],
           "median_ttft_ms": float(d["median_ttft_ms"]), "client_cpu_s": cpu, "client_wall_s": wall}
    row.update(error_metrics(per, c))
    return row


def reference(emu: Emulator, work: Path, tag: str, c: int, n: int, out_len: int, timeout: float) -> dict[str, float]:
    out = work / f"ref-{tag}.json"
    cmd = [*pin(1), str(PY), str(HERE / "refclient.py"), emu.url, "--concurrency", str(c), "--num-prompts", str(n),
           "--output-len", str(out_len), "--keep-requests", "--out", str(out)]
    rc, wall, cpu = run_client(cmd, work / f"client-{tag}.log", timeout)
    if rc != 0 or not out.exists():
        raise SystemExit(f"perf: the reference client failed (exit {rc}); log {work / f'client-{tag}.log'}")
    d = json.loads(out.read_text(encoding="utf-8"))
    row = {"output_throughput_tok_s": d["tok_s"], "events_per_s": d["events_s"], "completed": float(d["completed"]),
           "duration": d["duration_s"], "client_cpu_s": cpu, "client_wall_s": wall}
    per: list[tuple[int, float, list[float]]] = []
    for r in d["requests"]:
        ev = r["events"]
        if not ev or "server_arrival_wall" not in r or ev[0][2] is None:
            continue
        itl = [(b[0] - a[0]) - (b[2] - a[2]) for a, b in zip(ev, ev[1:]) if b[1] - a[1] == 1]
        per.append((r["index"], ev[0][0] - (ev[0][2] - r["server_arrival_wall"]), itl))
    row.update(error_metrics(per, c))
    return row


CLIENTS = {OURS: ours, PEER: peer, REF: reference}
#: The sections that run the peer's client and AIPerf, each from its own venv.
PEER_SECTIONS = {PEER: {"clients", "openloop", "efficiency"}, AIPERF: {"efficiency"}}
#: The script that builds each one's venv (``--setups``: the Makefile runs those a run needs).
SETUPS = {PEER: "benchmarks/peer/setup.sh", AIPERF: "benchmarks/aiperf/setup.sh"}


def clients_for(sections: list[str], clients: list[str]) -> list[str]:
    """``clients`` less the peer's client and AIPerf where no section of
    ``sections`` runs them: `--sections render` (or emulator) needs
    neither venv, nor the tokenizer they read."""
    return [c for c in clients if c not in PEER_SECTIONS or PEER_SECTIONS[c] & set(sections)]


# --------------------------------------------------------------------------- open loop

def _arrival_ks(emu: Emulator, rate: float, warmup: int) -> dict[str, float]:
    """The emulator's own arrival times (its ground-truth log), less the
    warm-up requests: the achieved rate and SciPy's KS test of the gaps
    against the exponential of the nominal rate."""
    arrivals = sorted(json.loads(line)["arrival"]
                      for line in emu.truth_log.read_text(encoding="utf-8").splitlines())[warmup:]
    return {"server_arrival_rate_req_s": (len(arrivals) - 1) / (arrivals[-1] - arrivals[0]),
            "server_arrival_ks_p": _gaps_ks(arrivals, rate), "server_arrivals": float(len(arrivals)),
            "server_short_gaps": _short_gaps(arrivals)}


#: A gap shorter than this (seconds) is "short": at 1,000 requests/s, a
#: Poisson schedule has about one gap in twenty this short, and a server that
#: stamps an arrival only once it has done its work on the one before (the
#: emulator's event loop) records almost none.
SHORT_GAP_S = 50e-6


def _short_gaps(times: list[float]) -> float:
    """The share of the gaps between sorted ``times`` under SHORT_GAP_S."""
    gaps = [b - a for a, b in zip(times, times[1:])]
    return sum(g < SHORT_GAP_S for g in gaps) / len(gaps) if gaps else float("nan")


def _gaps_ks(times: list[float], rate: float) -> float:
    """SciPy's KS p-value of the gaps between sorted ``times`` against the
    exponential of mean 1/``rate``."""
    from scipy import stats  # noqa: PLC0415 (the dev extra; make perf runs in .venv)

    gaps = [b - a for a, b in zip(times, times[1:])]
    return float(stats.kstest(gaps, "expon", args=(0, 1 / rate)).pvalue)


def _send_ks(point: dict[str, Any], rate: float) -> dict[str, float]:
    """The KS p-value of the gaps between our own writes (``sent_s``, every
    worker's, in time order) against the exponential of the nominal rate:
    what the server would see with no delay of its own."""
    sent = sorted(t for t in point["requests"]["sent_s"] if t is not None)
    if len(sent) < 2:
        return {}
    out = {"client_send_ks_p": _gaps_ks(sent, rate), "client_short_gaps": _short_gaps(sent),
           # What the seeded exponential schedule holds: 1 - exp(-rate x SHORT_GAP_S).
           "expected_short_gaps": 1 - math.exp(-rate * SHORT_GAP_S)}
    # How much later than usual the server stamped a request after our
    # write (its arrival less our send, less the median of that): the
    # server's own delay, which it adds to the gaps it sees.
    delay = [d for d in point["requests"].get("server_arrival_minus_sent_s", []) if d is not None]
    mid, top = pct(delay, 50), pct(delay, 99)
    if mid is not None and top is not None:
        out["server_stamp_delay_p99_ms"] = (top - mid) * 1e3
    return out


def ours_open(emu: Emulator, work: Path, tag: str, rate: float, n: int, out_len: int,
              timeout: float) -> dict[str, float]:
    point, wall, cpu = _bench(emu, work, tag, ["--request-rate", f"{rate:g}"], n, out_len, timeout)
    m = point["metrics"]
    keep = ("output_throughput_tok_s", "send_lateness_p50_ms", "send_lateness_p99_ms", "send_lateness_max_ms",
            "offered_rate_req_s", "achieved_rate_req_s", "client_loop_lag_p99_ms", "completed", "failed",
            "median_ttft_ms")
    row = {k: float(m[k]) for k in keep if k in m}
    req = point["requests"]
    per = [(i, ttft - (first - arr), []) for i, (ttft, arr, first) in enumerate(
        zip(req["ttft_s"], req["server_arrival_minus_sent_s"], req["server_first_event_minus_sent_s"]))
        if ttft is not None and arr is not None and first is not None]
    row.update(error_metrics(per, 0))
    row.update(_arrival_ks(emu, rate, 2))
    row["client_cpu_s"], row["client_wall_s"] = cpu, wall
    return row


def peer_open(emu: Emulator, work: Path, tag: str, rate: float, n: int, out_len: int,
              timeout: float) -> dict[str, float]:
    out = work / f"peer-{tag}.jsonl"
    cmd = [*pin(1), str(PEER_PY), "-m", "sglang.bench_serving", "--backend", "sglang", "--base-url", emu.url,
           "--dataset-name", "random-ids", "--tokenize-prompt", "--random-input-len", "32",
           "--random-output-len", str(out_len), "--random-range-ratio", "1.0", "--num-prompts", str(n),
           "--request-rate", f"{rate:g}", "--tokenizer", str(TOKENIZER), "--model", str(TOKENIZER),
           "--output-file", str(out), "--output-details", "--warmup-requests", "2", "--disable-tqdm", "--seed", "1"]
    rc, wall, cpu = run_client(cmd, work / f"client-{tag}.log", timeout)
    if rc != 0 or not out.exists():
        raise SystemExit(f"perf: sglang.bench_serving failed (exit {rc}); log {work / f'client-{tag}.log'}")
    d = json.loads(out.read_text(encoding="utf-8").splitlines()[-1])
    truth = emu.truth()
    per: list[tuple[int, float, list[float]]] = []
    for i, e in enumerate(d["errors"]):
        t = truth.get(hashlib.sha1(d["generated_texts"][i].encode()).hexdigest()) if not e else None
        if t is not None and t["events"]:
            per.append((i, d["ttfts"][i] - (t["events"][0] - t["arrival"]), []))
    row = {"output_throughput_tok_s": float(d["output_throughput"]), "completed": float(d["completed"]),
           "median_ttft_ms": float(d["median_ttft_ms"]), "client_cpu_s": cpu, "client_wall_s": wall}
    row.update(error_metrics(per, 0))
    row.update(_arrival_ks(emu, rate, 2))
    return row


def section_openloop(a: argparse.Namespace, work: Path) -> list[dict[str, Any]]:
    """Send timing under an open loop at the seed's scale: Poisson arrivals at
    10 requests/s against the paced emulator (speed 1), ours and the peer's
    (`sglang.bench_serving --request-rate`), each against a fresh emulator.
    Ours records its lateness against its schedule; for both, the emulator's
    own arrival times give the achieved rate and a KS test against the
    exponential, and its write times the TTFT error."""
    rate, n, out_len = (10.0, 60, 16) if a.quick else (10.0, 600, 32)
    rows: list[dict[str, Any]] = []
    for client, fn in ((OURS, ours_open), (PEER, peer_open)):
        if client not in a.clients:
            continue
        tag = f"open-r{rate:g}-{client.replace('.', '_')}"
        log(f"open loop: {client} Poisson {rate:g} requests/s, N={n}, output {out_len}")
        with Emulator(work, tag, "baseline", 1.0) as emu:
            metrics = fn(emu, work, tag, rate, n, out_len, a.client_timeout)
        # A rate row's load is its rate (D103): no concurrency.
        rows.append({"workload": "open-loop", "config": client, "concurrency": None, "request_rate": rate,
                     "output_len": out_len, "num_prompts": n, **metrics})
        log(f"  send lateness p99 {metrics.get('send_lateness_p99_ms', float('nan')):.3f} ms, TTFT error p99 "
            f"{metrics.get('ttft_client_error_p99_ms', float('nan')):.2f} ms, arrivals KS p "
            f"{metrics['server_arrival_ks_p']:.3f}")
    return rows


def section_clients(a: argparse.Namespace, work: Path) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    plan: list[tuple[str, str, float, int, int, int]] = []  # workload, profile, speed, C, N, output tokens
    if a.quick:
        plan += [("firehose", "firehose", 1.0, c, 2 * c, 64) for c in (64, 250)]
        plan += [("paced", "baseline", 1.0, 1, 4, 16), ("paced", "baseline", 1.0, 250, 250, 8)]
    else:
        plan += [("firehose", "firehose", 1.0, 64, 1000, 256), ("firehose", "firehose", 1.0, 250, 1000, 256),
                 ("firehose", "firehose", 1.0, 1000, 2000, 256)]
        plan += [("paced", "baseline", 1.0, 1, 12, 64), ("paced", "baseline", 1.0, 250, 500, 32)]
    clients = [c for c in (OURS, PEER, REF) if c in a.clients]
    for workload, profile, speed, c, n, out_len in plan:
        for client in clients:
            tag = f"{workload}-c{c}-{client.replace('.', '_')}"
            log(f"clients: {client} {workload} C={c} N={n} output {out_len}")
            with Emulator(work, tag, profile, speed) as emu:
                metrics = CLIENTS[client](emu, work, tag, c, n, out_len, a.client_timeout)
            rows.append({"workload": f"{workload}", "config": client, "concurrency": c,
                         "output_len": out_len, "num_prompts": n, **metrics})
            log(f"  {metrics.get('output_throughput_tok_s', 0):.0f} tok/s, TTFT error p50 "
                f"{metrics.get('ttft_client_error_p50_ms', float('nan')):.2f} ms")
    return rows


# --------------------------------------------------------------------------- one client's efficiency

def aiperf_client(emu: Emulator, work: Path, tag: str, c: int, n: int, out_len: int,
                  timeout: float, watch: list[tuple[float, float]] | None = None) -> dict[str, float]:
    """AIPerf 0.13.0 (its own venv: benchmarks/aiperf/setup.sh), completions,
    streaming, C in flight; every process it starts inherits the pin."""
    art = work / f"aiperf-{tag}"
    cmd = [*pin(1), str(AIPERF_VENV / "bin" / "aiperf"), "profile", "--model", "findings-emulator/firehose",
           "--url", emu.url, "--endpoint-type", "completions", "--streaming", "--tokenizer", str(TOKENIZER),
           "--concurrency", str(c), "--request-count", str(n), "--isl", "32", "--isl-stddev", "0",
           "--osl", str(out_len), "--osl-stddev", "0", "--extra-inputs", "ignore_eos:true", "--random-seed", "1",
           "--artifact-dir", str(art), "--ui", "none", "--no-server-metrics", "--no-gpu-telemetry"]
    rc, wall, cpu = run_client(cmd, work / f"client-{tag}.log", timeout, watch)
    out = art / "profile_export_aiperf.json"
    if rc != 0 or not out.exists():
        raise SystemExit(f"perf: aiperf failed (exit {rc}); log {work / f'client-{tag}.log'}")
    d = json.loads(out.read_text(encoding="utf-8"))
    completed = float(d["request_count"]["avg"])
    duration = float(d["benchmark_duration"]["avg"])
    return {"completed": completed, "duration": duration, "output_throughput_tok_s": completed * out_len / duration,
            "client_cpu_s": cpu, "client_wall_s": wall}


def floor_client(emu: Emulator, work: Path, tag: str, c: int, n: int, out_len: int, timeout: float,
                 watch: list[tuple[float, float]] | None, mode: str) -> dict[str, float]:
    """floorclient.py (D159): the same requests as ours, every byte read and dropped."""
    out = work / f"floor-{tag}.json"
    cmd = [*pin(1), str(PY), str(HERE / "floorclient.py"), emu.url, "--mode", mode, "--concurrency", str(c),
           "--num-prompts", str(n), "--output-len", str(out_len), "--out", str(out)]
    rc, wall, cpu = run_client(cmd, work / f"client-{tag}.log", timeout, watch)
    if rc != 0 or not out.exists():
        raise SystemExit(f"perf: the floor client ({mode}) failed (exit {rc}); log {work / f'client-{tag}.log'}")
    d = json.loads(out.read_text(encoding="utf-8"))
    return {"completed": float(d["completed"]), "duration": d["duration_s"],
            "output_throughput_tok_s": d["completed"] * out_len / d["duration_s"], "client_cpu_s": cpu,
            "client_wall_s": wall}


def section_efficiency(a: argparse.Namespace, work: Path) -> list[dict[str, Any]]:
    """Tokens per client CPU-second against the firehose at C = 64, 250 and
    1000: ours (one worker), sglang.bench_serving and AIPerf, each against a
    fresh emulator, the client pinned to one core. The emulator logs each
    request's arrival and writes (its ground-truth log only: the clients
    read what they would read without it); the client's whole process tree
    is sampled from /proc every 20 ms. Tokens per client CPU-second = the
    tokens the emulator streamed (requests served x output length: every
    client asks for exactly that many) over the CPU time the client's tree
    used between the first arrival and the last write at the server: the
    cost of streaming, its start-up and result files left out. The CPU of
    the whole run, start to exit, is reported beside it. ``--efficiency-rounds``
    rounds (1: ``make perf`` within 20 minutes, D179), each every client at
    every C in turn; the best is kept, the worst beside it.
    The floor clients (floorclient.py, D159) are measured the same way."""
    plan = [(64, 256, 64), (250, 500, 64)] if a.quick else [(64, 1000, 256), (250, 1000, 256), (1000, 2000, 256)]
    rows: list[dict[str, Any]] = []

    def ours_eff(emu: Emulator, tag: str, c: int, n: int, out_len: int,
                 watch: list[tuple[float, float]], transport: str = "aiohttp") -> dict[str, float]:
        point, wall, cpu = _bench(emu, work, tag, ["--concurrency", str(c), "--workers", "1", "--transport",
                                                   transport], n, out_len, a.client_timeout, watch=watch)
        m = point["metrics"]
        return {"completed": m["completed"], "output_throughput_tok_s": m["output_throughput_tok_s"],
                "client_cpu_s": cpu, "client_wall_s": wall, "client_cpu_fraction": m["client_cpu_fraction"],
                "point_cpu_s": m["client_cpu_s"]}

    def floor_of(mode: str) -> Any:
        return lambda emu, tag, c, n, o, watch: floor_client(emu, work, tag, c, n, o, a.client_timeout, watch, mode)

    fns = {OURS: ours_eff,
           OURS_RAW: lambda emu, tag, c, n, o, watch: ours_eff(emu, tag, c, n, o, watch, "raw"),
           PEER: lambda emu, tag, c, n, o, watch: peer(emu, work, tag, c, n, o, a.client_timeout, watch),
           AIPERF: lambda emu, tag, c, n, o, watch: aiperf_client(emu, work, tag, c, n, o, a.client_timeout, watch),
           **{floor: floor_of(mode) for floor, mode in FLOORS.items()}}
    best: dict[tuple[str, int], dict[str, Any]] = {}
    seen: dict[tuple[str, int], list[float]] = {}
    for rnd, (c, n, out_len, client) in ((r, x) for r in range(1, a.efficiency_rounds + 1)
                                         for x in ((c, n, o, cl) for c, n, o in plan
                                                   for cl in (OURS, OURS_RAW, PEER, AIPERF, *FLOORS))):
            if client not in a.clients:
                continue
            tag = f"eff-c{c}-{client.replace('.', '_')}-r{rnd}"
            log(f"efficiency: {client} firehose C={c} N={n} output {out_len}")
            watch: list[tuple[float, float]] = []
            with Emulator(work, tag, "firehose", 1.0, truth=False, log_only=True) as emu:
                m = fns[client](emu, tag, c, n, out_len, watch)
                t0, t1, served = streaming_window(emu.truth_log)
            cpu = window_cpu_s(watch, t0, t1)
            tokens = served * out_len
            row = {"workload": "efficiency", "config": client, "concurrency": c, "output_len": out_len,
                   "num_prompts": n, "output_throughput_tok_s": m["output_throughput_tok_s"],
                   "completed": m["completed"], "client_run_cpu_s": m["client_cpu_s"],
                   "client_wall_s": m["client_wall_s"], "streaming_s": t1 - t0,
                   "tokens_per_client_run_cpu_s": m["completed"] * out_len / m["client_cpu_s"]}
            if cpu:
                row["client_cpu_s"] = cpu
                row["tokens_per_client_cpu_s"] = tokens / cpu
                row["client_cpu_fraction"] = cpu / (t1 - t0)
            if client in (OURS, OURS_RAW):
                # Ours also measures its own CPU inside the point (warm-up excluded).
                row["tokens_per_point_cpu_s"] = m["completed"] * out_len / m["point_cpu_s"]
            # Each round measures every client at every C once, in turn; the
            # best round is kept (other load on the machine only ever slows a
            # client down), with the rounds and their spread.
            got = row.get("tokens_per_client_cpu_s", 0.0)
            seen.setdefault((client, c), []).append(got)
            if (client, c) not in best or got > best[(client, c)].get("tokens_per_client_cpu_s", 0.0):
                best[(client, c)] = row
            log(f"  round {rnd}: {row.get('tokens_per_client_cpu_s', float('nan')):.0f} tokens per client "
                f"CPU-second while streaming ({row['tokens_per_client_run_cpu_s']:.0f} over the whole run), "
                f"{m['output_throughput_tok_s']:.0f} tok/s")
    for key, row in best.items():
        vals = [v for v in seen[key] if v]
        row["rounds"] = float(len(seen[key]))
        if vals and len(seen[key]) > 1:  # (of one round, the best)
            row["tokens_per_client_cpu_s_worst"] = min(vals)
        rows.append(row)
        if key[1] == plan[-1][0] and "tokens_per_client_cpu_s" in row:
            a.efficiency[key[0]] = row["tokens_per_client_cpu_s"]  # the last C: section workers' paper figures
    return rows


# --------------------------------------------------------------------------- worker processes

def _inflight_max(truth_log: Path, warmup: int) -> float:
    """The most requests the emulator held at once (its ground-truth log:
    arrival and last write of each), the warm-up requests left out."""
    recs = sorted((json.loads(line) for line in truth_log.read_text(encoding="utf-8").splitlines()),
                  key=lambda d: d["arrival"])[warmup:]
    edges = sorted([(d["arrival"], 1) for d in recs] + [(d["events"][-1], -1) for d in recs if d["events"]],
                   key=lambda e: (e[0], e[1]))
    level = top = 0
    for _, step in edges:
        level += step
        top = max(top, level)
    return float(top)


def section_workers(a: argparse.Namespace, work: Path) -> list[dict[str, Any]]:
    """``findings bench --workers N``: capacity against the firehose with 1
    and 2 workers (the client's processes pinned to the cores that are not
    the emulator's), and open loops at 100 and 1,000 requests/s with 1 and 2
    workers: our send lateness, the achieved rate, and at the emulator its
    arrival rate, the KS p-value of its gaps and the most requests in
    flight. Then, on paper, the capacity of N workers from the measured
    cost per worker and the parent's cost of starting them and merging."""
    rows: list[dict[str, Any]] = []
    ncpu = os.cpu_count() or 1
    # The client's processes on every core but the emulator's (core 0); with
    # two cores, not pinned: two workers pinned to one core would measure the
    # core's time slicing, not the workers.
    client_cores = ["taskset", "-c", f"1-{ncpu - 1}"] if ncpu >= 3 and pin(0) else []
    cap_plan = [(64, 256, 64)] if a.quick else [(250, 2000, 256), (1000, 2000, 256)]
    measured: dict[tuple[int, int], dict[str, float]] = {}
    for c, n, out_len in cap_plan:
        for workers in (1, 2):
            tag = f"workers-c{c}-w{workers}"
            log(f"workers: capacity, {workers} worker(s), firehose C={c} N={n} output {out_len}")
            with Emulator(work, tag, "firehose", 1.0) as emu:
                point, wall, cpu = _bench(emu, work, tag, ["--concurrency", str(c), "--workers", str(workers)], n,
                                          out_len, a.client_timeout, cores=client_cores)
                top = _inflight_max(emu.truth_log, 2)
            m = point["metrics"]
            row = {"workload": "workers-capacity", "config": f"{workers} worker{'s' if workers > 1 else ''}",
                   "concurrency": c, "output_len": out_len, "num_prompts": n, "workers": float(workers),
                   "output_throughput_tok_s": m["output_throughput_tok_s"], "completed": m["completed"],
                   "client_cpu_s": cpu, "client_wall_s": wall, "server_inflight_max": top,
                   "tokens_per_client_cpu_s": m["completed"] * out_len / cpu,
                   "worker_cpu_s": m.get("client_cpu_s"), "client_cpu_fraction": m.get("client_cpu_fraction"),
                   "client_loop_lag_p99_ms": m.get("client_loop_lag_p99_ms")}
            if "client_parent_cpu_s" in m:
                row["parent_cpu_s"] = m["client_parent_cpu_s"]
            rows.append(row)
            measured[(c, workers)] = row
            log(f"  {m['output_throughput_tok_s']:.0f} tok/s, {row['tokens_per_client_cpu_s']:.0f} tokens per "
                f"client CPU-second, at most {top:.0f} in flight at the server")
    open_plan = [(100.0, 200), (1000.0, 1000)] if a.quick else [(100.0, 1000), (1000.0, 5000)]
    for rate, n in open_plan:
        for workers, transport in ((1, "aiohttp"), (2, "aiohttp"), (1, "raw"), (2, "raw")):
            raw = transport == "raw"
            tag = f"workers-open-r{rate:g}-w{workers}" + ("-raw" if raw else "")
            log(f"workers: open loop, {workers} worker(s), {transport}, Poisson {rate:g} requests/s, N={n}, output 8")
            with Emulator(work, tag, "firehose", 1.0) as emu:
                point, wall, cpu = _bench(emu, work, tag, ["--request-rate", f"{rate:g}", "--workers", str(workers),
                                                           "--transport", transport],
                                          n, 8, a.client_timeout, cores=client_cores)
                ks = _arrival_ks(emu, rate, 2)
            m = point["metrics"]
            keep = ("send_lateness_p50_ms", "send_lateness_p99_ms", "send_lateness_max_ms", "offered_rate_req_s",
                    "achieved_rate_req_s", "client_loop_lag_p99_ms", "completed", "failed", "client_cpu_fraction")
            row = {"workload": "workers-open-loop",
                   "config": f"{workers} worker{'s' if workers > 1 else ''}" + (", raw" if raw else ""),
                   "concurrency": None, "request_rate": rate, "workers": float(workers), "num_prompts": n,
                   "output_len": 8, "output_throughput_tok_s": m["output_throughput_tok_s"],
                   **{k: float(m[k]) for k in keep if k in m}, **ks, **_send_ks(point, rate),
                   "client_cpu_s": cpu, "client_wall_s": wall}
            rows.append(row)
            log(f"  send lateness p50 {m.get('send_lateness_p50_ms', float('nan')):.3f} ms, p99 "
                f"{m.get('send_lateness_p99_ms', float('nan')):.3f} ms; achieved {m.get('achieved_rate_req_s', 0):.1f}"
                f" req/s; at the server {ks['server_arrival_rate_req_s']:.1f} req/s, KS p "
                f"{ks['server_arrival_ks_p']:.3f}")
    efficiency = dict(getattr(a, "efficiency", {})) or stored_efficiency(a.store, 1000)
    rows += paper_capacity(measured, cap_plan[-1][0], efficiency)
    rows += section_pacer(a, work)
    return rows


def section_pacer(a: argparse.Namespace, work: Path) -> list[dict[str, Any]]:
    """The pacer alone (benchmarks/perf/pacer.py, pinned like a client):
    how late an idle event loop wakes at Poisson deadlines at 1,000 per
    second: findings' ``until`` (a timerfd, D126), the spin it replaced,
    and a plain ``asyncio.sleep``."""
    n = 1000 if a.quick else 5000
    log(f"workers: the pacer alone, {n} Poisson deadlines at 1000/s")
    out = subprocess.run([*pin(1), str(PY), str(HERE / "pacer.py"), "--rate", "1000", "--n", str(n)], cwd=ROOT,
                         capture_output=True, text=True, check=True)
    d = json.loads(out.stdout.strip().splitlines()[-1])
    rows = []
    for name, label in (("until", "findings until (timerfd)"), ("spin", "sleep then spin"),
                        ("asyncio_sleep", "asyncio.sleep")):
        rows.append({"workload": "pacer", "config": label, "concurrency": 1, "output_throughput_tok_s": "n/a",
                     "deadlines_per_s": 1000.0, "deadlines": float(n), "wake_lateness_p50_ms": d[name]["p50_ms"],
                     "wake_lateness_p99_ms": d[name]["p99_ms"], "wake_lateness_max_ms": d[name]["max_ms"]})
        log(f"  {label}: lateness p50 {d[name]['p50_ms']:.3f} ms, p99 {d[name]['p99_ms']:.3f} ms")
    return rows


def stored_efficiency(store: Path, c: int) -> dict[str, float]:
    """Tokens per client CPU-second at C=``c`` from the latest run of the
    efficiency section in the perf store's inputs (when this run did not
    measure them), each client's figure with its campaign."""
    out: dict[str, float] = {}
    for path in sorted((store / "inputs").glob("perf-*.csv")):
        with open(path, encoding="utf-8", newline="") as fh:
            found = {r["config"]: float(r["tokens_per_client_cpu_s"]) for r in csv.DictReader(fh)
                     if r.get("workload") == "efficiency" and r.get("concurrency") == str(c)
                     and r.get("tokens_per_client_cpu_s")}
        if found:
            out = found
    if out:
        log(f"  on paper: tokens per client CPU-second at C={c} from the latest efficiency run in {store}")
    return out


def paper_capacity(measured: dict[tuple[int, int], dict[str, float]], c: int,
                   efficiency: dict[str, float]) -> list[dict[str, Any]]:
    """On paper: N workers on N cores of their own (the parent on one more)
    stream N times what one worker streams per CPU-second (its efficiency
    at C=1000, this run; else its CPU inside the point), the parent's
    gauge reads being negligible. The parent merges after the window: its
    CPU per token (measured with 2 workers: starting them, taking their
    records, merging) is what grows with N, as the share of the window
    that merging adds after it. AIPerf on the same N cores: N times its
    tokens per CPU-second, as if its timing manager and record processors
    scaled as well (optimistic for it)."""
    one, two = measured.get((c, 1)), measured.get((c, 2))
    if not one or not two or not one.get("worker_cpu_s") or not two.get("parent_cpu_s"):
        return []
    per_worker = efficiency.get(OURS) or one["completed"] * one["output_len"] / one["worker_cpu_s"]
    merge_per_token = two["parent_cpu_s"] / (two["completed"] * two["output_len"])
    rows: list[dict[str, Any]] = []
    for n in (1, 2, 4, 8, 16, 32):
        stream = n * per_worker
        rows.append({"workload": "workers-paper", "config": OURS, "concurrency": n,
                     "output_throughput_tok_s": stream, "tokens_per_worker_cpu_s": per_worker,
                     "merge_cpu_s_per_million_tokens": merge_per_token * 1e6,
                     "merge_share_of_window": stream * merge_per_token})
        for other in (OURS_RAW, AIPERF):
            if efficiency.get(other):
                rows.append({"workload": "workers-paper", "config": other, "concurrency": n,
                             "output_throughput_tok_s": n * efficiency[other]})
    return rows


# --------------------------------------------------------------------------- emulator schedule

def section_emulator(a: argparse.Namespace, work: Path) -> list[dict[str, Any]]:
    # Where the demo and the tests run the emulator: speed 1 up to C=250 (make demo,
    # make bench), speed 1 up to C=100 (the matrix test), speed 10 up to C=32 (the
    # batching test), speed 25 with C=4 and speed 50 with C=8 (functional tests).
    sweep = [(1.0, 250), (4.0, 250), (50.0, 8)] if a.quick else \
        [(1.0, 64), (1.0, 100), (1.0, 250), (2.0, 250), (4.0, 250), (10.0, 32), (10.0, 1000), (25.0, 4),
         (50.0, 8)]
    if a.emulator_sweep:
        sweep = [(float(x.split(":")[0]), int(x.split(":")[1])) for x in a.emulator_sweep.split(",")]
    rows = []
    for speed, c in sweep:
        tag = f"sched-s{speed:g}-c{c}"
        n = 2 * c
        log(f"emulator: baseline profile at speed {speed:g}, C={c}, N={n}, 32 output tokens")
        with Emulator(work, tag, "baseline", speed, truth=False) as emu:
            store = work / f"store-{tag}"
            cmd = [*pin(1), str(FINDINGS), "--store", str(store), "bench", "--url", emu.url, "--config", "perf",
                   "--campaign", f"perf-{tag}", "--workload", "perf", "--concurrency", str(c), "--num-prompts",
                   str(n), "--input-len", "256", "--output-len", "32", "--prompts", "random-ids", "--warmup", "0",
                   "--no-progress", "--read-timeout", "120", "--create"]
            rc, _, _ = run_client(cmd, work / f"client-{tag}.log", a.client_timeout)
            sched = http_json(emu.url + "/server_info").get("emulator_schedule", {})
        files = sorted((store / "runs").glob("*.json"))
        if rc != 0 or not files:
            raise SystemExit(f"perf: findings bench failed (exit {rc}); log {work / f'client-{tag}.log'}")
        m = crosscheck.first_point(files[-1])["metrics"]
        rows.append({"workload": "emulator-schedule", "config": f"speed-{speed:g}", "concurrency": c,
                     "speed": speed, "output_throughput_tok_s": m["output_throughput_tok_s"],
                     "steps": float(sched.get("steps", 0)),
                     "lateness_p50_ms": sched.get("lateness_p50_ms"), "lateness_p99_ms": sched.get("lateness_p99_ms"),
                     "lateness_max_ms": sched.get("lateness_max_ms"),
                     "client_loop_lag_p99_ms": m.get("client_loop_lag_p99_ms")})
        log(f"  {m['output_throughput_tok_s']:.0f} tok/s, lateness p99 {sched.get('lateness_p99_ms')} ms")
    return rows


# --------------------------------------------------------------------------- render scaling

def section_render(a: argparse.Namespace, work: Path) -> list[dict[str, Any]]:
    sys.path.insert(0, str(HERE))
    import render_scaling  # noqa: PLC0415 (a sibling script)

    sizes = [1000, 10000] if a.quick else [1000, 10000, 100000, 1000000]
    log(f"render: synthetic stores of {', '.join(map(str, sizes))} points")
    rows = []
    # Stores are cached per size and seed in build/perf/render (the first
    # build of the 1M store takes 15-20 minutes here); best of 2 runs where
    # repeated, at 1M too: a cold render there takes 20-30 s, and one run
    # of it varied by a quarter within an hour (D169).
    measured = [r for size in sizes
                for r in render_scaling.measure([size], ROOT / "build" / "perf" / "render",
                                                repeats=1 if a.quick else 2)]
    # The same points as `findings bench --url` stores them: one run file a point (issue 38, item 4).
    bench_size = 10000 if a.quick else 100000
    log(f"render: the {bench_size}-point store shaped as findings bench writes it (one run file per point)")
    measured += render_scaling.measure_bench_shape(bench_size, ROOT / "build" / "perf" / "render",
                                                   repeats=1 if a.quick else 2)
    # The store's other readers (deploy, plan, store check, export, and
    # diff in a git repository of the store), up to 100k points: at 1M each
    # takes a minute or more (D164, D165).
    for size in [s for s in sizes if s <= 100000]:
        log(f"render: deploy, plan, store check, export and diff on the {size}-point store")
        for r in [*render_scaling.measure_commands(size, ROOT / "build" / "perf" / "render",
                                                   repeats=1 if a.quick else 2),
                  render_scaling.measure_diff(size, ROOT / "build" / "perf" / "render", repeats=1)]:
            rows.append({"workload": "command-scaling", "config": r["command"], "concurrency": 1,
                         "output_throughput_tok_s": "n/a", "store_points": float(r["size"]),
                         "wall_s": r["wall_s"], "peak_rss_mib": r["peak_rss_mib"]})
            log(f"  {r['command']} {r['size']} points: {r['wall_s']:.3f} s, {r['peak_rss_mib']:.0f} MiB")
    for r in measured:
        row = {"workload": "render-scaling", "config": r["command"], "concurrency": 1,
               "output_throughput_tok_s": "n/a", "store_points": float(r["size"])}
        if r["command"] == "render":  # the store's size: once per store
            row.update(store_mib=r["store_mib"], bytes_per_point=float(r["bytes_per_point"]),
                       points_with_requests=r.get("points_with_requests"))
        if r["command"] == "write":
            row["write_ms"] = round(r["wall_s"] * 1000, 2)
        else:
            row["wall_s"], row["peak_rss_mib"] = r["wall_s"], r["peak_rss_mib"]
        rows.append(row)
        rss = f", {r['peak_rss_mib']:.0f} MiB" if r["peak_rss_mib"] is not None else ""
        log(f"  {r['command']} {r['size']} points: {r['wall_s']:.3f} s{rss}")
    return rows


# --------------------------------------------------------------------------- output

def environment(a: argparse.Namespace) -> dict[str, Any]:
    env: dict[str, Any] = {"machine": platform.machine(), "cpus": os.cpu_count() or 0,
                           "python": platform.python_version(), "pinning": "emulator core 0, client core 1"
                           if pin(0) else "none (one core)"}
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                env["cpu_model"] = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    try:
        import aiohttp  # noqa: PLC0415

        env["aiohttp"] = aiohttp.__version__
    except ImportError:
        pass
    try:
        from findings.bench import eventloop  # noqa: PLC0415

        env["event_loop"] = eventloop.name()  # what findings bench ran on (D135)
    except ImportError:
        pass
    try:
        env["git_commit"] = subprocess.run(["git", "rev-parse", "--short=12", "HEAD"], cwd=ROOT, text=True,
                                           capture_output=True, check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--", "findings"], cwd=ROOT, text=True,
                               capture_output=True, check=True).stdout.strip()
        env["git_dirty"] = bool(dirty)
    except (OSError, subprocess.CalledProcessError):
        pass
    if PEER in a.clients:
        env["peer"] = ("sglang 0.5.23 bench_serving (benchmarks/peer/setup.sh)" if "PEER_VENV" not in os.environ
                       else f"sglang bench_serving from PEER_VENV={PEER_VENV}")
    if AIPERF in a.clients:
        env["aiperf"] = "aiperf 0.13.0 (benchmarks/aiperf/setup.sh)"
    env["quick"] = bool(a.quick)
    return env


def toml_value(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (int, float)):
        return repr(v)
    return json.dumps(str(v))


def write_outputs(rows: list[dict[str, Any]], campaign: str, date: str, csv_path: Path, env_path: Path,
                  env: dict[str, Any]) -> None:
    fixed = ["campaign", "date", "workload", "config", "concurrency", "output_throughput_tok_s"]
    extra = sorted({k for r in rows for k in r} - set(fixed))
    csv_path.parent.mkdir(parents=True, exist_ok=True)
    with open(csv_path, "w", encoding="utf-8", newline="") as fh:
        w = csv.writer(fh, lineterminator="\n")
        w.writerow(fixed + extra)
        for r in rows:
            vals = {**r, "campaign": campaign, "date": date}
            out = []
            for k in fixed + extra:
                v = vals.get(k)
                if isinstance(v, float):
                    out.append(f"{v:.6g}")
                else:
                    out.append("" if v is None else str(v))
            w.writerow(out)
    env_path.write_text("".join(f"{k} = {toml_value(v)}\n" for k, v in sorted(env.items())), encoding="utf-8")


def main() -> int:
    ap = argparse.ArgumentParser(description="make perf: measure findings and render docs/performance.md")
    ap.add_argument("--store", type=Path, default=ROOT / "benchmarks" / "perf" / "results")
    ap.add_argument("--settings", type=Path, default=HERE / "findings.toml")
    ap.add_argument("--work", type=Path, default=ROOT / "build" / "perf")
    ap.add_argument("--sections", default="clients,openloop,efficiency,workers,emulator,render")
    ap.add_argument("--clients", default=",".join((OURS, OURS_RAW, PEER, REF, AIPERF, *FLOORS)))
    ap.add_argument("--quick", action="store_true", help="small sizes (for trying the harness; not published)")
    ap.add_argument("--client-timeout", type=float, default=300.0)
    ap.add_argument("--emulator-sweep", default="", metavar="SPEED:C,...",
                    help="the emulator section's (speed, C) points instead of the default sweep")
    ap.add_argument("--no-render", action="store_true", help="measure and ingest, do not render the document")
    ap.add_argument("--efficiency-rounds", type=int, default=1,
                    help="section efficiency: measure every client at every C this many times in turn, keep the "
                         "best (2 shows the worst beside it; each round adds about 3.6 minutes here, D179)")
    ap.add_argument("--setups", action="store_true",
                    help="print the scripts that build the venvs these sections' clients need, and exit (make perf)")
    a = ap.parse_args()
    a.clients = clients_for(a.sections.split(","), [c for c in a.clients.split(",") if c])
    if a.setups:
        print(" ".join(SETUPS[c] for c in a.clients if c in SETUPS))
        return 0
    a.efficiency = {}
    if PEER in a.clients and not (PEER_VENV / "bin" / "python").exists():
        raise SystemExit(f"perf: no peer venv at {PEER_VENV}; run bash {SETUPS[PEER]} "
                         f"(or pass --clients {OURS},{REF})")
    if AIPERF in a.clients and not (AIPERF_VENV / "bin" / "aiperf").exists():
        raise SystemExit(f"perf: no AIPerf venv at {AIPERF_VENV}; run bash {SETUPS[AIPERF]} "
                         f"(or pass --clients without {AIPERF})")
    if (PEER in a.clients or AIPERF in a.clients) and not (TOKENIZER / "tokenizer.json").is_file():
        subprocess.run([str(PEER_PY), str(ROOT / "benchmarks" / "peer" / "make_tokenizer.py"), str(TOKENIZER)],
                       check=True)
    now = dt.datetime.now(dt.timezone.utc)
    stamp = now.strftime("%Y%m%d-%H%M%S")
    campaign = f"perf-{stamp}" + ("-quick" if a.quick else "")
    work = a.work / stamp
    work.mkdir(parents=True, exist_ok=True)
    # Every command measured loads the package's bytecode, as an installed
    # wheel's does: with PYTHONDONTWRITEBYTECODE set, a module edited since
    # its .pyc was written would be compiled again by every run (about 0.1 s
    # of each command, D161). compileall writes the .pyc files whatever that
    # variable says.
    subprocess.run([sys.executable, "-m", "compileall", "-q", str(ROOT / "findings")], check=True)
    t0 = time.perf_counter()
    rows: list[dict[str, Any]] = []
    sections = {"clients": section_clients, "openloop": section_openloop, "efficiency": section_efficiency,
                "workers": section_workers, "emulator": section_emulator, "render": section_render}
    for name in a.sections.split(","):
        if name not in sections:
            raise SystemExit(f"perf: unknown section {name!r} (known: {', '.join(sections)})")
        rows += sections[name](a, work)
    env = environment(a)
    env["wall_s"] = round(time.perf_counter() - t0, 1)
    store_mod.create(a.store)  # a new --store: a store before its inputs/ folder (else ingest refuses the folder)
    csv_path = a.store / "inputs" / f"{campaign}.csv"
    env_path = a.store / "inputs" / f"{campaign}.environment.toml"
    write_outputs(rows, campaign, now.strftime("%Y-%m-%d"), csv_path, env_path, env)
    log(f"{len(rows)} rows -> {csv_path.relative_to(ROOT) if csv_path.is_relative_to(ROOT) else csv_path}")
    base = [str(FINDINGS), "--settings", str(a.settings), "--store", str(a.store)]
    subprocess.run([*base, "ingest", "table", str(csv_path), "--environment", str(env_path), "--create"], check=True)
    if not a.no_render:
        subprocess.run([*base, "render"], check=True)
    log(f"done in {time.perf_counter() - t0:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
