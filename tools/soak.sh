#!/usr/bin/env bash
# Soak run: the fuzz and durability tests at soak size (FINDINGS_SOAK=1: about
# 20x the fuzz cases, 500 ingest kills, 60 bench kills, 4 writers x 40 ingests),
# then the figures they recorded. Extra arguments go to pytest (e.g. -x, -k kill).
# Takes about 20 minutes on two cores. Exit status: pytest's.
set -u
cd "$(dirname "$0")/.."
PY=${PYTHON:-.venv/bin/python}
rm -f build/fuzz-count-soak.txt build/durability-count-soak.txt
start=$(date +%s)
FINDINGS_SOAK=1 "$PY" -m pytest -q "$@" tests/test_fuzz.py tests/test_durability.py
rc=$?
echo
echo "soak: pytest exit status $rc after $(( $(date +%s) - start )) s"
for f in build/fuzz-count-soak.txt build/durability-count-soak.txt; do
  if [ -f "$f" ]; then
    echo "== $f"
    cat "$f"
  else
    echo "== $f: missing (those tests did not run to the end)"
  fi
done
exit "$rc"
