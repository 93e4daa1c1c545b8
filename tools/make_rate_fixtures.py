"""Rate-sweep and multi-workload fixtures, made by editing copies of the
format-exact fixtures consistently (issue 37, D97/D98).

Not measured: each line is a copy of an existing fixture line with its load
(``request_rate``, ``burstiness``, ``max_concurrency``, lengths) changed and
every number that depends on it recomputed from one simple model, so the
aggregates agree with one another (throughput = tokens / duration,
request_throughput = completed / duration, sglang's ``concurrency`` =
sum(e2e) / duration, each latency family scaled as a whole so its
mean/median/std/percentiles keep their shape). Key order, separators,
``Infinity``/``"inf"`` and line endings are the tools' own, as the
templates have them. The fixture READMEs say which file came from which.

    python tools/make_rate_fixtures.py        # rewrites the files below
"""

from __future__ import annotations

import json
import math
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SGL = ROOT / "tests" / "fixtures" / "sglang_bench"
VLLM = ROOT / "tests" / "fixtures" / "vllm_bench"
AIPERF = ROOT / "tests" / "fixtures" / "aiperf"

STATS = ("mean", "median", "std", "p50", "p90", "p95", "p99")


def _scale(doc: dict, family: str, factor: float) -> None:
    for stat in STATS:
        key = f"{stat}_{family}_ms"
        if isinstance(doc.get(key), (int, float)):
            doc[key] = doc[key] * factor


def _model(rate: float, speculative: bool) -> tuple[float, float]:
    """Median TPOT and TTFT (ms) at a rate: speculation is faster per token
    at low load and loses its edge as the batch grows (crossover near 12.5 req/s)."""
    tpot = 20.0 * (1 + 0.04 * rate)
    if speculative:
        tpot = 12.0 * (1 + 0.12 * rate)
    ttft = 80.0 * (1 + 0.1 * rate)
    return tpot, ttft


def sglang_line(template: dict, *, rate: float | None, cap: int | None, input_len: int | None = None,
                output_len: int | None = None) -> dict:
    d = json.loads(json.dumps(template))
    n = d["completed"]
    if input_len is not None:
        d["random_input_len"] = input_len
        d["total_input_tokens"] = d["total_input_text_tokens"] = n * input_len
    if output_len is not None:
        d["random_output_len"] = output_len
        d["total_output_tokens"] = n * output_len
        d["total_output_tokens_retokenized"] = n * output_len - 21
    out = d["random_output_len"]
    d["request_rate"] = math.inf if rate is None else float(rate)
    d["max_concurrency"] = cap
    tpot, ttft = _model(rate if rate is not None else 8.0, speculative=False)
    if rate is None:  # a closed loop at the template's C: the lengths change only
        tpot, ttft = d["median_tpot_ms"], d["median_ttft_ms"] * d["random_input_len"] / template["random_input_len"]
    ft, fs = tpot / d["median_tpot_ms"], ttft / d["median_ttft_ms"]
    _scale(d, "tpot", ft)
    _scale(d, "itl", ft)
    _scale(d, "ttft", fs)
    e2e = d["mean_ttft_ms"] + d["mean_tpot_ms"] * (out - 1)
    _scale(d, "e2e_latency", e2e / d["mean_e2e_latency_ms"])
    if rate is not None:  # the last request is sent at about n / rate and ends one latency later
        duration = n / rate + e2e / 1000
    else:  # a closed loop at the same C: the time scales with each request's latency
        duration = template["duration"] * e2e / template["mean_e2e_latency_ms"]
    d["duration"] = duration
    d["request_throughput"] = n / duration
    d["input_throughput"] = d["total_input_tokens"] / duration
    d["output_throughput"] = d["total_output_tokens"] / duration
    d["total_throughput"] = d["input_throughput"] + d["output_throughput"]
    d["concurrency"] = n * e2e / 1000 / duration
    d["max_output_tokens_per_s"] = float(round(d["output_throughput"] * 1.08))
    d["max_concurrent_requests"] = min(cap or n, math.ceil(d["concurrency"] * 1.5) + 1)
    return d


def vllm_line(template: dict, *, rate: float, cap: int | None, speculative: bool, label: str) -> dict:
    d = json.loads(json.dumps(template))
    n = d["completed"]
    out = d["total_output_tokens"] / n
    d["label"] = label
    d["spec"] = "eagle3" if speculative else "none"
    if not speculative:  # vLLM writes spec_decode_* only when the server exposes the counters
        for k in [k for k in d if k.startswith("spec_decode_")]:
            del d[k]
    d["request_rate"] = float(rate)
    d["burstiness"] = 1.0
    d["max_concurrency"] = cap
    tpot, ttft = _model(rate, speculative)
    ft, fs = tpot / d["median_tpot_ms"], ttft / d["median_ttft_ms"]
    _scale(d, "tpot", ft)
    _scale(d, "itl", ft)
    _scale(d, "ttft", fs)
    e2e = d["mean_ttft_ms"] + d["mean_tpot_ms"] * (out - 1)
    fe = e2e / d["mean_e2el_ms"]
    _scale(d, "e2el", fe)
    d["latencies"] = [x * fe for x in d["latencies"]]
    d["queue_times"] = [0.0 for _ in d["queue_times"]]  # no waiting for a slot at these rates
    duration = n / rate + e2e / 1000
    d["duration"] = duration
    d["request_throughput"] = n / duration
    d["output_throughput"] = d["total_output_tokens"] / duration
    d["total_token_throughput"] = (d["total_input_tokens"] + d["total_output_tokens"]) / duration
    d["max_output_tokens_per_s"] = float(round(d["output_throughput"] * 1.08))
    d["max_concurrent_requests"] = min(cap or n, math.ceil(n * e2e / 1000 / duration * 1.5) + 1)
    return d


def _pct(values: list[float], q: float) -> float:
    """numpy.percentile's default (linear interpolation), as vLLM computes it."""
    xs = sorted(values)
    k = (len(xs) - 1) * q / 100
    lo, hi = math.floor(k), math.ceil(k)
    return xs[lo] + (xs[hi] - xs[lo]) * (k - lo)


def _std(values: list[float]) -> float:
    m = sum(values) / len(values)
    return math.sqrt(sum((x - m) ** 2 for x in values) / len(values))


def vllm_detailed(template: dict, *, rate: float, speculative: bool, label: str, n: int = 40,
                  out: int = 32, seed: int = 1) -> dict:
    """A --save-detailed result at one rate: per-request lists drawn from the
    model (seeded), the aggregates computed from them as vLLM's
    calculate_metrics does (numpy mean, median, std, percentile)."""
    import random

    # The same arrivals for every config (vLLM's --seed, 0 by default, draws the schedule),
    # the server's times per config.
    arrivals = random.Random(seed * 1000 + int(rate * 10))
    rng = random.Random(seed * 1000 + int(rate * 10) + (1 if speculative else 0) + 500)
    d = json.loads(json.dumps(template))
    tpot0, ttft0 = _model(rate, speculative)
    starts, t = [], 1000.0
    for _ in range(n):
        t += arrivals.expovariate(rate)
        starts.append(t)
    ttfts = [ttft0 / 1000 * rng.uniform(0.7, 1.3) for _ in range(n)]
    itls = [[tpot0 / 1000 * rng.uniform(0.8, 1.2) for _ in range(out - 1)] for _ in range(n)]
    lat = [f + sum(i) for f, i in zip(ttfts, itls)]
    tpots = [sum(i) / (out - 1) for i in itls]
    duration = max(s + x for s, x in zip(starts, lat)) - starts[0]
    ins = [256] * n
    d.update(label=label, request_rate=float(rate), burstiness=1.0, max_concurrency=None, duration=duration,
             completed=n, failed=0, num_prompts=n, total_input_tokens=sum(ins), total_output_tokens=n * out,
             request_throughput=n / duration, output_throughput=n * out / duration,
             total_token_throughput=(sum(ins) + n * out) / duration, input_lens=ins, output_lens=[out] * n,
             ttfts=ttfts, itls=itls, latencies=lat, start_times=starts, queue_times=[0.0] * n,
             generated_texts=[" the" * out] * n, errors=[""] * n,
             max_output_tokens_per_s=float(round(n * out / duration * 1.5)),
             max_concurrent_requests=max(1, math.ceil(sum(lat) / duration * 1.5)))
    flat = [x for i in itls for x in i]
    for key, xs in (("ttft", ttfts), ("tpot", tpots), ("itl", flat)):
        ms = [x * 1000 for x in xs]
        d[f"mean_{key}_ms"] = sum(ms) / len(ms)
        d[f"median_{key}_ms"] = _pct(ms, 50)
        d[f"std_{key}_ms"] = _std(ms)
        d[f"p99_{key}_ms"] = _pct(ms, 99)
    return d


def main() -> None:
    base = [json.loads(x) for x in (SGL / "v0_5_23_baseline.jsonl").read_text().splitlines()]
    c30 = base[1]
    lines = [sglang_line(c30, rate=r, cap=None) for r in (1, 2, 4, 8, 16)]
    (SGL / "v0_5_23_rate_sweep.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    lines = [sglang_line(c30, rate=r, cap=16) for r in (2, 8)]
    (SGL / "v0_5_23_rate_cap.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    lines = [sglang_line(c30, rate=None, cap=30, input_len=i, output_len=o)
             for i, o in ((1000, 1000), (1000, 200), (4000, 200), (200, 1000))]
    (SGL / "v0_5_23_four_lengths.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))

    eagle = json.loads((VLLM / "v0_33_0_eagle3_c30.json").read_text())
    for name, spec, label in (("baseline", False, "baseline"), ("eagle3", True, "eagle3-topk1")):
        objs = [vllm_line(eagle, rate=r, cap=None, speculative=spec, label=label) for r in (1, 2, 4, 8, 16)]
        (VLLM / f"v0_33_0_rate_sweep_{name}.json").write_text("\n".join(json.dumps(o) for o in objs))
    (VLLM / "v0_33_0_rate_cap.json").write_text(
        json.dumps(vllm_line(eagle, rate=8, cap=32, speculative=True, label="eagle3-topk1")))

    detailed = json.loads((VLLM / "v0_33_0_detailed.json").read_text())
    for name, spec, label in (("baseline", False, "baseline"), ("eagle3", True, "eagle3-topk1")):
        objs = [vllm_detailed(detailed, rate=r, speculative=spec, label=label) for r in (1, 2, 4, 8)]
        (VLLM / f"v0_33_0_rate_detailed_{name}.json").write_text("\n".join(json.dumps(o) for o in objs))

    doc = json.loads((AIPERF / "aiperf_0_13_0_rate_errors.json").read_text())
    phase = doc["input_config"]["phases"][0]
    doc["input_config"]["phases"][0] = {"name": phase["name"], "kind": phase["kind"], "type": "gamma",
                                        "requests": phase["requests"], "concurrency": 16, "rate": phase["rate"],
                                        "smoothness": 0.5}
    doc["run_info"]["cli_command"] += " --concurrency 16 --arrival-pattern gamma --arrival-smoothness 0.5"
    (AIPERF / "aiperf_0_13_0_rate_gamma_cap.json").write_text(json.dumps(doc, indent=2))


if __name__ == "__main__":
    main()
