"""What to do about the derivation: the engines' settings of each policy
(deploy.py) and what to measure next (plan.py).

``decide(derived)`` computes, once per document, the deployments and the
open questions the document shows; ``findings deploy`` and ``findings plan``
call the same functions with their options, on the same ``Derived``.
"""

from __future__ import annotations

from dataclasses import dataclass

from findings.decide import deploy, plan
from findings.derive.derived import Derived


@dataclass(frozen=True)
class Decided:
    #: One per (workload, candidate): the engines' settings or the reason there are none.
    deployments: tuple[deploy.Deployment, ...]
    #: The open questions, most decisive first.
    questions: tuple[plan.Question, ...]


def decide(derived: Derived) -> Decided:
    return Decided(
        deployments=tuple(deploy.plan(derived.data, derived.conclusions, open_loop=derived.open_loop,
                                      points=derived.points)),
        questions=tuple(plan.questions(derived.data, derived.rules, derived.concluded)),
    )
