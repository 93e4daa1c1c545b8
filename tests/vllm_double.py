"""A stand-in for vLLM's OpenAI server for `make test`, where no engine is
installed: a real process on a real socket that speaks vLLM's wire format as
captured from the real server (tests/fixtures/vllm/): `/version`,
`/v1/models`, no `/server_info` and no `/props`; `/v1/completions` streams
with usage in every chunk when `continuous_usage_stats` is asked, then a
usage-only chunk; `/metrics` with vLLM's names, the `vllm:spec_decode_*`
counters (per draft position too) only when it speculates, and the
`vllm:num_requests_running` gauge.

    python tests/vllm_double.py [--k K] [--schedule "1-3:4,4-4:0"]   (prints "listening on http://127.0.0.1:PORT")

With ``--k`` it speculates: each step of a sequence drafts K tokens (or the
schedule's K for the number of sequences running in that step; past the last
range its K holds) and accepts all but the last. Steps take 2 ms and all
running sequences step together, so the running count is the batch. The
conformance of findings with the REAL engine is `make test-engine`.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time

from rawhttp import KEEP, chunk, connections, response, serve

K: int | None = None
SCHEDULE: list[tuple[int, int, int]] = []
STEP_S = 0.002
RUNNING = 0
COUNTERS: dict[str, float] = {"generation_tokens_total": 0, "prompt_tokens_total": 0}
SPEC: dict[str, float] = {"spec_decode_num_drafts_total": 0, "spec_decode_num_draft_tokens_total": 0,
                          "spec_decode_num_accepted_tokens_total": 0}
PER_POS: dict[int, float] = {}


def k_now() -> int:
    assert K is not None
    for start, end, k in SCHEDULE:
        if start <= RUNNING <= end:
            return min(k, K)
    return min(SCHEDULE[-1][2], K) if SCHEDULE and RUNNING > SCHEDULE[-1][1] else K


def metrics_text() -> bytes:
    labels = 'engine="0",model_name="tiny-llama"'
    lines = [f"# TYPE vllm:num_requests_running gauge", f"vllm:num_requests_running{{{labels}}} {float(RUNNING)}"]
    for name, value in COUNTERS.items():
        lines += [f"# TYPE vllm:{name} counter", f"vllm:{name}{{{labels}}} {float(value)}"]
    if K is not None:
        for name, value in SPEC.items():
            lines += [f"# TYPE vllm:{name} counter", f"vllm:{name}{{{labels}}} {float(value)}",
                      f"vllm:{name.replace('_total', '_created')}{{{labels}}} 1.7e9"]
        lines.append("# TYPE vllm:spec_decode_num_accepted_tokens_per_pos_total counter")
        for pos in range(K):
            lines.append(f'vllm:spec_decode_num_accepted_tokens_per_pos_total{{{labels},position="{pos}"}} '
                         f"{float(PER_POS.get(pos, 0))}")
    return ("\n".join(lines) + "\n").encode()


def sse(obj: object) -> bytes:
    return chunk(b"data: " + json.dumps(obj, separators=(",", ":")).encode() + b"\n\n")


async def stream(writer: asyncio.StreamWriter, body: dict) -> None:
    global RUNNING
    prompt_n = len(str(body.get("prompt", "")).split()) + 1
    max_tokens = int(body.get("max_tokens", 16))
    cont = bool((body.get("stream_options") or {}).get("continuous_usage_stats"))
    base = {"id": f"cmpl-{time.time_ns()}", "object": "text_completion", "created": int(time.time()),
            "model": "tiny-llama"}
    writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream; charset=utf-8\r\n"
                 b"transfer-encoding: chunked\r\n\r\n")
    RUNNING += 1
    made = 0
    hist = [0] * ((K or 0) + 1)  # verify steps by accepted drafts, as vLLM's RequestSpecDecodeMetrics
    drafted = 0
    try:
        await asyncio.sleep(STEP_S)  # prefill
        COUNTERS["prompt_tokens_total"] += prompt_n
        while made < max_tokens:
            await asyncio.sleep(STEP_S)
            k = k_now() if K is not None else 0
            k = min(k, max_tokens - made - 1)
            accepted = max(k - 1, 0)
            if k > 0:
                SPEC["spec_decode_num_drafts_total"] += 1
                SPEC["spec_decode_num_draft_tokens_total"] += k
                SPEC["spec_decode_num_accepted_tokens_total"] += accepted
                for pos in range(accepted):
                    PER_POS[pos] = PER_POS.get(pos, 0) + 1
                hist[accepted] += 1
                drafted += k
            step = accepted + 1
            made += step
            COUNTERS["generation_tokens_total"] += step
            text = "".join(f" t{made - step + i + 1}" for i in range(step))
            usage = {"prompt_tokens": prompt_n, "total_tokens": prompt_n + made, "completion_tokens": made}
            done = made >= max_tokens
            writer.write(sse({**base, "choices": [{"index": 0, "text": text, "logprobs": None,
                                                   "finish_reason": "length" if done else None,
                                                   "stop_reason": None}], **({"usage": usage} if cont else {})}))
            await writer.drain()
    finally:
        RUNNING -= 1
    usage = {"prompt_tokens": prompt_n, "total_tokens": prompt_n + made, "completion_tokens": made}
    final: dict = {**base, "choices": [], "usage": usage}
    if K is not None:
        # vLLM 0.32 with --per-request-spec-decode-metrics summary: the final usage
        # chunk's metrics.speculative_decoding (SpeculativeDecodingMetrics, field for field).
        steps = sum(hist)
        accepted_total = sum(j * n for j, n in enumerate(hist))
        final["metrics"] = {"speculative_decoding": {
            "mean_acceptance_length": 1.0 + accepted_total / steps if steps else 1.0,
            "draft_acceptance_rate": accepted_total / drafted if drafted else 0.0,
            "acceptance_histogram": hist, "num_spec_steps": steps, "num_accepted_draft_tokens": accepted_total,
            "num_draft_tokens": drafted, "num_spec_tokens": K}}
    writer.write(sse(final))
    writer.write(chunk(b"data: [DONE]\n\n") + chunk(b""))
    await writer.drain()


async def respond(method: str, path: str, raw: bytes, writer: asyncio.StreamWriter) -> str:
    if path == "/health":
        writer.write(response("200 OK", b""))
    elif path == "/version":
        writer.write(response("200 OK", b'{"version":"0.32.0-double"}'))
    elif path == "/v1/models":
        writer.write(response("200 OK", json.dumps({"object": "list", "data": [
            {"id": "tiny-llama", "object": "model", "owned_by": "vllm", "root": "/models/tiny-llama",
             "parent": None, "max_model_len": 1024}]}).encode()))
    elif path == "/metrics":
        writer.write(response("200 OK", metrics_text(), "text/plain; version=0.0.4; charset=utf-8"))
    elif method == "POST" and path == "/v1/completions":
        await stream(writer, json.loads(raw))
    else:
        writer.write(response("404 Not Found", b'{"detail":"Not Found"}'))
    return KEEP


if __name__ == "__main__":
    args = sys.argv[1:]
    if "--k" in args:
        K = int(args[args.index("--k") + 1])
    if "--schedule" in args:
        for part in args[args.index("--schedule") + 1].split(","):
            span, k = part.split(":")
            lo, hi = span.split("-")
            SCHEDULE.append((int(lo), int(hi), int(k)))
    serve(connections(respond), "vllm double")
