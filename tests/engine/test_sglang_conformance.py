"""Runner conformance against real SGLang 0.5.23 on the CPU (issue 24).
`make test-engine` only (FINDINGS_ENGINE=1), beside llama.cpp's and vLLM's.

The SGLang venv is tools/get_sglang_cpu.sh's; its first build needs an SGLang
checkout (SGLANG_SRC). Without one and without a cached build, these tests are
skipped, saying so.

One launch-mode matrix through the real CLI in a subprocess, with small models
(tools/make_sglang_models.py, hidden 256, 2 layers; tools/sglang_serve.py):

- `baseline`: no speculation, the random-weight Llama;
- `ngram`: SGLang's NGRAM speculation on the same model, whose greedy loops
  n-gram drafts genuinely match;
- `eagle3`: the "permutation" Llama with the local EAGLE3 draft head that
  guesses right on 60% of the tokens (3 steps, topk 1).

Campaign `sglang-native` runs all three through the native `/generate`
stream with random-ids prompts (the vocabulary comes from the server: the
model has 4,096 tokens, and ids past it crash SGLang's embedding); campaigns
`sglang-openai-completions` and `sglang-openai-chat` run `baseline` and
`eagle3` through the OpenAI APIs with text prompts. C = 1 and 8. Every point
is checked against SGLang's own figures:

- tokens: the client's against `sglang:generation_tokens_total` over the
  point (scraped after the warm-up and after the last request), exactly;
- throughput: the client's against the counters over the same window, within 5%;
- acceptance (native API): ours from each response's `meta_info`
  (`completion_tokens / spec_verify_ct`, summed) against the counters'
  (`Δgeneration_tokens / Δsglang:spec_verify_calls_total`), within 1%;
- the facts: from the real `/server_info`.

And, on servers of their own: `/flush_cache` really empties the radix cache
(`meta_info.cached_tokens` before and after); a server killed mid-point ends
the sweep with a one-line error, the store intact; and `sglang.bench_serving`
0.5.23 (the peer's own client, from the same venv) beside `findings bench` on
one server, point by point.

The figures are also written to build/engine/sglang-conformance.md.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from conftest import ENGINE_TRANSPORT, run_docs

pytestmark = pytest.mark.skipif(os.environ.get("FINDINGS_ENGINE") != "1",
                                reason="the real SGLang engine tier: run `make test-engine`")

ROOT = Path(__file__).resolve().parents[2]
CONCURRENCY = (1, 8)
OUTPUT_LEN = 64
PROMPTS = 16
SMALL = {"SGLANG_TINY_HIDDEN": "256", "SGLANG_TINY_LAYERS": "2", "SGLANG_TINY_HEADS": "4"}
SUMMARY = ROOT / "build" / "engine" / "sglang-conformance.md"


def _env_table(extra: dict[str, str] | None = None) -> str:
    env = {**SMALL, **(extra or {})}
    return "{ " + ", ".join(f'{k} = "{v}"' for k, v in env.items()) + " }"


MATRIX = f"""
[defaults]
transport = "{ENGINE_TRANSPORT}"
concurrency = {list(CONCURRENCY)}
warmup = 2
health_timeout_s = 1800
read_timeout_s = 120

[workloads.ids]
prompts = "random-ids"
input_len = 32
output_len = {OUTPUT_LEN}
num_prompts = {PROMPTS}

[workloads.text]
prompts = "diverse"
input_len = 32
output_len = {OUTPUT_LEN}
num_prompts = {PROMPTS}

# The same prompts through the chat API: a workload of its own, since the
# API is part of a workload's definition (a name keeps one, issue 26).
[workloads.text-chat]
prompts = "diverse"
input_len = 32
output_len = {OUTPUT_LEN}
num_prompts = {PROMPTS}

[configs.baseline]
launch = "{{python}} tools/sglang_serve.py {{port}} none --model random"
env = {_env_table()}

[configs.ngram]
launch = "{{python}} tools/sglang_serve.py {{port}} ngram --model random"
env = {_env_table()}

[configs.eagle3]
launch = "{{python}} tools/sglang_serve.py {{port}} eagle3"
env = {_env_table()}

[[campaigns]]
name = "sglang-native"
api = "native"
configs = ["baseline", "ngram", "eagle3"]
workloads = ["ids"]

[[campaigns]]
name = "sglang-openai-completions"
api = "openai-completions"
configs = ["baseline", "eagle3"]
workloads = ["text"]

[[campaigns]]
name = "sglang-openai-chat"
api = "openai-chat"
configs = ["baseline", "eagle3"]
workloads = ["text-chat"]
"""

Points = dict[tuple[str, str, int], dict[str, Any]]


def _sglang_python() -> str:
    r = subprocess.run(["bash", str(ROOT / "tools" / "get_sglang_cpu.sh")], capture_output=True, text=True)
    if r.returncode != 0:
        if "SGLANG_SRC is unset" in r.stderr:
            pytest.skip(r.stderr.strip().splitlines()[-1])
        raise AssertionError(r.stderr[-3000:])
    return r.stdout.strip()


@pytest.fixture(scope="module")
def sglang_py() -> str:
    return _sglang_python()


@pytest.fixture(scope="module")
def sweep(sglang_py: str, tmp_path_factory: pytest.TempPathFactory) -> Points:
    tmp = tmp_path_factory.mktemp("sglang")
    matrix = tmp / "conformance.toml"
    matrix.write_text(MATRIX, encoding="utf-8")
    store = tmp / "store"
    r = subprocess.run([sys.executable, "-m", "findings", "--settings", "benchmarks/sglang.findings.toml",
                        "--store", str(store), "bench", str(matrix), "--no-progress", "--log-dir", str(tmp / "logs"),
                        "--create"],
                       cwd=ROOT, text=True, capture_output=True, timeout=3600)
    print(r.stdout, r.stderr)
    assert r.returncode == 0, r.stderr[-3000:]
    points: Points = {}
    for doc in run_docs(store):
        for p in doc["points"]:
            points[(p["campaign"], p["config"], p["concurrency"])] = {**p, "facts": doc["configs"][p["config"]]}
    _write_summary(points)
    return points


def _ratio(m: dict[str, float]) -> float:
    return m["output_throughput_tok_s"] / m["server_output_throughput_tok_s"]


def _write_summary(points: Points) -> None:
    lines = ["# SGLang conformance (make test-engine)", "", f"Measured with the {ENGINE_TRANSPORT} transport.", "",
             "| campaign | config | C | tokens client / counters | tok/s client | tok/s counters | ratio | "
             "accept length ours | accept length counters | batch p90 |", "|---|---|---|---|---|---|---|---|---|---|"]
    for (camp, config, c), p in sorted(points.items()):
        m = p["metrics"]
        ours = m.get("accept_length")
        theirs = m.get("accept_length_metrics")
        lines.append(f"| {camp} | {config} | {c} | {int(m['total_output_tokens'])} / "
                     f"{int(m.get('server_generation_tokens', 0))} | {m['output_throughput_tok_s']:.1f} | "
                     f"{m.get('server_output_throughput_tok_s', 0):.1f} | {_ratio(m):.4f} | "
                     f"{'' if ours is None else f'{ours:.3f}'} | {'' if theirs is None else f'{theirs:.3f}'} | "
                     f"{m.get('server_running_p90', 0):g} |")
    SUMMARY.parent.mkdir(parents=True, exist_ok=True)
    SUMMARY.write_text("\n".join(lines) + "\n", encoding="utf-8")


def test_every_point_was_measured(sweep: Points) -> None:
    want = {("sglang-native", c, n) for c in ("baseline", "ngram", "eagle3") for n in CONCURRENCY}
    want |= {(camp, c, n) for camp in ("sglang-openai-completions", "sglang-openai-chat")
             for c in ("baseline", "eagle3") for n in CONCURRENCY}
    assert set(sweep) == want
    for key, p in sweep.items():
        m = p["metrics"]
        assert m["completed"] == m["planned"] == PROMPTS and m["failed"] == 0, key
        assert p["requests"]["output_len"] == [OUTPUT_LEN] * PROMPTS, key  # ignore_eos kept lengths fixed


def test_tokens_match_the_counters_exactly(sweep: Points) -> None:
    for key, p in sweep.items():
        m = p["metrics"]
        assert m["server_generation_tokens"] == m["total_output_tokens"] == PROMPTS * OUTPUT_LEN, key


def test_throughput_agrees_with_the_counters(sweep: Points) -> None:
    for key, p in sweep.items():
        m = p["metrics"]
        assert m["server_metrics_window_s"] >= m["duration"], key
        assert abs(_ratio(m) - 1) <= 0.05, (key, _ratio(m))


def test_acceptance_from_meta_info_matches_the_counters(sweep: Points) -> None:
    for (camp, config, c), p in sweep.items():
        m = p["metrics"]
        if config == "baseline":
            assert "accept_length" not in m and "accept_length_metrics" not in m, (camp, c)
            continue
        # drafts are genuinely accepted (n-gram on the looping random model: about 1.2; EAGLE3: about 3.2)
        assert m["accept_length_metrics"] > (1.1 if config == "ngram" else 2.5), (camp, config, c)
        if camp == "sglang-native":  # meta_info carries spec_verify_ct per request
            assert m["accept_length"] == pytest.approx(m["accept_length_metrics"], rel=0.01), (config, c)
    # The 85%-right draft: 1 + 0.85 + 0.72 + 0.61 = 3.18 expected with 3 steps, if each guess
    # is right independently; the tokens a sequence visits decide the exact figure.
    for c in CONCURRENCY:
        al = sweep[("sglang-native", "eagle3", c)]["metrics"]["accept_length_metrics"]
        assert 2.7 < al < 3.7, (c, al)


def test_configs_record_the_real_server_info(sweep: Points) -> None:
    for (camp, config, c), p in sweep.items():
        f = p["facts"]
        assert f["sglang_version"] == "0.5.23" and f["device"] == "cpu", (config, f)
        assert f["attention_backend"] == "intel_amx" and f["dtype"] == "bfloat16", (config, f)
        if config == "baseline":
            assert f.get("speculative_algorithm") in (None, "none", ""), f
        else:
            assert f["speculative_algorithm"] == ("NGRAM" if config == "ngram" else "EAGLE3"), f
            assert f["max_running_requests"] == 48, f  # forced for speculation on the CPU
        if config == "eagle3":
            assert f["speculative_num_steps"] == 3 and f["speculative_eagle_topk"] == 1, f
            assert f["speculative_num_draft_tokens"] == 4, f


# ------------------------------------------------------------------ servers of their own

def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Server:
    """tools/sglang_serve.py in its own process group, on a free port."""

    def __init__(self, mode: str, tmp: Path, *args: str) -> None:
        self.port = _free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = tmp / f"sglang-{mode}-{self.port}.log"
        env = {**os.environ, **SMALL}
        self.proc = subprocess.Popen([sys.executable, str(ROOT / "tools" / "sglang_serve.py"), str(self.port), mode,
                                      *args], stdout=self.log.open("w"), stderr=subprocess.STDOUT, env=env,
                                     cwd=ROOT, start_new_session=True)
        deadline = time.monotonic() + 600
        while time.monotonic() < deadline:
            assert self.proc.poll() is None, self.log.read_text()[-3000:]
            try:
                if httpx.get(self.url + "/health", timeout=2).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(1)
        raise AssertionError(f"SGLang did not come up: {self.log.read_text()[-3000:]}")

    def kill(self) -> None:
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.proc.wait(timeout=60)


@pytest.fixture()
def server(sglang_py: str, tmp_path: Path) -> Any:
    s = Server("none", tmp_path, "--model", "random")
    yield s
    s.kill()


def _generate(url: str, text: str) -> dict[str, Any]:
    r = httpx.post(url + "/generate", json={"text": text, "sampling_params": {"max_new_tokens": 4,
                                                                               "temperature": 0}}, timeout=120)
    r.raise_for_status()
    return r.json()


def test_flush_cache_empties_the_radix_cache(server: Server) -> None:
    prompt = "the same long prompt, word after word, " * 20
    first = _generate(server.url, prompt)["meta_info"]
    again = _generate(server.url, prompt)["meta_info"]
    assert first["cached_tokens"] == 0 and again["cached_tokens"] > 0.5 * again["prompt_tokens"], (first, again)
    r = httpx.post(server.url + "/flush_cache", timeout=30)
    assert r.status_code == 200, r.text
    after = _generate(server.url, prompt)["meta_info"]
    assert after["cached_tokens"] == 0, after


def test_a_server_killed_mid_point_ends_the_sweep_in_one_line(server: Server, tmp_path: Path) -> None:
    store = tmp_path / "store"
    cmd = [sys.executable, "-m", "findings", "--settings", "benchmarks/sglang.findings.toml", "--store", str(store),
           "bench", "--url", server.url, "--config", "live", "--campaign", "killed", "--workload", "long", "--prompts", "diverse",
           "--input-len", "32", "--output-len", "512", "--num-prompts", "32", "--concurrency", "2", "--no-progress",
           "--create"]
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    time.sleep(12)  # the warm-up is over and the point is running
    server.kill()
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 1, (out, err)
    # The run's summary (stdout) names the one problem in one line; the point measured is stored.
    problems = [ln for ln in out.splitlines() if ln.startswith("problem:")]
    assert len(problems) == 1 and "stopped answering mid-sweep" in problems[0], out
    assert "failed requests are counted" in problems[0]
    if store.exists():  # whatever was stored is intact and readable
        from findings import store as store_mod

        store_mod.load(store)


def test_sglang_bench_serving_beside_findings_bench(sglang_py: str, tmp_path: Path) -> None:
    """The peer's own client (sglang.bench_serving 0.5.23, the same venv) and
    ours, one after the other on the same EAGLE3 server, at each C."""
    s = Server("eagle3", tmp_path)
    rows = []
    try:
        info = httpx.get(s.url + "/server_info", timeout=10).json()
        model = info["model_path"]
        def theirs(c: int, i: int) -> dict[str, Any]:
            out = tmp_path / f"bench-serving-c{c}-{i}.jsonl"
            # As benchmarks/peer/crosscheck.py runs it: random token ids (offline), no request-rate limit.
            r = subprocess.run([sglang_py, "-m", "sglang.bench_serving", "--backend", "sglang", "--base-url", s.url,
                                "--dataset-name", "random-ids", "--tokenize-prompt", "--random-input-len", "32",
                                "--random-output-len", str(OUTPUT_LEN), "--random-range-ratio", "1.0",
                                "--num-prompts", str(PROMPTS), "--max-concurrency", str(c), "--request-rate", "inf",
                                "--tokenizer", model, "--model", model, "--output-file", str(out),
                                "--warmup-requests", "2", "--flush-cache", "--disable-tqdm", "--seed", str(i)],
                               capture_output=True, text=True, timeout=900, cwd=tmp_path,
                               env={**os.environ, "HF_HUB_OFFLINE": "1"})
            assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
            return dict(json.loads(out.read_text().splitlines()[-1]))

        def ours(c: int, i: int) -> dict[str, Any]:
            store = tmp_path / f"store-c{c}-{i}"
            r = subprocess.run(
                [sys.executable, "-m", "findings", "--settings", "benchmarks/sglang.findings.toml", "--store",
                 str(store), "bench", "--url", s.url, "--config", "eagle3", "--campaign", f"beside-c{c}-{i}",
                 "--workload", "ids", "--prompts", "random-ids", "--input-len", "32", "--output-len",
                 str(OUTPUT_LEN), "--num-prompts", str(PROMPTS), "--concurrency", str(c), "--seed", str(i),
                 "--no-progress", "--create"], cwd=ROOT, capture_output=True, text=True, timeout=900)
            assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
            return dict(run_docs(store)[-1]["points"][0]["metrics"])

        # In alternating order, twice each (theirs, ours, ours, theirs): on this shared 2-core
        # machine one launch of the same thing moved by up to a quarter between runs
        # (docs/sglang-cpu.md), so each client's better run is compared.
        for c in CONCURRENCY:
            t1, o1, o2, t2 = theirs(c, 1), ours(c, 1), ours(c, 2), theirs(c, 2)
            t = max((t1, t2), key=lambda x: x["output_throughput"])
            o = max((o1, o2), key=lambda x: x["output_throughput_tok_s"])
            rows.append((c, o["output_throughput_tok_s"], t["output_throughput"], o.get("accept_length"),
                         t.get("accept_length"), [round(x["output_throughput_tok_s"], 1) for x in (o1, o2)],
                         [round(x["output_throughput"], 1) for x in (t1, t2)]))
    finally:
        s.kill()
    with SUMMARY.open("a", encoding="utf-8") as fh:
        fh.write("\n## Beside sglang.bench_serving 0.5.23 (same EAGLE3 server; the better of two runs each)\n\n"
                 "| C | ours tok/s | bench_serving tok/s | ratio | ours accept length | bench_serving accept length "
                 "| ours, both runs | theirs, both runs |\n|---|---|---|---|---|---|---|---|\n")
        for c, ours, theirs, a, b, os_, ts in rows:
            fh.write(f"| {c} | {ours:.1f} | {theirs:.1f} | {ours / theirs:.4f} | {a} | {b} | {os_} | {ts} |\n")
    for c, ours, theirs, a, b, _, _ in rows:
        # Before D84 ours was 22% below theirs at C=1: the running-batch gauge was read every
        # 0.2 s by a synchronous client in a worker thread. With the read on the event loop every
        # 1 s, the means of four alternating rounds were 160.0 against 157.7 tok/s at C=1 and
        # 567.2 against 560.2 at C=8 (docs/decisions.md D83, D84). One run of either client still
        # moves by up to a fifth between rounds on this shared 2-core machine, hence the bound.
        assert abs(ours / theirs - 1) <= 0.20, (c, ours, theirs)
        if a is not None and b is not None:
            assert a == pytest.approx(b, rel=0.05), (c, a, b)
