"""The SGLang-API emulator over real loopback sockets, as a subprocess server.

Each server runs fast (--speed 20..50) so the whole file stays small and quick.
"""

from __future__ import annotations

import asyncio
import json
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any, Iterator

import aiohttp
import httpx
import pytest

ROOT = Path(__file__).resolve().parent.parent
READY = re.compile(r"^findings-emulator: profile (\S+) listening on http://127\.0\.0\.1:(\d+) \(SIMULATED\)$")


class Emulator:
    """``python -m findings.emulator --port 0 ...`` in a subprocess; the URL from its ready line."""

    def __init__(self, *args: str) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "findings.emulator", "--port", "0", *args],
            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )
        assert self.proc.stdout is not None
        self.ready_line = self.proc.stdout.readline().rstrip("\n")
        match = READY.match(self.ready_line)
        if not match:
            self.proc.kill()
            raise AssertionError(f"no ready line: {self.ready_line!r} {self.proc.stderr.read() if self.proc.stderr else ''}")
        self.profile = match.group(1)
        self.base = f"http://127.0.0.1:{match.group(2)}"
        self.client = httpx.Client(base_url=self.base, timeout=10)

    def stop(self, sig: int = signal.SIGTERM) -> int:
        self.client.close()
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        try:
            return self.proc.wait(timeout=10)
        finally:
            if self.proc.poll() is None:
                self.proc.kill()
            for pipe in (self.proc.stdout, self.proc.stderr):
                if pipe is not None:
                    pipe.close()

    def sse(self, path: str, body: dict[str, Any]) -> list[Any]:
        """POST and read the SSE stream: parsed events, and "[DONE]" as a string."""
        events: list[Any] = []
        with self.client.stream("POST", path, json=body) as resp:
            assert resp.status_code == 200, resp.read()
            assert resp.headers["content-type"].startswith("text/event-stream")
            assert resp.headers["x-findings-emulated"] == "1"
            for line in resp.iter_lines():
                if line.startswith("data: "):
                    data = line[len("data: "):]
                    events.append("[DONE]" if data == "[DONE]" else json.loads(data))
        return events


@pytest.fixture(scope="module")
def baseline() -> Iterator[Emulator]:
    emu = Emulator("--profile", "baseline", "--speed", "50")
    yield emu
    assert emu.stop() == 0  # SIGTERM: clean exit


@pytest.fixture(scope="module")
def spec() -> Iterator[Emulator]:
    emu = Emulator("--profile", "eagle3-topk1-v2", "--speed", "50", "--ground-truth")
    yield emu
    assert emu.stop(signal.SIGINT) == 0


META_KEYS = {"id", "finish_reason", "prompt_tokens", "completion_tokens", "cached_tokens"}
SPEC_KEYS = {"spec_verify_ct", "spec_accept_length", "spec_accept_rate", "spec_num_correct_drafts",
             "spec_num_proposed_drafts"}


def test_ready_line_names_the_profile_and_a_real_port(baseline: Emulator) -> None:
    assert baseline.profile == "baseline"
    assert baseline.client.get("/health").status_code == 200


def test_generate_stream_by_text(baseline: Emulator) -> None:
    events = baseline.sse("/generate", {"text": "one two three four", "stream": True, "rid": "r1",
                                        "sampling_params": {"max_new_tokens": 12, "ignore_eos": True},
                                        "unknown_top_level": 1})
    assert events[-1] == "[DONE]" and "[DONE]" not in events[:-1]
    body = events[:-1]
    prev_text, prev_ids = "", list[int]()
    for ev in body:
        assert set(ev) == {"text", "output_ids", "meta_info"}
        meta = ev["meta_info"]
        assert META_KEYS <= set(meta) and meta["id"] == "r1" and meta["prompt_tokens"] == 4
        assert ev["text"].startswith(prev_text) and ev["output_ids"][: len(prev_ids)] == prev_ids  # cumulative
        assert meta["completion_tokens"] == len(ev["output_ids"]) == len(ev["text"].split())
        assert not SPEC_KEYS & set(meta) and "emulator_event_ts" not in meta
        prev_text, prev_ids = ev["text"], ev["output_ids"]
    assert all(ev["meta_info"]["finish_reason"] is None for ev in body[:-1])
    final = body[-1]["meta_info"]
    assert final["finish_reason"] == {"type": "length", "length": 12}
    assert final["completion_tokens"] == 12 and final["e2e_latency"] > 0
    assert all("e2e_latency" not in ev["meta_info"] for ev in body[:-1])
    assert all(ev["meta_info"]["completion_tokens"] - p["meta_info"]["completion_tokens"] == 1
               for p, ev in zip(body, body[1:]))  # baseline: one token per step


def test_generate_non_stream_by_input_ids_is_deterministic(baseline: Emulator) -> None:
    body = {"input_ids": list(range(50)), "sampling_params": {"max_new_tokens": 9}, "rid": "same"}
    r = baseline.client.post("/generate", json=body)
    assert r.status_code == 200 and r.headers["x-findings-emulated"] == "1"
    out = r.json()
    assert out["meta_info"]["prompt_tokens"] == 50 and out["meta_info"]["completion_tokens"] == 9
    assert len(out["output_ids"]) == 9 and len(out["text"].split()) == 9
    assert out["meta_info"]["finish_reason"]["type"] == "length" and "e2e_latency" in out["meta_info"]
    again = baseline.client.post("/generate", json=body).json()
    assert again["text"] == out["text"] and again["meta_info"]["cached_tokens"] == 49  # prefix cache
    batch = baseline.client.post("/generate", json={"text": ["a b", "c"], "sampling_params": {"max_new_tokens": 2}})
    assert [b["meta_info"]["prompt_tokens"] for b in batch.json()] == [2, 1]


def test_bad_requests_get_400(baseline: Emulator) -> None:
    r = baseline.client.post("/generate", json={"text": "x", "sampling_params": {"max_new_tokens": 2, "bogus": 1}})
    assert r.status_code == 400 and "bogus" in r.json()["error"]["message"]
    r = baseline.client.post("/generate", content=b"{not json", headers={"content-type": "application/json"})
    assert r.status_code == 400 and "error" in r.json()
    r = baseline.client.post("/v1/completions", json={"prompt": "x", "max_tokens": -3})
    assert r.status_code == 400 and r.json()["object"] == "error"


def test_speculative_stream_coalesces_tokens_and_reports_spec_fields_last(spec: Emulator) -> None:
    events = spec.sse("/generate", {"text": "hello", "stream": True, "sampling_params": {"max_new_tokens": 64}})
    body = events[:-1]
    counts = [ev["meta_info"]["completion_tokens"] for ev in body]
    assert counts[-1] == 64 and counts == sorted(counts)
    assert max(b - a for a, b in zip(counts, counts[1:])) > 1  # one step, several tokens, one event
    assert all(not SPEC_KEYS & set(ev["meta_info"]) for ev in body[:-1])
    final = body[-1]["meta_info"]
    assert SPEC_KEYS <= set(final)
    assert final["spec_accept_length"] == pytest.approx(64 / final["spec_verify_ct"])
    assert final["spec_num_proposed_drafts"] == 2 * final["spec_verify_ct"]  # 2 draft steps per verify
    assert 0 < final["spec_accept_rate"] <= 1


def test_ground_truth_timestamps(spec: Emulator, baseline: Emulator) -> None:
    t0 = time.time()
    events = spec.sse("/generate", {"text": "a", "stream": True, "sampling_params": {"max_new_tokens": 20}})[:-1]
    t1 = time.time()
    arrivals = {ev["meta_info"]["emulator_arrival_ts"] for ev in events}
    stamps = [ev["meta_info"]["emulator_event_ts"] for ev in events]
    assert len(arrivals) == 1 and t0 <= arrivals.pop() <= stamps[0]
    assert stamps == sorted(stamps) and stamps[-1] <= t1
    chunks = spec.sse("/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}], "stream": True,
                                               "max_tokens": 5})[:-1]
    assert all({"emulator_arrival_ts", "emulator_event_ts"} <= set(c["emulator"]) for c in chunks)
    plain = baseline.sse("/v1/completions", {"prompt": "hi", "stream": True, "max_tokens": 3})[:-1]
    assert all("emulator" not in c for c in plain)


def test_chat_stream_with_usage_matches_non_stream(baseline: Emulator) -> None:
    req = {"model": "whatever", "messages": [{"role": "user", "content": "say something nice"}],
           "max_tokens": 10, "ignore_eos": True, "rid": "chat-1"}
    chunks = baseline.sse("/v1/chat/completions", {**req, "stream": True, "stream_options": {"include_usage": True}})
    assert chunks[-1] == "[DONE]"
    chunks = chunks[:-1]
    assert all(c["object"] == "chat.completion.chunk" and c["model"] == "findings-emulator/baseline" for c in chunks)
    assert chunks[0]["choices"][0]["delta"]["role"] == "assistant"
    with_choices = [c for c in chunks if c["choices"]]
    finishes = [c["choices"][0]["finish_reason"] for c in with_choices]
    assert finishes[-1] == "length" and all(f is None for f in finishes[:-1])
    text = "".join(c["choices"][0]["delta"].get("content") or "" for c in with_choices)
    usage = chunks[-1]
    assert usage["choices"] == [] and usage["usage"] == {"prompt_tokens": 3, "completion_tokens": 10,
                                                         "total_tokens": 13}
    whole = baseline.client.post("/v1/chat/completions", json=req).json()
    assert whole["object"] == "chat.completion" and whole["choices"][0]["message"]["content"] == text
    assert whole["choices"][0]["finish_reason"] == "length" and whole["usage"]["completion_tokens"] == 10


def test_chat_spec_tokens_details(spec: Emulator) -> None:
    chunks = spec.sse("/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}], "stream": True,
                                               "max_completion_tokens": 30, "return_spec_tokens_details": True,
                                               "stream_options": {"include_usage": True}})[:-1]
    details = [c["sglext"]["spec_tokens_details"] for c in chunks if "sglext" in c]
    assert len(details) == 1 and details[0]["spec_accept_length"] == pytest.approx(30 / details[0]["spec_verify_ct"])
    assert chunks[-1]["usage"]["completion_tokens"] == 30
    deltas = [c["choices"][0]["delta"].get("content", "") for c in chunks if c["choices"]]
    assert any(len(d.split()) > 1 for d in deltas)  # several tokens in one chunk


def test_completions_stream_and_non_stream(baseline: Emulator) -> None:
    chunks = baseline.sse("/v1/completions", {"prompt": "a b c", "max_tokens": 6, "stream": True,
                                              "stream_options": {"include_usage": True}})[:-1]
    with_choices = [c for c in chunks if c["choices"]]
    assert all(c["object"] == "text_completion" for c in chunks)
    assert with_choices[-1]["choices"][0]["finish_reason"] == "length"
    assert len("".join(c["choices"][0]["text"] for c in with_choices).split()) == 6
    assert chunks[-1]["choices"] == [] and chunks[-1]["usage"]["total_tokens"] == 9
    whole = baseline.client.post("/v1/completions", json={"prompt": [1, 2, 3, 4], "max_tokens": 4}).json()
    assert whole["object"] == "text_completion" and len(whole["choices"][0]["text"].split()) == 4
    assert whole["usage"]["prompt_tokens"] == 4


def test_info_endpoints(baseline: Emulator, spec: Emulator) -> None:
    info = baseline.client.get("/server_info").json()
    alias = baseline.client.get("/get_server_info").json()
    assert {k: v for k, v in info.items() if k != "internal_states"} == \
        {k: v for k, v in alias.items() if k != "internal_states"}
    assert info["emulated"] is True and info["emulator_profile"] == "baseline"
    assert info["model_path"] == "findings-emulator/baseline" and info["tp_size"] == 8
    assert info["speculative_algorithm"] is None and info["load_format"] == "dummy"
    assert info["version"] == "0.5.23-emulated" and info["enable_metrics"] is True
    assert info["max_running_requests"] == 256 and "launch_command" in info
    assert "last_gen_throughput" in info["internal_states"][0]
    sinfo = spec.client.get("/server_info").json()
    assert (sinfo["speculative_algorithm"], sinfo["speculative_eagle_topk"], sinfo["speculative_num_steps"],
            sinfo["speculative_num_draft_tokens"], sinfo["disable_overlap_schedule"]) == ("EAGLE3", 1, 2, 3, False)
    assert sinfo["speculative_draft_model_path"]
    for path in ("/model_info", "/get_model_info"):
        mi = baseline.client.get(path).json()
        assert mi["model_path"] == mi["served_model_name"] == "findings-emulator/baseline"
        assert mi["architectures"] and mi["tokenizer_path"]
    models = baseline.client.get("/v1/models").json()
    assert models["object"] == "list" and models["data"][0]["id"] == "findings-emulator/baseline"


def test_metrics_counters_increase(baseline: Emulator) -> None:
    def scrape() -> dict[str, float]:
        r = baseline.client.get("/metrics")
        assert r.status_code == 200 and r.headers["x-findings-emulated"] == "1"
        out = {}
        for line in r.text.splitlines():
            if line and not line.startswith("#"):
                name, value = line.rsplit(" ", 1)
                out[name] = float(value)
        return out

    label = '{model_name="findings-emulator/baseline"}'
    before = scrape()
    baseline.client.post("/generate", json={"text": "a b c d e", "sampling_params": {"max_new_tokens": 7}})
    after = scrape()
    assert after[f"sglang:generation_tokens_total{label}"] - before[f"sglang:generation_tokens_total{label}"] == 7
    assert after[f"sglang:prompt_tokens_total{label}"] - before[f"sglang:prompt_tokens_total{label}"] == 5
    assert after[f"sglang:num_requests_total{label}"] - before[f"sglang:num_requests_total{label}"] == 1
    for gauge in ("num_running_reqs", "num_queue_reqs", "gen_throughput", "spec_accept_length", "token_usage",
                  "spec_verify_calls_total"):
        assert f"sglang:{gauge}{label}" in after
    for hist in ("time_to_first_token_seconds", "inter_token_latency_seconds", "e2e_request_latency_seconds"):
        assert after[f"sglang:{hist}_count{label}"] > before.get(f"sglang:{hist}_count{label}", 0)
        assert f"sglang:{hist}_sum{label}" in after
        assert f'sglang:{hist}_bucket{{le="+Inf",model_name="findings-emulator/baseline"}}' in after


def test_flush_cache_refused_while_busy_and_resets_the_lifetime_average(spec: Emulator) -> None:
    spec.client.post("/generate", json={"text": "warm", "sampling_params": {"max_new_tokens": 20}})
    assert spec.client.get("/server_info").json()["internal_states"][0]["avg_spec_accept_length"] > 1
    first_event = threading.Event()

    def long_stream() -> None:
        with httpx.stream("POST", f"{spec.base}/generate", timeout=20,
                          json={"text": "x", "stream": True, "sampling_params": {"max_new_tokens": 3000}}) as r:
            for _ in r.iter_lines():
                first_event.set()

    worker = threading.Thread(target=long_stream)
    worker.start()
    assert first_event.wait(5)
    busy = spec.client.post("/flush_cache")
    worker.join(20)
    assert busy.status_code == 400
    assert spec.client.post("/flush_cache").status_code == 200
    assert spec.client.get("/server_info").json()["internal_states"][0]["avg_spec_accept_length"] is None


def test_health_is_503_during_startup_delay() -> None:
    # The clock starts before the process: its delay starts when it does, so a
    # busy machine that is slow to start it cannot make the delay look short.
    start = time.monotonic()
    emu = Emulator("--startup-delay", "1.0", "--speed", "50")
    try:
        assert emu.client.get("/health").status_code == 503
        assert emu.client.get("/health_generate").status_code == 503
        assert emu.client.post("/generate", json={"text": "x"}).status_code == 503
        while emu.client.get("/health").status_code != 200:
            assert time.monotonic() - start < 60
            time.sleep(0.05)
        assert time.monotonic() - start >= 0.9
        assert emu.client.get("/health_generate").status_code == 200
        assert emu.client.get("/server_info").json()["emulated"] is True
    finally:
        assert emu.stop() == 0


async def _throughput(base: str, concurrency: int, tokens: int) -> float:
    async def one(session: aiohttp.ClientSession) -> int:
        # Only the last event is parsed (its count of completion tokens is
        # the running total): the client's CPU per event stays small, so on
        # a busy machine the emulator's batching, not this client, sets the
        # throughput measured.
        last = b""
        body = {"input_ids": list(range(256)), "stream": True, "sampling_params": {"max_new_tokens": tokens}}
        async with session.post(f"{base}/generate", json=body) as resp:
            async for raw in resp.content:
                if raw.startswith(b"data: {"):
                    last = raw
        return int(json.loads(last[6:])["meta_info"]["completion_tokens"]) if last else 0

    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=concurrency + 4)) as session:
        start = time.perf_counter()
        counts = await asyncio.gather(*(one(session) for _ in range(concurrency)))
        return sum(counts) / (time.perf_counter() - start)


def test_continuous_batching_throughput_rises_with_concurrency() -> None:
    emu = Emulator("--profile", "baseline", "--speed", "10")
    try:
        # The best of three at each C: another process on the machine (make
        # test runs three) only ever lowers what one run measures.
        thr = [max(asyncio.run(_throughput(emu.base, c, 96)) for _ in range(3)) for c in (1, 8, 32)]
    finally:
        emu.stop()
    assert thr[1] > 2.5 * thr[0] and thr[2] > 1.2 * thr[1], thr
    # Near the model: C=1 ~ 92 tok/s and C=8 ~ 420 tok/s, times speed 10.
    assert 600 < thr[0] < 1100 and 2500 < thr[1] < 5000, thr


def _fates(emu: Emulator, n: int) -> list[str]:
    out = []
    for i in range(n):
        with emu.client.stream("POST", "/generate", json={"text": "x", "stream": True,
                                                          "sampling_params": {"max_new_tokens": 8}}) as r:
            if r.status_code == 500:
                r.read()
                assert r.json()["error"]["code"] == 500
                out.append("500")
                continue
            lines = [ln for ln in r.iter_lines() if ln.startswith("data: ")]
            assert lines[-1] == "data: [DONE]"
            errors = [json.loads(ln[6:]) for ln in lines[:-1] if '"error"' in ln]
            if errors:
                assert set(errors[0]["error"]) >= {"message", "type", "code", "retryable"}
                out.append("event")
            else:
                out.append("ok")
    return out


def test_error_rate_gives_500s_and_error_events_deterministically() -> None:
    a = Emulator("--error-rate", "0.5", "--seed", "3", "--speed", "50")
    b = Emulator("--error-rate", "0.5", "--seed", "3", "--speed", "50")
    try:
        fa, fb = _fates(a, 24), _fates(b, 24)
    finally:
        a.stop()
        b.stop()
    assert fa == fb
    assert fa.count("500") > 0 and fa.count("event") > 0 and fa.count("ok") > 0


def _outcome(emu: Emulator, path: str) -> str:
    """One streamed request's outcome: "ok", "http:<status>", "event" or "drop"."""
    body: dict[str, Any] = ({"text": "x", "stream": True, "sampling_params": {"max_new_tokens": 8}}
                            if path == "/generate" else {"prompt": "x", "max_tokens": 8, "stream": True})
    try:
        with emu.client.stream("POST", path, json=body) as r:
            if r.status_code != 200:
                r.read()
                err = r.json()
                # The endpoint's own error shape: SGLang's native one, or OpenAI's.
                code = err["error"]["code"] if path == "/generate" else err["code"]
                assert code == r.status_code
                return f"http:{r.status_code}"
            lines = [ln for ln in r.iter_lines() if ln.startswith("data: ")]
    except httpx.RemoteProtocolError:
        return "drop"
    assert lines[-1] == "data: [DONE]"
    return "event" if any('"error"' in ln for ln in lines) else "ok"


@pytest.mark.parametrize("path", ["/generate", "/v1/completions"])
def test_fail_share_fails_exactly_that_share_in_the_kinds_given(path: str) -> None:
    emu = Emulator("--fail-share", "0.4", "--fail-how", "http:503,drop,error-event", "--fail-skip", "1",
                   "--speed", "50")
    try:
        got = [_outcome(emu, path) for _ in range(21)]
        assert emu.client.get("/health").status_code == 200  # the server lives on
    finally:
        assert emu.stop() == 0
    assert got[0] == "ok"  # the skipped (warm-up) request
    failed = [g for g in got[1:] if g != "ok"]
    assert len(failed) == 8  # exactly 40% of the 20 after the skip
    assert failed == ["http:503", "drop", "event"] * 2 + ["http:503", "drop"]  # the kinds in turn
    # Every prefix has failed its share, to within one request.
    for n in range(1, 21):
        assert abs(sum(g != "ok" for g in got[1:n + 1]) - 0.4 * n) < 1


def test_fail_share_one_fails_every_request_and_bad_kinds_are_refused() -> None:
    emu = Emulator("--fail-share", "1", "--fail-how", "http:429", "--speed", "50")
    try:
        assert [_outcome(emu, "/v1/completions") for _ in range(4)] == ["http:429"] * 4
    finally:
        emu.stop()
    bad = subprocess.run([sys.executable, "-m", "findings.emulator", "--port", "0", "--fail-how", "http:200"],
                         cwd=ROOT, capture_output=True, text=True, timeout=30)
    assert bad.returncode == 2 and "--fail-how" in bad.stderr and "status 400-599" in bad.stderr


def test_drop_rate_closes_the_connection_mid_stream() -> None:
    emu = Emulator("--drop-rate", "1", "--speed", "50")
    try:
        seen: list[str] = []
        with pytest.raises(httpx.RemoteProtocolError):
            with emu.client.stream("POST", "/generate", json={"text": "x", "stream": True,
                                                              "sampling_params": {"max_new_tokens": 10}}) as r:
                assert r.status_code == 200
                for line in r.iter_lines():
                    seen.append(line)
        assert seen and "data: [DONE]" not in seen  # some events, then the connection closed
        assert emu.client.get("/health").status_code == 200  # the server lives on
    finally:
        assert emu.stop() == 0


def test_stall_rate_pauses_the_stream() -> None:
    emu = Emulator("--stall-rate", "1", "--stall-s", "0.4", "--speed", "50")
    try:
        stamps = []
        with emu.client.stream("POST", "/generate", json={"text": "x", "stream": True,
                                                          "sampling_params": {"max_new_tokens": 8}}) as r:
            for line in r.iter_lines():
                if line.startswith("data: "):
                    stamps.append(time.monotonic())
        gaps = [b - a for a, b in zip(stamps, stamps[1:])]
        assert max(gaps) >= 0.35 and sum(g >= 0.35 for g in gaps) == 1
    finally:
        emu.stop()


def test_die_after_exits_the_process() -> None:
    emu = Emulator("--die-after", "2", "--speed", "50")
    try:
        for _ in range(2):
            r = emu.client.post("/generate", json={"text": "x", "sampling_params": {"max_new_tokens": 3}})
            assert r.status_code == 200
        assert emu.proc.wait(timeout=5) == 1
        with pytest.raises(httpx.TransportError):
            emu.client.get("/health")
    finally:
        emu.stop()


def test_firehose_sends_every_token_as_fast_as_read() -> None:
    emu = Emulator("--profile", "firehose")
    try:
        events = emu.sse("/generate", {"text": "x", "stream": True, "sampling_params": {"max_new_tokens": 200}})
        counts = [ev["meta_info"]["completion_tokens"] for ev in events[:-1]]
        assert counts == list(range(1, 201))  # the client takes each token before the next
        assert emu.client.get("/server_info").json()["emulator_profile"] == "firehose"
    finally:
        assert emu.stop() == 0
