"""What the serving engines do with speculative-decoding flags. Pure: no I/O.

Two engines, each as a frozen spec, a ``*_normalize`` (the config as the
engine would really run it, plus a note for every adjustment it makes, or a
``ValueError`` with a one-line message for what it refuses) and the launch
flags. Used by the emulator (``findings emulate --speculative-*``) and by the
config search (findings/tune), so that neither searches, emulates or emits a
config the engine would change or refuse.

The rules were read from the engines' source (docs/decisions.md D112); no
engine code is copied here. Where a rule is an engine's *runtime* failure
rather than an argument check, the comment says so.

SGLang 0.5.23, EAGLE family (EAGLE, EAGLE3; NEXTN is an alias of EAGLE):

* ``_handle_eagle_family`` (python/sglang/srt/speculative/spec_info.py in
  the 0.5.2x line; python/sglang/srt/arg_groups/speculative_hook.py on main):
  - ``--max-running-requests`` unset -> 48 ("reset to 48 for speculative
    decoding");
  - topk == 1 -> ``num_draft_tokens`` forced to ``num_steps + 1``;
  - ``--speculative-num-steps`` unset -> all three auto-chosen per model
    architecture (here refused: a search must name them), and topk or draft
    tokens given without steps trips an assertion there;
  - ``--disable-overlap-schedule`` selects the synchronous spec-v2 path; since
    the v1 worker was removed, the overlap path takes any topk (older releases
    either refused topk > 1 with SGLANG_ENABLE_SPEC_V2 or silently fell back
    to v1; 0.5.23 does neither, and ignores that variable: see ``sglang_env``).
* The draft tree (``organize_draft_results`` in
  python/sglang/srt/speculative/eagle_utils.py) picks ``num_draft_tokens - 1``
  nodes with ``torch.topk`` over ``topk + (num_steps - 1) * topk**2``
  candidates; asking for more fails on the first decode batch (the launch's
  own warm-up request), so the launch never serves: refused here.
* Not modelled (they need facts a spec does not carry): topk > 1 with
  page_size > 1 off flashinfer/fa3/triton, trtllm_mha with topk > 1, and
  overlap forced off on the CPU device (main only).

vLLM 0.32 n-gram (``SpeculativeConfig`` in vllm/config/speculative.py):
``num_speculative_tokens`` must be given and > 0; ``prompt_lookup_min`` and
``prompt_lookup_max`` are >= 1 when given; neither given -> both 5; one given
-> the other copies it; ``prompt_lookup_min > prompt_lookup_max`` is refused.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace

__all__ = [
    "SGLANG_DEFAULT_SPEC_MAX_RUNNING",
    "SglangSpec",
    "VllmNgramSpec",
    "sglang_args",
    "sglang_env",
    "sglang_normalize",
    "tree_candidates",
    "vllm_args",
    "vllm_normalize",
]

#: SGLang's --max-running-requests when an EAGLE-family launch does not pass one.
SGLANG_DEFAULT_SPEC_MAX_RUNNING = 48
#: The algorithms whose flags this module knows (SGLang upper-cases the name; NEXTN is EAGLE).
SGLANG_EAGLE_FAMILY = ("EAGLE", "EAGLE3")
#: vLLM's n-gram window when neither bound is given.
VLLM_NGRAM_DEFAULT_LOOKUP = 5


@dataclass(frozen=True)
class SglangSpec:
    """SGLang's speculative launch flags (None: not passed)."""

    algorithm: str | None = None
    num_steps: int | None = None
    eagle_topk: int | None = None
    num_draft_tokens: int | None = None
    overlap: bool = True  # False: --disable-overlap-schedule
    max_running_requests: int | None = None


def tree_candidates(num_steps: int, topk: int) -> int:
    """Draft nodes SGLang's EAGLE tree chooses from: topk at the first step, topk**2 at each later one."""
    return topk + (num_steps - 1) * topk * topk


def _positive(name: str, value: int | None) -> None:
    if value is not None and (type(value) is not int or value < 1):
        raise ValueError(f"{name} must be a positive integer, got {value!r}")


def sglang_normalize(spec: SglangSpec) -> tuple[SglangSpec, tuple[str, ...]]:
    """The config as SGLang 0.5.23 runs it, and a note per adjustment; ValueError when refused."""
    notes: list[str] = []
    _positive("--max-running-requests", spec.max_running_requests)
    if spec.algorithm is None:
        if any(v is not None for v in (spec.num_steps, spec.eagle_topk, spec.num_draft_tokens)):
            raise ValueError("speculative flags given without --speculative-algorithm")
        return spec, ()
    algo = spec.algorithm.upper()
    if algo == "NEXTN":
        algo = "EAGLE"
        notes.append("--speculative-algorithm NEXTN runs as EAGLE")
    if algo not in SGLANG_EAGLE_FAMILY:
        raise ValueError(f"--speculative-algorithm {spec.algorithm}: only EAGLE, EAGLE3 (and NEXTN) are modelled")
    for name, value in (("--speculative-num-steps", spec.num_steps), ("--speculative-eagle-topk", spec.eagle_topk),
                        ("--speculative-num-draft-tokens", spec.num_draft_tokens)):
        _positive(name, value)
    if spec.num_steps is None:
        # SGLang auto-chooses all three per model architecture (and asserts the
        # other two are unset); a search over flags must name the steps.
        raise ValueError("--speculative-num-steps is required (SGLang would choose steps, topk and "
                         "draft tokens per model architecture)")
    steps = spec.num_steps
    topk = spec.eagle_topk
    if topk is None:
        topk = 1
        notes.append("--speculative-eagle-topk defaults to 1")
    draft = spec.num_draft_tokens
    if topk == 1:
        if draft != steps + 1:
            notes.append(f"--speculative-num-draft-tokens {draft if draft is not None else 'unset'} -> {steps + 1}"
                         " (topk 1 forces num_steps + 1)")
        draft = steps + 1
    elif draft is None:
        raise ValueError("--speculative-num-draft-tokens is required when --speculative-eagle-topk > 1")
    else:
        cands = tree_candidates(steps, topk)
        if draft - 1 > cands:
            raise ValueError(f"--speculative-num-draft-tokens {draft} needs {draft - 1} draft nodes but steps "
                             f"{steps} x topk {topk} give only {cands} candidates (SGLang fails on the first decode)")
    running = spec.max_running_requests
    if running is None:
        running = SGLANG_DEFAULT_SPEC_MAX_RUNNING
        notes.append(f"--max-running-requests unset -> {SGLANG_DEFAULT_SPEC_MAX_RUNNING} for speculative decoding")
    out = replace(spec, algorithm=algo, eagle_topk=topk, num_draft_tokens=draft, max_running_requests=running)
    return out, tuple(notes)


def sglang_args(spec: SglangSpec) -> list[str]:
    """The launch flags for ``spec`` (as given: normalize first to pass what SGLang will run)."""
    args: list[str] = []
    if spec.algorithm is not None:
        args += ["--speculative-algorithm", spec.algorithm]
        for flag, value in (("--speculative-num-steps", spec.num_steps),
                            ("--speculative-eagle-topk", spec.eagle_topk),
                            ("--speculative-num-draft-tokens", spec.num_draft_tokens)):
            if value is not None:
                args += [flag, str(value)]
    if not spec.overlap:
        args.append("--disable-overlap-schedule")
    if spec.max_running_requests is not None:
        args += ["--max-running-requests", str(spec.max_running_requests)]
    return args


def sglang_env(spec: SglangSpec) -> dict[str, str]:
    """Environment variables the path needs: none. SGLANG_ENABLE_SPEC_V2 is
    ignored from 0.5.21 (0.5.23 only warns that it was removed): the v2
    worker always runs and ``--disable-overlap-schedule`` alone picks the path."""
    del spec
    return {}


@dataclass(frozen=True)
class VllmNgramSpec:
    """vLLM's n-gram ``--speculative-config`` (None: not given)."""

    num_speculative_tokens: int | None
    prompt_lookup_min: int | None = None
    prompt_lookup_max: int | None = None


def vllm_normalize(spec: VllmNgramSpec) -> tuple[VllmNgramSpec, tuple[str, ...]]:
    """The n-gram config as vLLM's SpeculativeConfig resolves it, and notes; ValueError when refused."""
    n = spec.num_speculative_tokens
    if n is None:
        raise ValueError("num_speculative_tokens must be given for the ngram method")
    if type(n) is not int or n < 1:
        raise ValueError(f"num_speculative_tokens must be > 0, got {n!r}")
    for name, value in (("prompt_lookup_min", spec.prompt_lookup_min), ("prompt_lookup_max", spec.prompt_lookup_max)):
        if value is not None and (type(value) is not int or value < 1):
            raise ValueError(f"{name} must be >= 1, got {value!r}")
    lo, hi = spec.prompt_lookup_min, spec.prompt_lookup_max
    notes: list[str] = []
    if lo is None and hi is None:
        lo = hi = VLLM_NGRAM_DEFAULT_LOOKUP
        notes.append(f"prompt_lookup_min and prompt_lookup_max unset -> {VLLM_NGRAM_DEFAULT_LOOKUP}")
    elif lo is None:
        lo = hi
        notes.append(f"prompt_lookup_min unset -> prompt_lookup_max ({hi})")
    elif hi is None:
        hi = lo
        notes.append(f"prompt_lookup_max unset -> prompt_lookup_min ({lo})")
    assert lo is not None and hi is not None
    if lo > hi:
        raise ValueError(f"prompt_lookup_min={lo} must be <= prompt_lookup_max={hi}")
    return VllmNgramSpec(n, lo, hi), tuple(notes)


def vllm_args(spec: VllmNgramSpec) -> list[str]:
    """``["--speculative-config", JSON]`` for ``spec`` (keys given only)."""
    cfg: dict[str, object] = {"method": "ngram", "num_speculative_tokens": spec.num_speculative_tokens}
    if spec.prompt_lookup_min is not None:
        cfg["prompt_lookup_min"] = spec.prompt_lookup_min
    if spec.prompt_lookup_max is not None:
        cfg["prompt_lookup_max"] = spec.prompt_lookup_max
    return ["--speculative-config", json.dumps(cfg, separators=(",", ":"))]
