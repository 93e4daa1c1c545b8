"""From a derived policy to the exact engine settings that deploy it. Pure.

For each candidate of each workload, its policy (``analysis.policy``), its
threshold and its recorded facts give one outcome per engine:

- ``deploy``: a per-batch-size step schedule, where 0 steps means "do not
  draft". SGLang 0.5.14+: ``--speculative-adaptive`` with a JSON file whose
  integer keys are the lower bounds of batch-size slots, each with one
  ``candidate_steps`` value (a hard policy: a slot with one candidate never
  moves). vLLM 0.30+: ``num_speculative_tokens_per_batch_size`` ranges
  inside ``--speculative-config``.
- ``always-on`` / ``off``: static flags: speculation as measured, or none.
- ``unchanged``: ``no-difference`` or ``inconclusive``: nothing to deploy.
- ``refused``: the engine would reject the schedule or silently ignore it
  (SGLang logs "speculative_adaptive disabled" and falls back to static
  steps): topk > 1, attention DP, multi-layer EAGLE, two-batch overlap,
  pdmux, an algorithm other than EAGLE/EAGLE3/NEXTN, or SGLang before
  0.5.14; vLLM with data parallel > 1, a tree, or a method its schedule
  does not drive.
- ``needs-input``: a fact the flags need is not recorded and the engine's
  rules do not make it certain (``--steps k``): never guessed.

SGLang on the CPU (the ``device`` fact, or ``--device cpu``) gets what
SGLang 0.5.23 showed there: no step 0 in a slot (it crashes; the nearest safe
schedule runs 1 step instead, and says so), ``--disable-cuda-graph`` for the
adaptive schedule, and at most 48 running requests.

The engine facts come from shared/reference/speculation-deploy.md and are
checked against the engines' own code by ``make test-deploy``
(tests/deploy/). The thresholds are client concurrencies; the engines
switch on their running batch, which the runner's gauge samples
(``server_running_*``): each deployment says which it used.
"""

from __future__ import annotations

import json
import math
import re
import shlex
from dataclasses import dataclass
from typing import Any, Iterable, Mapping, Sequence

from findings.derive.analysis import Candidate, Conclusions
from findings.derive.openloop import OpenLoopConclusion, RateCandidate
from findings.core.model import Dataset, Point, Scalar

ENGINES = ("sglang", "vllm")
STATUSES = ("deploy", "always-on", "off", "unchanged", "refused", "needs-input")
#: Step 0 ("do not draft") is accepted in adaptive slots from this SGLang release on.
SGLANG_MIN = (0, 5, 14)
#: vLLM's per-batch-size schedule, from this release on.
VLLM_MIN = (0, 30, 0)
#: SGLang algorithms whose adaptive speculation exists (NEXTN runs as EAGLE):
#: 0.5.23's adaptive_spec_params; every other algorithm logs "speculative_adaptive
#: disabled" and runs static steps.
SGLANG_ADAPTIVE = frozenset({"EAGLE", "EAGLE3", "NEXTN"})
#: SGLang 0.5.23's ``--speculative-algorithm`` names (``SpeculativeAlgorithm``,
#: NEXTN its one alias, of EAGLE; llama.cpp's "draft-model" too) -> vLLM 0.32's
#: ``method`` for the same technique; None: vLLM has none (D90).
SGLANG_TO_VLLM: dict[str, str | None] = {
    "EAGLE": "eagle", "EAGLE3": "eagle3", "NEXTN": "mtp", "FROZEN_KV_MTP": "mtp", "STANDALONE": "draft_model",
    "DRAFT-MODEL": "draft_model", "NGRAM": "ngram", "DFLASH": "dflash", "DSPARK": "dspark", "UNO": None,
}
#: vLLM 0.32's methods (``SpeculativeMethod``; model-specific ``*_mtp`` names
#: are rewritten to ``mtp`` by vLLM itself) -> SGLang's algorithm; None: SGLang has none.
VLLM_TO_SGLANG: dict[str, str | None] = {
    "eagle": "EAGLE", "eagle3": "EAGLE3", "mtp": "NEXTN", "draft_model": "STANDALONE", "ngram": "NGRAM",
    "ngram_gpu": "NGRAM", "dflash": "DFLASH", "dspark": "DSPARK", "suffix": None, "medusa": None,
    "mlp_speculator": None, "extract_hidden_states": None, "custom_class": None,
}
#: vLLM methods whose proposer honours the schedule, K=0 included (0.32, model
#: runner V1); suffix, medusa and ngram_gpu assert when K changes, dspark
#: drafts the full K (masked), custom_class never sees it.
VLLM_SCHEDULED = frozenset({"ngram", "eagle", "eagle3", "mtp", "draft_model", "dflash"})
#: vLLM methods that need no draft ``model`` (they draft from the prompt or the target's own layers).
VLLM_NO_MODEL = frozenset({"ngram", "ngram_gpu", "suffix", "mtp", "extract_hidden_states"})
#: SGLang algorithms that need no draft model path.
SGLANG_NO_DRAFT = frozenset({"NGRAM"})


class _Unknown(str):
    """A name neither engine knows (the message says so, not "no counterpart")."""


def vllm_method(algorithm: str) -> str | None:
    """vLLM's method for a recorded algorithm of either engine; None where
    vLLM has no counterpart; an ``_Unknown`` for a name neither knows."""
    upper, lower = algorithm.strip().upper(), algorithm.strip().lower()
    if upper in SGLANG_TO_VLLM:
        return SGLANG_TO_VLLM[upper]
    if lower.endswith("_mtp"):
        return "mtp"
    if lower in VLLM_TO_SGLANG:
        return lower
    return _Unknown(lower)


def sglang_algorithm(algorithm: str) -> str | None:
    """SGLang's ``--speculative-algorithm`` for a recorded algorithm of either
    engine; None where SGLang has no counterpart; an ``_Unknown`` otherwise."""
    upper, lower = algorithm.strip().upper(), algorithm.strip().lower()
    if upper == "DRAFT-MODEL":
        return "STANDALONE"
    if upper in SGLANG_TO_VLLM:
        return upper
    if lower.endswith("_mtp"):
        return "NEXTN"
    if lower in VLLM_TO_SGLANG:
        return VLLM_TO_SGLANG[lower]
    return _Unknown(upper)
NO_SPEC = frozenset({"", "none", "null", "off", "false", "no"})
#: SGLang on the CPU, as SGLang 0.5.23 showed it (shared/engines/sglang-cpu,
#: measured again by docs/sglang-cpu.md): a 0 in ``candidate_steps`` crashes the
#: scheduler as soon as the controller picks it (``verify_tree_greedy_cpu``:
#: "CHECK_EQ(candidates.scalar_type(), index_dtype) failed. Int vs Long"), so the
#: fewest steps a CPU slot may hold is 1; speculation's running batch is forced to
#: 48; ``--speculative-adaptive`` starts only with ``--disable-cuda-graph``; and
#: verification is greedy whatever the temperature. Whether step 0 also fails on
#: CUDA is not known (no GPU was used).
SGLANG_CPU_FACTS_VERSION = "0.5.23"
SGLANG_CPU_MIN_STEPS = 1
SGLANG_CPU_MAX_RUNNING = 48


@dataclass(frozen=True)
class EngineOutcome:
    engine: str
    status: str
    reason: str  # one line
    flags: tuple[str, ...] = ()
    #: SGLang: the adaptive config file's content; vLLM: the --speculative-config object.
    config: Mapping[str, Any] | None = None
    #: SGLang: the file name the flags refer to (written by ``findings deploy --out``).
    file: str | None = None
    notes: tuple[str, ...] = ()  # what a reader must know to use the flags
    details: tuple[str, ...] = ()  # how the engine behaves at the switch (CLI and JSON only)


@dataclass(frozen=True)
class Deployment:
    workload: str
    config: str
    policy: str
    threshold: int | None
    engines: tuple[EngineOutcome, ...]
    #: For both engines: what the threshold measures, the gap before it.
    notes: tuple[str, ...] = ()
    #: An open-loop policy: the request rate of the crossover (``threshold``
    #: is then the running batch measured there), else None.
    threshold_rate: float | None = None
    #: Where the ratio is estimated to cross the baseline (a closed-loop
    #: threshold policy): {estimate, low, high, method}.
    crossover: Mapping[str, object] | None = None
    #: A closed-loop policy: the client concurrency C of the switch
    #: (``threshold`` is then the running batch measured there, or C where
    #: the gauge was not recorded), else None.
    threshold_concurrency: int | None = None

    def engine(self, name: str) -> EngineOutcome | None:
        return next((e for e in self.engines if e.engine == name), None)


@dataclass(frozen=True)
class Facts:
    """What the flags need, normalised from a config's recorded facts."""

    algorithm: str | None  # upper case; None: not recorded
    topk: int | None
    steps: int | None
    steps_derivation: str | None  # how ``steps`` was derived, when it was
    draft_tokens: int | None
    draft_model: str | None
    source_engine: str | None  # "SGLang", "vLLM", "llama.cpp"
    sglang_version: str | None
    vllm_version: str | None
    max_running: int | None
    #: A config measured on vLLM: its --speculative-config as launched (the
    #: deployed one keeps its other keys, prompt_lookup_* for ngram say).
    vllm_spec: Mapping[str, Any] | None
    overlap: bool | None  # SGLang's overlap scheduler
    attention_dp: bool
    multi_layer_eagle: bool
    two_batch_overlap: bool
    pdmux: bool
    data_parallel: int | None
    device: str | None = None  # lower case: "cpu", "cuda", ...; None: not recorded

    @property
    def speculates(self) -> bool | None:
        if self.algorithm is None:
            return None
        return self.algorithm.lower() not in NO_SPEC


def _int(v: Scalar) -> int | None:
    if isinstance(v, bool) or v is None:
        return None
    if isinstance(v, int):
        return v
    if isinstance(v, float) and v.is_integer():
        return int(v)
    if isinstance(v, str) and v.strip().isdigit():
        return int(v.strip())
    return None


def _flag(v: Scalar) -> bool:
    return v is True or (isinstance(v, str) and v.strip().lower() in ("true", "yes", "1")) or v == 1


def version(text: str | None) -> tuple[int, ...] | None:
    """"0.5.23-emulated" -> (0, 5, 23); None when it does not start with a version."""
    if not text:
        return None
    m = re.match(r"v?(\d+)\.(\d+)(?:\.(\d+))?", text.strip())
    return tuple(int(x) for x in m.groups(default="0")) if m else None


def facts_of(facts: Mapping[str, Scalar], environment: Mapping[str, Scalar] = {}, steps: int | None = None,
             device: str | None = None) -> Facts:
    """Normalise the facts; ``steps`` (``--steps k``) and ``device``
    (``--device``) win over what is recorded."""
    algo = facts.get("speculative_algorithm")
    topk = _int(facts.get("speculative_eagle_topk", facts.get("eagle_topk")))
    draft = _int(facts.get("speculative_num_draft_tokens", facts.get("draft_tokens")))
    recorded = _int(facts.get("speculative_num_steps", facts.get("num_steps")))
    how = None
    k = steps if steps is not None else recorded
    if steps is not None:
        how = f"steps {steps} given with --steps"
    elif recorded is None and topk == 1 and draft is not None and draft >= 2:
        # SGLang forces speculative_num_draft_tokens = steps + 1 when topk is 1.
        k, how = draft - 1, (f"steps {draft - 1} derived from the recorded {draft} draft tokens: with topk 1, "
                             "SGLang forces draft tokens = steps + 1")
    if k is None:
        k = _int(facts.get("num_speculative_tokens"))  # a vLLM config measured as such
    engine = str(facts.get("engine") or environment.get("engine") or "")
    source = ("llama.cpp" if "llama" in engine.lower() else "vLLM" if "vllm" in engine.lower()
              else "SGLang" if "sglang" in engine.lower() or "sglang_version" in facts else None)
    dp = _int(facts.get("data_parallel_size", facts.get("dp_size")))
    overlap = facts.get("disable_overlap_schedule")
    vspec: Any = None
    if isinstance(facts.get("speculative_config"), str):
        try:
            vspec = json.loads(str(facts["speculative_config"]))
        except ValueError:
            vspec = None
    return Facts(
        algorithm=str(algo).strip().upper() if algo is not None else None,
        topk=topk, steps=k, steps_derivation=how, draft_tokens=draft,
        draft_model=str(facts["speculative_draft_model_path"]) if facts.get("speculative_draft_model_path") else None,
        source_engine=source,
        sglang_version=str(facts.get("sglang_version") or environment.get("sglang_version") or "") or None,
        vllm_version=str(facts.get("vllm_version") or environment.get("vllm_version") or "") or None,
        max_running=_int(facts.get("max_running_requests")),
        vllm_spec={k: v for k, v in vspec.items() if k != "num_speculative_tokens_per_batch_size"}
        if isinstance(vspec, dict) else None,
        overlap=(not _flag(overlap)) if overlap is not None else (
            str(facts["overlap_schedule"]).lower() in ("yes", "true", "1") if "overlap_schedule" in facts else None),
        attention_dp=_flag(facts.get("enable_dp_attention")),
        multi_layer_eagle=_flag(facts.get("enable_multi_layer_eagle")),
        two_batch_overlap=_flag(facts.get("enable_two_batch_overlap")),
        pdmux=_flag(facts.get("enable_pdmux")),
        data_parallel=dp,
        device=(device or str(facts.get("device") or "")).strip().lower() or None,
    )


# ------------------------------------------------------------------ schedules

def adaptive_config(policy: str, threshold: int, k: int, off: int = 0) -> dict[str, Any]:
    """SGLang's adaptive file: one candidate per slot (a hard policy). ``off``:
    the steps where the policy says "do not draft" (1 on the CPU, where 0 crashes)."""
    if policy == "on-above":
        return {"1": {"candidate_steps": [off]}, str(threshold): {"candidate_steps": [k]}}
    return {"1": {"candidate_steps": [k]}, str(threshold + 1): {"candidate_steps": [off]}}


def vllm_schedule(policy: str, threshold: int, k: int) -> list[list[int]]:
    """vLLM's inclusive ranges; past the last one, its K holds up to max_num_seqs."""
    if policy == "on-above":
        return [[1, threshold - 1, 0], [threshold, threshold, k]] if threshold > 1 else [[1, 1, k]]
    return [[1, threshold, k], [threshold + 1, threshold + 1, 0]]


def steps_for(policy: str, threshold: int, k: int, batch: int) -> int:
    """What the schedule means: the steps at a running batch size (for checks)."""
    on = batch >= threshold if policy == "on-above" else batch <= threshold
    return k if on else 0


def _quote(text: str) -> str:
    return shlex.quote(text)


def file_name(workload: str, config: str) -> str:
    safe = re.sub(r"[^A-Za-z0-9._-]+", "_", f"{config}.{workload}").strip("_")
    return f"{safe}.sglang-adaptive.json"


# ------------------------------------------------------------------ per engine

#: How to launch each engine without speculation.
WITHOUT = {"sglang": "launch SGLang without --speculative-algorithm (no speculative flags)",
           "vllm": "launch vLLM without --speculative-config"}


def _nothing(engine: str, policy: str, axis: str = "C") -> EngineOutcome | None:
    """The outcome of a policy that deploys no schedule and no speculation
    (``axis``: "C", or "rate" for an open loop's policy)."""
    if policy == "off":
        return EngineOutcome(engine, "off", f"speculation never won at any measured {axis}: {WITHOUT[engine]}")
    if policy in ("no-difference", "inconclusive"):
        return EngineOutcome(engine, "unchanged", _unchanged(policy, axis))
    return None


def _sglang(policy: str, threshold: int | None, f: Facts, largest: int, path: str, axis: str = "C") -> EngineOutcome:
    """``path``: the adaptive file's name, as the flags refer to it."""
    e = "sglang"
    nothing = _nothing(e, policy, axis)
    if nothing is not None:
        return nothing
    why = _sglang_name_refusal(f) or (_sglang_refusal(f) if policy != "always-on" else None)
    if why:
        return EngineOutcome(e, "refused", why)
    if f.steps is None:
        return EngineOutcome(e, "needs-input", "the step count is not recorded and the engine's rules do not "
                             "make it certain: pass --steps k")
    if f.steps <= 0:
        return EngineOutcome(e, "refused", f"the recorded step count is {f.steps}: nothing to speculate with")
    cpu = f.device == "cpu"
    running = max(largest, f.max_running or 0)
    notes = []
    if f.steps_derivation:
        notes.append(f.steps_derivation)
    if f.source_engine and f.source_engine != "SGLang":
        notes.append(f"measured on {f.source_engine}, not SGLang: the crossover may lie elsewhere there; "
                     "measure it on SGLang")
    algorithm = sglang_algorithm(f.algorithm) if f.algorithm else "EAGLE3"
    assert algorithm is not None and not isinstance(algorithm, _Unknown)  # refused above
    if f.algorithm and algorithm != f.algorithm:
        notes.append(f"speculative_algorithm {f.algorithm} was recorded: SGLang's name for it is {algorithm}")
    head = [f"--speculative-algorithm {algorithm}"]
    if f.draft_model:
        head.append(f"--speculative-draft-model-path {_quote(f.draft_model)}")
    elif algorithm not in SGLANG_NO_DRAFT:
        notes.append("the draft model's path is not recorded: add --speculative-draft-model-path")
    if cpu:
        if running > SGLANG_CPU_MAX_RUNNING:
            notes.append(f"on the CPU SGLang {SGLANG_CPU_FACTS_VERSION} forces max_running_requests to "
                         f"{SGLANG_CPU_MAX_RUNNING} for speculation: the {running} measured would be cut, so requests "
                         f"beyond {SGLANG_CPU_MAX_RUNNING} wait in the queue")
        running = min(running, SGLANG_CPU_MAX_RUNNING)
        why_running = (f"--max-running-requests {running} (on the CPU SGLang {SGLANG_CPU_FACTS_VERSION} caps "
                       f"speculation's running batch at {SGLANG_CPU_MAX_RUNNING})")
        notes.append(f"on the CPU, SGLang {SGLANG_CPU_FACTS_VERSION} verifies greedily whatever the temperature")
    else:
        why_running = f"--max-running-requests {running} (EAGLE otherwise resets it to 48)"
    tail = [f"--max-running-requests {running}"] + (["--disable-overlap-schedule"] if f.overlap is False else [])
    if policy == "always-on":
        flags = head + [f"--speculative-num-steps {f.steps}", f"--speculative-eagle-topk {f.topk or 1}"]
        if f.draft_tokens is not None:
            flags.append(f"--speculative-num-draft-tokens {f.draft_tokens}")
        return EngineOutcome(e, "always-on", f"speculation won or tied at every measured C: launch it as "
                             f"measured; {why_running}", tuple(flags + tail), notes=tuple(notes))
    assert threshold is not None
    off = SGLANG_CPU_MIN_STEPS if cpu else 0
    if off >= f.steps:
        return EngineOutcome(e, "refused", f"on the CPU a slot cannot hold step 0 (it crashes SGLang "
                             f"{SGLANG_CPU_FACTS_VERSION} in verify_tree_greedy_cpu), and the nearest safe schedule, "
                             f"{off} step where the policy says none, is the measured {f.steps} steps everywhere: "
                             "nothing would switch; launch it static, or measure more steps")
    cfg = adaptive_config(policy, threshold, f.steps, off)
    flags = head + ["--speculative-adaptive", f"--speculative-adaptive-config {_quote(path)}",
                    f"--speculative-num-steps {f.steps}", "--speculative-eagle-topk 1"] + tail
    if cpu:
        flags.append("--disable-cuda-graph")
    none = f"{off} step" if cpu else "no drafting"
    if policy == "on-above":
        rule, below = f"{none} below a running batch of {threshold}, {f.steps} steps from {threshold} on", threshold - 1
    else:
        rule, below = f"{f.steps} steps up to a running batch of {threshold}, {none} from {threshold + 1} on", threshold
    if cpu:
        notes.append(f"the nearest safe schedule, not the policy's: on the CPU a 0 in candidate_steps crashes SGLang "
                     f"{SGLANG_CPU_FACTS_VERSION} as soon as the controller picks it (verify_tree_greedy_cpu: Int vs "
                     f"Long), so the slot where the policy says \"do not draft\" runs {off} step, the fewest that works: "
                     "it drafts less there, not nothing")
        notes.append(f"--disable-cuda-graph: on the CPU SGLang {SGLANG_CPU_FACTS_VERSION} starts "
                     "--speculative-adaptive only without graphs (NotImplementedError in build_adaptive_runtime_state)")
    else:
        notes.append(f"CUDA graphs: SGLang rounds the batch up to the next captured size before it picks a slot; with "
                     f"an explicit --cuda-graph-bs-decode list, include {below} in it (or leave the flag out), or the "
                     "switch moves down to the captured size below")
    if version(f.sglang_version) is None:
        notes.append("the SGLang version is not recorded: step 0 in a slot needs SGLang 0.5.14 or newer")
    details = ("step 0 still runs a one-token verify and the draft's extend pass (to keep the draft's KV cache "
               "warm); SGLANG_SPEC_SKIP_ZERO_STEP_DRAFT_EXTEND=1 skips the extend (experimental)",) if not cpu else ()
    return EngineOutcome(e, "deploy", f"{rule}; --speculative-num-steps {f.steps} is among the slots' steps; "
                         f"{why_running}", tuple(flags), cfg, path, tuple(notes), details)


def _sglang_name_refusal(f: Facts) -> str | None:
    """Why SGLang cannot run the recorded algorithm at all."""
    if f.algorithm is None or f.speculates is False:
        return None
    name = sglang_algorithm(f.algorithm)
    if isinstance(name, _Unknown):
        return f"speculative_algorithm={f.algorithm} is a name neither SGLang nor vLLM knows"
    if name is None:
        return f"SGLang has no counterpart of vLLM's method {f.algorithm.lower()}"
    return None


def _sglang_refusal(f: Facts) -> str | None:
    """Why SGLang would not run this schedule (it logs and falls back to static steps)."""
    if f.speculates is False:
        return "the config does not speculate"
    name = sglang_algorithm(f.algorithm) if f.algorithm is not None else None
    if name is not None and name not in SGLANG_ADAPTIVE:
        return (f"adaptive speculation supports EAGLE and EAGLE3 only (and NEXTN, which runs as EAGLE; "
                f"speculative_algorithm={f.algorithm}, SGLang's {name}); SGLang would log it and keep static steps")
    if f.topk is not None and f.topk != 1:
        return (f"adaptive speculation needs topk 1, and this config drafts a tree with topk {f.topk}: SGLang "
                "would log \"speculative_adaptive disabled\" and keep static steps")
    if f.attention_dp:
        return "attention DP is not supported by adaptive speculation (tiers are not synchronised across ranks)"
    if f.multi_layer_eagle:
        return "multi-layer EAGLE (--enable-multi-layer-eagle) does not implement adaptive speculation"
    if f.two_batch_overlap:
        return "two-batch overlap is not supported by adaptive speculation"
    if f.pdmux:
        return "pdmux is not supported by adaptive speculation"
    ver = version(f.sglang_version)
    if ver is not None and ver < SGLANG_MIN:
        return (f"SGLang {f.sglang_version} accepts no step 0 in an adaptive slot (0.5.14+ does): the schedule "
                "cannot say \"do not draft\"")
    return None


def _vllm(policy: str, threshold: int | None, f: Facts, largest: int, draft_model: str | None,
          axis: str = "C") -> EngineOutcome:
    e = "vllm"
    nothing = _nothing(e, policy, axis)
    if nothing is not None:
        return nothing
    why = _vllm_refusal(f, scheduled=policy not in ("always-on",))
    if why:
        return EngineOutcome(e, "refused", why)
    if f.steps is None:
        return EngineOutcome(e, "needs-input", "the number of speculative tokens is not recorded and the engine's "
                             "rules do not make it certain: pass --steps k")
    method = vllm_method(f.algorithm or "EAGLE3")
    assert method is not None  # refused above
    # A config measured on vLLM keeps its own --speculative-config (method,
    # prompt_lookup_*, draft model ...); others get the method of their algorithm.
    spec: dict[str, Any] = dict(f.vllm_spec) if f.vllm_spec else {"method": method}
    notes = []
    if f.steps_derivation:
        notes.append(f.steps_derivation + "; vLLM's num_speculative_tokens is the chain's steps")
    if f.source_engine != "vLLM":
        notes.append(f"measured on {f.source_engine or 'an unrecorded engine'}, not vLLM: the crossover may lie "
                     "elsewhere there; measure it on vLLM")
    model = draft_model or f.draft_model
    if f.algorithm and method != f.algorithm.lower():
        notes.append(f"speculative_algorithm {f.algorithm} was recorded: vLLM's method for it is {method}")
    if method not in VLLM_NO_MODEL and "model" not in spec:
        if model:
            spec["model"] = model
        else:
            notes.append('the draft model\'s path is not recorded: add "model" to the JSON (or pass --draft-model)')
    spec["num_speculative_tokens"] = f.steps
    running = max(largest, f.max_running or 0)
    if policy == "always-on":
        flags = (f"--speculative-config {_quote(json.dumps(spec, separators=(',', ':')))}",
                 f"--max-num-seqs {running}")
        return EngineOutcome(e, "always-on", "speculation won or tied at every measured C: launch with the "
                             "measured speculation", flags, spec, notes=tuple(notes))
    assert threshold is not None
    spec["num_speculative_tokens_per_batch_size"] = vllm_schedule(policy, threshold, f.steps)
    flags = (f"--speculative-config {_quote(json.dumps(spec, separators=(',', ':')))}", f"--max-num-seqs {running}")
    rule = (f"K=0 below {threshold} running requests, K={f.steps} from {threshold} on" if policy == "on-above"
            else f"K={f.steps} up to {threshold} running requests, K=0 from {threshold + 1} on")
    ver = version(f.vllm_version)
    if f.source_engine == "vLLM" and ver is None:
        notes.append("the vLLM version is not recorded: the schedule needs vLLM 0.30 or newer")
    return EngineOutcome(e, "deploy", f"{rule} (the last range's K holds up to --max-num-seqs {running}); "
                         "scheduled requests per step, prefill chunks included", flags, spec, notes=tuple(notes),
                         details=("with K=0 the drafter still runs its first forward to stay in sync, then "
                                  "proposes nothing",))


def _vllm_refusal(f: Facts, scheduled: bool) -> str | None:
    if f.speculates is False:
        return "the config does not speculate"
    if f.topk is not None and f.topk != 1:
        return (f"the measured config drafts a tree (topk {f.topk}); vLLM's num_speculative_tokens drafts a chain, "
                "so vLLM has no equivalent of what was measured")
    method = vllm_method(f.algorithm or "EAGLE3")
    if isinstance(method, _Unknown):
        return f"speculative_algorithm={f.algorithm} is a name neither SGLang nor vLLM knows"
    if method is None:
        return f"vLLM has no counterpart of SGLang's {(f.algorithm or '').upper()}"
    if scheduled and method not in VLLM_SCHEDULED:
        return f"vLLM's per-batch-size schedule does not drive method {method}"
    if scheduled and f.data_parallel is not None and f.data_parallel > 1:
        return (f"data parallel {f.data_parallel} > 1: vLLM drops num_speculative_tokens_per_batch_size with a "
                "warning")
    ver = version(f.vllm_version)
    if scheduled and ver is not None and ver < VLLM_MIN:
        return f"vLLM {f.vllm_version} has no per-batch-size schedule (0.30+)"
    return None


def _unchanged(policy: str, axis: str = "C") -> str:
    if policy == "no-difference":
        return f"no measurable difference at any measured {axis}: nothing to gain by changing the deployment"
    return ("wins and losses do not split at one threshold (or nothing was compared): no policy is safe to "
            "deploy; measure more")


# ------------------------------------------------------------------ the batch-size measure

def _batch_threshold(cand: Candidate, points: Mapping[str, Point]) -> tuple[int | None, str | None]:
    """A closed-loop policy's threshold as the engines need it, and the note
    that says where it comes from (D107). The threshold is a client
    concurrency C; the engines switch on the server's running batch. Where
    the candidate's gauge recorded its p90 at C, the switch is that batch
    (rounded, at least 1, at most C): the batch the server reached while the
    client held C, so the measured regime stays on its side of the switch.
    The mean is never the switch: it includes the ramp-up and ramp-down, and
    a switch at the mean would turn speculation off (on-below) or on
    (on-above) inside the regime that was measured. Without a p90 the switch
    stays at C, and the note says why."""
    t = cand.threshold
    if t is None:
        return None, None
    comp = next((c for c in cand.comparisons if c.concurrency == t), None)
    if comp is None:
        return t, None
    pts = [points[i] for i in comp.a.point_ids if i in points]
    means = [p.metrics["server_running_mean"] for p in pts if "server_running_mean" in p.metrics]
    head = (f"The threshold is a client concurrency: C={t} requests kept in flight by the benchmark client. "
            "The engines switch on the server's running batch")
    if not means:
        return t, (head + f"; the server's running-requests gauge was not recorded at C={t}, so the batch size there "
                   f"is not known: the switch is at a running batch of {t}, as if the server ran every request "
                   "the client kept in flight.")
    p50 = [p.metrics["server_running_p50"] for p in pts if "server_running_p50" in p.metrics]
    p90 = [p.metrics["server_running_p90"] for p in pts if "server_running_p90" in p.metrics]
    said = (head + f": at C={t} ({comp.a.config}, campaign {comp.a.campaign}) the server's running batch averaged "
            f"{sum(means) / len(means):.1f}" + (f" (p50 {max(p50):g}, p90 {max(p90):g})" if p50 and p90 else "")
            + ", ramp-up and ramp-down included")
    if not p90:
        return t, (said + f"; with no p90 recorded, the switch is at a running batch of {t}, as if the server "
                   "ran every request the client kept in flight once the ramp was over.")
    batch = min(t, max(1, round(sum(p90) / len(p90))))
    if batch == t:
        return t, said + f", so the switch is at a running batch of {t}, the batch it reached there (p90)."
    return batch, (said + f", so the switch is at a running batch of {batch}, the batch it reached there (p90), "
                   f"not at the client's {t}: the server ran fewer requests than the client kept in flight "
                   "(queued or prefilling).")


def _gap_note(cand: Candidate) -> str | None:
    """How the switch relates to where the ratio is estimated to cross the
    baseline (findings/derive/crossover.py)."""
    x, t = cand.crossover, cand.threshold
    if x is None or t is None:
        return None
    side = "last" if cand.policy == "on-below" else "first"
    where = (f"The switch is at C={t}, the {side} measured C at or above the baseline next to the losses; the ratio "
             f"is estimated to cross the baseline near C≈{x.estimate:.1f} (between {x.low:.1f} and {x.high:.1f}, "
             f"interpolated on log C)")
    early = (cand.policy == "on-below" and t < x.low) or (cand.policy == "on-above" and t > x.high)
    if early:
        how = (": the switch lies outside that range, on the safe side: speculation "
               + ("stops earlier" if cand.policy == "on-below" else "starts later") + " than it would pay")
    else:
        how = ": the switch lies inside that range"
    return where + how + "; findings plan --kind threshold measures the Cs of that range."


# ------------------------------------------------------------------ all of it

def plan(data: Dataset, conclusions: Conclusions, *, workload: str | None = None, config: str | None = None,
         engines: Iterable[str] = ENGINES, steps: int | None = None,
         draft_model: str | None = None, adaptive_dir: str = "", device: str | None = None,
         open_loop: Sequence[OpenLoopConclusion] = (), points: Mapping[str, Point] | None = None) -> list[Deployment]:
    """One deployment per (workload, candidate), in workload then config order,
    then those of the open-loop workloads (``open_loop``: load.verdicts.conclude).
    ``adaptive_dir``: where the SGLang files will be, as the flags name them;
    ``device``: where the engine will run, when not as recorded (``--device``);
    ``points``: the data's points by id, where the caller has them (``Derived.points``)."""
    env: dict[str, Scalar] = {}
    for environment, _ in data.environments:
        env.update(environment)
    if points is None:
        points = data.points_by_id
    out = []
    chosen = tuple(engines)
    for wc in conclusions.workloads:
        if workload is not None and wc.workload != workload:
            continue
        largest = max(wc.concurrencies) if wc.concurrencies else 1
        for cand in wc.candidates:
            if config is not None and cand.config != config:
                continue
            f = facts_of(data.configs.get(cand.config, {}), env, steps, device)
            threshold, batch_note = _batch_threshold(cand, points)
            outcomes = []
            for engine in chosen:
                if engine == "sglang":
                    name = file_name(wc.workload, cand.config)
                    outcomes.append(_sglang(cand.policy, threshold, f, largest,
                                            f"{adaptive_dir.rstrip('/')}/{name}" if adaptive_dir else name))
                else:
                    outcomes.append(_vllm(cand.policy, threshold, f, largest, draft_model))
            simulated = ("SIMULATED: derived from the findings emulator's model, not from a measured server; "
                         "these settings show the mechanics, not a deployment to make." if wc.simulated else None)
            notes = tuple(n for n in (simulated, batch_note, _gap_note(cand)) if n)
            out.append(Deployment(workload=wc.workload, config=cand.config, policy=cand.policy,
                                  threshold=threshold, engines=tuple(outcomes), notes=notes,
                                  crossover=cand.crossover.to_json() if cand.crossover is not None else None,
                                  threshold_concurrency=cand.threshold))
    for oc in open_loop:
        if workload is not None and oc.workload != workload:
            continue
        batches = [m for cell in oc.latest.values() if (m := cell.mean("server_running_mean")) is not None]
        largest = max(1, math.ceil(max(batches))) if batches else 1
        for rc in oc.candidates:
            if config is not None and rc.config != config:
                continue
            f = facts_of(data.configs.get(rc.config, {}), env, steps, device)
            threshold, note = _rate_threshold(rc)
            pol = rc.policy if threshold is not None or rc.threshold_rate is None else "inconclusive"
            outcomes = []
            for engine in chosen:
                if engine == "sglang":
                    name = file_name(oc.workload, rc.config)
                    outcomes.append(_sglang(pol, threshold, f, largest,
                                            f"{adaptive_dir.rstrip('/')}/{name}" if adaptive_dir else name,
                                            axis="rate"))
                else:
                    outcomes.append(_vllm(pol, threshold, f, largest, draft_model, axis="rate"))
            simulated = ("SIMULATED: derived from the findings emulator's model, not from a measured server; "
                         "these settings show the mechanics, not a deployment to make." if oc.simulated else None)
            out.append(Deployment(workload=oc.workload, config=rc.config, policy=pol, threshold=threshold,
                                  engines=tuple(outcomes), notes=tuple(n for n in (simulated, note) if n),
                                  threshold_rate=rc.threshold_rate))
    return out


def _rate_threshold(rc: RateCandidate) -> tuple[int | None, str | None]:
    """An open-loop policy's threshold as the engines need it: the running
    batch the candidate's server measured at the crossover rate (rounded,
    at least 1), never a client concurrency."""
    if rc.threshold_rate is None:
        return None, None
    rate = f"{rc.threshold_rate:g} req/s"
    if rc.threshold_batch is None:
        return None, (f"The crossover is at {rate}, but {rc.config}'s running-requests gauge was not recorded "
                      "there, so the batch size the engines switch on is not known: no schedule is safe to emit "
                      "(measure with running_sample_s > 0).")
    batch = max(1, round(rc.threshold_batch))
    where = "the last rate before the losses" if rc.policy == "on-below" else "the first rate after them"
    at = next((v for v in rc.verdicts if v.rate == rc.threshold_rate), None)
    if at is not None:  # what it measured there, as the verdict table shows it (D104)
        comp = at.by_metric[at.decided_by]
        metric = "goodput" if at.decided_by == "goodput_req_s" else "TPOT p50"
        where += f" ({metric} {(comp.ratio - 1) * 100:+.1f}%, a {at.verdict})"
    return batch, (f"The threshold is a measured running batch: at {rate}, {where}, "
                   f"{rc.config}'s server ran {rc.threshold_batch:.2f} requests on average (its gauge), "
                   f"so the switch is at a running batch of {batch}.")


def to_json(deployments: list[Deployment]) -> dict[str, Any]:
    """The stable shape of ``findings deploy --json`` (docs/deploy.md)."""
    workloads: dict[str, Any] = {}
    for d in deployments:
        entry: dict[str, Any] = {"policy": d.policy, "threshold": d.threshold, "notes": list(d.notes)}
        if d.crossover is not None:
            entry["crossover"] = dict(d.crossover)
        if d.threshold_concurrency is not None:
            entry["load_axis"] = "concurrency"
            entry["threshold_concurrency"] = d.threshold_concurrency
        if d.threshold_rate is not None:
            entry["load_axis"] = "request_rate"
            entry["threshold_rate"] = d.threshold_rate
        for e in d.engines:
            key = "adaptive_config" if e.engine == "sglang" else "speculative_config"
            entry[e.engine] = {"status": e.status, "reason": e.reason, "flags": list(e.flags),
                               key: dict(e.config) if e.config is not None else None,
                               "notes": list(e.notes) + list(e.details)}
            if e.engine == "sglang":
                entry[e.engine]["adaptive_config_file"] = e.file
        workloads.setdefault(d.workload, {})[d.config] = entry
    return {"workloads": workloads}




def text(deployments: list[Deployment], written: bool = False) -> str:
    """Plain text for a terminal: each candidate, then each engine's outcome,
    flags (one per line, ready to paste), JSON and notes."""
    if not deployments:
        return "no candidates to deploy (no workload compares a candidate with the baseline)"
    lines: list[str] = []
    for d in deployments:
        if lines:
            lines.append("")
        where = (f", threshold running batch {d.threshold} (at {d.threshold_rate:g} req/s)"
                 if d.threshold_rate is not None and d.threshold else
                 f", threshold C={d.threshold}" if d.threshold else "")
        lines.append(f"{d.workload} / {d.config}: {d.policy}{where}")
        for n in d.notes:
            lines.append(f"  note: {n}")
        for e in d.engines:
            lines.append(f"  {e.engine}: {e.status}: {e.reason}")
            if e.flags:
                lines.append("    " + " \\\n    ".join(e.flags))
            if e.config is not None and e.engine == "sglang":
                where = f" (written to {e.file})" if written else f" (save as {e.file})"
                lines.append(f"    adaptive config{where}: {json.dumps(e.config, separators=(', ', ': '))}")
            for n in e.notes + e.details:
                lines.append(f"    note: {n}")
    return "\n".join(lines)
