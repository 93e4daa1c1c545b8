"""Run with the peer venv's Python (sglang 0.5.23): load every emitted SGLang
adaptive config with SGLang's own parser and router, and ask SGLang's own
``adaptive_unsupported_reason`` about every case.

    benchmarks/peer/peer-python tests/deploy/check_sglang.py CASES.json

CASES.json is written by tests/deploy/test_deploy_engines.py. Prints one
JSON object per case on stdout; exits 1 on the first disagreement.
Nothing is stubbed: ``sglang.srt.speculative.adaptive_spec_params`` imports
in the CPU venv as it is. ``adaptive_unsupported_reason`` takes a
server-args object; it gets a namespace with the fields it reads.
"""

from __future__ import annotations

import json
import sys
from types import SimpleNamespace

from sglang.srt.speculative.adaptive_spec_params import AdaptiveSpeculativeParams, adaptive_unsupported_reason

GRAPH_SIZES = [1, 2, 4, 8, 12, 16, 24, 32, 40, 48, 56, 64, 72, 80, 88, 96, 104, 112, 120, 128]


def server_args(ns: dict) -> SimpleNamespace:
    algo = ns["speculative_algorithm"]
    return SimpleNamespace(
        speculative_algorithm="EAGLE" if algo == "NEXTN" else algo,  # SGLang turns NEXTN into EAGLE first
        speculative_eagle_topk=ns["speculative_eagle_topk"],
        attn_dp_size=ns["attn_dp_size"], ep_join_mode="none",
        enable_multi_layer_eagle=ns["enable_multi_layer_eagle"],
        enable_two_batch_overlap=ns["enable_two_batch_overlap"], enable_pdmux=ns["enable_pdmux"],
    )


def main() -> int:
    cases = json.loads(open(sys.argv[1]).read())
    failed = 0
    for case in cases:
        out = {"case": case["case"], "status": case["status"]}
        engine_reason = adaptive_unsupported_reason(server_args(case["server_args"]))
        out["engine_unsupported_reason"] = engine_reason
        # Our refusal must name the same kinds of cases SGLang itself refuses
        # (the version rule is not in that function: step 0 is, in the parser).
        ours = case["status"] == "refused" and case["engine_checked"]
        if case["threshold_policy"] and (engine_reason is not None) != ours:
            out["error"] = f"SGLang says {engine_reason!r}, findings says {case['status']}: {case['reason']}"
        if case["status"] == "deploy":
            p = AdaptiveSpeculativeParams(initial_steps=case["k"], cfg_path=case["file"])
            got = [p.get_steps_for_batch(b) for b in range(1, case["max_batch"] + 1)]
            out["candidate_steps"] = p.candidate_steps
            out["switch"] = next((b for b in range(2, len(got) + 1) if got[b - 1] != got[b - 2]), None)
            if case["k"] not in p.candidate_steps:
                out["error"] = f"--speculative-num-steps {case['k']} is not in {p.candidate_steps}"
            elif got != case["expected"]:
                bad = next(b for b in range(1, len(got) + 1) if got[b - 1] != case["expected"][b - 1])
                out["error"] = f"batch {bad}: SGLang routes to {got[bad - 1]} steps, findings meant {case['expected'][bad - 1]}"
            # The CUDA-graph trap the deploy note names: with captured sizes that
            # skip the size below the switch, the switch moves down (not on the
            # CPU, whose flags turn graphs off).
            if not case.get("graphs", True):
                print(json.dumps(out), flush=True)
                failed += "error" in out
                continue
            p.set_cuda_graph_bs(GRAPH_SIZES)
            graphed = [p.get_steps_for_batch(b) for b in range(1, min(case["max_batch"], 128) + 1)]
            out["switch_with_graphs"] = next((b for b in range(2, len(graphed) + 1)
                                              if graphed[b - 1] != graphed[b - 2]), None)
            safe = sorted(set(GRAPH_SIZES) | {case["below"]})
            p.set_cuda_graph_bs(safe)
            fixed = [p.get_steps_for_batch(b) for b in range(1, min(case["max_batch"], 128) + 1)]
            if fixed != case["expected"][:len(fixed)]:
                out["error"] = f"with {case['below']} among the captured sizes the routing still differs"
        print(json.dumps(out), flush=True)
        failed += "error" in out
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
