#!/usr/bin/env bash
# Build (or reuse) llama.cpp's C++ `llama-server` from the sources inside the
# llama-cpp-python sdist on PyPI (vendor/llama.cpp), for issue 7's real engine
# tier. Nothing is fetched from anywhere but PyPI.
#
#   bash tools/get_llama_server.sh          # prints the path of the binary
#
# The binary is built for the native CPU, so it is cached per machine under a
# key of the llama-cpp-python version, the architecture and a hash of the CPU
# flags; it is rebuilt only when that key changes. The first build took 7 to
# 11 minutes on 2 cores. Progress goes to stderr; stdout is only the path.
#
# Environment: LLAMA_CPP_PYTHON_VERSION (default 0.3.36), FINDINGS_ENGINE_CACHE
# (default ~/.cache/findings/llama-server), PYTHON (default python3), JOBS.
set -euo pipefail

VERSION="${LLAMA_CPP_PYTHON_VERSION:-0.3.36}"
CACHE_ROOT="${FINDINGS_ENGINE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/findings/llama-server}"
PYTHON="${PYTHON:-python3}"
JOBS="${JOBS:-$(nproc 2>/dev/null || echo 2)}"

flags="$(grep -m1 -E '^(flags|Features)' /proc/cpuinfo 2>/dev/null || echo unknown)"
key="$VERSION-$(uname -m)-$(printf '%s' "$flags" | sha256sum | cut -c1-12)"
dest="$CACHE_ROOT/$key"
bin="$dest/bin/llama-server"

log() { echo "[get_llama_server] $*" >&2; }

if [[ -x "$bin" ]]; then
  log "cached: $bin"
  echo "$bin"
  exit 0
fi

for tool in cmake g++ tar; do
  command -v "$tool" >/dev/null || { log "error: $tool is required to build llama-server"; exit 2; }
done

mkdir -p "$CACHE_ROOT"
# One build at a time per cache: a second caller waits, then reuses it.
if command -v flock >/dev/null; then
  exec 9>"$CACHE_ROOT/.lock"
  flock 9
  if [[ -x "$bin" ]]; then
    log "cached (built by another process meanwhile): $bin"
    echo "$bin"
    exit 0
  fi
fi
work="$(mktemp -d "$CACHE_ROOT/.build-XXXXXX")"
trap 'rm -rf "$work"' EXIT
t0=$(date +%s)

log "downloading the llama-cpp-python $VERSION sdist from PyPI"
"$PYTHON" -m pip download --quiet --disable-pip-version-check --no-binary :all: --no-deps \
  "llama-cpp-python==$VERSION" -d "$work/sdist" >&2
archive="$(ls "$work"/sdist/llama_cpp_python-*.tar.gz 2>/dev/null | head -1)"
[[ -n "$archive" ]] || { log "error: no sdist downloaded"; exit 1; }
tar -xzf "$archive" -C "$work"
src="$(ls -d "$work"/llama_cpp_python-*/vendor/llama.cpp | head -1)"
[[ -f "$src/CMakeLists.txt" ]] || { log "error: no vendor/llama.cpp in $archive"; exit 1; }

log "configuring $src (native CPU, static, server only, no web UI, no OpenSSL, no curl)"
cmake -S "$src" -B "$work/build" -DCMAKE_BUILD_TYPE=Release -DBUILD_SHARED_LIBS=OFF \
  -DLLAMA_BUILD_SERVER=ON -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF \
  -DLLAMA_BUILD_UI=OFF -DLLAMA_USE_PREBUILT_UI=OFF -DLLAMA_OPENSSL=OFF -DLLAMA_CURL=OFF \
  -DGGML_NATIVE=ON >"$work/configure.log" 2>&1 || { tail -30 "$work/configure.log" >&2; exit 1; }

log "building llama-server with $JOBS jobs (7 to 11 minutes on 2 cores)"
cmake --build "$work/build" --target llama-server -j "$JOBS" >"$work/build.log" 2>&1 \
  || { tail -40 "$work/build.log" >&2; exit 1; }
built="$(find "$work/build" -type f -name llama-server -perm -u+x | head -1)"
[[ -n "$built" ]] || { log "error: the build produced no llama-server"; exit 1; }

# Install atomically: a half-copied binary never sits at the cached path.
stage="$work/stage"
mkdir -p "$stage/bin"
cp "$built" "$stage/bin/llama-server"
"$stage/bin/llama-server" --version >"$stage/version.txt" 2>&1 || true
printf 'llama-cpp-python %s\nkey %s\nbuilt %s in %ss\n' "$VERSION" "$key" "$(date -u +%FT%TZ)" \
  "$(( $(date +%s) - t0 ))" >"$stage/build-info.txt"
rm -rf "$dest.partial"
mv "$stage" "$dest.partial"
mv -T "$dest.partial" "$dest"
log "built in $(( $(date +%s) - t0 )) s: $bin"
echo "$bin"
