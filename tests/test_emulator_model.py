"""The emulator's pure parts: profiles, step-time model, engine, request parsing."""

from __future__ import annotations

import random
import subprocess
import sys

import pytest

from findings.emulator.engine import Engine, Seq, count_prompt_tokens, simulate_closed_loop
from findings.emulator.model import PROFILES, draw_step_tokens, mean_accept_length
from findings.emulator.protocol import BadRequest, parse_generate, parse_openai, parse_sampling

# The seed's diverse-prompts curves the profiles are calibrated to (benchmarks/history/measurements.csv).
SEED = {
    "baseline": {1: 92.6, 2: 159.7, 5: 292.5, 10: 457.2, 30: 711.0, 70: 784.2, 100: 761.6, 250: 772.1},
    "eagle3-topk4-v1": {1: 77.5, 2: 125.1, 5: 183.2, 10: 239.6, 30: 299.5, 70: 337.7, 100: 338.8, 250: 340.9},
    "eagle3-topk1-v2": {1: 86.8, 30: 759.3, 100: 775.0, 250: 754.4},
}


def test_profiles_are_the_documented_four() -> None:
    assert set(PROFILES) == {"baseline", "eagle3-topk4-v1", "eagle3-topk1-v2", "firehose"}
    assert not PROFILES["baseline"].speculative
    topk4, topk1 = PROFILES["eagle3-topk4-v1"], PROFILES["eagle3-topk1-v2"]
    assert (topk4.speculative_eagle_topk, topk4.speculative_num_draft_tokens, topk4.overlap) == (4, 16, False)
    assert (topk1.speculative_eagle_topk, topk1.speculative_num_draft_tokens, topk1.overlap) == (1, 3, True)
    assert PROFILES["firehose"].decode_step_ms(100) == 0.0


@pytest.mark.parametrize("profile", sorted(SEED))
def test_virtual_time_closed_loop_matches_the_seed_within_15_percent(profile: str) -> None:
    for c, seed in SEED[profile].items():
        result = simulate_closed_loop(PROFILES[profile], c, max(2 * c, 8))
        assert abs(result.throughput / seed - 1) < 0.15, (profile, c, result.throughput, seed)


def test_design_intent_of_the_curves() -> None:
    def thr(name: str, c: int) -> float:
        return simulate_closed_loop(PROFILES[name], c, max(2 * c, 8)).throughput

    # topk=4 v1 saturates flat near 340; baseline keeps rising to ~780.
    assert abs(thr("eagle3-topk4-v1", 250) / thr("eagle3-topk4-v1", 70) - 1) < 0.06
    assert thr("baseline", 250) > 2 * thr("eagle3-topk4-v1", 250)
    # topk=1 v2: about 6% behind baseline at C=1 (beyond a 4% noise floor), ahead at C=30.
    ratio1 = thr("eagle3-topk1-v2", 1) / thr("baseline", 1)
    assert 0.90 < ratio1 < 0.96
    assert thr("eagle3-topk1-v2", 30) > 1.04 * thr("baseline", 30)


def test_accept_draws_average_to_the_profile_accept_length() -> None:
    for name in ("eagle3-topk4-v1", "eagle3-topk1-v2"):
        p = PROFILES[name]
        rng = random.Random(1)
        draws = [draw_step_tokens(p, rng.random(), 1000) for _ in range(20000)]
        assert all(1 <= n <= p.max_step_tokens and c == n - 1 for n, c in draws)
        mean = sum(n for n, _ in draws) / len(draws)
        assert abs(mean - mean_accept_length(p)) < 0.03
        assert draw_step_tokens(p, 0.999, 1)[0] == 1  # capped by the remaining budget
        assert draw_step_tokens(p, 0.999, 1000)[0] == p.max_step_tokens and draw_step_tokens(p, 0.0, 9)[0] == 1


def test_engine_caps_running_and_retires_at_max_new_tokens() -> None:
    engine = Engine(PROFILES["baseline"], max_running=2)
    seqs = [Seq(sid=i, rid=str(i), prompt_tokens=4, max_new_tokens=3, seed=i) for i in range(3)]
    for s in seqs:
        engine.add(s)
    step = engine.next_step()
    assert step is not None and step.kind == "prefill" and len(step.seqs) == 2
    assert len(engine.running) == 2 and len(engine.waiting) == 1
    engine.apply(step)
    while engine.running[:1] and not seqs[0].finished:
        s2 = engine.next_step()
        assert s2 is not None and s2.kind == "decode"
        engine.apply(s2)
    assert seqs[0].finish_reason == {"type": "length", "length": 3}
    assert seqs[0].text.split() and len(seqs[0].text.split()) == 3 == len(seqs[0].output_ids)


def test_same_seed_same_words_whatever_the_profile() -> None:
    def run(profile: str) -> str:
        engine = Engine(PROFILES[profile])
        seq = Seq(sid=0, rid="r", prompt_tokens=3, max_new_tokens=20, seed=42)
        engine.add(seq)
        while not seq.finished:
            step = engine.next_step()
            assert step is not None
            engine.apply(step)
        return seq.text

    assert run("baseline") == run("eagle3-topk1-v2") == run("eagle3-topk4-v1")


def test_stop_string_and_min_new_tokens() -> None:
    engine = Engine(PROFILES["baseline"])
    probe = Seq(sid=0, rid="p", prompt_tokens=1, max_new_tokens=30, seed=7)
    engine.add(probe)
    while not probe.finished:
        step = engine.next_step()
        assert step is not None
        engine.apply(step)
    third = probe.text.split()[2]
    seq = Seq(sid=1, rid="s", prompt_tokens=1, max_new_tokens=30, seed=7, stop=(third,))
    engine.add(seq)
    while not seq.finished:
        step = engine.next_step()
        assert step is not None
        engine.apply(step)
    assert seq.finish_reason is not None and seq.finish_reason["type"] == "stop"
    assert seq.finish_reason["matched"] == third
    assert third not in seq.text.split()


def test_prompt_tokens_are_words_or_ids() -> None:
    assert count_prompt_tokens("one two  three\nfour") == 4
    assert count_prompt_tokens("") == 1
    assert count_prompt_tokens([5, 6, 7]) == 3


def test_request_parsing() -> None:
    specs, stream, batch = parse_generate({"text": "a b", "sampling_params": {"max_new_tokens": 5}, "whatever": 1})
    assert (len(specs), stream, batch, specs[0].max_new_tokens) == (1, False, False, 5)
    specs, _, batch = parse_generate({"input_ids": [[1, 2], [3]], "stream": True})
    assert batch and [s.prompt for s in specs] == [[1, 2], [3]] and specs[0].max_new_tokens == 128
    with pytest.raises(BadRequest, match="unexpected keyword argument 'bogus'"):
        parse_sampling({"bogus": 1})
    with pytest.raises(BadRequest):
        parse_sampling({"max_new_tokens": -1})
    with pytest.raises(BadRequest):
        parse_generate({"sampling_params": {}})
    specs, opts = parse_openai({"messages": [{"role": "user", "content": "hi there"}], "max_completion_tokens": 7,
                                "stream": True, "stream_options": {"include_usage": True}}, chat=True)
    assert specs[0].max_new_tokens == 7 and opts["include_usage"] and specs[0].prompt == "hi there"
    specs, _ = parse_openai({"prompt": "x", "min_tokens": 2}, chat=False)
    assert (specs[0].max_new_tokens, specs[0].min_new_tokens) == (16, 2)


def test_importing_the_package_and_model_is_light() -> None:
    code = ("import sys, findings.emulator, findings.emulator.model, findings.emulator.engine, "
            "findings.emulator.protocol; bad = {'aiohttp', 'pandas', 'httpx'} & set(sys.modules); "
            "assert not bad, bad")
    subprocess.run([sys.executable, "-c", code], check=True)


def test_exact_share_fates_are_exact_in_every_prefix() -> None:
    from hypothesis import given, settings
    from hypothesis import strategies as st

    from findings.emulator.faults import Faults, fate, parse_how

    @settings(max_examples=200, deadline=None)
    @given(share=st.floats(0, 1), skip=st.integers(0, 5), n=st.integers(1, 300))
    def check(share: float, skip: int, n: int) -> None:
        f = Faults(fail_share=share, fail_how=("http:500", "drop"), fail_skip=skip)
        fates = [fate(f, 0, i) for i in range(skip + n)]
        assert not any(x.error_before or x.drop for x in fates[:skip])
        failed = [x.error_before or x.drop for x in fates[skip:]]
        for k in range(1, n + 1):
            assert abs(sum(failed[:k]) - share * k) < 1 + 1e-6
        kinds = ["http" if x.error_before else "drop" for x in fates[skip:] if x.error_before or x.drop]
        assert kinds == ["http", "drop"] * (len(kinds) // 2) + ["http"] * (len(kinds) % 2)

    check()
    assert parse_how("http:503, drop,error-event") == ("http:503", "drop", "error-event")
    for bad in ("", "http", "http:99", "http:600", "reset"):
        with pytest.raises(ValueError):
            parse_how(bad)


def test_acceptance_by_kind_of_text_is_the_documented_assumption():
    from findings.emulator.model import ACCEPT_SCALE, MAX_ACCEPT_P, PROFILES, accept_p, text_kind
    code = "def add(a, b):\n    return a + b\n"
    assert text_kind(code) == "code"
    assert text_kind("A tank holds 240 litres and drains 8 a minute. How long?") == "math"
    assert text_kind(" ".join(["word"] * 200)) == "long-context"
    assert text_kind("How should I spend one evening in a city I do not know?") == "text"
    assert text_kind([5, 6, 7]) == "text"
    p = PROFILES["eagle3-topk1-v2"]
    assert accept_p(p, code) == pytest.approx(p.accept_p * ACCEPT_SCALE["code"])
    assert accept_p(p, "hello there") == p.accept_p
    assert accept_p(PROFILES["eagle3-topk4-v1"], code) == min(MAX_ACCEPT_P, 0.72 * 1.25)
