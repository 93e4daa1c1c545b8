"""Speculative verdicts measured on unrepresentative prompts. Pure.

Speculative decoding pays in proportion to how many drafted tokens the
target accepts, and acceptance depends on the text. On random-token prompts
a draft model has nothing to predict; with ``ignore_eos`` the target keeps
generating past its natural end, where models fall into loops that drafts
predict unusually well. Neither is what real traffic sees (vLLM issue
33497, ai-dynamo/dynamo issue 12918). A candidate's win or loss measured
that way is still a valid A/B comparison under those conditions, but not a
deployment fact: such verdicts are marked, and the document says why once.

Only what the store records is used, never a guess from a workload's name:

- the prompt set: ``prompts`` (findings' own runner: ``random-ids``,
  ``diverse`` and ``fixed`` are made up and marked; a prompt file's format,
  ``sharegpt``, ``mt-bench`` and so on, and ``humaneval`` are real text and
  not marked), ``dataset_name`` (sglang.bench_serving, or
  ``vllm bench serve --metadata dataset_name=...``) or ``dataset`` (the
  table's column, AIPerf's dataset type);
- ``ignore_eos``: the runner's and the table's, AIPerf's
  ``--extra-inputs ignore_eos:true``, or ``--metadata ignore_eos=true``.
"""

from __future__ import annotations

from dataclasses import dataclass
from operator import attrgetter
from typing import Iterable, Mapping

from findings.core.model import Dataset, Point, Scalar
from findings.derive import likeness

#: Workload parameters that name the prompt set, by tool.
DATASET_KEYS = ("prompts", "dataset_name", "dataset")
#: Prompt sets of random tokens (sglang and vLLM ``random`` too: lengths and
#: content drawn at random, not taken from real requests).
RANDOM_TOKENS = frozenset({"random", "random-ids"})
#: One prompt sent over and over: the best case for drafts and caches.
REPEATED = frozenset({"fixed"})
#: Made-up text: findings' ``diverse`` prompts are words of a syllable
#: grammar, which say nothing about how a draft fares on real text.
MADE_UP = frozenset({"diverse"})
#: The marker of such a verdict in tables and sentences.
MARK = "⚑"

TRUE = frozenset({"true", "1", "yes", "on"})
FALSE = frozenset({"false", "0", "no", "off"})


@dataclass(frozen=True)
class Conditions:
    """What a point records about its prompts (None: not recorded)."""

    prompts: str | None
    ignore_eos: bool | None

    def reasons(self) -> tuple[str, ...]:
        out = []
        if self.prompts is not None and self.prompts.lower() in RANDOM_TOKENS:
            out.append(f"random-token prompts ({self.prompts})")
        elif self.prompts is not None and self.prompts.lower() in REPEATED:
            out.append(f"one repeated prompt ({self.prompts})")
        elif self.prompts is not None and self.prompts.lower() in MADE_UP:
            out.append(f"made-up text ({self.prompts})")
        if self.ignore_eos:
            out.append("ignore_eos")
        return tuple(out)


def _flag(v: Scalar) -> bool | None:
    if isinstance(v, bool):
        return v
    if isinstance(v, (int, float)):
        return bool(v)
    if isinstance(v, str) and v.strip().lower() in TRUE | FALSE:
        return v.strip().lower() in TRUE
    return None


def conditions(params: Mapping[str, Scalar]) -> Conditions:
    prompts = next((str(params[k]) for k in DATASET_KEYS if isinstance(params.get(k), str) and params[k]), None)
    return Conditions(prompts=prompts, ignore_eos=_flag(params.get("ignore_eos")))


def point_reasons(p: Point) -> tuple[str, ...]:
    return conditions(p.workload_params).reasons()


def _silent(facts: Mapping[str, Scalar]) -> bool:
    """Whether a config's facts say nothing of speculation (its points tell)."""
    return facts.get("speculative_algorithm") is None


def speculates(facts: Mapping[str, Scalar], points: Iterable[Point]) -> bool:
    """Whether a config speculates: its facts say so, or (facts silent) its
    points report acceptance."""
    if not _silent(facts):
        return str(facts["speculative_algorithm"]).strip().lower() not in {"", "none", "null", "off", "false", "no"}
    keys = ("accept_length", "accept_length_metrics", "draft_acceptance", "draft_acceptance_metrics")
    return any(k in p.metrics for p in points for k in keys)


def verdict_reasons(point_ids: Iterable[str], points: Mapping[str, Point]) -> tuple[str, ...]:
    """The conditions, over the points a verdict was drawn from (either side), in a fixed order."""
    found: list[str] = []
    for pid in point_ids:
        p = points.get(pid)
        if p is None:
            continue
        for r in point_reasons(p):
            if r not in found:
                found.append(r)
    return tuple(sorted(found))


def describe(reasons: Iterable[str]) -> str:
    """What follows "measured": "on random-token prompts (random-ids) and with ignore_eos"."""
    items = [("with " if r == "ignore_eos" else "" if r.startswith(UNLIKE) else "on ") + r
             for r in sorted(set(reasons))]
    if len(items) <= 1:
        return "".join(items)
    return ", ".join(items[:-1]) + " and " + items[-1]


#: How a reason of likeness.py starts: a comparison that is not like for like.
UNLIKE = "between "


def unlike(reasons: Iterable[str]) -> bool:
    """Whether any reason says the two sides are not like for like (likeness.py)."""
    return any(r.startswith(UNLIKE) for r in reasons)


#: Said once more where a verdict is not like for like (likeness.py).
UNLIKE_EXPLANATION = (
    f"A verdict marked {MARK} between different target models or APIs compares two numbers, not two "
    "configs: the recorded model or API of the candidate is not the baseline's, so the difference may be "
    "theirs rather than speculation's. Measure both on the same model and API before deploying it."
)

#: The one plain-words explanation, placed once in the document.
EXPLANATION = (
    "Speculative decoding pays only when the target accepts the drafted tokens, and acceptance depends on "
    "the text: on random-token prompts a draft has nothing to predict, made-up text says nothing of how "
    "it fares on real text, and with ignore_eos the target "
    "keeps generating past its natural end, where its output tends to loop and drafts predict it unusually "
    "well. None of these is what real traffic sees (vLLM issue 33497, ai-dynamo/dynamo issue 12918). A verdict "
    f"marked {MARK} was measured that way: it is a valid comparison under those conditions, but not a "
    "deployment fact. Measure on a representative prompt set (findings bench --dataset FILE), without ignore_eos, "
    "before deploying it."
)


def speculative_configs(configs: Mapping[str, Mapping[str, Scalar]], points: Iterable[Point]) -> frozenset[str]:
    """The configs that speculate (``speculates``), by name: the configs
    measured found at C speed, and the points gathered only for those whose
    facts are silent."""
    points = points if isinstance(points, (list, tuple)) else list(points)
    names = set(map(_CONFIG, points))
    by: dict[str, list[Point]] = {n: [] for n in names if _silent(configs.get(n, {}))}
    if by:
        for p in points:
            if p.config in by:
                by[p.config].append(p)
    return frozenset(n for n in names if speculates(configs.get(n, {}), by.get(n, ())))


_CONFIG = attrgetter("config")


def comparison_reasons(a_ids: Iterable[str], b_ids: Iterable[str], config: str, spec: frozenset[str],
                       points: Mapping[str, Point]) -> tuple[str, ...]:
    """Why a verdict of ``config`` (drawn from points ``a_ids`` against
    ``b_ids``) is not a deployment fact; empty for a config that does not
    speculate, or prompts that are not known to be unrepresentative."""
    if config not in spec:
        return ()
    return verdict_reasons([*a_ids, *b_ids], points)


def pair_reasons(data: Dataset, spec: frozenset[str], points: Mapping[str, Point],
                 a_config: str, a_campaign: str, a_ids: Iterable[str],
                 b_config: str, b_campaign: str, b_ids: Iterable[str]) -> tuple[str, ...]:
    """Everything that keeps one verdict (``a`` against ``b``) from being a
    deployment fact: the prompt conditions of a speculative candidate, then
    what is not like for like between the two sides (likeness.py)."""
    a_ids, b_ids = tuple(a_ids), tuple(b_ids)
    found = comparison_reasons(a_ids, b_ids, a_config, spec, points)
    unlike = likeness.reasons(
        a_config, data.facts_of(a_config, a_campaign), [points[i] for i in a_ids if i in points],
        b_config, data.facts_of(b_config, b_campaign), [points[i] for i in b_ids if i in points])
    return found + unlike
