"""Prompt sets: files users bring (``--dataset``), and sets registry packages ship.

Public surface: ``load`` (a file), ``named`` (a registry set), ``sample``,
and the frozen ``PromptSet`` and ``Conversation``. Layers: ``model`` (pure
data, sampling) < ``formats`` (bytes to a validated PromptSet, pure) <
``registry`` (reads packages' data files) < this module (reads the user's file).
"""

from __future__ import annotations

from pathlib import Path

from findings.datasets.formats import parse
from findings.datasets.model import FORMATS, REGISTRY, Conversation, PromptSet, sample
from findings.core import diskio
from findings.core.errors import FindingsError

__all__ = ["FORMATS", "REGISTRY", "Conversation", "PromptSet", "load", "named", "sample"]


def load(path: str | Path) -> PromptSet:
    """The prompt set in a file; one ``InputError`` line for a file that is
    missing, unreadable or malformed."""
    p = Path(path)
    ps, _ = parse(str(p), diskio.read_input(p, "prompt file"), p.name)
    return ps


def named(name: str) -> PromptSet:
    """A prompt set a registry package ships (``prompts = "humaneval"``)."""
    from findings.datasets import registry
    if name == "humaneval":
        return registry.humaneval()
    if name == "mmlu-cot":
        return registry.mmlu_cot()
    raise FindingsError(f"unknown prompt set {name!r}; the registry sets are {', '.join(REGISTRY)}")
