"""A stand-in for llama.cpp's `llama-server` for `make test`, where no engine
is built: a real process on a real socket that speaks llama.cpp's wire format
as captured from the real server (tests/fixtures/llamacpp/): OpenAI streams
whose only usage is in the final chunk, next to llama.cpp's ``timings``; the
``llamacpp:`` counters in /metrics, counted when a request ends; /props and
/slots but no /server_info; and a kept-alive connection dropped after each stream.

    python tests/llamacpp_double.py [--accept FRACTION]   (prints "listening on http://127.0.0.1:PORT")

Without --accept it serves like `llama-server` without speculation. With it,
each step drafts up to 4 tokens and accepts ``round(FRACTION * drafted)`` of
them, as draft-model speculation reports it (``timings.draft_n``,
``draft_n_accepted``, ``spec_decode_*`` counters). Each step takes 1 ms, all
slots stepping together, like a continuous-batching engine. The conformance
of findings with the REAL engine is `make test-engine` (tests/engine/).
"""

from __future__ import annotations

import asyncio
import json
import sys
import time

from rawhttp import DROP_NEXT, KEEP, chunk, connections, response, serve

ACCEPT: float | None = None
STEP_S = 0.001
N_MAX = 4
MODEL = "/models/tiny-random.gguf"
COUNTERS = {
    "prompt_tokens_total": 0, "prompt_tokens_cached_total": 0, "tokens_predicted_total": 0,
    "spec_decode_num_draft_tokens_total": 0, "spec_decode_num_accepted_tokens_total": 0,
    "spec_decode_num_drafts_total": 0,
}


KEEP_ALIVE = "Keep-Alive: timeout=5, max=100"


def reply(status: str, body: bytes, ctype: str = "application/json") -> bytes:
    return response(status, body, ctype, KEEP_ALIVE)


def sse(obj: object) -> bytes:
    return chunk(b"data: " + json.dumps(obj, separators=(",", ":")).encode() + b"\n\n")


def metrics_text() -> bytes:
    lines = []
    for name, value in COUNTERS.items():
        lines += [f"# HELP llamacpp:{name} counter", f"# TYPE llamacpp:{name} counter", f"llamacpp:{name} {value}"]
    lines += ["# TYPE llamacpp:requests_processing gauge", "llamacpp:requests_processing 0"]
    return ("\n".join(lines) + "\n").encode()


def steps(max_tokens: int) -> list[tuple[int, int]]:
    """(drafted, accepted) per step until max_tokens are generated."""
    out, made = [], 0
    while made < max_tokens:
        drafted = min(N_MAX, max_tokens - made - 1) if ACCEPT is not None else 0
        accepted = round(ACCEPT * drafted) if ACCEPT is not None else 0
        out.append((drafted, accepted))
        made += accepted + 1
    return out


async def stream(writer: asyncio.StreamWriter, path: str, body: dict) -> None:
    chat = path == "/v1/chat/completions"
    text = body["messages"][-1]["content"] if chat else body["prompt"]
    prompt_n = len(str(text).split()) + (7 if chat else 1)  # the chat template adds tokens
    max_tokens = int(body.get("max_tokens", 16))
    rid = f"chatcmpl-{time.time_ns()}"
    base = {"created": int(time.time()), "model": MODEL, "system_fingerprint": "b1-double",
            "object": "chat.completion.chunk" if chat else "text_completion", "id": rid}
    writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n"
                 b"Keep-Alive: timeout=5, max=100\r\n\r\n")
    t0 = time.perf_counter()
    await asyncio.sleep(STEP_S)  # prefill
    t1 = time.perf_counter()
    if chat:
        writer.write(sse({"choices": [{"finish_reason": None, "index": 0,
                                       "delta": {"role": "assistant", "content": None}}], **base}))
    made = drafted_total = accepted_total = 0
    plan = steps(max_tokens)
    for drafted, accepted in plan:
        await asyncio.sleep(STEP_S)
        for _ in range(accepted + 1):  # one chunk per token, as the real server sends them
            made += 1
            piece = f" t{made}"
            choice = {"finish_reason": None, "index": 0, "delta": {"content": piece}} if chat else \
                {"text": piece, "index": 0, "logprobs": None, "finish_reason": None}
            writer.write(sse({"choices": [choice], **base}))
        drafted_total += drafted
        accepted_total += accepted
        await writer.drain()
    t2 = time.perf_counter()
    usage = {"completion_tokens": made, "prompt_tokens": prompt_n, "total_tokens": made + prompt_n,
             "prompt_tokens_details": {"cached_tokens": 0}}
    timings: dict[str, float | int] = {
        "cache_n": 0, "prompt_n": prompt_n, "prompt_ms": (t1 - t0) * 1000, "predicted_n": made,
        "predicted_ms": (t2 - t1) * 1000}
    if drafted_total:
        timings.update(draft_n=drafted_total, draft_n_accepted=accepted_total)
    if chat:
        writer.write(sse({"choices": [{"finish_reason": "length", "index": 0, "delta": {}}], **base}))
        writer.write(sse({"choices": [], **base, "usage": usage, "timings": timings}))
    else:
        writer.write(sse({"choices": [{"text": "", "index": 0, "logprobs": None, "finish_reason": "length"}],
                          **base, "usage": usage, "timings": timings}))
    writer.write(chunk(b"data: [DONE]\n\n") + chunk(b""))
    # Counted when the request ends, as llama.cpp's server does.
    COUNTERS["prompt_tokens_total"] += prompt_n
    COUNTERS["tokens_predicted_total"] += made
    if drafted_total:
        COUNTERS["spec_decode_num_draft_tokens_total"] += drafted_total
        COUNTERS["spec_decode_num_accepted_tokens_total"] += accepted_total
        COUNTERS["spec_decode_num_drafts_total"] += sum(1 for d, _ in plan if d)
    await writer.drain()


async def respond(method: str, path: str, raw: bytes, writer: asyncio.StreamWriter) -> str:
    if path == "/health":
        writer.write(reply("200 OK", b'{"status":"ok"}'))
    elif path == "/v1/models":
        writer.write(reply("200 OK", json.dumps(
            {"object": "list", "data": [{"id": MODEL, "object": "model", "owned_by": "llamacpp"}]}).encode()))
    elif path == "/props":
        writer.write(reply("200 OK", json.dumps(
            {"total_slots": 8, "model_path": MODEL, "model_ftype": "all F32", "build_info": "b1-double",
             "default_generation_settings": {"n_ctx": 1024, "params": {}}}).encode()))
    elif path == "/slots":
        slots = [{"id": i, "n_ctx": 1024, "speculative": ACCEPT is not None, "is_processing": False}
                 for i in range(8)]
        writer.write(reply("200 OK", json.dumps(slots).encode()))
    elif path == "/metrics":
        writer.write(reply("200 OK", metrics_text(), "text/plain; version=0.0.4"))
    elif method == "POST" and path in ("/v1/completions", "/v1/chat/completions"):
        await stream(writer, path, json.loads(raw))
        return DROP_NEXT  # after a stream the kept-alive connection is dropped unanswered
    else:
        writer.write(reply("404 Not Found", b'{"error":{"code":404,"message":"File Not Found"}}'))
    return KEEP


if __name__ == "__main__":
    if "--accept" in sys.argv:
        ACCEPT = float(sys.argv[sys.argv.index("--accept") + 1])
    serve(connections(respond), "llamacpp double")
