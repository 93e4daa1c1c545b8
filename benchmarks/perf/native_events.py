"""The cost of one SGLang native event in the raw transport's parser (D134):
a 256-token /generate stream as the emulator and SGLang write it (text and
output ids so far in each event, one HTTP chunk per event) fed to
``_Exchange.feed`` in reads of READ bytes, 20 responses a try, best of 7;
the events read where they lie (``on_event``), then each copied and parsed
by lines (the path the aiohttp transport takes, and the raw one before D134).

    .venv/bin/python benchmarks/perf/native_events.py [READ]
"""

from __future__ import annotations

import asyncio
import sys
import time
from typing import Any

import orjson

from findings.bench import transport as T
from findings.bench.protocol import Parser
from findings.bench.records import RequestRecord

WORDS = ("alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel")


def stream(tokens: int = 256) -> bytes:
    events = []
    for k in range(1, tokens + 1):
        meta: dict[str, Any] = {"id": "79cc561a992346938b2afc0e9f41572e", "finish_reason": None,
                                "prompt_tokens": 4, "completion_tokens": k, "cached_tokens": 0}
        if k == tokens:
            meta["finish_reason"] = {"type": "length", "length": tokens}
        text = "r1 " + " ".join(WORDS[i % len(WORDS)] for i in range(k))
        events.append(b"data: " + orjson.dumps({"text": text, "output_ids": list(range(1000, 1000 + k)),
                                                 "meta_info": meta}) + b"\n\n")
    events.append(b"data: [DONE]\n\n")
    head = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
    return head + b"".join(b"%x\r\n%s\r\n" % (len(e), e) for e in events) + b"0\r\n\r\n"


def one(pieces: list[bytes], in_place: bool) -> None:
    rec = RequestRecord(index=0, input_len=4)
    parser = Parser("native", rec)
    on_line, on_event, _ = T.stream_handlers(parser)
    ex = T._Exchange(on_line, time.perf_counter, on_event if in_place else None)
    for p in pieces:
        ex.feed(p)
    assert ex.done.done() and rec.output_tokens == 256 and not rec.error


async def main(read: int) -> None:
    wire = stream()
    pieces = [wire[i:i + read] for i in range(0, len(wire), read)]
    for _ in range(5):  # warm-up
        one(pieces, True)
        one(pieces, False)
    for in_place in (True, False, True, False):
        best = float("inf")
        for _ in range(7):
            t0 = time.perf_counter()
            for _ in range(20):
                one(pieces, in_place)
            best = min(best, time.perf_counter() - t0)
        per = best / (20 * 256) * 1e6
        print(f"{'in place' if in_place else 'by lines'}: {per:.2f} us per event, "
              f"{len(wire) * 20 / best / 1e6:.0f} MB/s (reads of {read} bytes)")


if __name__ == "__main__":
    asyncio.run(main(int(sys.argv[1]) if len(sys.argv) > 1 else 60000))
