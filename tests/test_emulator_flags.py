"""findings emulate with SGLang's speculative flags (the flags model, D113)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest

from findings.core.engine_rules import SglangSpec, sglang_normalize
from findings.emulator.engine import simulate_closed_loop
from findings.emulator.model import PROFILES, mean_accept_length, profile_from_flags

ROOT = Path(__file__).resolve().parents[1]
READY = re.compile(r"listening on (http://\S+)")


def _profile(s: int, k: int, d: int, overlap: bool = True, mrr: int = 128):
    return profile_from_flags(sglang_normalize(SglangSpec("EAGLE3", s, k, d, overlap, mrr))[0])


def test_named_profiles_untouched() -> None:
    assert PROFILES["eagle3-topk1-v2"].depth == 2 and PROFILES["eagle3-topk4-v1"].depth == 3
    assert PROFILES["eagle3-topk1-v2"].accept_depth is None


def test_profile_from_flags_facts() -> None:
    p = _profile(3, 1, 4)
    assert p.name == "eagle3-s3-k1-d4-overlap" and p.tokens_verified == 4 and p.max_running_requests == 128
    for s in (1, 2, 3, 4, 6):  # overlap never slower than no overlap
        on, off = _profile(s, 1, s + 1, True), _profile(s, 1, s + 1, False)
        assert all(on.decode_step_ms(b) <= off.decode_step_ms(b) for b in (1, 16, 64))
    # a wider tree accepts more per position; depth is capped by the draft tokens
    assert _profile(3, 4, 16, False).accept_p > _profile(3, 2, 8, False).accept_p > _profile(3, 1, 4, False).accept_p
    assert _profile(6, 2, 4).depth == 3 and _profile(6, 4, 16).depth == 6
    assert mean_accept_length(_profile(4, 1, 5)) > mean_accept_length(_profile(2, 1, 3))
    # the draft grows with steps and with topk x batch
    assert _profile(4, 1, 5).draft_ms(16) > _profile(2, 1, 3).draft_ms(16)
    assert _profile(3, 4, 8).draft_ms(64) > _profile(3, 2, 8).draft_ms(64)
    with pytest.raises(ValueError):
        profile_from_flags(SglangSpec("EAGLE3", 3, None, None))


def test_best_beats_seed_and_baseline_in_model_time() -> None:
    def tp(p, c: int) -> float:
        return simulate_closed_loop(p, c, max(4 * c, 32), 128, 64, max_running=p.max_running_requests).throughput
    best, seed = _profile(2, 1, 3), _profile(3, 4, 16, False)
    assert tp(best, 1) > 1.5 * tp(seed, 1) and tp(best, 1) > 1.5 * tp(PROFILES["baseline"], 1)


def test_emulator_serves_flags_over_http() -> None:
    proc = subprocess.Popen([sys.executable, "-m", "findings", "emulate", "--port", "0", "--speed", "20",
                             "--speculative-algorithm", "EAGLE3", "--speculative-num-steps", "3",
                             "--speculative-eagle-topk", "1", "--speculative-num-draft-tokens", "8"],
                            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        m = READY.search(line)
        assert m, line
        url = m.group(1)
        info = json.load(urllib.request.urlopen(url + "/server_info", timeout=10))
        assert info["speculative_algorithm"] == "EAGLE3"
        assert (info["speculative_num_steps"], info["speculative_eagle_topk"],
                info["speculative_num_draft_tokens"]) == (3, 1, 4)  # topk 1 forces steps + 1, as SGLang does
        assert info["disable_overlap_schedule"] is False and info["max_running_requests"] == 48
        assert info["emulator_profile"] == "eagle3-s3-k1-d4-overlap"
        assert "--speculative-num-draft-tokens 4" in info["launch_command"]
        req = urllib.request.Request(url + "/generate", data=json.dumps(
            {"text": "hello", "sampling_params": {"max_new_tokens": 16, "ignore_eos": True}, "stream": True}).encode(),
            headers={"Content-Type": "application/json"})
        body = urllib.request.urlopen(req, timeout=20).read().decode()
        events = [json.loads(x[6:]) for x in body.splitlines() if x.startswith("data: {")]
        assert events and events[-1]["meta_info"]["completion_tokens"] == 16
        assert events[-1]["meta_info"]["spec_verify_ct"] <= 16
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def test_refused_combination_exits_nonzero() -> None:
    r = subprocess.run([sys.executable, "-m", "findings", "emulate", "--port", "0", "--speculative-algorithm",
                        "EAGLE3", "--speculative-num-steps", "1", "--speculative-eagle-topk", "2",
                        "--speculative-num-draft-tokens", "16"], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert r.returncode == 2
    errors = [x for x in r.stderr.splitlines() if "Error" in x]
    assert len(errors) == 1 and "only 2 candidates" in errors[0]
