"""The emulator's performance model: profiles and step times. Pure: no I/O.

A *profile* describes one emulated server configuration: what it reports
about itself (speculative settings) and how long one scheduler step takes for
a batch of ``b`` running requests. All times here are *model* milliseconds;
the server divides them by ``EmulatorOptions.speed``.

The equations (docs/emulator.md has the fitted numbers and their origin):

* decode/verify forward, with ``T = b * tokens_verified`` tokens in it::

      verify(b) = verify_fixed_ms + verify_token_ms * T + verify_token2_ms * T**2

* draft (speculative profiles only)::

      draft(b) = draft_fixed_ms + draft_req_ms * b

* one decode step::

      step(b) = max(verify(b), draft(b))   if overlap (spec v2 hides the draft)
      step(b) = verify(b) + draft(b)       otherwise

* a prefill step for ``n`` new requests with ``t`` uncached prompt tokens::

      prefill = prefill_fixed_ms + prefill_token_ms * t

* tokens a request gets from one speculative step: ``1 + k`` where ``k``
  counts leading accepted drafts, each accepted with probability
  ``accept_p``, at most ``num_steps`` (the chain depth). Its mean is
  ``(1 - p**(s+1)) / (1 - p)`` (see :func:`mean_accept_length`). The engine
  feeds the draws from a per-request golden-ratio (Weyl) sequence, so that
  even a short request's accept length is close to the mean while single
  steps still vary between 1 and ``num_steps + 1``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from findings.core.engine_rules import SglangSpec

__all__ = [
    "ACCEPT_SCALE",
    "PROFILES",
    "Profile",
    "FlagsModel",
    "profile_from_flags",
    "accept_p",
    "draw_step_tokens",
    "mean_accept_length",
    "text_kind",
]


@dataclass(frozen=True)
class Profile:
    """One emulated server configuration and its calibrated step-time model."""

    name: str
    description: str
    # What /server_info reports.
    speculative_algorithm: str | None = None
    speculative_num_steps: int | None = None
    speculative_eagle_topk: int | None = None
    speculative_num_draft_tokens: int | None = None
    overlap: bool = True  # spec v2 overlap (draft hidden); reported as disable_overlap_schedule=not overlap
    worker: str | None = None  # "v1" / "v2" for speculative profiles
    # Scheduler limits.
    max_running_requests: int = 256
    max_prefill_tokens: int = 16384
    kv_capacity_tokens: int = 1_000_000
    # Step-time model (model milliseconds).
    tokens_verified: int = 1
    verify_fixed_ms: float = 0.0
    verify_token_ms: float = 0.0
    verify_token2_ms: float = 0.0
    draft_fixed_ms: float = 0.0
    draft_req_ms: float = 0.0
    # Prefill: ~50k prompt tokens/s across the 8 GPUs (shared by every GPU profile).
    prefill_fixed_ms: float = 8.0
    prefill_token_ms: float = 0.02
    # Speculative acceptance: probability that each draft position is accepted.
    accept_p: float = 0.0
    #: The deepest chain a step can accept (None: ``speculative_num_steps``);
    #: the flags model caps it by the draft tokens too (``profile_from_flags``).
    accept_depth: int | None = None
    #: Zero model delay: steps run back to back and a request gets its next
    #: token only once its previous event has been written (client-capacity tests).
    firehose: bool = False

    @property
    def speculative(self) -> bool:
        return self.speculative_algorithm is not None

    def verify_ms(self, b: int) -> float:
        t = b * self.tokens_verified
        return self.verify_fixed_ms + self.verify_token_ms * t + self.verify_token2_ms * t * t

    def draft_ms(self, b: int) -> float:
        if not self.speculative:
            return 0.0
        return self.draft_fixed_ms + self.draft_req_ms * b

    def decode_step_ms(self, b: int) -> float:
        """Model time of one decode (or draft+verify) step for ``b`` requests."""
        if b <= 0 or self.firehose:
            return 0.0
        verify, draft = self.verify_ms(b), self.draft_ms(b)
        return max(verify, draft) if self.overlap else verify + draft

    def prefill_step_ms(self, new_tokens: int) -> float:
        """Model time of one prefill step over ``new_tokens`` uncached prompt tokens."""
        if self.firehose:
            return 0.0
        return self.prefill_fixed_ms + self.prefill_token_ms * max(0, new_tokens)

    @property
    def max_step_tokens(self) -> int:
        """The most tokens one request can get from one step."""
        return self.depth + 1 if self.speculative else 1

    @property
    def depth(self) -> int:
        """The most drafts one step can accept."""
        return self.accept_depth if self.accept_depth is not None else (self.speculative_num_steps or 0)

    def steady_throughput(self, b: int) -> float:
        """Decode-only tokens/s at batch size ``b`` (model time; no prefill, no tail)."""
        step = self.decode_step_ms(b)
        return float("inf") if step == 0 else 1000.0 * b * mean_accept_length(self) / step


def mean_accept_length(profile: Profile) -> float:
    """Mean tokens per request per step (1 for non-speculative profiles)."""
    if not profile.speculative:
        return 1.0
    p, s = profile.accept_p, profile.depth
    return float(sum(p**i for i in range(s + 1)))


#: ASSUMPTIONS, not measurements: how much more (or less) often a draft is
#: accepted on each kind of prompt text than on the seed study's diverse
#: prompts (which the profiles' ``accept_p`` was fitted to). Drafts predict
#: code and text copied from a long context better than open chat; published
#: per-category acceptance (Spec-Bench, SPEED-Bench) shows that order, not
#: these numbers. docs/emulator.md lists them; results stay SIMULATED.
ACCEPT_SCALE: dict[str, float] = {"code": 1.25, "long-context": 1.15, "math": 1.10, "text": 1.0}
#: No draft position is accepted more often than this.
MAX_ACCEPT_P = 0.95
_CODE = re.compile(r"(\bdef \w+\(|\breturn\b|\bimport \w|\bfunction\b|#include|[{};]\s*$|\bclass \w+[(:])",
                   re.MULTILINE)
_NUMBER = re.compile(r"\d+(?:[.,:]\d+)?")
#: Words past which a prompt counts as a long context (summarise, extract, answer from it).
LONG_CONTEXT_WORDS = 150
#: A short prompt with this many numbers is a word problem.
MATH_NUMBERS, MATH_WORDS = 2, 80


def text_kind(prompt: str | list[int]) -> str:
    """What kind of text a prompt is, by its content alone (never a label
    the client sends): ``code``, ``math``, ``long-context`` or ``text``.
    Token-id prompts are ``text``."""
    if not isinstance(prompt, str) or not prompt:
        return "text"
    if len(_CODE.findall(prompt)) >= 2:
        return "code"
    words = len(prompt.split())
    if words >= LONG_CONTEXT_WORDS:
        return "long-context"
    if words <= MATH_WORDS and len(_NUMBER.findall(prompt)) >= MATH_NUMBERS:
        return "math"
    return "text"


def accept_p(profile: Profile, prompt: str | list[int]) -> float:
    """The draft acceptance probability for one prompt: the profile's, scaled by its text's kind."""
    return min(MAX_ACCEPT_P, profile.accept_p * ACCEPT_SCALE[text_kind(prompt)])


def draw_step_tokens(profile: Profile, u: float, remaining: int, p: float | None = None) -> tuple[int, int]:
    """Tokens one request gets from one decode step, and the drafts accepted.

    ``u`` in [0, 1) is the step's uniform draw (``p``: the request's own
    acceptance, from ``accept_p``; default the profile's); the count follows the
    truncated chain distribution ``P(k >= i) = accept_p**i`` for ``i <= num_steps``
    by inverse CDF. Returns ``(emitted, correct_drafts)``; ``emitted`` is at
    least 1 and at most ``min(profile.max_step_tokens, remaining)``.
    """
    if not profile.speculative:
        return 1, 0
    p, steps = (profile.accept_p if p is None else p), profile.depth
    k = 0
    while k < steps and u >= 1.0 - p ** (k + 1):
        k += 1
    emitted = max(1, min(k + 1, remaining))
    return emitted, emitted - 1


#: The profiles. Step-time parameters were fitted (weighted least squares on the
#: step times implied by the seed curves, C=1 pinned, then checked in virtual
#: time and over HTTP with tools/calibrate_emulator.py) to the seed's
#: diverse-prompts curves; docs/emulator.md has the table.
PROFILES: dict[str, Profile] = {
    "baseline": Profile(
        name="baseline",
        description="no speculative decoding; rises to ~780 tok/s at saturation",
        tokens_verified=1,
        verify_fixed_ms=9.68,
        verify_token_ms=1.114,
        verify_token2_ms=0.000422,
    ),
    "eagle3-topk4-v1": Profile(
        name="eagle3-topk4-v1",
        description="EAGLE-3 tree (topk=4, 16 draft tokens), v1 worker, no overlap; flat near 340 tok/s",
        speculative_algorithm="EAGLE3",
        speculative_num_steps=3,
        speculative_eagle_topk=4,
        speculative_num_draft_tokens=16,
        overlap=False,
        worker="v1",
        tokens_verified=16,
        verify_fixed_ms=10.9,
        verify_token_ms=0.4582,
        verify_token2_ms=0.0,
        draft_fixed_ms=15.0,
        draft_req_ms=0.3,
        accept_p=0.72,
    ),
    "eagle3-topk1-v2": Profile(
        name="eagle3-topk1-v2",
        description="EAGLE-3 chain (topk=1, 3 draft tokens), v2 worker with overlap; at or above baseline at C>=30",
        speculative_algorithm="EAGLE3",
        speculative_num_steps=2,
        speculative_eagle_topk=1,
        speculative_num_draft_tokens=3,
        overlap=True,
        worker="v2",
        tokens_verified=3,
        verify_fixed_ms=3.99,
        verify_token_ms=0.801,
        verify_token2_ms=0.0000713,
        draft_fixed_ms=21.44,
        draft_req_ms=1.5,
        accept_p=0.62,
    ),
    "firehose": Profile(
        name="firehose",
        description="zero model delay: tokens as fast as the client reads them (client-capacity tests)",
        firehose=True,
    ),
}


@dataclass(frozen=True)
class FlagsModel:
    """The flags model's parameters (docs/emulator.md, "The flags model").

    ASSUMPTIONS chosen so that a search over SGLang's speculative flags has a
    clear optimum; they are not measurements. The target model's forward is
    the calibrated baseline's (``verify_*``); the rest is made up:

    * accepted depth at most ``L = min(num_steps, num_draft_tokens - 1)``;
    * acceptance per chain position with a tree ``w = min(topk, (num_draft_tokens - 1) / L)``
      nodes wide: ``p = 1 - (1 - accept_p1) * w ** -topk_gain`` (a wider
      tree covers more of the target's choices), at most ``MAX_ACCEPT_P``;
    * draft, per step: ``num_steps * (draft_step_ms + draft_node_ms * topk * b)``;
    * verify: the baseline's forward over ``b * num_draft_tokens`` tokens;
    * step: ``max(verify, draft)`` with overlap, ``verify + draft`` without.
    """

    verify_fixed_ms: float = 9.68
    verify_token_ms: float = 1.114
    verify_token2_ms: float = 0.000422
    accept_p1: float = 0.92
    topk_gain: float = 0.5
    draft_step_ms: float = 6.0
    draft_node_ms: float = 0.02


FLAGS_MODEL = FlagsModel()


def profile_from_flags(spec: SglangSpec, params: FlagsModel = FLAGS_MODEL) -> Profile:
    """The emulated profile for SGLang flags that ``engine_rules.sglang_normalize`` has resolved.

    Raises ValueError for a spec that is not normalized (no algorithm, steps,
    topk, draft tokens or max running requests)."""
    if (spec.algorithm is None or spec.num_steps is None or spec.eagle_topk is None
            or spec.num_draft_tokens is None or spec.max_running_requests is None):
        raise ValueError("profile_from_flags needs a normalized spec (engine_rules.sglang_normalize)")
    s, k, d = spec.num_steps, spec.eagle_topk, spec.num_draft_tokens
    depth = min(s, d - 1)
    width = min(float(k), (d - 1) / depth)  # tree nodes per depth: a tree no wider than its budget
    p = min(MAX_ACCEPT_P, 1.0 - (1.0 - params.accept_p1) * width ** -params.topk_gain)
    name = f"{spec.algorithm.lower()}-s{s}-k{k}-d{d}-{'overlap' if spec.overlap else 'nooverlap'}"
    return Profile(
        name=name,
        description=f"flags model (ASSUMPTIONS, docs/emulator.md): steps {s}, topk {k}, {d} draft tokens, "
                    f"{'overlap' if spec.overlap else 'no overlap'}",
        speculative_algorithm=spec.algorithm,
        speculative_num_steps=s,
        speculative_eagle_topk=k,
        speculative_num_draft_tokens=d,
        overlap=spec.overlap,
        worker="v2",
        max_running_requests=spec.max_running_requests,
        tokens_verified=d,
        verify_fixed_ms=params.verify_fixed_ms,
        verify_token_ms=params.verify_token_ms,
        verify_token2_ms=params.verify_token2_ms,
        draft_fixed_ms=s * params.draft_step_ms,
        draft_req_ms=s * params.draft_node_ms * k,
        accept_p=p,
        accept_depth=depth,
    )
