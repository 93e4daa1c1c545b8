"""Serve the tiny random model with llama.cpp's `llama-server` (issue 7).

    python tools/llama_serve.py PORT {none|random|self} [extra llama-server options]

Builds or reuses the engine (tools/get_llama_server.sh), writes the models
once (tools/make_tiny_gguf.py: build/engine/target.gguf with seed 1, and
build/engine/draft.gguf with seed 2), then replaces itself with
`llama-server -np 8 -cb --metrics -t 1` on 127.0.0.1:PORT (one thread:
the other core is the client's, which must not be starved). The draft mode picks
the speculation: none; a random draft (another seed: acceptance about 0); or
the target as its own draft (acceptance 1 at temperature 0, at the same
cost). A launch line for `findings bench` matrices (benchmarks/llamacpp-cpu.toml).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
MODELS = ROOT / "build" / "engine"
SPEC = ["--spec-type", "draft-simple", "--spec-draft-n-max", "4"]


def main(argv: list[str]) -> int:
    if len(argv) < 2 or argv[1] not in ("none", "random", "self"):
        print(__doc__, file=sys.stderr)
        return 2
    port, mode, extra = argv[0], argv[1], argv[2:]
    binary = subprocess.run(["bash", str(HERE / "get_llama_server.sh")], check=True, text=True,
                            stdout=subprocess.PIPE).stdout.strip()
    sys.path.insert(0, str(HERE))
    import make_tiny_gguf  # noqa: PLC0415 (needs the [engine] extra)

    for name, seed in (("target", 1), ("draft", 2)):
        path = MODELS / f"{name}.gguf"
        if not path.exists():
            make_tiny_gguf.main([str(path), "--seed", str(seed)])
    args = [binary, "-m", str(MODELS / "target.gguf"), "--host", "127.0.0.1", "--port", port, "-np", "8", "-cb",
            "--metrics", "-c", "8192", "-t", "1"]
    if mode == "random":
        args += ["-md", str(MODELS / "draft.gguf"), *SPEC]
    elif mode == "self":
        args += ["-md", str(MODELS / "target.gguf"), *SPEC]
    sys.stdout.flush()
    os.execv(binary, args + extra)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
