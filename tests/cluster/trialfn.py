"""A real trial for tests/cluster: launch the emulator, measure it with
``findings bench`` (attach mode) into a store of its own, return the run files.

A module-level function that Ray's workers import by name (this folder is on
their PYTHONPATH: test_ray_trials.py sets it before the cluster starts). It
writes nothing outside its own temporary folder but the marker the tests watch
(``marker_dir``/KEY.start, holding the node it runs on)."""

from __future__ import annotations

import base64
import ctypes
import json
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any


def _node() -> str:
    try:
        import ray
    except ImportError:
        return "local"
    return ray.get_runtime_context().get_node_id() if ray.is_initialized() else "local"


def _die_with_parent() -> None:
    # The emulator dies with the worker that launched it: a node killed in the
    # middle of a trial leaves no server behind (Linux: PR_SET_PDEATHSIG).
    ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)


def run_trial(payload: dict[str, Any]) -> dict[str, Any]:
    key = str(payload["key"])
    node = _node()
    if payload.get("marker_dir"):
        Path(payload["marker_dir"], f"{key}.start").write_text(node, encoding="utf-8")
    work = Path(tempfile.mkdtemp(prefix=f"findings-trial-{key}-"))
    emulator = subprocess.Popen(
        [sys.executable, "-m", "findings", "emulate", "--port", "0", "--profile", payload.get("profile", "baseline"),
         "--speed", str(payload.get("speed", 8)), "--seed", str(payload.get("seed", 0))],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=work, preexec_fn=_die_with_parent)
    try:
        assert emulator.stdout is not None
        line = emulator.stdout.readline()
        if "listening on" not in line:
            raise RuntimeError(f"the emulator did not start: {line.strip()!r}")
        url = line.split("listening on ", 1)[1].split()[0]
        store = work / "store"
        started = time.time()
        bench = subprocess.run(
            [sys.executable, "-m", "findings", "--store", str(store), "bench", "--url", url,
             "--config", payload.get("config", "baseline"), "--campaign", payload.get("campaign", "tune"),
             "--workload", payload.get("workload", "w"), "--concurrency", payload.get("concurrency", "1,4"),
             "--num-prompts", str(payload.get("num_prompts", 8)), "--input-len", "16",
             "--output-len", str(payload.get("output_len", 32)), "--warmup", "1", "--no-progress", "--create"],
            capture_output=True, text=True, cwd=work, timeout=300)
        if bench.returncode != 0:
            raise RuntimeError(f"findings bench failed: {(bench.stdout + bench.stderr).strip()[-300:]}")
        runs, sidecars = [], {}
        for path in sorted((store / "runs").glob("*.json")):
            text = path.read_text(encoding="utf-8")  # as written: the store checks its bytes
            doc = json.loads(text)
            runs.append({"file": path.name, "text": text})
            ref = doc.get("requests")
            if ref is not None:
                sidecars[ref["file"]] = base64.b64encode((path.parent / ref["file"]).read_bytes()).decode()
        return {"key": key, "node": node, "runs": runs, "sidecars": sidecars, "bench_s": time.time() - started}
    finally:
        emulator.terminate()
        try:
            emulator.wait(10)
        except subprocess.TimeoutExpired:
            emulator.kill()
            emulator.wait()
        if emulator.stdout is not None:
            emulator.stdout.close()
        shutil.rmtree(work, ignore_errors=True)
