"""``findings bench --append`` resumes (issue 36): a sweep stopped by SIGTERM,
then ``--append``, measures only the points the campaign lacks, so that every
(config, workload, C, repeat) is stored exactly once. Real processes, a real
signal, ``findings emulate`` over loopback."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Iterator

import pytest
from test_bench_e2e import start_emulator

PY = sys.executable
ARGS = ["--config", "baseline", "--campaign", "resume", "--workload", "w", "--num-prompts", "4",
        "--input-len", "16", "--output-len", "48", "--warmup", "0", "--date", "2026-12-01", "--no-progress",
        "--create"]


@pytest.fixture
def emulator() -> Iterator[str]:
    proc, url = start_emulator("--profile", "baseline", "--speed", "2")
    yield url
    proc.terminate()
    try:
        proc.wait(10)
    except subprocess.TimeoutExpired:
        proc.kill()


def bench(store: Path, url: str, *extra: str) -> subprocess.Popen[str]:
    return subprocess.Popen([PY, "-m", "findings", "--store", str(store), "bench", "--url", url, *ARGS, *extra],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def finish(proc: subprocess.Popen[str]) -> tuple[int, str]:
    out, err = proc.communicate(timeout=240)
    return proc.returncode, out + err


def stored(store: Path) -> Counter[tuple[object, ...]]:
    """How many times the store holds each (config, workload, C, rate, repeat)."""
    n: Counter[tuple[object, ...]] = Counter()
    for p in sorted((store / "runs").glob("*.json")):
        if p.name.startswith("."):
            continue
        doc = json.loads(p.read_text())
        for point in doc["points"]:
            n[(point["config"], point["workload"], point["concurrency"],
               point["workload_params"].get("request_rate"), doc["provenance"]["repeat"])] += 1
    return n


def line_with(output: str, start: str) -> str:
    found = [ln for ln in output.splitlines() if ln.startswith(start)]
    assert len(found) == 1, output
    return found[0]


def test_append_after_sigterm_measures_only_the_missing_points(tmp_path: Path, emulator: str) -> None:
    store = tmp_path / "store"
    sweep = ["--concurrency", "1,2,4", "--repeats", "2"]
    proc = bench(store, emulator, *sweep)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and proc.poll() is None:
        if (store / "runs").is_dir() and sum(stored(store).values()) >= 2:
            break
        time.sleep(0.02)
    proc.send_signal(signal.SIGTERM)
    rc, out = finish(proc)
    assert rc == 128 + signal.SIGTERM, out
    assert "interrupted by SIGTERM: kept" in out
    kept = sum(stored(store).values())
    assert 2 <= kept < 6, out
    assert max(stored(store).values()) == 1

    rc, out = finish(bench(store, emulator, *sweep, "--append"))
    assert rc == 0, out
    assert line_with(out, "resuming campaign") == \
        f"resuming campaign resume: {kept} of 6 points already stored, measuring {6 - kept}"
    assert f"stored {6 - kept} points" in out
    want = {("baseline", "w", c, None, r) for c in (1, 2, 4) for r in (1, 2)}
    assert stored(store) == Counter(want)  # each point exactly its repeats times: once per repeat index

    # Everything stored: said so, nothing measured, exit 0 (no server needed even).
    before = sorted(p.name for p in (store / "runs").iterdir())
    rc, out = finish(bench(store, "http://127.0.0.1:9", *sweep, "--append"))
    assert rc == 0, out
    assert line_with(out, "campaign resume:") == "campaign resume: all 6 points already stored, nothing to measure"
    assert "stored 0 points" in out
    assert sorted(p.name for p in (store / "runs").iterdir()) == before

    # More repeats: only the third repeat of each C is measured.
    rc, out = finish(bench(store, emulator, *sweep[:2], "--repeats", "3", "--append"))
    assert rc == 0, out
    assert line_with(out, "resuming campaign") == \
        "resuming campaign resume: 6 of 9 points already stored, measuring 3"
    assert stored(store) == Counter(want | {("baseline", "w", c, None, 3) for c in (1, 2, 4)})


def test_append_resumes_an_open_loop_by_rate(tmp_path: Path, emulator: str) -> None:
    store = tmp_path / "store"
    rc, out = finish(bench(store, emulator, "--request-rate", "20,40"))
    assert rc == 0, out
    # Another rate is another point; the same rates are not measured again.
    rc, out = finish(bench(store, emulator, "--request-rate", "20,40,80", "--append"))
    assert rc == 0, out
    assert line_with(out, "resuming campaign") == \
        "resuming campaign resume: 2 of 3 points already stored, measuring 1"
    assert sorted(k[3] for k in stored(store)) == [20.0, 40.0, 80.0]
    assert set(stored(store).values()) == {1}
