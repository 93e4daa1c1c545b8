"""Serve a tiny local model with real SGLang 0.5.23 on the CPU (issue 24).

    python tools/sglang_serve.py PORT {none|ngram|standalone|eagle3|adaptive}
                                 [--model perm|random] [--store DIR --workload W --config CFG]
                                 [extra sglang.launch_server options]

Builds or reuses the SGLang CPU venv (tools/get_sglang_cpu.sh; the first build
needs SGLANG_SRC) and the models (tools/make_sglang_models.py, cached), then
replaces itself with SGLang's server on 127.0.0.1:PORT through
tools/sglang_launch.py (the ``intel_amx`` attention backend kept on a CPU
without AMX). The modes:

- ``none``: no speculation;
- ``ngram``: SGLang's NGRAM speculation (8 draft tokens); on ``--model random``
  the model loops at temperature 0, so n-gram drafts are genuinely accepted;
- ``eagle3``: EAGLE3 with a local draft head whose guess is right on a fraction
  SGLANG_TINY_AGREE of the tokens (tools/make_sglang_models.py), STEPS steps,
  topk 1, STEPS + 1 draft tokens;
- ``standalone``: STANDALONE with a smaller ``perm`` model as the draft (its next
  token is the target's on every token: acceptance is exact);
- ``adaptive``: the policy that the store (``--store``, the matrix's
  ``{store}``) derives now for ``--config`` (default ``spec``) on ``--workload``,
  launched with exactly the flags and file that ``findings deploy --engine sglang
  --json`` emits for it (never hand-written ones); on the CPU that is the
  nearest safe schedule (no step 0) with --disable-cuda-graph. If the policy is
  ``always-on``, its static flags are used; if there is nothing to deploy, it
  refuses to start (one line on stderr).

The target model (``--model perm``, the default): a "permutation" Llama, whose
greedy next token is certain, of SGLANG_TINY_HIDDEN (default 1024) hidden and
SGLANG_TINY_LAYERS (default 4) layers; docs/sglang-cpu.md gives the measurements
behind the size. The server's own choices: bf16 (the CPU attention kernels need
it), --max-total-tokens 32768, --enable-metrics, --random-seed 0,
SGLANG_USE_CPU_ENGINE=1, HF_HUB_OFFLINE=1.
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
MODES = ("none", "ngram", "standalone", "eagle3", "adaptive")
HIDDEN = os.environ.get("SGLANG_TINY_HIDDEN", "256")
LAYERS = os.environ.get("SGLANG_TINY_LAYERS", "2")
HEADS = os.environ.get("SGLANG_TINY_HEADS", "4")
AGREE = os.environ.get("SGLANG_TINY_AGREE", "0.85")
STEPS = int(os.environ.get("SGLANG_TINY_STEPS", "3"))
SERVER = ["--device", "cpu", "--host", "127.0.0.1", "--dtype", "bfloat16", "--max-total-tokens", "32768",
          "--enable-metrics", "--random-seed", "0", "--attention-backend", "intel_amx",
          "--served-model-name", "tiny-llama", "--log-level", "warning"]
NGRAM = ["--speculative-algorithm", "NGRAM", "--speculative-num-draft-tokens", "8"]


def _model(py: str, *args: str) -> str:
    out = subprocess.run([py, str(HERE / "make_sglang_models.py"), *args], check=True, text=True,
                         stdout=subprocess.PIPE).stdout.strip().splitlines()
    return out[-1]


def _deployed(store: str, workload: str, config: str) -> list[str]:
    """The flags `findings deploy` emits for ``config``'s policy, from the store as it is now;
    the adaptive file is written where the flags name it."""
    out_dir = ROOT / "build" / "deploy" / "sglang-cpu"
    findings = [sys.executable, "-m", "findings", "--settings", str(ROOT / "benchmarks" / "sglang.findings.toml"),
                "--store", store]
    r = subprocess.run(findings + ["deploy", "--engine", "sglang", "--json", "--workload", workload,
                                   "--config", config, "--out", str(out_dir)], capture_output=True, text=True)
    if r.returncode != 0:
        raise SystemExit(f"sglang_serve: findings deploy failed: {r.stdout.strip()} {r.stderr.strip()}")
    entry = json.loads(r.stdout)["workloads"][workload][config]
    s = entry["sglang"]
    if s["status"] not in ("deploy", "always-on"):
        raise SystemExit(f"sglang_serve: nothing to deploy for policy {entry['policy']}: {s['status']}: {s['reason']}")
    print(f"sglang_serve: policy {entry['policy']} (threshold {entry['threshold']}): {' '.join(s['flags'])}",
          flush=True)
    if s.get("adaptive_config") is not None:
        print(f"sglang_serve: adaptive config {s['adaptive_config_file']}: "
              f"{json.dumps(s['adaptive_config'], separators=(',', ':'))}", flush=True)
    return [tok for flag in s["flags"] for tok in shlex.split(flag)]


def main(argv: list[str]) -> int:
    if len(argv) < 2 or argv[1] not in MODES:
        print(__doc__, file=sys.stderr)
        return 2
    port, mode, rest = argv[0], argv[1], argv[2:]
    opts: dict[str, str] = {"model": "perm"}
    while rest and rest[0] in ("--store", "--workload", "--config", "--model"):
        opts[rest[0][2:]] = rest[1]
        rest = rest[2:]
    if opts["model"] not in ("perm", "random"):
        print(f"sglang_serve: --model {opts['model']}: expected perm or random", file=sys.stderr)
        return 2
    py = subprocess.run(["bash", str(HERE / "get_sglang_cpu.sh")], check=True, text=True,
                        stdout=subprocess.PIPE).stdout.strip()
    size = ["--hidden", HIDDEN, "--layers", LAYERS, "--heads", HEADS]
    target = _model(py, opts["model"], *size)
    args = [py, str(HERE / "sglang_launch.py"), "--model-path", target, "--port", port, *SERVER]
    eagle = ["--speculative-num-steps", str(STEPS), "--speculative-eagle-topk", "1",
             "--speculative-num-draft-tokens", str(STEPS + 1)]
    if mode == "ngram":
        args += NGRAM
    elif mode == "eagle3":
        draft = _model(py, "eagle3", "--hidden", HIDDEN, "--heads", HEADS, "--agree", AGREE)
        args += ["--speculative-algorithm", "EAGLE3", "--speculative-draft-model-path", draft, *eagle]
    elif mode == "standalone":
        draft = _model(py, "perm", "--hidden", "256", "--layers", "1")
        args += ["--speculative-algorithm", "STANDALONE", "--speculative-draft-model-path", draft, *eagle]
    elif mode == "adaptive":
        missing = [k for k in ("store", "workload") if k not in opts]
        if missing:
            print(f"sglang_serve: adaptive needs --{', --'.join(missing)}", file=sys.stderr)
            return 2
        # The recorded draft model is this machine's cached one (tools/make_sglang_models.py):
        # make sure it is there before SGLang is told to load it.
        _model(py, "eagle3", "--hidden", HIDDEN, "--heads", HEADS, "--agree", AGREE)
        flags = _deployed(opts["store"], opts["workload"], opts.get("config", "spec"))
        if "--speculative-draft-model-path" in flags:
            draft = flags[flags.index("--speculative-draft-model-path") + 1]
            if not Path(draft).is_dir():
                print(f"sglang_serve: the deployed draft model {draft} is not on this machine (made with other "
                      "SGLANG_TINY_* settings or another FINDINGS_MODEL_CACHE?)", file=sys.stderr)
                return 2
        args += flags
    env = {**os.environ, "SGLANG_USE_CPU_ENGINE": "1", "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
           "SGLANG_DISABLE_REQUEST_LOGGING": "1", "DO_NOT_TRACK": "1"}
    sys.stdout.flush()
    os.execve(py, args + rest, env)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
