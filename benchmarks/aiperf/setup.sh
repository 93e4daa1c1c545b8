#!/usr/bin/env bash
# Build a SEPARATE virtualenv holding AIPerf (`aiperf profile`, 0.13.0) for
# make perf's client-efficiency rows (benchmarks/perf/perf.py, section
# "efficiency") and tools/make_real_fixtures.py. Never touches the project's .venv.
#
#   bash benchmarks/aiperf/setup.sh [VENV_DIR]      (default: build/aiperf/venv)
#
# Only pip is used, with this machine's pip configuration. Idempotent: the
# install is skipped when the pinned version is already there.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$HERE/../.." && pwd)"
VENV="${1:-${AIPERF_VENV:-$ROOT/build/aiperf/venv}}"
PYTHON="${PYTHON:-python3.11}"
AIPERF_VERSION="${AIPERF_VERSION:-0.13.0}"

case "$(cd "$(dirname "$VENV")" 2>/dev/null && pwd)/$(basename "$VENV")" in
  "$ROOT/.venv") echo "setup.sh: refusing to install into the project's .venv" >&2; exit 2;;
esac

t0=$(date +%s)
log() { echo "[aiperf-setup +$(( $(date +%s) - t0 ))s] $*"; }

mkdir -p "$(dirname "$VENV")"
if [[ ! -x "$VENV/bin/python" ]]; then
  log "creating venv $VENV"
  "$PYTHON" -m venv "$VENV"
fi
PY="$VENV/bin/python"
if "$PY" -c "import importlib.metadata as m, sys; sys.exit(m.version('aiperf') != '$AIPERF_VERSION')" 2>/dev/null; then
  log "aiperf $AIPERF_VERSION present"
else
  log "installing aiperf==$AIPERF_VERSION"
  "$PY" -m pip install --disable-pip-version-check --no-input --quiet "aiperf==$AIPERF_VERSION"
fi
log "checking: aiperf profile --help"
if ! "$VENV/bin/aiperf" profile --help >"$VENV/aiperf-help.txt" 2>&1; then
  tail -40 "$VENV/aiperf-help.txt" >&2
  log "FAILED: aiperf profile --help"
  exit 1
fi
log "ok: aiperf $AIPERF_VERSION; venv size $(du -sh "$VENV" | cut -f1)"
