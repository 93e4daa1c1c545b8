"""A minimal reference load client written straight on aiohttp (issue 6).

One shared ``ClientSession`` (keep-alive, no connection limit), exactly C
requests in flight, SGLang's native ``POST /generate`` with ``stream: true``,
stdlib ``json.loads`` per SSE event. It records, per request, the send time,
the first-token time, every event's arrival time and the token count, and
(with an emulator started with --ground-truth) the server's own timestamps.
Nothing else: no lag monitor, no store, no validation. It is the yardstick
that ``findings bench``'s client is compared with in docs/performance.md.

    python benchmarks/perf/refclient.py URL --concurrency 64 --num-prompts 1000 --output-len 256 --out FILE.json
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import sys
import time

import aiohttp


async def one(session: aiohttp.ClientSession, url: str, ids: list[int], out_len: int, rid: str,
              index: int = -1) -> dict:
    body = {"input_ids": ids, "rid": rid, "stream": True,
            "sampling_params": {"max_new_tokens": out_len, "min_new_tokens": out_len, "ignore_eos": True,
                                "temperature": 0.0}}
    rec: dict = {"index": index, "events": [], "tokens": 0, "ok": False}
    wall0 = time.time()
    t0 = time.perf_counter()
    rec["sent"] = t0
    rec["sent_wall"] = wall0
    async with session.post(url + "/generate", json=body) as resp:
        async for line in resp.content:
            if not line.startswith(b"data:"):
                continue
            data = line[5:].strip()
            if data == b"[DONE]":
                break
            now = time.perf_counter()
            ev = json.loads(data)
            meta = ev.get("meta_info") or {}
            n = meta.get("completion_tokens", 0)
            if n > rec["tokens"]:
                rec["events"].append((now - t0, n, meta.get("emulator_event_ts")))
                rec["tokens"] = n
            if "emulator_arrival_ts" in meta:
                rec["server_arrival_wall"] = meta["emulator_arrival_ts"]
    rec["end"] = time.perf_counter() - t0
    rec["ok"] = rec["tokens"] > 0
    return rec


async def main_async(a: argparse.Namespace) -> dict:
    rng = random.Random(a.seed)
    prompts = [[rng.randrange(1000, 30000) for _ in range(a.input_len)] for _ in range(a.num_prompts)]
    queue = list(reversed(list(enumerate(prompts))))
    recs: list[dict] = []
    conn = aiohttp.TCPConnector(limit=0)
    timeout = aiohttp.ClientTimeout(total=None, sock_read=60)
    async with aiohttp.ClientSession(connector=conn, timeout=timeout) as session:
        for i in range(a.warmup):
            await one(session, a.url, prompts[i % len(prompts)], a.output_len, f"ref-w{i}")

        async def worker() -> None:
            while queue:
                i, ids = queue.pop()
                recs.append(await one(session, a.url, ids, a.output_len, f"ref-{i}", i))

        t0 = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(min(a.concurrency, a.num_prompts))))
        dur = time.perf_counter() - t0
    tokens = sum(r["tokens"] for r in recs)
    events = sum(len(r["events"]) for r in recs)
    return {"client": "aiohttp-reference", "concurrency": a.concurrency, "num_prompts": a.num_prompts,
            "output_len": a.output_len, "duration_s": dur, "tokens": tokens, "events": events,
            "tok_s": tokens / dur, "events_s": events / dur, "completed": sum(r["ok"] for r in recs),
            "requests": recs if a.keep_requests else None}


def load_options(p: argparse.ArgumentParser) -> None:
    """The load this client and floorclient.py drive, and where the result goes."""
    p.add_argument("url")
    p.add_argument("--concurrency", type=int, default=64)
    p.add_argument("--num-prompts", type=int, default=1000)
    p.add_argument("--input-len", type=int, default=32)
    p.add_argument("--output-len", type=int, default=256)
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--out", default="-")


def write_result(res: dict[str, object], out: str) -> None:
    """The result as one JSON object: on stdout for ``-``, else in the file ``out``."""
    text = json.dumps(res)
    if out == "-":
        print(text)
    else:
        with open(out, "w", encoding="utf-8") as fh:
            fh.write(text)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    load_options(p)
    p.add_argument("--keep-requests", action="store_true")
    a = p.parse_args()
    write_result(asyncio.run(main_async(a)), a.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
