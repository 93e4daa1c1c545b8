"""findings.core.engine_rules: SGLang's and vLLM's speculative-flag rules (D112)."""

from __future__ import annotations

import json

import pytest

from findings.core.engine_rules import (SglangSpec, VllmNgramSpec, sglang_args, sglang_env, sglang_normalize,
                                        tree_candidates, vllm_args, vllm_normalize)


def test_topk1_forces_draft_tokens_and_default_max_running() -> None:
    spec, notes = sglang_normalize(SglangSpec("eagle3", 3, 1, 16, True, None))
    assert spec == SglangSpec("EAGLE3", 3, 1, 4, True, 48)
    assert any("num_steps + 1" in n for n in notes) and any("48" in n for n in notes)


def test_topk_defaults_to_one_and_nextn_is_eagle() -> None:
    spec, notes = sglang_normalize(SglangSpec("NEXTN", 2, None, None, True, 128))
    assert spec == SglangSpec("EAGLE", 2, 1, 3, True, 128)
    assert len(notes) == 3


def test_already_normal_has_no_notes() -> None:
    spec = SglangSpec("EAGLE3", 3, 4, 16, False, 128)
    assert sglang_normalize(spec) == (spec, ())


def test_tree_needs_enough_candidates() -> None:
    assert tree_candidates(1, 2) == 2 and tree_candidates(2, 4) == 20
    with pytest.raises(ValueError, match="only 2 candidates"):
        sglang_normalize(SglangSpec("EAGLE3", 1, 2, 4, False, 48))
    assert sglang_normalize(SglangSpec("EAGLE3", 1, 4, 4, True, 48))[0].num_draft_tokens == 4


def test_overlap_takes_any_topk() -> None:  # the v2 worker since 0.5.21 (no v1 fallback, no refusal)
    assert sglang_normalize(SglangSpec("EAGLE3", 3, 4, 16, True, 48))[0].overlap


@pytest.mark.parametrize("spec, match", [
    (SglangSpec("EAGLE3", None, None, None), "num-steps is required"),
    (SglangSpec("EAGLE3", 3, 2, None), "required when"),
    (SglangSpec("EAGLE3", 0, 1, None), "positive"),
    (SglangSpec("NGRAM", 3, 1, None), "only EAGLE"),
    (SglangSpec(None, 3, 1, None), "without --speculative-algorithm"),
    (SglangSpec("EAGLE3", 3, 1, None, True, 0), "max-running"),
])
def test_refusals_are_one_line(spec: SglangSpec, match: str) -> None:
    with pytest.raises(ValueError, match=match) as exc:
        sglang_normalize(spec)
    assert "\n" not in str(exc.value)


def test_sglang_args_and_env() -> None:
    spec = sglang_normalize(SglangSpec("EAGLE3", 3, 4, 16, False, 128))[0]
    assert sglang_args(spec) == ["--speculative-algorithm", "EAGLE3", "--speculative-num-steps", "3",
                                 "--speculative-eagle-topk", "4", "--speculative-num-draft-tokens", "16",
                                 "--disable-overlap-schedule", "--max-running-requests", "128"]
    assert sglang_args(SglangSpec()) == []
    assert sglang_env(spec) == {}


def test_vllm_ngram_rules() -> None:
    assert vllm_normalize(VllmNgramSpec(4))[0] == VllmNgramSpec(4, 5, 5)
    assert vllm_normalize(VllmNgramSpec(4, None, 3))[0] == VllmNgramSpec(4, 3, 3)
    assert vllm_normalize(VllmNgramSpec(4, 2, None))[0] == VllmNgramSpec(4, 2, 2)
    assert vllm_normalize(VllmNgramSpec(4, 2, 4)) == (VllmNgramSpec(4, 2, 4), ())
    for bad, match in ((VllmNgramSpec(0), "> 0"), (VllmNgramSpec(None), "must be given"),
                       (VllmNgramSpec(3, 0, 2), ">= 1"), (VllmNgramSpec(3, 4, 2), "must be <=")):
        with pytest.raises(ValueError, match=match):
            vllm_normalize(bad)


def test_vllm_args() -> None:
    flag, value = vllm_args(VllmNgramSpec(4, 2, 4))
    assert flag == "--speculative-config"
    assert json.loads(value) == {"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_min": 2,
                                 "prompt_lookup_max": 4}
