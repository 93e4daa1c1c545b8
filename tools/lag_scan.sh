#!/usr/bin/env bash
# How far one `findings bench` process drives the emulator before its own
# event loop lags: prints C, output tok/s, TTFT p50 and loop-lag p50/p99/max.
# Usage: tools/lag_scan.sh PROFILE SPEED "C1 C2 ..." [OUTPUT_LEN]
set -euo pipefail
profile=${1:-baseline}; speed=${2:-1}; levels=${3:-"64 250 500 1000"}; out_len=${4:-64}
bin=$(dirname "$0")/../.venv/bin
tmp=$(mktemp -d)
"$bin/findings" emulate --port 0 --profile "$profile" --speed "$speed" --max-running 4096 >"$tmp/emu.log" 2>&1 &
emu=$!
trap 'kill $emu 2>/dev/null; rm -rf "$tmp"' EXIT
for _ in $(seq 50); do grep -q "listening on" "$tmp/emu.log" && break; sleep 0.1; done
url=$(sed -n 's/.*listening on \([^ ]*\).*/\1/p' "$tmp/emu.log")
for c in $levels; do
  "$bin/findings" --store "$tmp/store-$c" bench --url "$url" --config "$profile" --campaign scan --workload w \
    --concurrency "$c" --num-prompts "$c" --input-len 32 --output-len "$out_len" --warmup 0 --no-progress >/dev/null 2>&1
  python3 - "$tmp/store-$c" "$c" <<'PY'
import glob, json, sys
m = json.load(open(glob.glob(sys.argv[1] + "/runs/*.json")[0]))["points"][0]["metrics"]
print(f"C={sys.argv[2]:>5}  {m['output_throughput_tok_s']:9.1f} tok/s  TTFT p50 {m.get('median_ttft_ms', 0):8.1f} ms  "
      f"loop lag p50 {m['client_loop_lag_p50_ms']:.2f}  p99 {m['client_loop_lag_p99_ms']:.2f}  max {m['client_loop_lag_max_ms']:.2f} ms  "
      f"failed {int(m['failed'])}")
PY
done
