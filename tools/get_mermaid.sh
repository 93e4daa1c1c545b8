#!/usr/bin/env bash
# The chart check's tools (tests/test_mermaid_charts.py): Debian's chromium and
# mermaid (pinned, tools/mermaid/package-lock.json) with playwright-core from
# npm. Idempotent: does nothing when both are there. Needs root (apt) for
# chromium on a machine that lacks it, and the npm registry for the first
# install (about 170 MB in tools/mermaid/node_modules).
set -euo pipefail
cd "$(dirname "$0")/mermaid"
if ! command -v "${CHROMIUM:-chromium}" >/dev/null 2>&1; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    echo "[get_mermaid] installing Debian's chromium" >&2
    (apt-get install -y -q chromium >/dev/null 2>&1 || { apt-get update -q >/dev/null && apt-get install -y -q chromium >/dev/null; })
  else
    echo "[get_mermaid] chromium is missing: install Debian's chromium package (root), or set CHROMIUM" >&2
    exit 1
  fi
fi
stamp=node_modules/.findings-$(sha256sum package-lock.json | cut -c1-16)
if [ ! -e "$stamp" ]; then
  echo "[get_mermaid] npm ci (mermaid $(grep -m1 '"mermaid"' package.json | tr -dc '0-9.'))" >&2
  npm ci --no-audit --no-fund --loglevel=error >&2
  touch "$stamp"
fi
echo "[get_mermaid] ready: $("${CHROMIUM:-chromium}" --version 2>/dev/null | head -1), mermaid $(node -p "require('./node_modules/mermaid/package.json').version")" >&2
