#!/usr/bin/env python3
"""Check the SGLang emulator's profiles against the seed curves.

For each profile, start the emulator as a subprocess (``python -m
findings.emulator --port 0``), drive a closed-loop sweep over real HTTP
(exactly C requests in flight; a finished request is replaced at once by the
next prompt) with a minimal aiohttp client on native ``/generate`` streaming,
count output tokens from ``meta_info.completion_tokens`` deltas, and print
emulated vs seed throughput with the % error.

Throughput at speed X is divided by X before it is compared, so a fast run
(``--speed 10``) checks the same curve; speed 1 is the real calibration.
``--simulate`` skips HTTP and runs the engine in virtual time (instant).

    .venv/bin/python tools/calibrate_emulator.py                     # speed 1, all profiles
    .venv/bin/python tools/calibrate_emulator.py --speed 10 --concurrency 1,30,250
    .venv/bin/python tools/calibrate_emulator.py --simulate

The seed figures come from benchmarks/history/measurements.csv
(diverse-prompts): baseline and eagle3-topk4-v1 from campaign parallel-sweep,
eagle3-topk1-v2 from overlap-topk1.
"""

from __future__ import annotations

import argparse
import asyncio
import csv
import json
import random
import re
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from findings.emulator.engine import simulate_closed_loop  # noqa: E402
from findings.emulator.model import PROFILES  # noqa: E402

SEED_CSV = ROOT / "benchmarks" / "history" / "measurements.csv"
SEED_CAMPAIGN = {"baseline": "parallel-sweep", "eagle3-topk4-v1": "parallel-sweep", "eagle3-topk1-v2": "overlap-topk1"}
READY = re.compile(r"listening on http://([^ ]+):(\d+) ")


def seed_curves(path: Path = SEED_CSV) -> dict[str, dict[int, float]]:
    curves: dict[str, dict[int, float]] = {name: {} for name in SEED_CAMPAIGN}
    with path.open(newline="") as f:
        for row in csv.DictReader(f):
            name = row["config"]
            if row["workload"] == "diverse-prompts" and SEED_CAMPAIGN.get(name) == row["campaign"]:
                curves[name][int(row["concurrency"])] = float(row["output_throughput_tok_s"])
    return curves


@dataclass(frozen=True)
class Point:
    profile: str
    concurrency: int
    prompts: int
    tokens: int
    duration_s: float
    speed: float

    @property
    def throughput(self) -> float:
        """Model-time tokens/s (wall tokens/s divided by the speed)."""
        return self.tokens / self.duration_s / self.speed


async def closed_loop(base: str, concurrency: int, prompts: int, input_len: int, output_len: int,
                      seed: int) -> tuple[int, float]:
    import aiohttp

    rng = random.Random(f"{seed}-{concurrency}")  # distinct prompts per point: no prefix-cache hits
    bodies = [
        {"input_ids": [rng.randrange(1, 32000) for _ in range(input_len)],
         "sampling_params": {"max_new_tokens": output_len, "ignore_eos": True, "temperature": 0.0},
         "stream": True, "rid": f"cal-{seed}-{concurrency}-{i}"}
        for i in range(prompts)
    ]
    next_index = 0
    tokens = 0
    connector = aiohttp.TCPConnector(limit=concurrency + 8)
    timeout = aiohttp.ClientTimeout(total=None, sock_read=600)

    async def one(session: aiohttp.ClientSession, body: dict[str, object]) -> int:
        got = 0
        async with session.post(f"{base}/generate", json=body) as resp:
            resp.raise_for_status()
            async for raw in resp.content:
                line = raw.strip()
                if not line.startswith(b"data:"):
                    continue
                data = line[5:].strip()
                if data == b"[DONE]":
                    break
                event = json.loads(data)
                if "error" in event:
                    raise RuntimeError(event["error"])
                got = max(got, int(event["meta_info"]["completion_tokens"]))
        return got

    async def worker(session: aiohttp.ClientSession) -> None:
        nonlocal next_index, tokens
        while next_index < prompts:
            body = bodies[next_index]
            next_index += 1
            got = await one(session, body)  # not `tokens += await ...`: that reads tokens before awaiting
            tokens += got

    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:
        async with session.post(f"{base}/flush_cache") as resp:
            resp.raise_for_status()
        start = time.perf_counter()
        await asyncio.gather(*(worker(session) for _ in range(min(concurrency, prompts))))
        return tokens, time.perf_counter() - start


def start_emulator(profile: str, speed: float, seed: int) -> tuple[subprocess.Popen[str], str]:
    proc = subprocess.Popen(
        [sys.executable, "-m", "findings.emulator", "--port", "0", "--profile", profile,
         "--speed", str(speed), "--seed", str(seed)],
        cwd=ROOT, stdout=subprocess.PIPE, text=True,
    )
    assert proc.stdout is not None
    line = proc.stdout.readline()
    match = READY.search(line)
    if not match:
        proc.kill()
        raise SystemExit(f"emulator did not start: {line!r}")
    return proc, f"http://{match.group(1)}:{match.group(2)}"


def measure(profile: str, concurrencies: list[int], args: argparse.Namespace) -> list[Point]:
    points = []
    if args.simulate:
        for c in concurrencies:
            n = max(args.prompts_factor * c, args.min_prompts)
            r = simulate_closed_loop(PROFILES[profile], c, n, args.input_len, args.output_len, args.seed)
            points.append(Point(profile, c, n, r.output_tokens, r.duration_s, 1.0))
        return points
    proc, base = start_emulator(profile, args.speed, args.seed)
    try:
        for c in concurrencies:
            n = max(args.prompts_factor * c, args.min_prompts)
            tokens, duration = asyncio.run(closed_loop(base, c, n, args.input_len, args.output_len, args.seed))
            point = Point(profile, c, n, tokens, duration, args.speed)
            points.append(point)
            print(f"  {profile} C={c}: {point.throughput:.1f} tok/s ({n} prompts, {duration:.1f} s wall)",
                  file=sys.stderr, flush=True)
    finally:
        proc.terminate()
        proc.wait(timeout=10)
    return points


def table(points: list[Point], seeds: dict[str, dict[int, float]]) -> str:
    rows = ["| profile | C | prompts | emulated tok/s | seed tok/s | error |", "|---|---:|---:|---:|---:|---:|"]
    for p in points:
        seed = seeds.get(p.profile, {}).get(p.concurrency)
        err = f"{100 * (p.throughput / seed - 1):+.1f}%" if seed else ""
        rows.append(f"| {p.profile} | {p.concurrency} | {p.prompts} | {p.throughput:.1f} | "
                    f"{'' if seed is None else f'{seed:.1f}'} | {err} |")
    return "\n".join(rows)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--profiles", default=",".join(SEED_CAMPAIGN), help="comma-separated profile names")
    ap.add_argument("--concurrency", default=None,
                    help="comma-separated C values (default: each profile's seed concurrencies)")
    ap.add_argument("--speed", type=float, default=1.0)
    ap.add_argument("--input-len", type=int, default=256)
    ap.add_argument("--output-len", type=int, default=128)
    ap.add_argument("--prompts-factor", type=int, default=2, help="prompts per point = max(F*C, --min-prompts)")
    ap.add_argument("--min-prompts", type=int, default=8)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--simulate", action="store_true", help="virtual time, no HTTP (instant)")
    args = ap.parse_args(argv)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # run the finally that stops the emulator
    seeds = seed_curves()
    points: list[Point] = []
    for profile in args.profiles.split(","):
        if profile not in PROFILES:
            ap.error(f"unknown profile {profile!r}")
        cs = ([int(c) for c in args.concurrency.split(",")] if args.concurrency
              else sorted(seeds.get(profile, {})) or [1, 10, 100])
        points += measure(profile, cs, args)
    mode = "simulated (virtual time)" if args.simulate else f"over HTTP at speed {args.speed:g}"
    print(f"Closed loop, input {args.input_len} / output {args.output_len} tokens, {mode}:\n")
    print(table(points, seeds))
    worst = max((abs(p.throughput / s - 1) for p in points if (s := seeds.get(p.profile, {}).get(p.concurrency))),
                default=0.0)
    print(f"\nlargest error: {100 * worst:.1f}%")
    return 0


if __name__ == "__main__":
    sys.exit(main())
