#!/usr/bin/env bash
# Pin what findings prints for every committed store, so a refactor can be
# checked byte for byte: tools/pin_outputs.sh DIR writes, per settings file,
# the rendered documents, `conclusions --json`, `conclusions` (text),
# `deploy --json` and `plan` into DIR; compare two such DIRs with diff -r.
set -euo pipefail
out=${1:?usage: tools/pin_outputs.sh DIR}
bin=${FINDINGS:-.venv/bin/findings}
mkdir -p "$out"
for s in findings.toml benchmarks/*.findings.toml benchmarks/perf/findings.toml; do
  name=$(echo "$s" | tr '/' '_')
  "$bin" --settings "$s" conclusions --json > "$out/$name.conclusions.json" 2>&1 || echo "rc=$?" >> "$out/$name.conclusions.json"
  "$bin" --settings "$s" conclusions > "$out/$name.conclusions.txt" 2>&1 || echo "rc=$?" >> "$out/$name.conclusions.txt"
  "$bin" --settings "$s" deploy --json --out "$out/$name.deploy" > "$out/$name.deploy.json" 2>&1 || echo "rc=$?" >> "$out/$name.deploy.json"
  "$bin" --settings "$s" plan --output "$out/$name.plan.toml" > "$out/$name.plan.txt" 2>&1 || echo "rc=$?" >> "$out/$name.plan.txt"
  "$bin" --settings "$s" render --check > "$out/$name.render-check.txt" 2>&1 || echo "rc=$?" >> "$out/$name.render-check.txt"
done
# The documents themselves (render --check above compares them with these).
for f in $(git ls-files '*.md' | grep -v '^docs/\|^tests/\|README'); do
  mkdir -p "$out/docs/$(dirname "$f")"; cp "$f" "$out/docs/$f"
done
cp -r tests/golden "$out/golden"
# The output folder's own path appears in some outputs: name it OUT.
grep -rl --null "$out" "$out" | xargs -0 -r sed -i "s|$out|OUT|g"
