"""Deterministic workloads. Nothing is downloaded: prompts are made here.

- ``random-ids``: random token ids sent as ``input_ids`` (native API only);
- ``diverse``: a different made-up text per request (low prefix sharing,
  varied content: acceptance as on varied traffic);
- ``fixed``: one text repeated (the best case for speculation and caching).

Text prompts are words from a fixed syllable grammar, so a prompt of
``input_len`` words is roughly ``input_len`` tokens for the emulator and a
little more for a real BPE tokenizer; the server's own ``prompt_tokens`` is
recorded per request.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

KINDS = ("random-ids", "diverse", "fixed")
_ONSETS = ("b", "c", "d", "f", "g", "h", "k", "l", "m", "n", "p", "r", "s", "t", "v", "w", "st", "tr", "pl", "gr")
_VOWELS = ("a", "e", "i", "o", "u", "ai", "ou", "ea")
_CODAS = ("", "", "n", "r", "s", "t", "l", "nd", "st")
_TOPICS = (
    "Summarise the following notes", "Translate the following text", "Answer the question about the text",
    "Continue the story", "Explain the following log", "Write a reply to the message",
    "List the key points of the passage", "Rewrite the paragraph more formally",
)


@dataclass(frozen=True)
class Workload:
    name: str
    kind: str
    input_len: int
    output_len: int
    num_prompts: int
    seed: int = 1
    per_concurrency: int = 1  # at least this many requests per unit of C
    #: Generate exactly output_len tokens (the server ignores the end of
    #: sequence). Fixed lengths make points comparable, but speculation's
    #: acceptance past the natural end is not real traffic's (caveats.py).
    ignore_eos: bool = True

    def requests_at(self, concurrency: int) -> int:
        """Requests measured at one C: enough that every slot is reused."""
        return max(self.num_prompts, self.per_concurrency * concurrency)

    def params(self) -> dict[str, str | int]:
        return {"prompts": self.kind, "input_len": self.input_len, "output_len": self.output_len,
                "seed": self.seed, "ignore_eos": self.ignore_eos}


@dataclass(frozen=True)
class Prompt:
    index: int
    input_len: int
    text: str | None = None
    input_ids: tuple[int, ...] | None = None


def _word(rng: random.Random) -> str:
    return "".join(rng.choice(_ONSETS) + rng.choice(_VOWELS) + rng.choice(_CODAS)
                   for _ in range(rng.choice((1, 1, 2, 2, 3))))


def _text(rng: random.Random, n_words: int) -> str:
    topic = rng.choice(_TOPICS)
    words = topic.split()
    body = [_word(rng) for _ in range(max(n_words - len(words), 1))]
    return " ".join(words) + ": " + " ".join(body)


def make_prompts(w: Workload, count: int, salt: int = 0, ids: bool = False) -> list[Prompt]:
    """``count`` prompts; ``salt`` separates warm-up prompts from measured ones."""
    rng = random.Random(f"{w.seed}:{salt}:{w.kind}")
    if w.kind == "random-ids" or ids:
        return [Prompt(i, w.input_len, input_ids=tuple(rng.randrange(100, 30000) for _ in range(w.input_len)))
                for i in range(count)]
    if w.kind == "fixed":
        text = _text(random.Random(f"{w.seed}:fixed"), w.input_len)
        return [Prompt(i, w.input_len, text=text) for i in range(count)]
    return [Prompt(i, w.input_len, text=_text(rng, w.input_len)) for i in range(count)]
