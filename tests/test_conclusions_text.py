"""`findings conclusions` (text) names every workload that `--json` does,
the open-loop ones too (issue 36: they appeared only in --json)."""

from __future__ import annotations

import json

from conftest import ROOT, cli


def test_text_lists_every_workload_of_the_json_open_loop_included() -> None:
    settings = str(ROOT / "benchmarks" / "vllm.findings.toml")
    as_json = cli("--settings", settings, "conclusions", "--json")
    assert as_json.exit_code == 0, as_json.output
    workloads = json.loads(as_json.output)["workloads"]
    open_loop = {name for name, w in workloads.items() if w["load_axis"] != "concurrency"}
    assert open_loop, "the committed vLLM store holds a day replay (an open loop)"
    text = cli("--settings", settings, "conclusions")
    assert text.exit_code == 0, text.output
    heads = [line for line in text.output.splitlines() if line.startswith("workload ")]
    for name, w in workloads.items():
        mode = f" (open loop, {w['mode']}" if name in open_loop else ""
        assert any(h == f"workload {name}" or h.startswith(f"workload {name}{mode}") for h in heads), (name, heads)
    for name in open_loop:
        block = text.output.split(f"workload {name} (open loop", 1)[1].split("\nworkload ", 1)[0]
        best = workloads[name]["replay"].get("best") if isinstance(workloads[name].get("replay"), dict) else None
        if best:
            assert f"best over the replay: {best}" in block, block
        assert "replay" in block or "policy" in block or "sustained" in block, block
