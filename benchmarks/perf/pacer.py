"""How precisely an asyncio loop wakes at an absolute deadline, alone (no
requests): findings' pacer (``findings.bench.transport.until``: a Linux
timerfd, D126), the pacer before it (sleep until 1.5 ms before, then yield
to the loop until the time has come: "spin") and a plain
``asyncio.sleep(deadline - now)``, whose timeout the selector rounds up to
whole milliseconds. Deadlines are a Poisson schedule at RATE per
second; prints one JSON line of lateness percentiles in ms.

    .venv/bin/python benchmarks/perf/pacer.py [--rate 1000] [--n 5000]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import time

from findings.bench.transport import SPIN_S, until


async def until_spin(when: float) -> None:
    """findings' pacer before the timerfd (D48): sleep, then spin the last SPIN_S."""
    clock = time.perf_counter
    left = when - clock()
    if left > SPIN_S:
        await asyncio.sleep(left - SPIN_S)
    while clock() < when:
        await asyncio.sleep(0)


def pct(values: list[float], q: float) -> float:
    s = sorted(values)
    pos = (len(s) - 1) * q / 100.0
    lo = int(pos)
    hi = min(lo + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (pos - lo)


async def run(rate: float, n: int, how: str) -> list[float]:
    rng = random.Random(1)
    start = time.perf_counter() + 0.05
    due = start
    late: list[float] = []
    for _ in range(n):
        due += rng.expovariate(rate)
        if how == "asyncio_sleep":
            left = due - time.perf_counter()
            if left > 0:
                await asyncio.sleep(left)
        elif how == "spin":
            await until_spin(due)
        else:
            await until(due)
        late.append((time.perf_counter() - due) * 1000)
    return late


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rate", type=float, default=1000.0)
    ap.add_argument("--n", type=int, default=5000)
    a = ap.parse_args()
    out = {}
    for name in ("until", "spin", "asyncio_sleep"):
        late = asyncio.run(run(a.rate, a.n, name))
        out[name] = {"p50_ms": pct(late, 50), "p99_ms": pct(late, 99), "max_ms": max(late)}
    print(json.dumps(out))


if __name__ == "__main__":
    main()
