#!/usr/bin/env bash
# Build (or reuse) a SEPARATE virtualenv holding SGLang 0.5.23 for the CPU, with
# SGLang's own torch pin and the CPU kernel (sgl-kernel) built from SGLang's
# source. Never touches the project's .venv.
#
#   SGLANG_SRC=DIR bash tools/get_sglang_cpu.sh    # prints the venv's python on stdout
#
# SGLANG_SRC: an SGLang checkout (the folder holding python/sglang/kernels/aot),
# or that aot folder itself. Needed only for the first build on a machine: the
# kernel wheel is cached (FINDINGS_SGLANG_CACHE/kernel-*), and later venvs reuse
# it without a compiler. Get it with `git clone https://github.com/sgl-project/sglang`
# (any commit whose kernel tree the shim accepts), or, in this workplace, the
# fetch tool's `github:liusy58/sglang` and
#   git -C /work/.mirror/liusy58+sglang/repo archive 6127d1daeee33ec758a737bca0a1ddd2d17f02ca \
#       python/sglang/kernels/aot | tar -x -C /tmp/sglang-src     # then SGLANG_SRC=/tmp/sglang-src
#
# What it does (the recipe of shared/engines/sglang-cpu/README.md):
# 1. a venv with torch==2.14.1 and torchvision==0.29.1 (0.5.23's pin; the CUDA
#    builds from PyPI run on the CPU), `pip install --no-deps sglang==0.5.23`, and
#    tools/sglang-cpu-requirements.txt (sglang's list minus CUDA-only packages);
# 2. the kernel: copy the aot tree, tools/sglang_cpu_shim.py (signature shim,
#    C++20, torch unpinned), `pip wheel --no-build-isolation` with MAX_JOBS=2 and
#    the two cmake paths the CMakeLists asks for; the wheel is kept in the cache;
# 3. libnuma (Debian's libnuma-dev and numactl), installed with apt-get when root;
# 4. a check: `import sglang, sgl_kernel` under SGLANG_USE_CPU_ENGINE=1, and the
#    shimmed decode_attention_cpu schema present.
#
# One build at a time (flock); the venv is built in a staging directory and
# renamed into place, so a killed build never leaves a half-built venv at the
# cached path. Timings on this machine kind (2 cores) are in docs/sglang-cpu.md.
#
# Environment: SGLANG_VERSION (default 0.5.23), TORCH_VERSION (2.14.1),
# TORCHVISION_VERSION (0.29.1), FINDINGS_SGLANG_CACHE (~/.cache/findings/sglang-cpu),
# PYTHON (python3.11), MAX_JOBS (2).
set -euo pipefail
VERSION="${SGLANG_VERSION:-0.5.23}"
TORCH_VERSION="${TORCH_VERSION:-2.14.1}"
TV_VERSION="${TORCHVISION_VERSION:-0.29.1}"
CACHE_ROOT="${FINDINGS_SGLANG_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/findings/sglang-cpu}"
PYTHON="${PYTHON:-python3.11}"
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"

flags="$(grep -m1 -E '^(flags|Features)' /proc/cpuinfo 2>/dev/null || echo unknown)"
cpu="$(uname -m)-$(printf '%s' "$flags" | sha256sum | cut -c1-12)"
# A CPU without AVX512-BF16 (every AMX CPU has it) needs the portable kernel
# (tools/sglang_cpu_shim.py --portable); FINDINGS_SGLANG_PORTABLE=1 forces it.
shim_args=()
if [[ "${FINDINGS_SGLANG_PORTABLE:-}" == 1 ]] || ! grep -qw avx512_bf16 <<<"$flags"; then shim_args=(--portable); fi
# RECIPE: bump when what the venv holds changes (the kernel is tracked apart).
RECIPE=r1
key="$VERSION-torch$TORCH_VERSION-$RECIPE-$cpu"
dest="$CACHE_ROOT/$key"
kdir="$CACHE_ROOT/kernel-torch$TORCH_VERSION-$(sha256sum "$HERE/sglang_cpu_shim.py" | cut -c1-8)${shim_args:+-portable}-$cpu"
py="$dest/bin/python"

log() { echo "[get_sglang_cpu] $*" >&2; }
die() { echo "get_sglang_cpu: $*" >&2; exit 1; }

venv_ready() { [[ -f "$dest/.complete" && -x "$py" ]]; }
kernel_in() { [[ "$(cat "$1/.kernel" 2>/dev/null)" == "$kdir" ]]; }

if venv_ready && kernel_in "$dest"; then
  log "cached: $dest"
  echo "$py"
  exit 0
fi

mkdir -p "$CACHE_ROOT"
exec 9>"$CACHE_ROOT/.lock"
flock 9
if venv_ready && kernel_in "$dest"; then
  log "cached (built by another process meanwhile): $dest"
  echo "$py"
  exit 0
fi

# Where the kernel comes from, decided before anything is downloaded.
aot=""
if ! ls "$kdir"/*.whl >/dev/null 2>&1; then
  [[ -n "${SGLANG_SRC:-}" ]] || die "no cached CPU kernel and SGLANG_SRC is unset: set SGLANG_SRC to an SGLang checkout (git clone https://github.com/sgl-project/sglang), the folder holding python/sglang/kernels/aot"
  for cand in "$SGLANG_SRC/python/sglang/kernels/aot" "$SGLANG_SRC"; do
    if [[ -f "$cand/pyproject_cpu.toml" && -d "$cand/csrc/cpu" ]]; then aot="$cand"; break; fi
  done
  [[ -n "$aot" ]] || die "SGLANG_SRC=$SGLANG_SRC holds no python/sglang/kernels/aot (with pyproject_cpu.toml and csrc/cpu)"
fi

if ! ldconfig -p 2>/dev/null | grep -q 'libnuma\.so\b' || ! command -v numactl >/dev/null; then
  if [[ "$(id -u)" == 0 ]]; then
    log "installing Debian's libnuma-dev and numactl"
    (apt-get install -y -qq libnuma-dev numactl >/dev/null 2>&1 || { apt-get update -qq >/dev/null 2>&1 && apt-get install -y -qq libnuma-dev numactl >/dev/null; }) \
      || die "apt-get install libnuma-dev numactl failed"
  else
    die "libnuma and numactl are missing: run 'apt-get install libnuma-dev numactl' as root"
  fi
fi

t0=$(date +%s)
quiet() { grep -v -E "^WARNING: (Location|The candidate)" >&2 || true; }

# build_kernel PY: the kernel wheel into $kdir (atomically), unless it is cached.
build_kernel() {
  local kpy="$1" kt0 work src site cu cudart nvrtc cmake_args cand
  if ls "$kdir"/*.whl >/dev/null 2>&1; then
    log "reusing the cached CPU kernel: $kdir"
    return
  fi
  log "building the CPU kernel from $aot${shim_args:+ (portable: this CPU has no AVX512-BF16)} (about 4 minutes on 2 cores)"
  kt0=$(date +%s)
  work="$(mktemp -d "$CACHE_ROOT/.kernel-build-XXXXXX")"
  src="$work/src"
  cp -r "$aot" "$src"
  "$kpy" "$HERE/sglang_cpu_shim.py" "$src" "${shim_args[@]}" || { rm -rf "$work"; die "the shim does not fit $aot"; }
  # The CMakeLists finds torch's CMake config, which asks for a CUDA toolkit
  # (the torch wheel is a CUDA build) although nothing is compiled for CUDA: give
  # it one, a system CUDA or the runtime tree the torch wheel brings.
  site="$("$kpy" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
  cu=""
  for cand in "${CUDA_HOME:-}" /usr/local/cuda "$site"/nvidia/cu13 "$site"/nvidia/cu12; do
    if [[ -n "$cand" && -d "$cand/include" ]]; then cu="$cand"; break; fi
  done
  [[ -n "$cu" ]] || { rm -rf "$work"; die "no CUDA tree for torch's CMake config: set CUDA_HOME (the torch wheel's nvidia/cu13 folder will do)"; }
  cudart="$(ls "$cu"/lib64/libcudart.so* "$cu"/lib/libcudart.so* 2>/dev/null | head -1 || true)"
  nvrtc="$(ls "$cu"/lib64/libnvrtc.so* "$cu"/lib/libnvrtc.so* "$site"/nvidia/cu*/lib/libnvrtc.so* 2>/dev/null | head -1 || true)"
  cmake_args="-DCUDA_TOOLKIT_ROOT_DIR=$cu -DCUDA_INCLUDE_DIRS=$cu/include"
  [[ -z "$cudart" ]] || cmake_args+=" -DCUDA_CUDART_LIBRARY=$cudart"
  [[ -z "$nvrtc" ]] || cmake_args+=" -DCUDA_nvrtc_LIBRARY=$nvrtc"
  mkdir -p "$work/wheel" "$work/out"
  if ! (cd "$src" && MAX_JOBS="${MAX_JOBS:-2}" CMAKE_BUILD_PARALLEL_LEVEL="${MAX_JOBS:-2}" CMAKE_ARGS="$cmake_args" \
        "$kpy" -m pip wheel --no-build-isolation --no-deps --disable-pip-version-check -w "$work/wheel" . \
        >"$work/build.log" 2>&1); then
    tail -40 "$work/build.log" >&2
    cp "$work/build.log" "$CACHE_ROOT/kernel-build-failed.log"
    rm -rf "$work"
    die "the CPU kernel build failed (log above; kept in $CACHE_ROOT/kernel-build-failed.log)"
  fi
  cp "$work"/wheel/*.whl "$work/out/"
  printf 'from %s\nshim %s\nbuilt %s in %ss\n' "$aot" "${shim_args[*]:-(default)}" "$(date -u +%FT%TZ)" \
    "$(( $(date +%s) - kt0 ))" >"$work/out/build-info.txt"
  rm -rf "$kdir"
  mv -T "$work/out" "$kdir"
  rm -rf "$work"
  log "kernel built in $(( $(date +%s) - kt0 )) s, cached: $kdir"
}

# install_kernel PY VENV: the cached wheel into the venv, then the check.
install_kernel() {
  local kpy="$1" venv="$2"
  "$kpy" -m pip install --disable-pip-version-check --no-input --quiet --no-deps --force-reinstall "$kdir"/*.whl 2>&1 | quiet
  log "checking: import sglang and the kernel on the CPU engine"
  SGLANG_USE_CPU_ENGINE=1 "$kpy" -c '
import sys
import torch
import sglang
import sgl_kernel  # noqa: F401  (registers torch.ops.sgl_kernel)
schema = str(torch.ops.sgl_kernel.decode_attention_cpu.default._schema)
if "k_scale" not in schema:
    sys.exit("the kernel decode_attention_cpu lacks k_scale: the shim did not take")
print("sglang", sglang.__version__, "torch", torch.__version__, "kernel ok", file=sys.stderr)
' >&2
  printf '%s\n' "$kdir" >"$venv/.kernel"
}

if venv_ready; then
  log "the venv is built; its kernel is not $kdir: replacing the kernel"
  build_kernel "$py"
  install_kernel "$py" "$dest"
  log "kernel replaced in $(( $(date +%s) - t0 )) s: $dest"
  echo "$py"
  exit 0
fi

rm -rf "$dest"
# The dependencies take minutes to install: a stage whose dependencies are all
# in (.deps-complete) survives a failed kernel build and is reused; any other
# stage is removed.
stage="$CACHE_ROOT/.build-$key"
[[ -f "$stage/.deps-complete" ]] || rm -rf "$stage"
trap '[[ -f "$stage/.deps-complete" ]] || rm -rf "$stage"' EXIT
PIP=("$stage/bin/python" -m pip install --disable-pip-version-check --no-input --quiet)

if [[ ! -f "$stage/.deps-complete" ]]; then
  log "creating the venv"
  "$PYTHON" -m venv "$stage"
  printf 'torch==%s\ntorchvision==%s\n' "$TORCH_VERSION" "$TV_VERSION" >"$stage/constraints.txt"
  log "installing torch==$TORCH_VERSION torchvision==$TV_VERSION"
  "${PIP[@]}" -c "$stage/constraints.txt" "torch==$TORCH_VERSION" "torchvision==$TV_VERSION" 2>&1 | quiet
  log "installing sglang==$VERSION (no deps) and its CPU dependency list"
  "${PIP[@]}" --no-deps "sglang==$VERSION" 2>&1 | quiet
  # pip's resolver lists the CUDA-only packages sglang names as missing: expected.
  "${PIP[@]}" -c "$stage/constraints.txt" -r "$HERE/sglang-cpu-requirements.txt" 2>&1 \
    | grep -v -E "requires|dependency conflicts" | quiet
  "$stage/bin/python" -c "import torch, torchvision, sys; print('torch', torch.__version__, 'torchvision', torchvision.__version__, file=sys.stderr)"
  touch "$stage/.deps-complete"
else
  log "reusing the installed dependencies in $stage"
fi

build_kernel "$stage/bin/python"
install_kernel "$stage/bin/python" "$stage"

printf 'sglang %s\ntorch %s\nkey %s\nbuilt %s in %ss\n' "$VERSION" "$TORCH_VERSION" "$key" \
  "$(date -u +%FT%TZ)" "$(( $(date +%s) - t0 ))" >"$stage/build-info.txt"
touch "$stage/.complete"
mv -T "$stage" "$dest"
trap - EXIT
log "built in $(( $(date +%s) - t0 )) s ($(du -sh "$dest" | cut -f1)): $dest"
echo "$py"
