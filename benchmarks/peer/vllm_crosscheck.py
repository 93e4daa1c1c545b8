"""Cross-check `findings bench` against vLLM's own client, `vllm bench serve`,
on the same vLLM server at the same points (issue 14).

    .venv/bin/python benchmarks/peer/vllm_crosscheck.py [--configs baseline,spec] [--concurrency 1,16,64]
                                                       [--store benchmarks/results-vllm] [--repeats 1]

For each config, one server (tools/vllm_serve.py, as in benchmarks/vllm-cpu.toml)
serves both clients in turn at each C, in alternating order:

- ours: `findings bench --url ... --workload tiny-loop-findings`, stored by
  the runner in campaign `crosscheck-<stamp>`;
- the peer: `vllm bench serve --backend openai` (vllm-cpu 0.32.0, through
  tools/vllm_cli.py) on exactly our prompts (written to a `custom` dataset
  file from the same workload, seed and salt), with `--ignore-eos`,
  temperature 0 and the same output length, `--save-result`; its file is
  ingested with `findings ingest vllm-bench` into campaign
  `crosscheck-<stamp>-vllm-bench`, workload `tiny-loop-vllm-bench`.

docs/vllm-cpu.md compares the two workloads point by point (throughput,
median TTFT, acceptance length). The peer's result files are kept in
`<store>/inputs/` (they are the ingested sources).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from findings.bench.workload import Workload, make_prompts  # noqa: E402

PY = ROOT / ".venv" / "bin" / "python"
SETTINGS = ROOT / "benchmarks" / "vllm.findings.toml"
MODES = {"baseline": "none", "spec": "ngram"}
INPUT_LEN, OUTPUT_LEN, PER_C, MIN_PROMPTS = 32, 128, 4, 16


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_healthy(url: str, proc: subprocess.Popen[bytes], timeout: float = 900) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"the server exited with {proc.returncode}")
        try:
            with urllib.request.urlopen(url + "/health", timeout=2) as r:
                if r.status == 200:
                    return
        except OSError:
            pass
        time.sleep(1)
    raise SystemExit("the server did not become healthy")


def run(cmd: list[str], **kw: object) -> subprocess.CompletedProcess[str]:
    print("  $ " + " ".join(str(c) for c in cmd)[:200], flush=True)
    done = subprocess.run([str(c) for c in cmd], capture_output=True, text=True, **kw)  # type: ignore[call-overload]
    if done.returncode != 0:
        sys.stderr.write(done.stdout[-2000:] + done.stderr[-2000:])
        raise SystemExit(f"failed: {cmd[0]} ... ({done.returncode})")
    return done


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--configs", default="baseline,spec")
    ap.add_argument("--concurrency", default="1,16,64")
    ap.add_argument("--repeats", type=int, default=1)
    ap.add_argument("--store", type=Path, default=ROOT / "benchmarks" / "results-vllm")
    a = ap.parse_args()
    stamp = dt.datetime.now(dt.timezone.utc).strftime("%Y%m%d-%H%M%S")
    today = stamp[:4] + "-" + stamp[4:6] + "-" + stamp[6:8]
    ours_campaign, peer_campaign = f"crosscheck-{stamp}", f"crosscheck-{stamp}-vllm-bench"
    # The peer campaign's place in the day, as the runner orders its own (D21): fixed up front,
    # so that every ingest of it agrees.
    peer_order = int(stamp[9:15]) * 100 + 99
    vpy = run(["bash", ROOT / "tools" / "get_vllm_cpu.sh"]).stdout.strip()
    out = ROOT / "build" / "vllm-crosscheck" / stamp
    out.mkdir(parents=True, exist_ok=True)
    inputs = a.store / "inputs"
    inputs.mkdir(parents=True, exist_ok=True)
    concs = [int(c) for c in a.concurrency.split(",")]
    for config in a.configs.split(","):
        port = free_port()
        url = f"http://127.0.0.1:{port}"
        log = open(out / f"{config}-server.log", "wb")
        proc = subprocess.Popen([str(PY), str(ROOT / "tools" / "vllm_serve.py"), str(port), MODES[config]],
                                stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            wait_healthy(url, proc)
            model = json.loads(urllib.request.urlopen(url + "/v1/models").read())["data"][0]["root"]
            for c in concs:
                n = max(MIN_PROMPTS, PER_C * c)
                w = Workload(name="tiny-loop-findings", kind="diverse", input_len=INPUT_LEN, output_len=OUTPUT_LEN,
                             num_prompts=n)
                for rep in range(1, a.repeats + 1):
                    salt = c * 1000 + 1  # the runner's salt (each of its invocations is repeat 1): the same prompts
                    prompts = make_prompts(w, n, salt=salt)
                    data = out / f"prompts-{c}-{rep}.jsonl"
                    data.write_text("".join(json.dumps({"prompt": p.text, "output_tokens": OUTPUT_LEN}) + "\n"
                                            for p in prompts))
                    order = ["ours", "peer"] if (c + rep) % 2 else ["peer", "ours"]
                    for who in order:
                        if who == "ours":
                            run([PY, "-m", "findings", "--settings", SETTINGS, "--store", a.store, "bench", "--url", url,
                                 "--config", config, "--campaign", ours_campaign, "--workload", "tiny-loop-findings",
                                 "--concurrency", str(c), "--num-prompts", str(n), "--input-len", str(INPUT_LEN),
                                 "--output-len", str(OUTPUT_LEN), "--prompts", "diverse", "--api",
                                 "openai-completions", "--warmup", "2", "--repeats", "1", "--date", today,
                                 "--no-progress", "--create"])
                        else:
                            name = f"vllm-bench-{stamp}-{config}-c{c}-r{rep}.json"
                            run([vpy, ROOT / "tools" / "vllm_cli.py", "bench", "serve", "--backend", "openai",
                                 "--base-url", url, "--model", "tiny-llama", "--tokenizer", model,
                                 "--dataset-name", "custom", "--dataset-path", data, "--custom-output-len",
                                 str(OUTPUT_LEN), "--skip-chat-template", "--disable-shuffle", "--num-prompts", str(n),
                                 "--max-concurrency", str(c), "--num-warmups", "2", "--ignore-eos", "--temperature",
                                 "0", "--percentile-metrics", "ttft,tpot,itl,e2el", "--metric-percentiles", "50,99",
                                 "--metadata", "dataset_name=diverse", "ignore_eos=true", "--save-result",
                                 "--result-dir", inputs, "--result-filename", name],
                                env={**os.environ, "HF_HUB_OFFLINE": "1"})
                            run([PY, "-m", "findings", "--settings", SETTINGS, "--store", a.store, "ingest",
                                 "vllm-bench", inputs / name, "--config", config, "--campaign", peer_campaign,
                                 "--workload", "tiny-loop-vllm-bench", "--date", today, "--order", str(peer_order),
                                 "--create"])
        finally:
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
            log.close()
    print(f"campaigns {ours_campaign} (findings bench) and {peer_campaign} (vllm bench serve) in {a.store}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
