"""The store survives SIGKILL and concurrent writers: real processes, real signals.

- Kills: ``findings ingest table|sglang-bench`` and ``findings bench`` (attach
  mode, against an emulator) are killed with SIGKILL at random moments
  (seeded). After every kill the store loads, every non-temporary run file
  parses, a finished ingest is complete, a killed one wrote all of its file or
  nothing, and no stored file changed.
- Concurrent writers: several processes ingest different files (and, with
  --skip-existing, the same shared files) into one store while a
  ``findings bench`` writes into it and a reader keeps loading it. Afterwards
  every record is there exactly once.

Sizes: 40 ingest kills, 8 bench kills, 3 writers x 10 ingests by default (about
a minute and a half on two cores); ``FINDINGS_SOAK=1`` runs 500, 60 and
4 writers x 40. The figures are printed by the last test (``pytest -s``) and
written to build/durability-count.txt (build/durability-count-soak.txt under
FINDINGS_SOAK=1).

Kill timing: a ``findings`` process spends most of its life importing Python
modules, so a delay of 0-150 ms after the start always lands before the store
is touched. A quarter of the kills do exactly that; the other three quarters
land within +-75 ms of the moment the run file appears, estimated as the test
goes (a staircase: later after a kill that came before the write, earlier
after one that came after it), so they hit the lock, the temporary file, the
link and the exit.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import os
import random
import signal
import statistics
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any, Iterator

import pytest

from findings.importers import ingest
from findings import store as store_mod
from findings.store.schema import SIDECAR_SUFFIX, records_in

ROOT = Path(__file__).resolve().parent.parent
PY = sys.executable
SOAK = os.environ.get("FINDINGS_SOAK") == "1"
COUNT_FILE = ROOT / "build" / ("durability-count-soak.txt" if SOAK else "durability-count.txt")
SEED = int(os.environ.get("FINDINGS_DURABILITY_SEED", "20261130"))

INGEST_KILLS = 500 if SOAK else 40
BENCH_KILLS = 60 if SOAK else 8
WRITERS, INGESTS_PER_WRITER = (4, 40) if SOAK else (3, 10)
SHARED_EVERY = 5  # every 5th step, all writers also race to ingest one shared file (--skip-existing)

BENCH_ARGS = ["--workload", "w", "--concurrency", "1,2,4,8", "--num-prompts", "8", "--input-len", "16",
              "--output-len", "32", "--warmup", "0", "--date", "2026-11-30", "--no-progress"]
BENCH_POINTS = 4  # concurrency levels above, one repeat

FIGURES: Counter[str] = Counter()


@pytest.fixture(scope="module", autouse=True)
def _record_figures() -> Iterator[None]:
    STARTED[0] = time.monotonic()
    yield
    COUNT_FILE.parent.mkdir(parents=True, exist_ok=True)
    COUNT_FILE.write_text(report())


STARTED = [time.monotonic()]  # reset when the module's first test starts


def report() -> str:
    lines = [f"durability (soak={int(SOAK)}, seed={SEED}), elapsed {time.monotonic() - STARTED[0]:.0f} s"]
    lines += [f"  {k}: {v}" for k, v in sorted(FIGURES.items())]
    return "\n".join(lines) + "\n"


# ---------------------------------------------------------------- processes

def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "FINDINGS_STORE"}
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    return env


def spawn(store: Path, *args: str, cwd: Path) -> subprocess.Popen[bytes]:
    """``findings --store STORE ARGS`` in its own process group (killed as a group)."""
    return subprocess.Popen([PY, "-m", "findings", "--store", str(store), *args], cwd=cwd, env=_env(),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)


def kill_after(proc: subprocess.Popen[bytes], delay: float) -> tuple[int, bytes, float]:
    """SIGKILL the process (group) after delay seconds unless it ended; (rc, stderr, seconds)."""
    t0 = time.monotonic()
    try:
        out, err = proc.communicate(timeout=delay)
    except subprocess.TimeoutExpired:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        out, err = proc.communicate()
    return proc.returncode, err, time.monotonic() - t0


@pytest.fixture(scope="module")
def emulator(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    proc = subprocess.Popen([PY, "-m", "findings", "emulate", "--port", "0", "--profile", "baseline",
                             "--speed", "25"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            cwd=tmp_path_factory.mktemp("emu"), env=_env())
    assert proc.stdout is not None
    line = proc.stdout.readline()
    assert "listening on" in line, line
    yield line.split("listening on ", 1)[1].split()[0]
    proc.terminate()
    try:
        proc.wait(10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


# ---------------------------------------------------------------- inputs

def table_file(folder: Path, tag: str, rows: int, rng: random.Random) -> Path:
    path = folder / f"{tag}.csv"
    lines = ["campaign,order,workload,config,concurrency,output_throughput_tok_s,p99_ttft_ms,note"]
    for c in range(1, rows + 1):
        lines.append(f"c-{tag},1,w,baseline,{c},{rng.uniform(50, 900):.3f},{rng.uniform(10, 500):.2f},row {c} of {tag}")
    path.write_text("\n".join(lines) + "\n")
    return path


def sglang_file(folder: Path, tag: str, rows: int, rng: random.Random) -> Path:
    path = folder / f"{tag}.jsonl"
    docs = [{"tag": tag, "backend": "sglang", "dataset_name": "random", "request_rate": float("inf"),
             "max_concurrency": c, "random_input_len": 1024, "random_output_len": 512, "duration": 10.0,
             "completed": 64, "output_throughput": round(rng.uniform(50, 900), 3),
             "p99_ttft_ms": round(rng.uniform(10, 500), 2), "accept_length": None}
            for c in range(1, rows + 1)]
    path.write_text("".join(json.dumps(d) + "\n" for d in docs))
    return path


def ingest_args(path: Path, tag: str, skip_existing: bool = False) -> list[str]:
    extra = ["--skip-existing"] if skip_existing else []
    if path.suffix == ".csv":
        return ["ingest", "table", str(path), *extra]
    return ["ingest", "sglang-bench", str(path), "--config", "baseline", "--campaign", f"c-{tag}",
            "--workload", "w-import", "--date", "2026-11-30", *extra]


# ---------------------------------------------------------------- checks

def check_store(store: Path) -> tuple[Any, dict[str, str]]:
    """Every non-temporary run file parses, the store loads; returns (dataset, {name: sha256})."""
    runs = store / "runs"
    digests = {}
    orphans = 0
    if runs.is_dir():
        for p in sorted(runs.iterdir()):
            if p.name.startswith(".tmp-") or p.name == store_mod.KEEP:
                continue
            raw = p.read_bytes()
            if p.name.endswith(SIDECAR_SUFFIX):  # per-request records (schema 4): never partial either
                json.loads(gzip.decompress(raw))
                orphans += not (runs / p.name.replace(SIDECAR_SUFFIX, ".json")).exists()
            else:
                assert p.suffix == ".json" and not p.name.startswith("."), f"unexpected file in the store: {p}"
                json.loads(raw)  # never a partial file
            digests[p.name] = hashlib.sha256(raw).hexdigest()
    key = "sidecars left by a writer killed before its run file (readers ignore them), most at once"
    FIGURES[key] = max(FIGURES[key], orphans)
    return store_mod.load(store), digests


def temp_leftovers(store: Path) -> int:
    return len(list((store / "runs").glob(".tmp-*"))) if (store / "runs").is_dir() else 0


def runs_of(dataset: Any, path: Path) -> list[Any]:
    return [r for r in dataset.runs if r.source_file == str(path)]


def check_bench_points(dataset: Any) -> int:
    """Every stored bench point is complete; returns how many there are."""
    n = 0
    for run in dataset.runs:
        if run.importer != "findings-bench":
            continue
        assert len(run.points) == 1, run.run_id
        m = run.points[0].metrics
        assert m["completed"] + m["failed"] == m["planned"] == 8, (run.run_id, m)
        req = run.points[0].requests
        assert req is not None and len(req["ttft_s"]) == 8, run.run_id
        n += 1
    return n


def one_line_error(err: bytes) -> None:
    text = err.decode(errors="replace").strip()
    assert text.startswith("Error: ") and "\n" not in text, text


# ---------------------------------------------------------------- kills

def test_ingest_killed_at_random_moments(tmp_path: Path) -> None:
    rng = random.Random(SEED)
    store, inputs = store_mod.create(tmp_path / "store"), tmp_path / "in"
    inputs.mkdir()
    finish_times: list[float] = []

    # Calibrate: two ingests that finish.
    for i in range(2):
        path = table_file(inputs, f"cal{i}", 5, rng)
        rc, err, took = kill_after(spawn(store, *ingest_args(path, f"cal{i}"), cwd=tmp_path), 60)
        assert rc == 0, err.decode()
        finish_times.append(took)
    dataset, digests = check_store(store)

    outcomes: Counter[str] = Counter()
    # When, after the start, the run file appears: estimated by a staircase that
    # moves later after a kill that came before the write, earlier after one that came after.
    write_at = statistics.median(finish_times) - 0.075
    for i in range(INGEST_KILLS):
        tag = f"k{i}"
        rows = rng.randint(1, 40)
        path = (table_file if i % 2 == 0 else sglang_file)(inputs, tag, rows, rng)
        late = rng.random() < 0.75
        delay = max(0.0, write_at + rng.uniform(-0.075, 0.075)) if late else rng.uniform(0, 0.150)
        temps = set((store / "runs").glob(".tmp-*"))
        rc, err, took = kill_after(spawn(store, *ingest_args(path, tag), cwd=tmp_path), delay)
        new_temps = set((store / "runs").glob(".tmp-*")) - temps

        dataset, now = check_store(store)
        for name, digest in digests.items():
            assert now.get(name) == digest, f"kill {i}: stored file {name} changed or vanished"
        mine = runs_of(dataset, path)
        assert len(mine) <= 1
        if late:
            write_at += -0.01 if mine else 0.01
        if rc == 0:
            assert len(mine) == 1 and len(mine[0].points) == rows, f"kill {i}: a finished ingest is incomplete"
            outcomes["finished before the kill"] += 1
        else:
            assert rc == -signal.SIGKILL, (rc, err.decode())
            if mine:
                assert len(mine[0].points) == rows and records_in(mine[0].line_hashes) == rows
                outcomes["killed after its file was linked"] += 1
            else:
                outcomes["killed before writing"] += 1
            if new_temps:
                outcomes["killed mid-write (temp file left)"] += 1
            outcomes[f"killed ({'around the write' if late else 'in the first 150 ms'})"] += 1
        digests = now
    # No lock or leftover blocks the next writer.
    after = ingest.ingest_table(store, str(table_file(inputs, "after", 3, rng)))
    assert len(runs_of(check_store(store)[0], inputs / "after.csv")) == 1 and after.points == 3
    FIGURES["ingest kills: processes started"] += INGEST_KILLS
    FIGURES["ingest kills: estimated write moment after start (ms)"] = round(write_at * 1000)
    for k, v in outcomes.items():
        FIGURES[f"ingest kills: {k}"] += v
    FIGURES["ingest kills: temp files left at the end (ignored by readers)"] += temp_leftovers(store)
    FIGURES["ingest kills: runs in the store at the end"] += len(check_store(store)[0].runs)


def test_bench_killed_at_random_moments(tmp_path: Path, emulator: str) -> None:
    rng = random.Random(SEED + 1)
    store = store_mod.create(tmp_path / "store")
    # Calibrate with one whole sweep (its own campaign).
    rc, err, full = kill_after(spawn(store, "bench", "--url", emulator, "--config", "baseline", "--campaign",
                                     "bench-cal", *BENCH_ARGS, cwd=tmp_path), 120)
    assert rc == 0, err.decode()
    dataset, digests = check_store(store)
    assert check_bench_points(dataset) == BENCH_POINTS

    killed = 0
    # A staircase keeps the kills inside the sweep when the machine is slower or
    # faster than at calibration: later after a kill before the first point,
    # earlier after one that came when all were stored.
    shift = 0.0
    # --append resumes a killed sweep (measuring only the points its campaign
    # lacks); once a campaign holds them all, the next kills go to a new one.
    campaign, rounds = "bench-kill-0", 0
    for i in range(BENCH_KILLS):
        delay = max(0.0, rng.uniform(0.4 * full, 1.0 * full) + shift)  # the first ~40% is start-up
        before = sum(n.endswith(".json") for n in digests)
        held = sum(p.campaign == campaign for p in dataset.points)
        missing = BENCH_POINTS - held
        rc, err, took = kill_after(spawn(store, "bench", "--url", emulator, "--config", "baseline",
                                         "--campaign", campaign, "--append", *BENCH_ARGS, cwd=tmp_path), delay)
        dataset, now = check_store(store)
        for name, digest in digests.items():
            assert now.get(name) == digest, f"bench kill {i}: stored file {name} changed or vanished"
        check_bench_points(dataset)  # every stored point is complete
        new = sum(n.endswith(".json") for n in now) - before
        assert 0 <= new <= missing
        cs = [p.concurrency for p in dataset.points if p.campaign == campaign]
        assert len(cs) == len(set(cs)) == held + new, f"bench kill {i}: a point stored twice in {campaign}: {cs}"
        shift += 0.05 if new == 0 else -0.05 if new == missing else 0.0
        if held + new == BENCH_POINTS:
            rounds += 1
            campaign = f"bench-kill-{rounds}"
        if rc == 0:
            assert new == missing, err.decode()
        else:
            assert rc == -signal.SIGKILL, (rc, err.decode())
            killed += 1
            FIGURES[f"bench kills: killed after {new} of {BENCH_POINTS} points"] += 1
        digests = now
    FIGURES["bench kills: processes started"] += BENCH_KILLS
    FIGURES["bench kills: killed"] += killed
    FIGURES["bench kills: delay shift at the end (ms)"] = round(shift * 1000)
    FIGURES["bench kills: points in the store at the end (all complete)"] += check_bench_points(check_store(store)[0])


# ---------------------------------------------------------------- concurrent writers

def test_concurrent_writers_lose_nothing(tmp_path: Path, emulator: str) -> None:
    rng = random.Random(SEED + 2)
    store, inputs = store_mod.create(tmp_path / "store"), tmp_path / "in"
    inputs.mkdir()
    expected: dict[Path, int] = {}
    plans: list[list[tuple[Path, str]]] = []
    for w in range(WRITERS):
        plan = []
        for i in range(INGESTS_PER_WRITER):
            tag = f"w{w}-{i}"
            rows = rng.randint(1, 30)
            path = (table_file if (w + i) % 2 == 0 else sglang_file)(inputs, tag, rows, rng)
            expected[path] = rows
            plan.append((path, tag))
        plans.append(plan)
    shared: list[tuple[Path, str]] = []
    for s in range(INGESTS_PER_WRITER // SHARED_EVERY):
        tag = f"shared-{s}"
        rows = rng.randint(5, 30)
        path = (table_file if s % 2 == 0 else sglang_file)(inputs, tag, rows, rng)
        expected[path] = rows
        shared.append((path, tag))

    results: list[tuple[str, Path, int, bytes]] = []
    lock = threading.Lock()
    failures: list[str] = []
    done = threading.Event()

    def writer(plan: list[tuple[Path, str]]) -> None:
        for i, (path, tag) in enumerate(plan):
            jobs = [(path, tag, False)]
            if i % SHARED_EVERY == 0 and i // SHARED_EVERY < len(shared):
                jobs.append((*shared[i // SHARED_EVERY], True))
            for p, t, skip in jobs:
                proc = spawn(store, *ingest_args(p, t, skip_existing=skip), cwd=tmp_path)
                _, err = proc.communicate(timeout=300)
                with lock:
                    results.append(("shared" if skip else "own", p, proc.returncode, err))

    def bench() -> None:
        proc = spawn(store, "bench", "--url", emulator, "--config", "baseline", "--campaign", "bench-conc",
                     *BENCH_ARGS, cwd=tmp_path)
        _, err = proc.communicate(timeout=300)
        with lock:
            results.append(("bench", Path("-"), proc.returncode, err))

    def reader() -> None:
        n = 0
        while not done.is_set():
            try:
                check_store(store)
                n += 1
            except Exception as exc:  # noqa: BLE001 - reported below
                failures.append(f"a reader failed during concurrent writes: {type(exc).__name__}: {exc}")
                return
            time.sleep(0.05)
        with lock:
            FIGURES["concurrent: store loads by a reader during the writes"] += n

    (store / "runs").mkdir(parents=True, exist_ok=True)  # an empty store: readers answer "no points"
    threads = [threading.Thread(target=writer, args=(plan,)) for plan in plans]
    threads.append(threading.Thread(target=bench))
    watcher = threading.Thread(target=reader)
    watcher.start()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    done.set()
    watcher.join()
    assert not failures, failures

    for kind, path, rc, err in results:
        if kind in ("own", "bench"):
            assert rc == 0, f"{kind} {path}: exit {rc}: {err.decode()}"
        elif rc != 0:  # a writer that lost the race for a shared file says so, in one line
            one_line_error(err)
            assert b"already ingested" in err, err.decode()

    dataset, _ = check_store(store)
    assert temp_leftovers(store) == 0
    per_source = Counter(p.source_file for p in dataset.points)
    lost = 0
    for path, rows in expected.items():
        runs = runs_of(dataset, path)
        assert len(runs) == 1, f"{path}: {len(runs)} runs"
        if per_source[str(path)] != rows:
            lost += abs(rows - per_source[str(path)])
        assert per_source[str(path)] == rows, f"{path}: {per_source[str(path)]} points, expected {rows}"
    hashes = [h for r in dataset.runs for h in r.line_hashes]
    FIGURES["concurrent: records stored twice"] += len(hashes) - len(set(hashes))
    assert len(hashes) == len(set(hashes)), "a record is stored twice"
    assert check_bench_points(dataset) == BENCH_POINTS

    shared_ok = sum(1 for kind, _, rc, _ in results if kind == "shared" and rc == 0)
    assert shared_ok == len(shared)  # exactly one writer won each shared file
    FIGURES["concurrent: writer processes at once"] += WRITERS + 1
    FIGURES["concurrent: ingest processes"] += sum(1 for r in results if r[0] != "bench")
    FIGURES["concurrent: ingests stored"] += sum(1 for r in results if r[0] != "bench" and r[2] == 0)
    FIGURES["concurrent: shared-file ingests refused as already ingested"] += sum(
        1 for kind, _, rc, _ in results if kind == "shared" and rc != 0)
    FIGURES["concurrent: bench points stored"] += BENCH_POINTS
    FIGURES["concurrent: records expected"] += sum(expected.values())
    FIGURES["concurrent: records stored"] += sum(per_source[str(p)] for p in expected)
    FIGURES["concurrent: records lost"] += lost


def test_zz_durability_figures() -> None:
    """Last in the file: print the figures (pytest -s); the file is written at teardown."""
    print("\n" + report())
    assert FIGURES
