"""A misbehaving SGLang-like server for fault tests: a real process on a real
socket, speaking just enough HTTP/1.1 to be wrong in one chosen way.

    python tests/badserver.py MODE      (prints "listening on http://127.0.0.1:PORT")

MODE: 503 (every /generate answers 503), malformed (an SSE stream with a
broken data line), hostile (well-formed streams, but a server_info full of
markup and secrets), oneshot (each connection serves one /generate stream,
kept alive by HTTP/1.1's default, then drops the connection when the next
request arrives on it, as llama.cpp's server does with streamed responses),
silent (reads each /generate request and never answers it), stall (answers
with headers and two events, then says nothing more), drip (a whole stream,
one event every 0.4 s: no silence as long as a 1 s read timeout, and longer
than it in all).
"""

from __future__ import annotations

import asyncio
import json
import sys

from rawhttp import CLOSE, DROP_NEXT, KEEP, chunk, connections, response, serve

MODE = sys.argv[1] if len(sys.argv) > 1 else "503"
SERVER_INFO = {
    "model_path": "evil|model<script>alert(1)</script>\n| injected | row |",
    "tp_size": 1,
    "speculative_algorithm": None,
    "launch_command": "python -m sglang.launch_server --model-path m --api-key sk-hostile-secret-123 --port 1",
    "version": "0.5.23",
}


async def respond(method: str, path: str, body: bytes, writer: asyncio.StreamWriter) -> str:
    if path in ("/health", "/v1/models", "/model_info"):
        doc = {"data": [{"id": "bad"}]} if path == "/v1/models" else {}
        writer.write(response("200 OK", json.dumps(doc).encode()))
    elif path in ("/server_info", "/get_server_info"):
        writer.write(response("200 OK", json.dumps(SERVER_INFO).encode()))
    elif path == "/generate" and MODE == "503":
        writer.write(response("503 Service Unavailable", b'{"error": "overloaded"}'))
    elif path == "/generate" and MODE == "silent":
        await asyncio.sleep(3600)
        return CLOSE
    elif path == "/generate" and MODE in ("stall", "drip"):
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nConnection: close\r\n\r\n")
        for n in range(1, 5):
            if MODE == "stall" and n == 3:
                await writer.drain()
                await asyncio.sleep(3600)
            meta = {"id": "x", "finish_reason": {"type": "length"} if n == 4 else None,
                    "prompt_tokens": 4, "completion_tokens": n, "cached_tokens": 0}
            writer.write(b"data: " + json.dumps({"text": "w " * n, "meta_info": meta}).encode() + b"\n\n")
            await writer.drain()
            await asyncio.sleep(0.4)
        writer.write(b"data: [DONE]\n\n")
        return CLOSE
    elif path == "/generate" and MODE == "oneshot":
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n")
        for n in range(1, 5):
            meta = {"id": "x", "finish_reason": {"type": "length"} if n == 4 else None,
                    "prompt_tokens": 4, "completion_tokens": n, "cached_tokens": 0}
            writer.write(chunk(b"data: " + json.dumps({"text": "w " * n, "meta_info": meta}).encode() + b"\n\n"))
        writer.write(chunk(b"data: [DONE]\n\n") + b"0\r\n\r\n")
        return DROP_NEXT  # drop the kept-alive connection without an answer
    elif path == "/generate":
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nConnection: close\r\n\r\n")
        events = []
        for n in range(1, 5):
            meta = {"id": "x", "finish_reason": {"type": "length"} if n == 4 else None,
                    "prompt_tokens": 4, "completion_tokens": n, "cached_tokens": 0}
            events.append(b"data: " + json.dumps({"text": "w " * n, "meta_info": meta}).encode() + b"\n\n")
        if MODE == "malformed":
            events.insert(2, b'data: {"text": "broken, "meta_info": \n\n')
        events.append(b"data: [DONE]\n\n")
        for e in events:
            writer.write(e)
            await writer.drain()
            await asyncio.sleep(0.001)
        return CLOSE
    else:
        writer.write(response("404 Not Found", b"{}"))
    return KEEP


if __name__ == "__main__":
    serve(connections(respond), f"badserver {MODE}")
