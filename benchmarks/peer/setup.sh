#!/usr/bin/env bash
# Build a SEPARATE virtualenv holding the peer benchmark client
# (`python -m sglang.bench_serving`, sglang 0.5.23) for the cross-check in
# docs/peer-crosscheck.md. Never touches the project's .venv.
#
#   bash benchmarks/peer/setup.sh [VENV_DIR]      (default: build/peer/venv)
#
# Only pip is used, and only for PyPI packages (with this machine's pip
# configuration: its local wheel folders are PyPI mirrors). sglang is
# installed --no-deps: its declared dependencies pull CUDA builds of torch.
# We add only what `import sglang.bench_serving` needs. torch is pinned to the
# 2.13.0 CPU build through a constraints file (-c) so that no other package
# can drag in a multi-GB CUDA torch. torchvision is replaced by an import-only
# stand-in (benchmarks/peer/stubs/torchvision, put on PYTHONPATH by
# benchmarks/peer/peer-python), because PyPI's torchvision does not import
# beside the CPU torch ("operator torchvision::nms does not exist").
#
# Idempotent: each step is skipped when already done.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$HERE/../.." && pwd)"
VENV="${1:-${PEER_VENV:-$ROOT/build/peer/venv}}"
PYTHON="${PYTHON:-python3.11}"
SGLANG_VERSION="${SGLANG_VERSION:-0.5.23}"
TORCH_VERSION="${TORCH_VERSION:-2.13.0}"

case "$(cd "$(dirname "$VENV")" 2>/dev/null && pwd)/$(basename "$VENV")" in
  "$ROOT/.venv") echo "setup.sh: refusing to install into the project's .venv" >&2; exit 2;;
esac

t0=$(date +%s)
log() { echo "[peer-setup +$(( $(date +%s) - t0 ))s] $*"; }

mkdir -p "$(dirname "$VENV")"
if [[ ! -x "$VENV/bin/python" ]]; then
  log "creating venv $VENV"
  "$PYTHON" -m venv "$VENV"
else
  log "venv exists: $VENV"
fi
PY="$VENV/bin/python"
PIP=("$PY" -m pip install --disable-pip-version-check --no-input)

# Constraints: the CPU torch only. A local version label (+cpu) is accepted by
# '==2.13.0' and pip prefers the wheel on disk (find-links) of that version.
CONS="$VENV/peer-constraints.txt"
cat >"$CONS" <<CONS_EOF
torch==$TORCH_VERSION
CONS_EOF

have() { "$PY" - "$@" <<'PYEOF' 2>/dev/null
import importlib.metadata as md, sys
for spec in sys.argv[1:]:
    name, _, ver = spec.partition("==")
    try:
        got = md.version(name)
    except md.PackageNotFoundError:
        sys.exit(1)
    if ver and got.split("+")[0] != ver:
        sys.exit(1)
PYEOF
}

# 1. torch (CPU) first, so that nothing later resolves another build.
if have "torch==$TORCH_VERSION"; then
  log "torch $TORCH_VERSION present"
else
  log "installing torch==$TORCH_VERSION (CPU)"
  "${PIP[@]}" -c "$CONS" "torch==$TORCH_VERSION"
fi
"$PY" -c 'import torch,sys; v=torch.version.cuda; sys.exit(f"CUDA torch {v} got in" if v else 0)'

# 2. What sglang.bench_serving imports (it imports the whole sglang package).
DEPS=(
  aiohttp msgspec numpy orjson requests tqdm psutil pybase64 packaging pillow
  starlette fastapi pydantic pyzmq IPython transformers datasets triton
  apache-tvm-ffi sentencepiece compressed-tensors gguf tokenizers
)
if [[ -f "$VENV/.peer-deps-ok" ]] && have aiohttp transformers datasets triton apache-tvm-ffi gguf compressed-tensors; then
  log "client dependencies present"
else
  log "installing client dependencies"
  "${PIP[@]}" -c "$CONS" "${DEPS[@]}"
  touch "$VENV/.peer-deps-ok"
fi

# 3. sglang itself, without its declared dependencies.
if have "sglang==$SGLANG_VERSION"; then
  log "sglang $SGLANG_VERSION present"
else
  log "installing sglang==$SGLANG_VERSION --no-deps"
  "${PIP[@]}" --no-deps "sglang==$SGLANG_VERSION"
fi

# 4. Check: the CLI parses (stand-in torchvision on PYTHONPATH, no hub).
log "checking: python -m sglang.bench_serving --help"
if ! "$HERE/peer-python" -m sglang.bench_serving --help >"$VENV/bench_serving-help.txt" 2>&1; then
  tail -40 "$VENV/bench_serving-help.txt" >&2
  log "FAILED: sglang.bench_serving --help"
  exit 1
fi
head -3 "$VENV/bench_serving-help.txt"
log "ok: sglang.bench_serving imports and parses; venv size $(du -sh "$VENV" | cut -f1)"
