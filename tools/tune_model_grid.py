#!/usr/bin/env python3
"""Rank every valid SGLang speculative config of the tune search space by the
emulator's flags model, in virtual time (no HTTP, a few seconds).

The space and objective are benchmarks/tune-emulated.toml's (issue 40):
steps {1,2,3,4,6} x topk {1,2,4} x draft tokens {4,8,16} x overlap on/off x
max running requests {128} (passed explicitly), each normalized by SGLang's rules
(findings/core/engine_rules.py; refused ones dropped, duplicates after
normalization kept once); workload input 128, output 64 tokens, closed loop at
C = 1, 16, 64; score = sum(w_C * output_throughput(C)) / sum(w_C) with
w = {1: 0.7, 16: 0.2, 64: 0.1}.

Each point runs ``simulate_closed_loop`` (findings/emulator/engine.py: the
emulator's own scheduler and token draws, model time) on
``profile_from_flags``. Prints the top ten, the margin of the best over the
runner-up (over all configs, and over configs with distinct speculative
flags: max running requests only caps the batch, so twins that differ only
there tie unless C=64 is capped), the seed team's first config (steps 3,
topk 4, 16 draft tokens, no overlap), the baseline, and a one-flag-at-a-time
hill climb from that first config.

    .venv/bin/python tools/tune_model_grid.py [--prompts-per-c 8] [--json]
"""

from __future__ import annotations

import argparse
import itertools
import json
import sys
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from findings.core.engine_rules import SglangSpec, sglang_normalize  # noqa: E402
from findings.emulator.engine import simulate_closed_loop  # noqa: E402
from findings.emulator.model import FLAGS_MODEL, PROFILES, FlagsModel, Profile, profile_from_flags  # noqa: E402

STEPS = (1, 2, 3, 4, 6)
TOPK = (1, 2, 4)
DRAFT = (4, 8, 16)
OVERLAP = (True, False)
MAX_RUNNING = (128,)
WEIGHTS = {1: 0.7, 16: 0.2, 64: 0.1}
INPUT_LEN, OUTPUT_LEN = 128, 64
SEED_FIRST = SglangSpec("EAGLE3", 3, 4, 16, False, 128)


def space() -> dict[SglangSpec, SglangSpec]:
    """Every combination, normalized: {normalized: first raw spec giving it}."""
    out: dict[SglangSpec, SglangSpec] = {}
    for s, k, d, ov, mr in itertools.product(STEPS, TOPK, DRAFT, OVERLAP, MAX_RUNNING):
        raw = SglangSpec("EAGLE3", s, k, d, ov, mr)
        try:
            norm, _ = sglang_normalize(raw)
        except ValueError:
            continue
        out.setdefault(norm, raw)
    return out


def throughputs(profile: Profile, max_running: int | None, prompts_per_c: int) -> dict[int, float]:
    return {c: simulate_closed_loop(profile, c, max(c * prompts_per_c, 32), INPUT_LEN, OUTPUT_LEN,
                                    max_running=max_running).throughput for c in WEIGHTS}


def score(tp: dict[int, float]) -> float:
    return sum(WEIGHTS[c] * tp[c] for c in WEIGHTS) / sum(WEIGHTS.values())


def label(spec: SglangSpec) -> str:
    return (f"s{spec.num_steps} k{spec.eagle_topk} d{spec.num_draft_tokens} "
            f"{'overlap' if spec.overlap else 'no-overlap'} mrr{spec.max_running_requests}")


def rank(params: FlagsModel, prompts_per_c: int) -> list[tuple[float, SglangSpec, dict[int, float]]]:
    rows = []
    for norm in space():
        tp = throughputs(profile_from_flags(norm, params), norm.max_running_requests, prompts_per_c)
        rows.append((score(tp), norm, tp))
    rows.sort(key=lambda r: -r[0])
    return rows


def climb(rows: list[tuple[float, SglangSpec, dict[int, float]]], start: SglangSpec) -> list[tuple[SglangSpec, float]]:
    """Greedy one-flag-at-a-time ascent over the raw space (a move that SGLang refuses is skipped)."""
    by_norm = {r[1]: r[0] for r in rows}
    axes = {"num_steps": STEPS, "eagle_topk": TOPK, "num_draft_tokens": DRAFT, "overlap": OVERLAP,
            "max_running_requests": MAX_RUNNING}

    def value(raw: SglangSpec) -> float | None:
        try:
            return by_norm.get(sglang_normalize(raw)[0])
        except ValueError:
            return None

    cur = start
    cur_v = value(cur)
    assert cur_v is not None
    path = [(cur, cur_v)]
    while True:
        best: tuple[SglangSpec, float] | None = None
        for field, values in axes.items():
            for v in values:
                cand = replace(cur, **{field: v})
                cv = value(cand)
                if cv is not None and cv > cur_v and (best is None or cv > best[1]):
                    best = (cand, cv)
        if best is None:
            return path
        cur, cur_v = best
        path.append(best)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--prompts-per-c", type=int, default=8, help="requests per point = C x this (at least 32)")
    ap.add_argument("--json", action="store_true", help="print the ranking as JSON instead")
    for f in ("accept_p1", "topk_gain", "draft_step_ms", "draft_node_ms"):
        ap.add_argument("--" + f.replace("_", "-"), type=float, default=getattr(FLAGS_MODEL, f))
    a = ap.parse_args()
    params = replace(FLAGS_MODEL, accept_p1=a.accept_p1, topk_gain=a.topk_gain, draft_step_ms=a.draft_step_ms,
                     draft_node_ms=a.draft_node_ms)
    rows = rank(params, a.prompts_per_c)
    base_tp = throughputs(PROFILES["baseline"], None, a.prompts_per_c)
    seed_norm = sglang_normalize(SEED_FIRST)[0]
    seed_row = next(r for r in rows if r[1] == seed_norm)
    distinct: list[tuple[float, SglangSpec, dict[int, float]]] = []
    seen: set[SglangSpec] = set()
    for r in rows:
        key = replace(r[1], max_running_requests=None)
        if key not in seen:
            seen.add(key)
            distinct.append(r)
    if a.json:
        print(json.dumps([{"config": label(r[1]), "score": r[0], "throughput": r[2]} for r in rows], indent=1))
        return 0
    print(f"{len(rows)} valid configs (normalized); flags model {params}")
    print(f"{'rank':>4}  {'score':>7}  {'C=1':>6} {'C=16':>6} {'C=64':>6}  config")
    for i, (sc, spec, tp) in enumerate(rows[:10], 1):
        print(f"{i:>4}  {sc:7.1f}  {tp[1]:6.1f} {tp[16]:6.1f} {tp[64]:6.1f}  {label(spec)}")
    best, second = rows[0], rows[1]
    print(f"best over runner-up (all configs): {100 * (best[0] / second[0] - 1):.1f}% "
          f"({label(best[1])} vs {label(second[1])})")
    print(f"best over runner-up (distinct speculative flags): {100 * (distinct[0][0] / distinct[1][0] - 1):.1f}% "
          f"({label(distinct[0][1])} vs {label(distinct[1][1])})")
    print(f"seed first config {label(seed_norm)}: score {seed_row[0]:.1f} "
          f"(best is {100 * (best[0] / seed_row[0] - 1):.0f}% higher), rank {rows.index(seed_row) + 1}")
    print(f"baseline (no speculation): score {score(base_tp):.1f} "
          f"(C=1 {base_tp[1]:.1f}, C=16 {base_tp[16]:.1f}, C=64 {base_tp[64]:.1f})")
    print("hill climb from the seed's first config, one flag at a time:")
    for spec, v in climb(rows, SEED_FIRST):
        print(f"  {v:7.1f}  {label(spec)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
