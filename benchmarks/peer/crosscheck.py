"""Cross-check `findings bench` against the peer client `sglang.bench_serving`.

Both clients drive the findings SGLang-API emulator with the same profile,
concurrency, prompt and output lengths and number of prompts. Each client run
gets a FRESH emulator process, so both see the same server state (empty
prefix cache, zero lifetime counters). The figures compared are output
throughput (tok/s) and median TTFT (ms); docs/peer-crosscheck.md explains
the gaps.

Run it with the PROJECT venv's python; the peer runs in its own venv
(benchmarks/peer/setup.sh) through benchmarks/peer/peer-python::

    bash benchmarks/peer/setup.sh
    benchmarks/peer/peer-python benchmarks/peer/make_tokenizer.py
    .venv/bin/python benchmarks/peer/crosscheck.py --profile baseline --profile eagle3-topk1-v2

Outputs (under build/peer/out/<stamp>/): the peer's JSONL lines, our store
(runs/*.json), each emulator's log, crosscheck.md (the table and the exact
commands) and crosscheck.json (every figure).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import shlex
import signal
import statistics
import subprocess
import sys
import threading
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
PROJECT_PY = ROOT / ".venv" / "bin" / "python"
FINDINGS = ROOT / ".venv" / "bin" / "findings"
PEER_PY = HERE / "peer-python"
READY = re.compile(r"findings-emulator: profile (\S+) listening on (http://\S+)")
TOLERANCE = 0.05



def first_point(path: Path) -> dict[str, Any]:
    """A run file's first point: its metrics, and its per-request records
    wherever the store keeps them (inline, or in the run's sidecar since
    store schema 4), read and checked by findings' own store reader."""
    from findings import store as store_mod  # noqa: PLC0415 (the project's venv runs this script)

    point = store_mod.read_run(path).points[0]
    return {"metrics": dict(point.metrics), "requests": point.requests}

def rel(p: Path) -> str:
    try:
        return str(p.relative_to(ROOT))
    except ValueError:
        return str(p)


def http_text(url: str, timeout: float = 5.0) -> str | None:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as r:  # noqa: S310 (loopback only)
            return r.read().decode("utf-8", "replace")
    except Exception:  # noqa: BLE001
        return None


# --------------------------------------------------------------------------- emulator

class Emulator:
    """One emulator process, in its own process group; its output goes to a log."""

    def __init__(self, profile: str, speed: float | None, seed: int, ground_truth: bool, log: Path,
                 ready_timeout_s: float = 60.0, prefix: tuple[str, ...] = (), extra: tuple[str, ...] = ()) -> None:
        """``prefix`` goes before the command (e.g. taskset), ``extra`` after its options."""
        self.cmd = [*prefix, str(PROJECT_PY), "-m", "findings.emulator", "--port", "0", "--profile", profile,
                    "--seed", str(seed)]
        if speed is not None:
            self.cmd += ["--speed", f"{speed:g}"]
        if ground_truth:
            self.cmd += ["--ground-truth"]
        self.cmd += list(extra)
        self.log = log
        self.url: str | None = None
        self.ready_line = ""
        self._fh = open(log, "w", encoding="utf-8")  # noqa: SIM115
        self._fh.write("$ " + shlex.join(self.cmd) + "\n")
        self._fh.flush()
        self.proc = subprocess.Popen(self.cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                     text=True, bufsize=1, start_new_session=True,
                                     env={**os.environ, "PYTHONUNBUFFERED": "1"})
        ready = threading.Event()

        def pump() -> None:
            assert self.proc.stdout is not None
            for line in self.proc.stdout:
                self._fh.write(line)
                self._fh.flush()
                m = READY.search(line)
                if m and not ready.is_set():
                    self.url = m.group(2).rstrip("/")
                    self.ready_line = line.strip()
                    ready.set()
            ready.set()

        self._pump = threading.Thread(target=pump, daemon=True)
        self._pump.start()
        deadline = time.monotonic() + ready_timeout_s
        while not ready.wait(0.1):
            if time.monotonic() > deadline:
                break
        if self.url is None:
            self.stop()
            raise RuntimeError(f"emulator did not print its ready line within {ready_timeout_s:g} s "
                               f"(exit code {self.proc.poll()}); log {log}:\n{tail(log)}")
        # The ready line is printed when the socket listens; make sure it answers.
        for _ in range(100):
            if http_text(self.url + "/v1/models") is not None:
                break
            time.sleep(0.1)

    def stop(self) -> None:
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(10)
        self._pump.join(5)
        self._fh.close()

    def __enter__(self) -> "Emulator":
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def tail(path: Path, n: int = 25) -> str:
    try:
        return "\n".join(path.read_text(encoding="utf-8", errors="replace").splitlines()[-n:])
    except OSError:
        return "(no log)"


def wait_for_emulator_module(max_wait_s: float, poll_s: float = 60.0) -> None:
    main = ROOT / "findings" / "emulator" / "__main__.py"
    t0 = time.monotonic()
    while not main.exists():
        if time.monotonic() - t0 > max_wait_s:
            raise SystemExit(f"crosscheck: {rel(main)} still missing after {max_wait_s:g} s")
        print(f"crosscheck: waiting for {rel(main)} (the emulator is not there yet)", file=sys.stderr)
        time.sleep(poll_s)


# --------------------------------------------------------------------------- server-side evidence

def prom(text: str | None) -> dict[str, list[tuple[dict[str, str], float]]]:
    out: dict[str, list[tuple[dict[str, str], float]]] = {}
    for line in (text or "").splitlines():
        if not line or line.startswith("#"):
            continue
        head, _, value = line.rpartition(" ")
        name, _, labels = head.partition("{")
        lab = dict(re.findall(r'(\w+)="([^"]*)"', labels))
        try:
            out.setdefault(name.strip(), []).append((lab, float(value)))
        except ValueError:
            pass
    return out


def hist_quantile(metrics: dict[str, list[tuple[dict[str, str], float]]], name: str, q: float) -> float | None:
    """Prometheus histogram_quantile (linear within the bucket), summed over labels."""
    buckets: dict[float, float] = {}
    for lab, v in metrics.get(name + "_bucket", []):
        le = lab.get("le")
        if le is None:
            continue
        buckets[math.inf if le == "+Inf" else float(le)] = buckets.get(math.inf if le == "+Inf" else float(le),
                                                                        0.0) + v
    if not buckets:
        return None
    edges = sorted(buckets)
    total = buckets[edges[-1]]
    if total <= 0:
        return None
    rank = q * total
    prev_edge, prev_count = 0.0, 0.0
    for e in edges:
        c = buckets[e]
        if c >= rank:
            if math.isinf(e):
                return prev_edge
            if c == prev_count:
                return e
            return prev_edge + (e - prev_edge) * (rank - prev_count) / (c - prev_count)
        prev_edge, prev_count = e, c
    return None


def scalar(metrics: dict[str, list[tuple[dict[str, str], float]]], name: str) -> float | None:
    vals = [v for _, v in metrics.get(name, [])]
    return sum(vals) if vals else None


def server_evidence(url: str) -> dict[str, Any]:
    """What the emulator itself saw over its lifetime (one client run, warm-up included)."""
    m = prom(http_text(url + "/metrics"))
    ev: dict[str, Any] = {}
    ttft50 = hist_quantile(m, "sglang:time_to_first_token_seconds", 0.5)
    if ttft50 is not None:
        ev["server_ttft_p50_ms_hist"] = ttft50 * 1000
    for key, name in (("server_requests", "sglang:num_requests_total"),
                      ("server_generation_tokens", "sglang:generation_tokens_total"),
                      ("server_spec_verify_calls", "sglang:spec_verify_calls_total"),
                      ("server_ttft_count", "sglang:time_to_first_token_seconds_count"),
                      ("server_ttft_sum_s", "sglang:time_to_first_token_seconds_sum")):
        v = scalar(m, name)
        if v is not None:
            ev[key] = v
    if ev.get("server_ttft_count"):
        ev["server_ttft_mean_ms"] = ev["server_ttft_sum_s"] / ev["server_ttft_count"] * 1000
    if ev.get("server_spec_verify_calls"):
        ev["server_accept_length_lifetime"] = ev["server_generation_tokens"] / ev["server_spec_verify_calls"]
    info_text = http_text(url + "/server_info")
    if info_text:
        try:
            info = json.loads(info_text)
            st = (info.get("internal_states") or [{}])[0]
            if st.get("avg_spec_accept_length") is not None:
                ev["server_info_avg_spec_accept_length"] = st["avg_spec_accept_length"]
        except (ValueError, AttributeError, IndexError):
            pass
    return ev


# --------------------------------------------------------------------------- the two clients

@dataclass
class ClientRun:
    client: str
    profile: str
    c: int
    n: int
    cmd: list[str]
    emulator_cmd: list[str]
    url: str
    rc: int
    wall_s: float
    metrics: dict[str, Any] = field(default_factory=dict)
    server: dict[str, Any] = field(default_factory=dict)
    error: str = ""
    log: str = ""


def run_peer(a: argparse.Namespace, profile: str, c: int, n: int, out: Path, tag: str, rep: int) -> ClientRun:
    log = out / f"emulator-{tag}.log"
    jsonl = out / f"peer-{tag}.jsonl"
    with Emulator(profile, a.speed, a.emulator_seed, a.ground_truth, log) as emu:
        assert emu.url
        cmd = [str(PEER_PY), "-m", "sglang.bench_serving", "--backend", "sglang", "--base-url", emu.url,
               "--dataset-name", "random-ids", "--tokenize-prompt",
               "--random-input-len", str(a.input_len), "--random-output-len", str(a.output_len),
               "--random-range-ratio", "1.0", "--num-prompts", str(n), "--max-concurrency", str(c),
               "--request-rate", "inf", "--tokenizer", str(a.tokenizer), "--model", str(a.tokenizer),
               "--output-file", str(jsonl), "--output-details", "--warmup-requests", str(a.warmup),
               "--flush-cache", "--disable-tqdm", "--seed", str(a.seed + rep - 1), "--tag", tag]
        clog = out / f"peer-{tag}.log"
        t0 = time.monotonic()
        with open(clog, "w", encoding="utf-8") as fh:
            fh.write("$ " + shlex.join(cmd) + "\n")
            fh.flush()
            p = subprocess.run(cmd, cwd=ROOT, stdout=fh, stderr=subprocess.STDOUT, timeout=a.client_timeout)
        wall = time.monotonic() - t0
        run = ClientRun("peer", profile, c, n, cmd, emu.cmd, emu.url, p.returncode, wall, log=rel(clog))
        run.server = server_evidence(emu.url)
    if p.returncode != 0 or not jsonl.exists():
        run.error = f"peer exited {p.returncode}; log {rel(clog)}:\n{tail(clog)}"
        return run
    line = json.loads(jsonl.read_text(encoding="utf-8").splitlines()[-1])
    ttfts = [t for t, e in zip(line.get("ttfts") or [], line.get("errors") or []) if not e]
    run.metrics = {
        "output_throughput_tok_s": line["output_throughput"],
        "median_ttft_ms": line["median_ttft_ms"],
        "mean_ttft_ms": line["mean_ttft_ms"],
        "p99_ttft_ms": line["p99_ttft_ms"],
        "median_itl_ms": line["median_itl_ms"],
        "median_tpot_ms": line["median_tpot_ms"],
        "median_e2e_latency_ms": line["median_e2e_latency_ms"],
        "duration": line["duration"],
        "completed": line["completed"],
        "total_output_tokens": line["total_output_tokens"],
        "total_input_tokens": line["total_input_tokens"],
        "concurrency": line["concurrency"],
        "accept_length": line.get("accept_length"),
        "min_ttft_ms": min(ttfts) * 1000 if ttfts else None,
    }
    return run


def run_ours(a: argparse.Namespace, profile: str, c: int, n: int, out: Path, tag: str, store: Path,
             campaign: str) -> ClientRun:
    log = out / f"emulator-{tag}.log"
    runs_dir = store / "runs"
    before = set(runs_dir.glob("*.json")) if runs_dir.exists() else set()
    with Emulator(profile, a.speed, a.emulator_seed, a.ground_truth, log) as emu:
        assert emu.url
        cmd = [str(FINDINGS), "--store", str(store), "bench", "--url", emu.url, "--config", profile,
               "--campaign", campaign, "--workload", "xcheck", "--concurrency", str(c),
               "--num-prompts", str(n), "--input-len", str(a.input_len), "--output-len", str(a.output_len),
               "--prompts", "random-ids", "--api", "native", "--warmup", str(a.warmup), "--no-progress", "--create"]
        clog = out / f"ours-{tag}.log"
        t0 = time.monotonic()
        with open(clog, "w", encoding="utf-8") as fh:
            fh.write("$ " + shlex.join(cmd) + "\n")
            fh.flush()
            p = subprocess.run(cmd, cwd=ROOT, stdout=fh, stderr=subprocess.STDOUT, timeout=a.client_timeout)
        wall = time.monotonic() - t0
        run = ClientRun("ours", profile, c, n, cmd, emu.cmd, emu.url, p.returncode, wall, log=rel(clog))
        run.server = server_evidence(emu.url)
    new = sorted(set(runs_dir.glob("*.json")) - before) if runs_dir.exists() else []
    if p.returncode != 0 or not new:
        run.error = f"findings bench exited {p.returncode}; {len(new)} new run files; log {rel(clog)}:\n{tail(clog)}"
        if not new:
            return run
    pt = first_point(new[-1])
    m = pt["metrics"]
    keep = ("output_throughput_tok_s", "median_ttft_ms", "mean_ttft_ms", "p99_ttft_ms", "median_itl_ms",
            "median_tpot_ms", "median_e2e_latency_ms", "duration", "completed", "failed", "total_output_tokens",
            "total_input_tokens", "concurrency", "accept_length", "accept_length_metrics",
            "client_loop_lag_p99_ms", "ttft_client_error_p50_ms", "ttft_client_error_p99_ms")
    run.metrics = {k: m[k] for k in keep if k in m}
    ttfts = [t for t in (pt.get("requests") or {}).get("ttft_s", []) if t is not None]
    run.metrics["min_ttft_ms"] = min(ttfts) * 1000 if ttfts else None
    run.metrics["run_file"] = rel(new[-1])
    return run


# --------------------------------------------------------------------------- report

def fmt(x: Any, digits: int = 1) -> str:
    if x is None or (isinstance(x, float) and not math.isfinite(x)):
        return "-"
    return f"{x:.{digits}f}" if isinstance(x, (int, float)) else str(x)


def ratio(ours: Any, peer: Any) -> float | None:
    if not isinstance(ours, (int, float)) or not isinstance(peer, (int, float)) or peer == 0:
        return None
    return ours / peer


def med(runs: list[ClientRun], key: str) -> float | None:
    vals = [r.metrics[key] for r in runs if isinstance(r.metrics.get(key), (int, float))]
    return statistics.median(vals) if vals else None


def srv_med(runs: list[ClientRun], key: str) -> float | None:
    vals = [r.server[key] for r in runs if isinstance(r.server.get(key), (int, float))]
    return statistics.median(vals) if vals else None


def within(r: float | None) -> str:
    if r is None:
        return "n/a"
    return "yes" if abs(r - 1) <= TOLERANCE else "**no**"


def report(a: argparse.Namespace, results: list[tuple[str, int, int, list[ClientRun], list[ClientRun]]],
           out: Path, total_s: float) -> str:
    lines = [
        f"# Peer cross-check: `findings bench` vs `sglang.bench_serving` 0.5.23 (SIMULATED server)",
        "",
        f"Emulator speed: {a.speed if a.speed is not None else 1:g}x"
        + (" (absolute figures scaled; both clients see the same speed)" if a.speed not in (None, 1.0) else "")
        + f"; input/output {a.input_len}/{a.output_len} tokens; warm-up {a.warmup} requests per run; "
        f"repeats {a.repeats} (median shown); a fresh emulator per client run. Ratio = ours / peer. "
        +
        f"Total wall time {total_s:.0f} s. Emulator source: findings/emulator/*.py sha256 {emulator_hash()[:12]} "
        f"(git {git_head()[:10]}).",
        "",
        "| profile | C | N | peer tok/s | ours tok/s | ratio | within 5% | peer TTFT p50 ms | ours TTFT p50 ms "
        "| ratio | within 5% |",
        "|---|---:|---:|---:|---:|---:|:-:|---:|---:|---:|:-:|",
    ]
    for profile, c, n, peer, ours in results:
        pt, ot = med(peer, "output_throughput_tok_s"), med(ours, "output_throughput_tok_s")
        pf, of = med(peer, "median_ttft_ms"), med(ours, "median_ttft_ms")
        lines.append(f"| {profile} | {c} | {n} | {fmt(pt)} | {fmt(ot)} | {fmt(ratio(ot, pt), 3)} | "
                     f"{within(ratio(ot, pt))} | {fmt(pf)} | {fmt(of)} | {fmt(ratio(of, pf), 3)} | "
                     f"{within(ratio(of, pf))} |")
    lines += ["", "TTFT against the server's own clock (the emulator's /metrics histogram sum/count over the "
              "run: arrival (the server reading the request's first bytes) to the step that made its first token; with --warmup 0 it "
              "covers exactly the measured requests). Client overhead = client mean - server mean.", "",
              "| profile | C | client | client TTFT mean ms | server TTFT mean ms | client overhead ms "
              "| ours: ground-truth TTFT error p50 / p99 ms |",
              "|---|---:|---|---:|---:|---:|---:|"]
    for profile, c, _, peer, ours in results:
        for name, runs in (("peer", peer), ("ours", ours)):
            cm = med(runs, "mean_ttft_ms")
            sm = statistics.median([r.server["server_ttft_mean_ms"] for r in runs
                                    if "server_ttft_mean_ms" in r.server] or [math.nan])
            gt = (f"{fmt(med(runs, 'ttft_client_error_p50_ms'), 2)} / {fmt(med(runs, 'ttft_client_error_p99_ms'), 2)}"
                  if name == "ours" else "-")
            lines.append(f"| {profile} | {c} | {name} | {fmt(cm, 2)} | {fmt(sm, 2)} | "
                         f"{fmt(cm - sm if cm is not None and math.isfinite(sm) else None, 2)} | {gt} |")
    lines += ["", "Secondary figures (median over repeats):", "",
              "| profile | C | client | duration s | completed | output tokens | ITL p50 ms | TPOT p50 ms "
              "| e2e p50 ms | TTFT min ms | accept length (client) | accept length (server, lifetime) "
              "| client wall s |",
              "|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for profile, c, _, peer, ours in results:
        for name, runs in (("peer", peer), ("ours", ours)):
            acc = med(runs, "accept_length")
            lines.append(f"| {profile} | {c} | {name} | {fmt(med(runs, 'duration'), 2)} | "
                         f"{fmt(med(runs, 'completed'), 0)} | {fmt(med(runs, 'total_output_tokens'), 0)} | "
                         f"{fmt(med(runs, 'median_itl_ms'), 2)} | {fmt(med(runs, 'median_tpot_ms'), 2)} | "
                         f"{fmt(med(runs, 'median_e2e_latency_ms'))} | {fmt(med(runs, 'min_ttft_ms'))} | "
                         f"{fmt(acc, 3)} | {fmt(srv_med(runs, 'server_accept_length_lifetime'), 3)} | "
                         f"{fmt(statistics.median(r.wall_s for r in runs))} |")
    errors = [r for *_, peer, ours in results for r in peer + ours if r.error]
    if errors:
        lines += ["", "Errors:", ""]
        for r in errors:
            lines += [f"- {r.client} {r.profile} C={r.c}:", "", "```", r.error, "```", ""]
    lines += ["", "Exact commands (first run of each; the URL is the fresh emulator's):", ""]
    for profile, c, _, peer, ours in results:
        for r in (peer[:1] + ours[:1]):
            lines += [f"- {r.client} {profile} C={c}:", "", "```",
                      "# emulator: " + shlex.join(rel_cmd(r.emulator_cmd)),
                      shlex.join(rel_cmd(r.cmd)), "```", ""]
    text = "\n".join(lines) + "\n"
    (out / "crosscheck.md").write_text(text, encoding="utf-8")
    return text


def emulator_hash() -> str:
    import hashlib
    h = hashlib.sha256()
    for f in sorted((ROOT / "findings" / "emulator").glob("*.py")):
        h.update(f.name.encode() + b"\0" + f.read_bytes())
    return h.hexdigest()


def git_head() -> str:
    try:
        return subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True,
                              timeout=10).stdout.strip() or "?"
    except (OSError, subprocess.TimeoutExpired):
        return "?"


def rel_cmd(cmd: list[str]) -> list[str]:
    return [rel(Path(x)) if x.startswith(str(ROOT)) else x for x in cmd]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--profile", action="append", default=None,
                    help="emulator profile (repeatable; default baseline)")
    ap.add_argument("--concurrency", default="1,8,32", help="comma-separated C list (default 1,8,32)")
    ap.add_argument("--input-len", type=int, default=128)
    ap.add_argument("--output-len", type=int, default=128)
    ap.add_argument("--num-prompts", type=int, default=None, help="requests per point (default max(4*C, 32))")
    ap.add_argument("--warmup", type=int, default=0,
                    help="warm-up requests per client run, both clients (default 0: the emulator needs none, "
                         "and the server-side TTFT then covers exactly the measured requests)")
    ap.add_argument("--repeats", type=int, default=1, help="client runs per point; the median is reported")
    ap.add_argument("--speed", type=float, default=None, help="emulator --speed (default: not passed, i.e. 1x)")
    ap.add_argument("--ground-truth", action=argparse.BooleanOptionalAction, default=True,
                    help="run the emulator with --ground-truth (ours then reports its TTFT error; the peer "
                         "ignores the extra meta_info keys)")
    ap.add_argument("--emulator-seed", type=int, default=0)
    ap.add_argument("--seed", type=int, default=1,
                    help="peer --seed for the first repeat; repeat r uses seed+r-1, so that repeats draw "
                         "different prompts (the emulator seeds a request's acceptance from its prompt when it "
                         "has no rid, and the peer sends none)")
    ap.add_argument("--tokenizer", type=Path, default=ROOT / "build" / "peer" / "tokenizer")
    ap.add_argument("--out", type=Path, default=None, help="output dir (default build/peer/out/<stamp>)")
    ap.add_argument("--client-timeout", type=float, default=600.0)
    ap.add_argument("--wait-emulator", type=float, default=0.0,
                    help="seconds to wait for findings/emulator/__main__.py to appear (polled each minute)")
    ap.add_argument("--order", choices=("peer-first", "ours-first", "alternate"), default="alternate")
    a = ap.parse_args(argv)
    profiles = a.profile or ["baseline"]
    cs = [int(x) for x in a.concurrency.split(",") if x.strip()]
    if not (a.tokenizer / "tokenizer.json").is_file():
        raise SystemExit(f"crosscheck: no tokenizer at {a.tokenizer}; run "
                         f"benchmarks/peer/peer-python benchmarks/peer/make_tokenizer.py")
    if not (ROOT / "build" / "peer" / "venv" / "bin" / "python").exists() and not os.environ.get("PEER_VENV"):
        raise SystemExit("crosscheck: no peer venv; run bash benchmarks/peer/setup.sh")
    wait_for_emulator_module(a.wait_emulator)
    stamp = time.strftime("%Y%m%d-%H%M%S", time.gmtime())
    out = (a.out or ROOT / "build" / "peer" / "out" / stamp).resolve()
    out.mkdir(parents=True, exist_ok=True)
    store = out / "store"
    campaign = f"peer-xcheck-{stamp}"
    t0 = time.monotonic()
    results = []
    k = 0
    for profile in profiles:
        for c in cs:
            n = a.num_prompts or max(4 * c, 32)
            peer_runs: list[ClientRun] = []
            our_runs: list[ClientRun] = []
            for rep in range(1, a.repeats + 1):
                tag = f"{profile}-c{c}-r{rep}"
                first_peer = a.order == "peer-first" or (a.order == "alternate" and k % 2 == 0)
                k += 1
                for client in (("peer", "ours") if first_peer else ("ours", "peer")):
                    if client == "peer":
                        r = run_peer(a, profile, c, n, out, tag, rep)
                        peer_runs.append(r)
                    else:
                        r = run_ours(a, profile, c, n, out, tag, store, campaign)
                        our_runs.append(r)
                    status = "ERROR" if r.error else "ok"
                    print(f"[{time.monotonic() - t0:6.0f}s] {profile} C={c} N={n} rep {rep} {client}: {status} "
                          f"{fmt(r.metrics.get('output_throughput_tok_s'))} tok/s, "
                          f"TTFT p50 {fmt(r.metrics.get('median_ttft_ms'))} ms, wall {r.wall_s:.0f} s",
                          flush=True)
                    if r.error:
                        print(r.error, file=sys.stderr, flush=True)
            results.append((profile, c, n, peer_runs, our_runs))
    total = time.monotonic() - t0
    text = report(a, results, out, total)
    (out / "crosscheck.json").write_text(json.dumps(
        {"args": {k2: (str(v) if isinstance(v, Path) else v) for k2, v in vars(a).items()},
         "total_s": total, "emulator_sha256": emulator_hash(), "git_head": git_head(),
         "points": [{"profile": p, "c": c, "n": n, "peer": [r.__dict__ for r in pr],
                     "ours": [r.__dict__ for r in orr]} for p, c, n, pr, orr in results]},
        indent=1, default=str) + "\n", encoding="utf-8")
    print(text)
    print(f"written: {rel(out / 'crosscheck.md')}, {rel(out / 'crosscheck.json')}")
    bad = any(r.error for *_, pr, orr in results for r in pr + orr)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
