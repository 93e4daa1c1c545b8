"""Prompt sets against real server processes over loopback: every format
through ``findings bench --dataset``, multi-turn with the live reply, natural
output lengths, per-category metrics, and random-ids within the vocabulary."""

from __future__ import annotations

import hashlib
import json
import subprocess
from pathlib import Path

import httpx
import pytest
from conftest import FIXTURES, cli, run_docs
from test_bench_e2e import SPEED, emulator  # noqa: F401 (the fixture: an emulator process per test)

DS = FIXTURES / "datasets"
FILES = ["sharegpt.json", "chat.jsonl", "completion.jsonl", "question.jsonl", "speed-bench/qualitative.jsonl",
         "prompts.txt"]


def bench(store: Path, url: str, *extra: str, workload: str = "w", concurrency: str = "2"):
    return cli("bench", "--url", url, "--config", "eagle3-topk1-v2", "--campaign", "c", "--workload", workload,
               "--concurrency", concurrency, "--num-prompts", "6", "--output-len", "24", "--warmup", "1",
               "--api", "openai-chat", "--no-progress", *extra, store=store)


@pytest.mark.parametrize("name", FILES)
def test_every_format_measures_and_stores_identity_not_text(emulator, store, name):
    url = emulator("--profile", "eagle3-topk1-v2", "--speed", SPEED)
    path = DS / name
    r = bench(store, url, "--dataset", str(path))
    assert r.exit_code == 0, r.output
    [doc] = run_docs(store)
    p = doc["points"][0]
    params, m = p["workload_params"], p["metrics"]
    ps_format = {"sharegpt.json": "sharegpt", "chat.jsonl": "chat-jsonl", "completion.jsonl": "completion-jsonl",
                 "question.jsonl": "mt-bench", "speed-bench/qualitative.jsonl": "speed-bench",
                 "prompts.txt": "text"}[name]
    assert params["prompts"] == ps_format and params["dataset_file"] == path.name
    assert params["dataset_sha256"] == hashlib.sha256(path.read_bytes()).hexdigest()
    assert params["dataset_prompts"] == 6 and params["seed"] == 1 and params["ignore_eos"] is False
    turns = 2 if ps_format in ("mt-bench",) else None
    if turns:
        assert m["planned"] == 12 and m["completed"] == 12  # every turn of 6 conversations
    assert m["failed"] == 0 and m["completed"] == m["planned"]
    # No prompt text anywhere in the store: run files and sidecars.
    words = {"sourdough", "mutex", "fibonacci", "palindrome", "bicycles", "kettle"}
    for f in (store / "runs").rglob("*"):
        if f.is_file():
            raw = f.read_bytes()
            text = (__import__("gzip").decompress(raw) if raw[:2] == b"\x1f\x8b" else raw).decode()
            assert not any(w in text for w in words), f


def test_multi_turn_sends_the_live_reply_in_turn_two(emulator, store, tmp_path):
    log = tmp_path / "truth.jsonl"
    url = emulator("--profile", "baseline", "--speed", SPEED, "--ground-truth-log", str(log))
    r = bench(store, url, "--dataset", str(DS / "question.jsonl"), "--warmup", "0", concurrency="1")
    assert r.exit_code == 0, r.output
    [doc] = run_docs(store)
    req = doc["points"][0]["requests"]
    assert req["turn"] == [1, 2] * 6
    lines = [json.loads(x) for x in log.read_text().splitlines()]
    by_rid = {x["rid"]: x for x in lines}
    seconds = [x for x in lines if x["rid"].endswith("t2")]
    assert len(seconds) == 6
    for second in seconds:
        first = by_rid[second["rid"][:-2]]
        # Turn 2's messages: user turn 1, the assistant's reply as it came back, user turn 2.
        assert len(second["messages_sha1"]) == 3 and len(first["messages_sha1"]) == 1
        assert second["messages_sha1"][0] == first["messages_sha1"][0]
        assert second["messages_sha1"][1] == first["text_sha1"]
    # Turn 2's prompt is longer than turn 1's by at least the reply (the server's own count).
    ptok, out = req["prompt_tokens"], req["output_len"]
    for i in range(0, 12, 2):
        assert ptok[i + 1] >= ptok[i] + out[i]


def test_per_category_metrics_and_natural_output_caps(emulator, store):
    url = emulator("--profile", "eagle3-topk1-v2", "--speed", SPEED)
    r = bench(store, url, "--dataset", str(DS / "completion.jsonl"), concurrency="1")
    assert r.exit_code == 0, r.output
    [doc] = run_docs(store)
    p = doc["points"][0]
    m, req = p["metrics"], p["requests"]
    cats = req["category"]
    assert set(cats) == {"coding", "chat", "extraction"}
    for cat in set(cats):
        assert m[f"cat.{cat}.requests"] == cats.count(cat)
        assert m[f"cat.{cat}.output_tokens"] == sum(n for n, c in zip(req["output_len"], cats) if c == cat)
        assert 1.0 <= m[f"cat.{cat}.accept_length"] <= 3.0
        assert m[f"cat.{cat}.median_tpot_ms"] > 0
    # The file's caps (80 for coding, 48 for extraction) lowered by --output-len 24; the emulator never
    # ends early, so every request runs to its cap.
    assert set(req["output_len"]) == {24}
    # The emulator accepts drafts on code more often than on text (its documented assumption).
    assert m["cat.coding.accept_length"] > m["cat.chat.accept_length"]


def test_split_by_category_makes_one_workload_per_category(emulator, store):
    url = emulator("--profile", "baseline", "--speed", SPEED)
    r = bench(store, url, "--dataset", str(DS / "chat.jsonl"), "--split-by", "category", workload="mix",
              concurrency="1")
    assert r.exit_code == 0, r.output
    got = sorted((d["points"][0]["workload"], d["points"][0]["workload_params"]["dataset_category"])
                 for d in run_docs(store))
    assert got == [("mix-chat", "chat"), ("mix-coding", "coding"), ("mix-extraction", "extraction")]


def test_random_ids_stay_inside_a_small_vocabulary(emulator, store, tmp_path):
    # The emulator refuses ids past its vocabulary (HTTP 400), as a real model's embedding fails on them.
    url = emulator("--profile", "baseline", "--speed", SPEED, "--vocab-size", "4096")
    bad = httpx.post(f"{url}/generate", json={"input_ids": [5, 4096], "sampling_params": {"max_new_tokens": 2}})
    assert bad.status_code == 400 and "index out of range" in bad.text
    r = cli("bench", "--url", url, "--config", "baseline", "--campaign", "c", "--workload", "ids",
            "--concurrency", "4", "--num-prompts", "16", "--input-len", "64", "--output-len", "8",
            "--prompts", "random-ids", "--no-progress", store=store)
    assert r.exit_code == 0, r.output
    [doc] = run_docs(store)
    p = doc["points"][0]
    assert p["metrics"]["failed"] == 0 and p["metrics"]["completed"] == 16
    assert p["workload_params"]["vocab_size"] == 4096
    assert p["workload_params"]["vocab_source"] == "/model_info vocab_size"


def test_random_ids_vocabulary_from_the_model_folder(emulator, store, tmp_path):
    model = tmp_path / "tiny-model"
    model.mkdir()
    (model / "config.json").write_text(json.dumps({"vocab_size": 2048, "architectures": ["LlamaForCausalLM"]}))
    url = emulator("--profile", "baseline", "--speed", SPEED, "--model-path", str(model))
    r = cli("bench", "--url", url, "--config", "baseline", "--campaign", "c", "--workload", "ids",
            "--concurrency", "2", "--num-prompts", "8", "--input-len", "64", "--output-len", "4",
            "--no-progress", store=store)
    assert r.exit_code == 0, r.output
    [doc] = run_docs(store)
    params = doc["points"][0]["workload_params"]
    assert params["prompts"] == "random-ids" and params["vocab_size"] == 2048
    assert params["vocab_source"] == f"{model}/config.json"
    assert doc["points"][0]["metrics"]["failed"] == 0


def test_random_ids_refused_in_one_line_when_no_vocabulary_is_known(store):
    # The vLLM double names a model path that is not a folder here, and reports no size.
    proc = subprocess.Popen([__import__("sys").executable, str(Path(__file__).parent / "vllm_double.py")],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        url = line.split("listening on ", 1)[1].split()[0] if "listening on" in line else line.strip()
        r = cli("bench", "--url", url, "--config", "b", "--campaign", "c", "--workload", "ids",
                "--concurrency", "1", "--prompts", "random-ids", "--api", "openai-completions", "--no-progress",
                store=store)
        assert r.exit_code == 1
        [msg] = r.output.strip().splitlines()
        assert "random-ids prompts need the model's vocabulary size" in msg and "--vocab-size N" in msg
        ok = cli("bench", "--url", url, "--config", "b", "--campaign", "c", "--workload", "ids",
                 "--concurrency", "1", "--num-prompts", "2", "--input-len", "8", "--output-len", "4",
                 "--prompts", "random-ids", "--vocab-size", "2048", "--api", "openai-completions",
                 "--no-progress", store=store)
        assert ok.exit_code == 0, ok.output
    finally:
        proc.terminate()
        proc.wait(10)
