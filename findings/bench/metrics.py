"""Per-point metrics derived from raw per-request records. Pure.

Names follow sglang.bench_serving where one exists (``*_ms`` milliseconds),
so that imported and measured points compare directly.
"""

from __future__ import annotations

import math
from typing import Any, Sequence

from findings.bench.records import PointOutcome, RequestRecord
from findings.datasets.model import category_key
from findings.core.model import THROUGHPUT
from findings.derive.validity import only_counts
from findings.load.spec import phase_key


def percentile(values: Sequence[float], q: float) -> float:
    """Linear interpolation between closest ranks (numpy's default)."""
    if not values:
        return math.nan
    s = sorted(values)
    pos = (len(s) - 1) * q / 100.0
    lo = math.floor(pos)
    hi = min(lo + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (pos - lo)


def _stats(prefix: str, values: Sequence[float], scale: float = 1000.0) -> dict[str, float]:
    if not values:
        return {}
    out = {
        f"mean_{prefix}_ms": sum(values) / len(values) * scale,
        f"median_{prefix}_ms": percentile(values, 50) * scale,
        f"p90_{prefix}_ms": percentile(values, 90) * scale,
        f"p99_{prefix}_ms": percentile(values, 99) * scale,
    }
    return out


def itls(rec: RequestRecord) -> list[float]:
    """Inter-token latencies: each event's gap split evenly over the tokens it added."""
    out: list[float] = []
    for (t0, n0), (t1, n1) in zip(rec.events, rec.events[1:]):
        added = n1 - n0
        if added > 0:
            out.extend([(t1 - t0) / added] * added)
    return out


def derive(outcome: PointOutcome) -> dict[str, float]:
    recs = outcome.records
    ok = [r for r in recs if r.ok]
    duration = max(outcome.finished - outcome.started, 1e-9)
    out_tokens = sum(r.output_tokens for r in ok)
    m: dict[str, float] = {
        THROUGHPUT: out_tokens / duration,
        "duration": duration,
        "completed": float(len(ok)),
        "failed": float(len(recs) - len(ok)),
        "planned": float(outcome.planned),
        "request_throughput": len(ok) / duration,
        "total_output_tokens": float(out_tokens),
        "total_input_tokens": float(sum(r.input_len for r in ok)),
    }
    m["input_throughput"] = m["total_input_tokens"] / duration
    ttft = [r.first_token - r.sent for r in ok if r.first_token is not None]
    e2e = [r.end - r.sent for r in ok if r.end is not None]
    tpot = [
        (r.end - r.first_token) / (r.output_tokens - 1)
        for r in ok
        if r.end is not None and r.first_token is not None and r.output_tokens > 1
    ]
    itl = [x for r in ok for x in itls(r)]
    m.update(_stats("ttft", ttft))
    m.update(_stats("tpot", tpot))
    m.update(_stats("itl", itl))
    m.update(_stats("e2e_latency", e2e))
    if e2e:
        m["concurrency"] = sum(e2e) / duration  # measured mean in flight, as sglang reports it
    verify = [r for r in ok if r.spec_verify_ct]
    if verify:
        calls = sum(r.spec_verify_ct or 0 for r in verify)
        m["accept_length"] = sum(r.output_tokens for r in verify) / calls
        # SGLang's per-request verify calls (meta_info.spec_verify_ct), summed and per request:
        # how much an adaptive schedule drafted, beside the counters' spec_verify_calls_metrics.
        m["spec_verify_calls"] = float(calls)
        m["spec_verify_ct_mean"] = calls / len(verify)
    elif (vllm := vllm_accept_length(ok)) is not None:
        m["accept_length"] = vllm
    drafted = [r for r in ok if r.draft_n is not None and r.draft_accepted is not None]
    if drafted:
        # llama.cpp: accepted / drafted tokens over the point's requests.
        m["draft_tokens"] = float(sum(r.draft_n or 0 for r in drafted))
        m["draft_accepted_tokens"] = float(sum(r.draft_accepted or 0 for r in drafted))
        if m["draft_tokens"] > 0:
            m["draft_acceptance"] = m["draft_accepted_tokens"] / m["draft_tokens"]
    steps = _tokens_per_event(ok)
    if steps is not None:
        m["tokens_per_event"] = steps
    m.update(_server_figures(ok))
    m.update(_counter_deltas(outcome))
    m.update(per_category(recs))
    if outcome.cpu_s is not None:
        m["client_cpu_fraction"] = outcome.cpu_s / duration
        m["client_cpu_s"] = outcome.cpu_s
    run = outcome.running_samples
    if run:
        # The server's running batch during the point (its gauge, sampled every
        # running_sample_s, 1 s by default, ramp-up and ramp-down included): what speculation schedules
        # switch on, against the client's concurrency C.
        m["server_running_mean"] = sum(run) / len(run)
        m["server_running_p50"] = percentile(run, 50)
        m["server_running_p90"] = percentile(run, 90)
        m["server_running_max"] = max(run)
        m["server_running_samples"] = float(len(run))
        if outcome.running_interval_s is not None:
            m["server_running_interval_s"] = outcome.running_interval_s
    if outcome.lag_samples_ms:
        lag = outcome.lag_samples_ms
        m["client_loop_lag_p50_ms"] = percentile(lag, 50)
        m["client_loop_lag_p99_ms"] = percentile(lag, 99)
        m["client_loop_lag_max_ms"] = max(lag)
    m["client_workers"] = float(len(outcome.workers) or 1)
    if outcome.workers:
        m.update(worker_metrics(outcome))
    reconnects = sum(r.reconnects for r in recs)
    if reconnects:
        m["reconnects"] = float(reconnects)
    for kind in sorted({r.error_type for r in recs if r.error_type}):
        m[f"errors_{kind}"] = float(sum(1 for r in recs if r.error_type == kind))
    # Client timing error against the emulator's ground truth: the client's
    # TTFT minus the server's own arrival -> first-write time.
    err = [
        (r.first_token - r.sent) - (r.server_first_event_wall - r.server_arrival_wall)
        for r in ok
        if r.first_token is not None and r.server_first_event_wall is not None
        and r.server_arrival_wall is not None
    ]
    if err:
        m["ttft_client_error_p50_ms"] = percentile(err, 50) * 1000
        m["ttft_client_error_p99_ms"] = percentile(err, 99) * 1000
    # ITL error: each gap between two events as the client saw it, minus the
    # gap between the server's writes of the same two events.
    gap_err = [
        (t1 - t0) - (s1 - s0)
        for r in ok
        if len(r.server_event_walls) == len(r.events) > 1
        for (t0, _), (t1, _), s0, s1 in zip(r.events, r.events[1:], r.server_event_walls, r.server_event_walls[1:])
    ]
    if gap_err:
        m["itl_client_error_p50_ms"] = percentile(gap_err, 50) * 1000
        m["itl_client_error_p99_ms"] = percentile(gap_err, 99) * 1000
    if outcome.schedule_start is not None:
        m.update(open_loop(outcome, outcome.phase_ends, outcome.slo))
    m = {k: v for k, v in m.items() if math.isfinite(v)}
    if recs and not ok:
        # Every request failed: a throughput of 0 and no latencies would
        # measure nothing; the point keeps its counts and its error types.
        return only_counts(m)
    return m


def worker_key(i: int, name: str) -> str:
    """A worker process's own figure: ``client_worker{i}_{name}`` (i from 1)."""
    return f"client_worker{i + 1}_{name}"


def worker_metrics(outcome: PointOutcome) -> dict[str, float]:
    """A point of several worker processes: each worker's CPU share, event
    loop lag and (open loop) send lateness, and the point's client figures
    as the worst worker's, so that a point is client-bound if any worker is
    (findings/derive/validity.py reads ``client_cpu_fraction`` and
    ``client_loop_lag_p99_ms``). Latencies and lateness of the point itself
    come from the merged raw records, never from per-worker summaries."""
    m: dict[str, float] = {}
    lag: dict[str, list[float]] = {"p50": [], "p99": [], "max": []}
    for w in outcome.workers:
        m[worker_key(w.index, "concurrency")] = float(w.concurrency)
        m[worker_key(w.index, "requests")] = float(w.requests)
        m[worker_key(w.index, "cpu_s")] = w.cpu_s
        m[worker_key(w.index, "cpu_fraction")] = w.cpu_fraction
        if w.lag_samples_ms:
            for q, v in (("p50", percentile(w.lag_samples_ms, 50)), ("p99", percentile(w.lag_samples_ms, 99)),
                         ("max", max(w.lag_samples_ms))):
                m[worker_key(w.index, f"loop_lag_{q}_ms")] = v
                lag[q].append(v)
        late = [_lateness(r) for r in outcome.records
                if r.worker == w.index and r.scheduled is not None and r.sent]
        if late:
            m[worker_key(w.index, "send_lateness_p99_ms")] = percentile(late, 99) * 1000
    m["client_cpu_fraction"] = max(w.cpu_fraction for w in outcome.workers)
    m["client_cpu_s"] = sum(w.cpu_s for w in outcome.workers)
    for q, values in lag.items():
        if values:
            m[f"client_loop_lag_{q}_ms"] = max(values)
    return m


def _in_flight(spans: Sequence[tuple[float, float]], t0: float, t1: float) -> dict[str, float]:
    """Requests in flight over [t0, t1], weighted by time: mean, median, p99
    and max of the step function that each send raises and each end lowers."""
    if t1 <= t0 or not spans:
        return {}
    edges = sorted([(max(a, t0), 1) for a, b in spans if b > t0 and a < t1]
                   + [(min(b, t1), -1) for a, b in spans if b > t0 and a < t1])
    level, last, top = 0, t0, 0
    weight: dict[int, float] = {}
    for t, step in edges:
        if t > last:
            weight[level] = weight.get(level, 0.0) + (t - last)
            last = t
        level += step
        top = max(top, level)
    if t1 > last:
        weight[level] = weight.get(level, 0.0) + (t1 - last)
    total = sum(weight.values())
    out = {"inflight_mean": sum(k * w for k, w in weight.items()) / total, "inflight_max": float(top)}
    for q, name in ((0.5, "inflight_p50"), (0.99, "inflight_p99")):
        acc = 0.0
        for k in sorted(weight):
            acc += weight[k]
            if acc >= q * total:
                out[name] = float(k)
                break
    return out


def _latency(ok: Sequence[RequestRecord]) -> tuple[list[float], list[float]]:
    ttft = [r.first_token - r.sent for r in ok if r.first_token is not None]
    tpot = [(r.end - r.first_token) / (r.output_tokens - 1) for r in ok
            if r.end is not None and r.first_token is not None and r.output_tokens > 1]
    return ttft, tpot


def meets_slo(r: RequestRecord, ttft_ms: float | None, tpot_ms: float | None) -> bool:
    """vLLM's --goodput: every limit given is met (a failed request meets none)."""
    if not r.ok:
        return False
    if ttft_ms is not None and (r.first_token is None or (r.first_token - r.sent) * 1000 > ttft_ms):
        return False
    if tpot_ms is not None and r.output_tokens > 1 and r.end is not None and r.first_token is not None:
        if (r.end - r.first_token) / (r.output_tokens - 1) * 1000 > tpot_ms:
            return False
    return True


def _window(recs: Sequence[RequestRecord], t0: float, t1: float,
            slo: tuple[float | None, float | None] | None) -> dict[str, float]:
    """Requests whose send was due in [t0, t1): counts, rates, latencies and
    SLO goodput; output tokens streamed within the window (by event times)."""
    firsts = [r for r in recs if r.scheduled is not None and t0 <= r.scheduled < t1]
    span = t1 - t0
    m: dict[str, float] = {"requests": float(len(firsts)), "duration": span}
    if span <= 0:
        return m
    m["offered_rate_req_s"] = len(firsts) / span
    ok = [r for r in firsts if r.ok]
    m["completed"] = float(len(ok))
    ttft, tpot = _latency(ok)
    m.update(_stats("ttft", ttft))
    m.update(_stats("tpot", tpot))
    tokens = 0
    for r in recs:
        prev = 0
        for t, n in r.events:
            if t0 <= t < t1:
                tokens += n - prev
            prev = n
    m[THROUGHPUT] = tokens / span
    if slo is not None and firsts:
        met = sum(1 for r in firsts if meets_slo(r, *slo))
        m["slo_met"] = float(met)
        m["slo_attainment"] = met / len(firsts)
        m["goodput_req_s"] = met / span
    return m


def _lateness(r: RequestRecord) -> float:
    """How late the client wrote a request against its schedule, less any
    wait for a slot under the cap (``cap_wait``): the body's write (``sent``)
    less the later of when it was due and when a slot was free."""
    assert r.scheduled is not None
    return r.sent - max(r.scheduled, r.admitted if r.admitted is not None else r.scheduled)


def open_loop(outcome: PointOutcome, phase_ends: Sequence[float] = (),
              slo: tuple[float | None, float | None] | None = None) -> dict[str, float]:
    """An open-loop point: the schedule's offered rate against what was sent,
    the client's send lateness (written - due) and the wait for a slot
    under the cap, the requests in flight over time, goodput under the SLO;
    per phase of a profile (``phase_ends``: seconds from the start) the same
    as ``phase.{i}.*``."""
    start = outcome.schedule_start
    assert start is not None
    recs = outcome.records
    firsts = [r for r in recs if r.scheduled is not None]
    m: dict[str, float] = {}
    if not firsts:
        return m
    last_due = max(r.scheduled or 0.0 for r in firsts) - start
    if last_due > 0:
        m["offered_rate_req_s"] = len(firsts) / last_due
    sent = [r.sent for r in firsts if r.sent]
    if sent and max(sent) > start:
        m["achieved_rate_req_s"] = len(sent) / (max(sent) - start)
    late = [_lateness(r) for r in firsts if r.sent and r.scheduled is not None]
    if late:
        m["send_lateness_p50_ms"] = percentile(late, 50) * 1000
        m["send_lateness_p99_ms"] = percentile(late, 99) * 1000
        m["send_lateness_max_ms"] = max(late) * 1000
    wait = [max(0.0, r.admitted - r.scheduled) for r in firsts if r.admitted is not None and r.scheduled is not None]
    if wait:
        m["cap_wait_p99_ms"] = percentile(wait, 99) * 1000
        m["cap_wait_max_ms"] = max(wait) * 1000
    spans = [(r.sent, r.end if r.end is not None else (r.first_token or r.sent)) for r in recs if r.sent]
    m.update(_in_flight(spans, start, outcome.finished))
    if slo is not None:
        # Every request counts, later turns too; a failed or skipped one meets nothing.
        met = sum(1 for r in recs if meets_slo(r, *slo))
        m["slo_met"] = float(met)
        m["slo_attainment"] = met / len(recs)
        m["goodput_req_s"] = met / max(outcome.finished - start, 1e-9)
    bounds = [0.0, *phase_ends]
    times, values = outcome.running_times, outcome.running_samples
    for i, (a, b) in enumerate(zip(bounds, bounds[1:]), start=1):
        for name, v in _window(recs, start + a, start + b, slo).items():
            m[phase_key(i, name)] = v
        run = [v for t, v in zip(times, values) if start + a <= t < start + b]
        if run:
            m[phase_key(i, "server_running_mean")] = sum(run) / len(run)
            m[phase_key(i, "server_running_p50")] = percentile(run, 50)
        for name, v in _in_flight(spans, start + a, start + b).items():
            m[phase_key(i, name)] = v
    return m


def vllm_accept_length(ok: Sequence[RequestRecord]) -> float | None:
    """vLLM's accept length over requests that report their verify steps:
    1 + accepted / steps, as its counters define it."""
    steps = [r for r in ok if r.spec_steps]
    if not steps:
        return None
    return 1 + sum(r.draft_accepted or 0 for r in steps) / sum(r.spec_steps or 0 for r in steps)


def _tokens_per_event(ok: Sequence[RequestRecord]) -> float | None:
    """Tokens per streamed event after the first, over the point's requests:
    a speculative server streams each verify step's accepted tokens together,
    so this is the client's view of the accept length (where the server
    streams every step; vLLM merges steps when the client falls behind)."""
    multi = [r for r in ok if len(r.events) > 1]
    steps = sum(len(r.events) - 1 for r in multi)
    return sum(r.output_tokens - r.events[0][1] for r in multi) / steps if steps else None


def per_category(recs: Sequence[RequestRecord]) -> dict[str, float]:
    """Per dataset category: requests (every turn sent or planned), completed,
    output tokens, TPOT, each request's decode rate, and acceptance where the
    server reports it per request (SGLang's verify steps, llama.cpp's drafts)
    or streams it (tokens per event)."""
    by: dict[str, list[RequestRecord]] = {}
    for r in recs:
        if r.category is not None:
            by.setdefault(r.category, []).append(r)
    m: dict[str, float] = {}
    for cat, rs in sorted(by.items()):
        ok = [r for r in rs if r.ok]
        m[category_key(cat, "requests")] = float(len(rs))
        m[category_key(cat, "completed")] = float(len(ok))
        m[category_key(cat, "output_tokens")] = float(sum(r.output_tokens for r in ok))
        tpot = [(r.end - r.first_token) / (r.output_tokens - 1) for r in ok
                if r.end is not None and r.first_token is not None and r.output_tokens > 1]
        if tpot:
            m[category_key(cat, "median_tpot_ms")] = percentile(tpot, 50) * 1000
            m[category_key(cat, "mean_tpot_ms")] = sum(tpot) / len(tpot) * 1000
            m[category_key(cat, "decode_tok_s")] = sum(1 / t for t in tpot if t > 0) / len(tpot)
        verify = [r for r in ok if r.spec_verify_ct]
        vllm = vllm_accept_length(ok)
        if verify:
            m[category_key(cat, "accept_length")] = (sum(r.output_tokens for r in verify)
                                                     / sum(r.spec_verify_ct or 0 for r in verify))
        elif vllm is not None:
            m[category_key(cat, "accept_length")] = vllm
        drafted = [r for r in ok if r.draft_n]
        if drafted:
            m[category_key(cat, "draft_acceptance")] = (sum(r.draft_accepted or 0 for r in drafted)
                                                        / sum(r.draft_n or 0 for r in drafted))
        steps = _tokens_per_event(ok)
        if steps is not None:
            m[category_key(cat, "tokens_per_event")] = steps
    return m


def _server_figures(ok: Sequence[RequestRecord]) -> dict[str, float]:
    """What the server said about each request, summed over the point."""
    m: dict[str, float] = {}
    cached = [r.cached_tokens for r in ok if r.cached_tokens is not None]
    if cached:
        m["cached_prompt_tokens"] = float(sum(cached))
    told = [r for r in ok if r.server_output_tokens is not None]
    if told:
        # llama.cpp: its own count of each response's tokens (timings.predicted_n)
        # against the usage the client counted from.
        m["server_output_tokens"] = float(sum(r.server_output_tokens or 0 for r in told))
        m["token_count_mismatches"] = float(sum(1 for r in told if r.server_output_tokens != r.output_tokens))
    return m


def _delta(before: dict[str, float], after: dict[str, float], name: str) -> float | None:
    if name not in after:
        return None
    return after[name] - before.get(name, 0.0)


def _counter_deltas(outcome: PointOutcome) -> dict[str, float]:
    """The server's /metrics counters over the point's window: scraped after
    the warm-up and after the last request (client.run_point), so the deltas
    cover exactly the point's requests when nothing else uses the server."""
    before, after = outcome.metrics_before, outcome.metrics_after
    if not before or not after:
        return {}
    m: dict[str, float] = {}
    llama = "llamacpp:tokens_predicted_total" in after
    vllm = "vllm:generation_tokens_total" in after
    gen = _delta(before, after, "llamacpp:tokens_predicted_total" if llama else
                 "vllm:generation_tokens_total" if vllm else "sglang:generation_tokens_total")
    if gen is not None and gen > 0:
        m["server_generation_tokens"] = gen
        if outcome.metrics_window is not None:
            t0, t1 = outcome.metrics_window
            if t1 > t0:
                m["server_metrics_window_s"] = t1 - t0
                m["server_output_throughput_tok_s"] = gen / (t1 - t0)
    if vllm:
        m.update(_vllm_spec(before, after))
        prompt = _delta(before, after, "vllm:prompt_tokens_total")
        if prompt is not None and prompt > 0:
            m["server_prompt_tokens"] = prompt
        # prometheus_client exposes vLLM's counter vllm:prefix_cache_hits as ..._total.
        hits = _delta(before, after, "vllm:prefix_cache_hits_total")
        if hits is not None:
            m["server_cached_tokens"] = hits
    elif llama:
        dn = _delta(before, after, "llamacpp:spec_decode_num_draft_tokens_total")
        da = _delta(before, after, "llamacpp:spec_decode_num_accepted_tokens_total")
        steps = _delta(before, after, "llamacpp:spec_decode_num_drafts_total")
        if dn and da is not None and dn > 0:
            m["draft_tokens_metrics"] = dn
            m["draft_acceptance_metrics"] = da / dn
            if steps:
                # Tokens per verification step (the accepted drafts plus the
                # target's own token), as SGLang's accept length counts them.
                m["accept_length_metrics"] = (da + steps) / steps
        prompt = _delta(before, after, "llamacpp:prompt_tokens_total")
        cached = _delta(before, after, "llamacpp:prompt_tokens_cached_total")
        if prompt is not None:
            m["server_prompt_tokens"] = prompt + (cached or 0.0)
    else:
        calls = _delta(before, after, "sglang:spec_verify_calls_total")
        if gen and calls:
            m["accept_length_metrics"] = gen / calls
            m["spec_verify_calls_metrics"] = calls
        prompt = _delta(before, after, "sglang:prompt_tokens_total")
        if prompt is not None and prompt > 0:
            m["server_prompt_tokens"] = prompt
        # Prompt tokens the server's prefix cache reused (summed over cache_source).
        cached = _delta(before, after, "sglang:cached_tokens_total")
        if cached is not None:
            m["server_cached_tokens"] = cached
    return m


def _vllm_spec(before: dict[str, float], after: dict[str, float]) -> dict[str, float]:
    """vLLM's speculative counters over the point: drafts (verify steps that
    drafted), drafted and accepted tokens, and accepted tokens per draft
    position (``vllm:spec_decode_num_accepted_tokens_per_pos_total{position=i}``,
    kept per label by parse_prometheus as ``...{position=i}``)."""
    m: dict[str, float] = {}
    drafts = _delta(before, after, "vllm:spec_decode_num_drafts_total")
    drafted = _delta(before, after, "vllm:spec_decode_num_draft_tokens_total")
    accepted = _delta(before, after, "vllm:spec_decode_num_accepted_tokens_total")
    if drafted is None or accepted is None or drafts is None:
        return m
    # Kept even when 0: a schedule that stopped drafting shows here.
    m["spec_drafts_metrics"] = drafts
    m["draft_tokens_metrics"] = drafted
    m["draft_accepted_tokens_metrics"] = accepted
    if drafted > 0:
        m["draft_acceptance_metrics"] = accepted / drafted
    if drafts > 0:
        # vLLM's acceptance length: 1 + accepted / drafts (the target's own
        # token plus the accepted drafts per verify step), as SGLang counts it.
        m["accept_length_metrics"] = 1 + accepted / drafts
        for key in sorted(after):
            if key.startswith("vllm:spec_decode_num_accepted_tokens_per_pos_total{position="):
                pos = key.split("position=", 1)[1].rstrip("}").strip('"')
                d = _delta(before, after, key)
                if d is not None and pos.isdigit():
                    m[f"spec_acceptance_pos{pos}_metrics"] = d / drafts
    return m


def _r(x: float | None, digits: int = 6) -> float | None:
    return None if x is None else round(x, digits)


def raw_columns(outcome: PointOutcome) -> dict[str, Any]:
    """Per-request records as compact columns for the store (times in seconds,
    relative to the point's first send)."""
    t0 = outcome.started
    recs = outcome.records

    def rel(x: float | None) -> float | None:
        return None if x is None else round(x - t0, 6)

    cols: dict[str, Any] = {
        "sent_s": [None if r.error_type == "skipped" else rel(r.sent) for r in recs],
        "ttft_s": [_r(r.first_token - r.sent) if r.first_token is not None else None for r in recs],
        "e2e_s": [_r(r.end - r.sent) if r.end is not None else None for r in recs],
        "input_len": [r.input_len for r in recs],
        "output_len": [r.output_tokens for r in recs],
        "event_s": [[round(t - r.sent, 6) for t, _ in r.events] for r in recs],
        "event_tokens": [[n for _, n in r.events] for r in recs],
        "error": [r.error for r in recs],
        "error_type": [r.error_type for r in recs],
        "spec_verify_ct": [r.spec_verify_ct for r in recs],
        "finish_reason": [r.finish_reason for r in recs],
    }
    optional: dict[str, list[Any]] = {
        "prompt_tokens": [r.prompt_tokens for r in recs],
        "cached_tokens": [r.cached_tokens for r in recs],
        "server_output_tokens": [r.server_output_tokens for r in recs],
        "server_prompt_eval": [r.server_prompt_eval for r in recs],
        "server_prompt_ms": [_r(r.server_prompt_ms, 3) for r in recs],
        "server_decode_ms": [_r(r.server_decode_ms, 3) for r in recs],
        "draft_n": [r.draft_n for r in recs],
        "spec_steps": [r.spec_steps for r in recs],
        "draft_accepted": [r.draft_accepted for r in recs],
    }
    if any(r.scheduled is not None for r in recs):
        # An open loop: when each first turn was due (from the point's first
        # send, like sent_s), and how late the client got to it.
        optional["due_s"] = [rel(r.scheduled) for r in recs]
        optional["send_lateness_s"] = [_r(_lateness(r)) if r.scheduled is not None and r.sent else None
                                       for r in recs]
    if outcome.workers:
        optional["worker"] = [r.worker + 1 for r in recs]  # which worker process sent it (from 1)
    if any(r.category is not None for r in recs):
        optional["category"] = [r.category for r in recs]
    if any(r.turn != 1 for r in recs):
        optional["turn"] = [r.turn for r in recs]
    # Only what this server reports: stores of other servers keep their shape.
    cols.update({k: v for k, v in optional.items() if any(x is not None for x in v)})
    if any(r.server_arrival_wall is not None for r in recs):
        cols["server_arrival_minus_sent_s"] = [
            _r(r.server_arrival_wall - r.sent_wall) if r.server_arrival_wall is not None else None for r in recs]
        cols["server_first_event_minus_sent_s"] = [
            _r(r.server_first_event_wall - r.sent_wall) if r.server_first_event_wall is not None else None
            for r in recs]
    if any(r.server_event_walls for r in recs):
        # The server's write time of each event (ground truth), aligned with event_s.
        cols["server_event_minus_sent_s"] = [
            [round(w - r.sent_wall, 6) for w in r.server_event_walls] if len(r.server_event_walls) == len(r.events)
            else None for r in recs]
    return cols
