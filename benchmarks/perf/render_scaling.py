"""Render scaling: how `findings render` and `findings conclusions` grow with the store.

Builds synthetic stores of N points, written as real run files through
findings.store: one nightly campaign a day (dated, in order), baseline plus 2-4
of 5 candidate configs that come and go over the years, 2-3 workloads, C in
1..250, a fifth of the campaigns with 2 repeats, one run file per (campaign,
config) of source "runner", runner-like metrics (a few points trip the
validity gates), and about 5% of the points with per-request records
(64-256 requests, events of 1-4 tokens). Then it times each command cold (a
new process per command) and reads the child's peak RSS.

    .venv/bin/python benchmarks/perf/render_scaling.py [--sizes 1000,10000,100000] [--repeats 3]

Prints one JSON row per (size, command):
{size, command, wall_s, peak_rss_mib, store_mib, runs, points_with_requests}.

Importable: ``measure(sizes, workdir) -> list[dict]``, ``measure_bench_shape``,
``measure_commands`` (deploy, plan, store check and export on one store),
``measure_diff`` (`findings diff` over a git repository of one)
and ``build_store(folder, n)``.
Stores are cached in the work folder (default build/perf/render; keyed by
size, seed and generator version); ``--rebuild`` rebuilds them. The settings
file written there leaves ``detail_campaigns`` at its default. The page
cache is not dropped, so "cold" means a fresh interpreter, not a cold disk.
"""

from __future__ import annotations

import argparse
import datetime as dt
import hashlib
import json
import os
import random
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from findings import store as store_mod  # noqa: E402
from findings.core.model import THROUGHPUT, Campaign, Point, Run, Scalar  # noqa: E402
from findings.document.cache import PARALLEL_FILES  # noqa: E402
from findings.store.schema import SCHEMA_VERSION, point_id  # noqa: E402

#: Bump when the generated shape changes, so cached stores are rebuilt
#: (2: store schema 4, per-request records in sidecars; 3: each run's series written with it, D109).
GENERATOR_VERSION = 3
DEFAULT_SIZES = (1000, 10000, 100000)
CONCURRENCIES = (1, 2, 4, 8, 16, 32, 64, 128, 250)
WORKLOADS = {  # name -> (input_len, output_len, base tok/s at saturation)
    "sharegpt-chat": (512, 256, 2400.0),
    "random-1024-512": (1024, 512, 2100.0),
    "code-2048-256": (2048, 256, 1700.0),
}
#: config -> (speculative algorithm, topk, speed-up at C=1, speed-up at C=250, first day, last day)
CONFIGS: dict[str, tuple[str, int, float, float, int, int]] = {
    "baseline": ("none", 0, 1.0, 1.0, 0, 10**6),
    "eagle3-topk1-v1": ("EAGLE3", 1, 1.25, 0.88, 0, 500),
    "eagle3-topk4-v1": ("EAGLE3", 4, 1.35, 0.80, 0, 350),
    "eagle3-topk1-v2": ("EAGLE3", 1, 1.32, 0.95, 200, 10**6),
    "eagle3-topk4-v2": ("EAGLE3", 4, 1.40, 0.86, 420, 10**6),
    "ngram-n4": ("NGRAM", 1, 1.10, 0.97, 120, 10**6),
}
REQUEST_FRACTION = 0.05  # of points carry per-request records
START = dt.date(2023, 1, 2)
#: Runs are written in batches of about this many points (one read of the store per batch).
BATCH_POINTS = 10000


def _campaign_plan(rng: random.Random, day: int) -> tuple[list[str], list[str], int]:
    """Configs, workloads and repeats of one nightly campaign."""
    alive = [n for n, spec in CONFIGS.items() if n != "baseline" and spec[4] <= day <= spec[5]]
    k = min(len(alive), rng.choice((2, 3, 3, 4)))
    configs = ["baseline"] + sorted(rng.sample(alive, k))
    names = sorted(WORKLOADS)
    workloads = names if rng.random() < 0.5 else sorted(rng.sample(names, 2))
    repeats = 2 if rng.random() < 0.2 else 1
    return configs, workloads, repeats


def _throughput(rng: random.Random, config: str, workload: str, c: int, day: int, drift: float) -> float:
    _, _, low, high, _, _ = CONFIGS[config]
    top = WORKLOADS[workload][2] * (1.0 + 0.08 * (day // 180))  # a software upgrade every half year
    base = top * c / (c + 24.0)
    frac = (len(CONCURRENCIES) - 1 - CONCURRENCIES.index(c)) / (len(CONCURRENCIES) - 1)
    speedup = high + (low - high) * frac
    return base * speedup * drift * rng.gauss(1.0, 0.015)


def _metrics(rng: random.Random, config: str, workload: str, c: int, tput: float, n_req: int) -> dict[str, float]:
    in_len, out_len, _ = WORKLOADS[workload]
    spec = CONFIGS[config][0] != "none"
    per_user = tput / c
    tpot = 1000.0 / per_user
    ttft = 40.0 + 0.9 * in_len / 100.0 * (1 + c / 16.0)
    e2e = ttft + tpot * (out_len - 1)
    duration = n_req * out_len / tput
    failed = float(rng.random() < 0.01) * rng.randint(1, max(1, n_req // 8))
    lag = rng.uniform(1.0, 8.0) if rng.random() > 0.005 else rng.uniform(30.0, 60.0)
    m = {
        THROUGHPUT: tput,
        "duration": duration,
        "completed": float(n_req - failed),
        "failed": failed,
        "planned": float(n_req),
        "request_throughput": (n_req - failed) / duration,
        "total_output_tokens": float((n_req - failed) * out_len),
        "total_input_tokens": float((n_req - failed) * in_len),
        "input_throughput": (n_req - failed) * in_len / duration,
        "concurrency": c * rng.uniform(0.9, 1.0),
        "client_loop_lag_p50_ms": lag / 3,
        "client_loop_lag_p99_ms": lag,
        "client_loop_lag_max_ms": lag * 1.5,
    }
    for name, value in (("ttft", ttft), ("tpot", tpot), ("itl", tpot * 0.97), ("e2e_latency", e2e)):
        m[f"mean_{name}_ms"] = value * 1.05
        m[f"median_{name}_ms"] = value
        m[f"p90_{name}_ms"] = value * 1.4
        m[f"p99_{name}_ms"] = value * rng.uniform(1.8, 2.6)
    if spec:
        m["accept_length"] = rng.uniform(2.2, 3.1)
        m["accept_length_metrics"] = m["accept_length"] * rng.uniform(0.98, 1.02)
    return {k: round(v, 4) for k, v in m.items()}


def _requests(rng: random.Random, c: int, n_req: int, tpot_ms: float, ttft_ms: float) -> dict[str, Any]:
    """Per-request columns as the runner writes them (bench/metrics.py raw_columns)."""
    cols: dict[str, list[Any]] = {k: [] for k in (
        "sent_s", "ttft_s", "e2e_s", "input_len", "output_len", "event_s", "event_tokens", "error",
        "error_type", "spec_verify_ct", "finish_reason")}
    slot_free = [0.0] * c
    for i in range(n_req):
        slot = i % c
        sent = slot_free[slot] + rng.uniform(0.0, 0.002)
        out = rng.randint(16, 48)
        first = ttft_ms / 1000 * rng.uniform(0.8, 1.3)
        times, counts, t, n = [], [], first, 0
        while n < out:
            n = min(out, n + rng.randint(1, 4))
            times.append(round(t, 6))
            counts.append(n)
            t += tpot_ms / 1000 * rng.uniform(1.5, 3.5)
        end = times[-1]
        slot_free[slot] = sent + end
        cols["sent_s"].append(round(sent, 6))
        cols["ttft_s"].append(round(first, 6))
        cols["e2e_s"].append(round(end, 6))
        cols["input_len"].append(rng.randint(200, 1200))
        cols["output_len"].append(out)
        cols["event_s"].append(times)
        cols["event_tokens"].append(counts)
        cols["error"].append(None)
        cols["error_type"].append(None)
        cols["spec_verify_ct"].append(len(times))
        cols["finish_reason"].append("length")
    return cols


def build_store(folder: Path, n_points: int, seed: int = 0, request_fraction: float = REQUEST_FRACTION,
                shape: str = "matrix") -> dict[str, int]:
    """A synthetic store of exactly ``n_points`` points: one nightly campaign a
    day, one run file per (campaign, config), as `findings bench` with a matrix
    per config would write (``shape="matrix"``), or one run file per point
    (``shape="bench"``: what `findings bench --url` writes, one point a
    call). The points are the same either way. Deterministic for a given seed."""
    rng = random.Random(seed)
    made = 0
    day = 0
    n_runs = 0
    with_requests = 0
    pending: list[Run] = []
    while made < n_points:
        date = (START + dt.timedelta(days=day)).isoformat()
        campaign = Campaign(name=f"nightly-{date}", date=date, order=None)
        configs, workloads, repeats = _campaign_plan(rng, day)
        drift = rng.gauss(1.0, 0.02)
        environment: dict[str, Scalar] = {
            "gpu": "8x NVIDIA RTX PRO 6000 Blackwell", "driver": f"580.{65 + day // 90}",
            "sglang_version": f"0.5.{20 + day // 180}", "tp_size": 8, "host": f"bench-{1 + (day // 365) % 2}"}
        runs: list[Run] = []
        for config in configs:
            if made >= n_points:
                break
            algo, topk, *_ = CONFIGS[config]
            facts: dict[str, Scalar] = {"speculative_algorithm": algo, "tp_size": 8,
                                        "launch": f"python -m sglang.launch_server --tp 8 --config {config}"}
            if topk:
                facts["speculative_eagle_topk"] = topk
                facts["speculative_num_steps"] = 3
            points: list[Point] = []
            content = f"{seed}/{campaign.name}/{config}"
            run_id = f"bench-{date.replace('-', '')}-{hashlib.sha256(content.encode()).hexdigest()[:10]}"
            for workload in workloads:
                for c in CONCURRENCIES:
                    for repeat in range(repeats):
                        if made >= n_points:
                            break
                        n_req = rng.randint(64, 256)
                        tput = _throughput(rng, config, workload, c, day, drift)
                        metrics = _metrics(rng, config, workload, c, tput, n_req)
                        requests = None
                        if rng.random() < request_fraction:
                            requests = _requests(rng, c, n_req, metrics["median_tpot_ms"], metrics["median_ttft_ms"])
                            with_requests += 1
                        in_len, out_len, _ = WORKLOADS[workload]
                        params: dict[str, Scalar] = {"dataset_name": "random", "random_input_len": in_len,
                                                     "random_output_len": out_len, "num_prompts": n_req,
                                                     "api": "native", "transport": "aiohttp", "warmup": 2,
                                                     "request_rate": "inf", "repeat": repeat + 1}
                        points.append(Point(id=point_id(run_id, len(points)), run_id=run_id, campaign=campaign.name,
                                            config=config, workload=workload, concurrency=c, metrics=metrics,
                                            source="runner", source_file=None, source_line=None,
                                            workload_params=params, requests=requests))
                        made += 1
            if not points:
                continue
            groups = [(run_id, content, points)] if shape == "matrix" else [
                (f"{run_id}-{i:04d}", f"{content}/{i}", [p._replace(id=point_id(f"{run_id}-{i:04d}", 0),
                                                                   run_id=f"{run_id}-{i:04d}")])
                for i, p in enumerate(points)]
            for rid, key, pts in groups:
                runs.append(Run(schema_version=SCHEMA_VERSION, run_id=rid, source="runner",
                                importer="findings-bench", importer_version="1", tool_version="0.1.0",
                                created_at=f"{date}T03:00:00Z", source_file=None,
                                source_sha256=hashlib.sha256(key.encode()).hexdigest(),
                                environment=environment, campaigns=(campaign,), configs={config: facts},
                                points=tuple(pts),
                                provenance={"url": "http://127.0.0.1:30000", "started_at": f"{date}T01:00:00Z",
                                            "ended_at": f"{date}T03:00:00Z", "flush_cache": True}))
        pending.extend(runs)
        n_runs += len(runs)
        day += 1
        if sum(len(r.points) for r in pending) >= BATCH_POINTS or made >= n_points:
            _write(folder, pending)
            pending = []
    if pending:
        _write(folder, pending)
    return {"points": made, "runs": n_runs, "campaigns": day, "points_with_requests": with_requests}


def _write(folder: Path, runs: list[Run]) -> None:
    store_mod.add_runs(folder, runs, create=True)  # one check of the store per batch, each file atomic


def _store_bytes(folder: Path) -> int:
    """Run files and their sidecars (the store's derived index and lock left out)."""
    return sum(p.stat().st_size for p in (folder / "runs").iterdir() if not p.name.startswith("."))


def _store_mib(folder: Path) -> float:
    return _store_bytes(folder) / 2**20


def _cached_store(workdir: Path, size: int, seed: int, rebuild: bool,
                  request_fraction: float = REQUEST_FRACTION, shape: str = "matrix") -> tuple[Path, dict[str, int]]:
    folder = workdir / (f"store-{size}" if request_fraction == REQUEST_FRACTION
                        else f"store-{size}-requests-{request_fraction:g}")
    if shape != "matrix":
        folder = folder.with_name(f"{folder.name}-{shape}")
    marker = folder / "synthetic.json"
    key = {"size": size, "seed": seed, "generator": GENERATOR_VERSION, "request_fraction": request_fraction,
           **({"shape": shape} if shape != "matrix" else {})}
    if not rebuild and marker.is_file():
        info = json.loads(marker.read_text())
        if info.get("key") == key:
            return folder, info["stats"]
    if folder.exists():
        shutil.rmtree(folder)
    folder.mkdir(parents=True)
    t0 = time.perf_counter()
    stats = build_store(folder, size, seed, request_fraction, shape)
    print(f"built {folder}: {stats} in {time.perf_counter() - t0:.1f} s", file=sys.stderr)
    marker.write_text(json.dumps({"key": key, "stats": stats}))
    return folder, stats


def _settings(workdir: Path) -> Path:
    path = workdir / "findings.toml"
    path.write_text(
        "[findings]\n"
        'title = "Render scaling (synthetic store)"\n'
        'baseline = "baseline"\n'
        f"templates = {json.dumps(str(REPO / 'templates'))}\n"
        'template = "eagle-fast-verify.md.j2"\n'
    )
    return path


def _findings_cmd() -> list[str]:
    script = Path(sys.executable).parent / "findings"
    return [str(script)] if script.is_file() else [sys.executable, "-m", "findings"]


#: Runs a command and writes its peak RSS (KiB) to a file. Linux keeps a
#: process's peak RSS across exec, and a child started from a large
#: process (perf.py after its client section: 160 MiB) would report at
#: least that much; the grandchild of this small wrapper starts afresh.
#: It also times the command itself (its own start-up left out).
_PEAK = ("import os, subprocess, sys, time\n"
         "t0 = time.perf_counter()\n"
         "p = subprocess.Popen(sys.argv[2:])\n"
         "_, status, usage = os.wait4(p.pid, 0)\n"
         "open(sys.argv[1], 'w').write(f'{time.perf_counter() - t0} {usage.ru_maxrss}')\n"
         "sys.exit(os.waitstatus_to_exitcode(status))\n")


def best_of(repeats: int, argv: list[str], cwd: Path, stdout: Path,
            env: dict[str, str] | None = None) -> tuple[float, float]:
    """The fastest of ``repeats`` fresh processes: (wall seconds, that run's peak RSS MiB)."""
    return min((timed(argv, cwd, stdout, env) for _ in range(max(1, repeats))), key=lambda r: r[0])


def timed(argv: list[str], cwd: Path, stdout: Path, env: dict[str, str] | None = None) -> tuple[float, float]:
    """Run one command in a fresh process: (wall seconds, peak RSS MiB of the command)."""
    peak = stdout.with_suffix(".peak")
    with open(stdout, "wb") as out, open(stdout.with_suffix(".err"), "wb") as err:
        proc = subprocess.run([sys.executable, "-c", _PEAK, str(peak), *argv], cwd=cwd, stdout=out, stderr=err,
                              env={**os.environ, **(env or {})})
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} failed ({proc.returncode}): "
                           f"{stdout.with_suffix('.err').read_text()[-2000:]}")
    wall, kib = peak.read_text().split()
    return float(wall), int(kib) / 1024  # Linux: KiB


#: Environment of a command run without the render cache (cold: it reads every run file).
NO_CACHE = {"FINDINGS_CACHE": "off"}

#: Every run file read and parsed, nothing else, as a render without the cache reads them (D160).
PARSE_FLOOR = Path(__file__).resolve().parent / "parse_floor.py"


def parse_floor(folder: Path, workdir: Path, name: str, repeats: int) -> tuple[float, float]:
    """``parse_floor.py`` on ``folder``'s run files, in a fresh process: (wall s, peak RSS MiB)."""
    return best_of(repeats, [sys.executable, str(PARSE_FLOOR), str(folder / "runs"), "--split",
                             str(PARALLEL_FILES)], workdir, workdir / f"{name}.out")


def _last_campaign(folder: Path) -> tuple[list[Path], list[Path]]:
    """The store's files: (those of every campaign but the last, the last's)."""
    files = sorted(p for p in (folder / "runs").iterdir() if not p.name.startswith("."))
    last = max(p.name.split("-")[1] for p in files)
    return [p for p in files if p.name.split("-")[1] != last], [p for p in files if p.name.split("-")[1] == last]


def _link(files: list[Path], runs: Path) -> None:
    runs.mkdir(parents=True, exist_ok=True)
    for p in files:
        os.link(p, runs / p.name)


def write_latency(folder: Path, seed: int, writes: int = 4) -> float:
    """Median seconds of ``store.add_run`` of one new run (a point of a new
    campaign) into the store, in this process, through the store's index
    (brought up to date first, outside the timing); the runs written are
    removed afterwards and the index put back as it was before them. The
    index rebuilds itself from every run file when one it knows has gone
    (findings/store/index.py), which took 49 s of each `make perf` at 1M
    points (D179)."""
    from findings.store import index as storeindex
    with store_mod.locked(folder), storeindex.open_for_write(folder):
        pass  # (any catching up on the files done here)
    saved = storeindex.path(folder)
    kept = saved.with_name(saved.name + ".perf-write")
    shutil.copy2(saved, kept)
    try:
        return _write_latency(folder, seed, writes)
    finally:
        with store_mod.locked(folder):
            os.replace(kept, saved)  # its stamp then differs, and no run it knows is gone: no rebuild


def _write_latency(folder: Path, seed: int, writes: int) -> float:
    rng = random.Random(seed + 7)
    times = []
    written: list[Path] = []
    for i in range(writes):
        run_id = f"perf-write-{seed}-{i}-{rng.getrandbits(40):010x}"
        campaign = Campaign(name=f"write-probe-{run_id}", date="2099-01-01", order=None)
        metrics = _metrics(rng, "baseline", "sharegpt-chat", 8, 900.0, 128)
        point = Point(id=point_id(run_id, 0), run_id=run_id, campaign=campaign.name, config="baseline",
                      workload="sharegpt-chat", concurrency=8, metrics=metrics, source="runner", source_file=None,
                      source_line=None, requests=_requests(rng, 8, 64, metrics["median_tpot_ms"],
                                                           metrics["median_ttft_ms"]))
        run = Run(schema_version=SCHEMA_VERSION, run_id=run_id, source="runner", importer="findings-bench",
                  importer_version="1", tool_version="0.1.0", created_at="2099-01-01T00:00:00Z", source_file=None,
                  source_sha256=hashlib.sha256(run_id.encode()).hexdigest(), environment={},
                  campaigns=(campaign,), configs={"baseline": {"speculative_algorithm": "none"}}, points=(point,))
        t0 = time.perf_counter()
        written.append(store_mod.add_run(folder, run))
        times.append(time.perf_counter() - t0)
    for path in written:
        path.unlink()
        store_mod.sidecar_path(folder, path.stem).unlink(missing_ok=True)
    return sorted(times)[len(times) // 2]


def measure(sizes: list[int] | tuple[int, ...] = DEFAULT_SIZES, workdir: Path | str = "build/perf/render",
            seed: int = 0, repeats: int = 1, rebuild: bool = False,
            request_fraction: float = REQUEST_FRACTION) -> list[dict[str, Any]]:
    """Rows {size, command, wall_s, peak_rss_mib, store_mib, bytes_per_point, runs,
    points_with_requests}; wall_s is the best of ``repeats`` fresh processes,
    peak RSS that run's. Commands:

    - ``render`` and ``conclusions``: without the render cache (every run file read);
    - ``render-cold-cache``: the store less its last campaign, into an empty cache;
    - ``render-new-campaign``: then with the last campaign's run files added
      (the earlier runs from the cache, the document derived again);
    - ``render-warm``: then again, nothing changed;
    - ``parse-floor``: every run file read and parsed, nothing else (parse_floor.py, D160);
    - ``write``: ``store.add_run`` of one run into the whole store (in process, median of 4).
    """
    workdir = Path(workdir).resolve()
    workdir.mkdir(parents=True, exist_ok=True)
    settings = _settings(workdir)
    rows = []
    for size in sizes:
        folder, stats = _cached_store(workdir, size, seed, rebuild, request_fraction)
        common = {"store_mib": round(_store_mib(folder), 1),
                  "bytes_per_point": round(_store_bytes(folder) / max(1, stats["points"])),
                  "runs": stats["runs"], "points_with_requests": stats["points_with_requests"]}

        def row(name: str, wall: float, rss: float | None) -> None:
            rows.append({"size": size, "command": name, "wall_s": round(wall, 3),
                         "peak_rss_mib": round(rss, 1) if rss is not None else None, **common})

        base = _findings_cmd() + ["--store", str(folder), "--settings", str(settings)]
        commands = {
            "render": base + ["render", "--output", str(workdir / f"doc-{size}.md")],
            "conclusions": base + ["conclusions", "--json"],
        }
        for name, argv in commands.items():
            row(name, *best_of(repeats, argv, workdir, workdir / f"{name}-{size}.out", NO_CACHE))
        row("parse-floor", *parse_floor(folder, workdir, f"parse-floor-{size}", repeats))
        # The cache: the store less its last campaign, then the campaign added.
        grown = workdir / f"grown-{size}"
        cache = workdir / f"cache-{size}"
        for path in (grown, cache):
            if path.exists():
                shutil.rmtree(path)
        earlier, last = _last_campaign(folder)
        _link(earlier, grown / "runs")
        env = {"FINDINGS_CACHE_DIR": str(cache)}
        argv = _findings_cmd() + ["--store", str(grown), "--settings", str(settings), "render", "--output",
                                  str(workdir / f"doc-{size}-grown.md")]
        row("render-cold-cache", *timed(argv, workdir, workdir / f"render-cold-{size}.out", env))
        _link(last, grown / "runs")
        row("render-new-campaign", *timed(argv, workdir, workdir / f"render-new-{size}.out", env))
        row("render-warm", *best_of(repeats, argv, workdir, workdir / f"render-warm-{size}.out", env))
        cached = (workdir / f"doc-{size}-grown.md").read_text().replace(grown.name, folder.name)
        if cached != (workdir / f"doc-{size}.md").read_text():
            raise RuntimeError(f"the cached render of the {size}-point store differs from the uncached one")
        shutil.rmtree(grown)
        shutil.rmtree(cache)
        row("write", write_latency(folder, seed), None)
    return rows


#: The store's other readers, each a new process without the render cache,
#: as CI on a fresh clone runs them (issue 38, D163, D164).
COMMANDS = {
    "deploy": ["deploy", "--json"],
    "plan": ["plan"],
    "store-check": ["store", "check"],
    "export-csv": ["export", "--force", "--output", "{out}"],
}


def measure_commands(size: int, workdir: Path | str = "build/perf/render", seed: int = 0,
                     repeats: int = 1) -> list[dict[str, Any]]:
    """``COMMANDS`` on the ``size``-point store: rows {size, command, wall_s,
    peak_rss_mib} (the best of ``repeats`` fresh processes)."""
    workdir = Path(workdir).resolve()
    workdir.mkdir(parents=True, exist_ok=True)
    settings = _settings(workdir)
    folder, _ = _cached_store(workdir, size, seed, False, REQUEST_FRACTION)
    rows = []
    for name, args in COMMANDS.items():
        argv = _findings_cmd() + ["--store", str(folder), "--settings", str(settings),
                                  *(a.format(out=workdir / f"{name}-{size}.csv") for a in args)]
        wall, rss = best_of(repeats, argv, workdir, workdir / f"{name}-{size}.out", NO_CACHE)
        rows.append({"size": size, "command": name, "wall_s": round(wall, 3), "peak_rss_mib": round(rss, 1)})
    return rows


def _git(repo: Path, *args: str) -> None:
    env = {**os.environ, "GIT_CONFIG_GLOBAL": os.devnull, "GIT_CONFIG_NOSYSTEM": "1"}
    subprocess.run(["git", "-c", "user.name=perf", "-c", "user.email=perf@localhost", "-c", "commit.gpgsign=false",
                    *args], cwd=repo, env=env, check=True, capture_output=True, timeout=600)


def _diff_repo(workdir: Path, size: int, folder: Path) -> Path:
    """A git repository of ``folder``'s store: the store less its last
    campaign in one commit, the last campaign in the next (what a pull
    request adding a nightly campaign looks like). Built once per store
    (keyed by its synthetic.json) in ``workdir``."""
    repo = workdir / f"diffrepo-{size}"
    key = (folder / "synthetic.json").read_text()
    marker = repo / ".perf-built"
    if marker.is_file() and marker.read_text() == key:
        return repo
    if repo.exists():
        shutil.rmtree(repo)
    repo.mkdir(parents=True)
    _git(repo, "init", "-q", "-b", "main")
    (repo / "findings.toml").write_text(_settings(workdir).read_text() + 'store = "store"\n')
    (repo / ".gitignore").write_text(".perf-built\n")
    earlier, last = _last_campaign(folder)
    _link(earlier, repo / "store" / "runs")
    _git(repo, "add", "-A")
    _git(repo, "commit", "-q", "-m", "the store")
    _link(last, repo / "store" / "runs")
    _git(repo, "add", "-A")
    _git(repo, "commit", "-q", "-m", "a new campaign")
    marker.write_text(key)
    return repo


def measure_diff(size: int, workdir: Path | str = "build/perf/render", seed: int = 0,
                 repeats: int = 1) -> dict[str, Any]:
    """``findings diff HEAD~1 HEAD`` in a git repository of the ``size``-point
    store whose last commit adds its last campaign (D165): a row {size,
    command, wall_s, peak_rss_mib}."""
    workdir = Path(workdir).resolve()
    folder, _ = _cached_store(workdir, size, seed, False, REQUEST_FRACTION)
    repo = _diff_repo(workdir, size, folder)
    argv = _findings_cmd() + ["--settings", str(repo / "findings.toml"), "diff", "HEAD~1", "HEAD"]
    wall, rss = best_of(repeats, argv, repo, workdir / f"diff-{size}.out", NO_CACHE)
    return {"size": size, "command": "diff", "wall_s": round(wall, 3), "peak_rss_mib": round(rss, 1)}


def measure_bench_shape(size: int, workdir: Path | str = "build/perf/render", seed: int = 0,
                        repeats: int = 1) -> list[dict[str, Any]]:
    """``render`` without the cache of the same points stored one run file per
    point, as `findings bench --url` writes them (command ``render-bench-shape``)."""
    workdir = Path(workdir).resolve()
    workdir.mkdir(parents=True, exist_ok=True)
    settings = _settings(workdir)
    folder, stats = _cached_store(workdir, size, seed, False, REQUEST_FRACTION, shape="bench")
    argv = _findings_cmd() + ["--store", str(folder), "--settings", str(settings), "render", "--output",
                              str(workdir / f"doc-{size}-bench.md")]
    common = {"store_mib": round(_store_mib(folder), 1),
              "bytes_per_point": round(_store_bytes(folder) / max(1, stats["points"])), "runs": stats["runs"],
              "points_with_requests": stats["points_with_requests"]}
    best = best_of(repeats, argv, workdir, workdir / f"render-bench-{size}.out", NO_CACHE)
    floor = parse_floor(folder, workdir, f"parse-floor-bench-{size}", repeats)
    return [{"size": size, "command": command, "wall_s": round(wall, 3), "peak_rss_mib": round(rss, 1), **common}
            for command, (wall, rss) in (("render-bench-shape", best), ("parse-floor-bench-shape", floor))]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", default=",".join(str(s) for s in DEFAULT_SIZES),
                    help="store sizes in points, comma-separated")
    ap.add_argument("--workdir", default=str(REPO / "build" / "perf" / "render"),
                    help="where stores, settings and outputs go")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--repeats", type=int, default=1, help="fresh processes per command; the fastest is kept")
    ap.add_argument("--rebuild", action="store_true", help="rebuild cached stores")
    ap.add_argument("--request-fraction", type=float, default=REQUEST_FRACTION,
                    help="share of points with per-request records")
    args = ap.parse_args(argv)
    sizes = [int(s) for s in args.sizes.split(",") if s.strip()]
    for row in measure(sizes, args.workdir, args.seed, args.repeats, args.rebuild, args.request_fraction):
        print(json.dumps(row), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
