"""Deterministic workloads. Nothing is downloaded: prompts are made here.

- ``random-ids``: random token ids sent as ``input_ids`` (native API only);
- ``diverse``: a different made-up text per request (low prefix sharing,
  varied content: acceptance as on varied traffic);
- ``fixed``: one text repeated (the best case for speculation and caching);
- a prompt set (``findings.datasets``): a file the user brings
  (``dataset = "PATH"``, ``--dataset PATH``) or one a registry package ships
  (``prompts = "humaneval"``). Its conversations are drawn seeded and
  stable; multi-turn ones carry their later turns, sent by the client once
  the previous reply has arrived. Output lengths are natural by default
  (``ignore_eos`` off), capped by the file's ``max_tokens`` and ``output_len``.

Text prompts are words from a fixed syllable grammar, so a prompt of
``input_len`` words is roughly ``input_len`` tokens for the emulator and a
little more for a real BPE tokenizer; the server's own ``prompt_tokens`` is
recorded per request.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Any, Mapping

from findings.datasets import PromptSet, sample
from findings.load.spec import LoadSpec
from findings.load.trace import TraceRequest

#: Made-up prompts (no file). ``dataset``: a prompt set (``Workload.prompt_set``).
KINDS = ("random-ids", "diverse", "fixed")
DATASET = "dataset"
#: Token ids for ``random-ids`` are drawn from [ID_LOW, min(vocab, ID_HIGH)).
ID_LOW, ID_HIGH = 100, 30000
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
    #: A prompt set (kind ``dataset``), loaded and validated when the matrix or
    #: the command line is read; its identity, never its text, is stored.
    prompt_set: PromptSet | None = field(default=None, compare=False, repr=False)
    #: ``split_by = "category"``: this workload is one category of the set.
    category: str | None = None
    #: Multi-turn sets: send at most this many turns of each conversation (None: all).
    max_turns: int | None = None
    #: ``random-ids``: the model's vocabulary size, when given (else the server's).
    vocab_size: int | None = None
    #: An open loop (findings.load.spec): requests sent at a rate, over a
    #: profile or as a trace replays, instead of C always in flight.
    load: LoadSpec | None = field(default=None, compare=False, repr=False)
    #: ``findings bench --url``: the workload table the command line amounts to
    #: (paths absolute), written into each run's recorded matrix (matrix.attach_matrix_toml).
    source_table: Mapping[str, Any] | None = field(default=None, compare=False, repr=False)

    @property
    def open_loop(self) -> bool:
        return self.load is not None

    def requests_at(self, concurrency: int) -> int:
        """Prompts (conversations, for a prompt set) measured at one C: enough that every slot is reused."""
        return max(self.num_prompts, self.per_concurrency * concurrency)

    def turns_per_prompt(self) -> float:
        """Requests per prompt: 1, or a multi-turn set's mean turns (up to ``max_turns``)."""
        ps = self.prompt_set
        if ps is None or not ps.conversations:
            return 1.0
        cap = self.max_turns or max(len(c.turns) for c in ps.conversations)
        return sum(min(len(c.turns), cap) for c in ps.conversations) / len(ps.conversations)

    def params(self) -> dict[str, str | int]:
        ps = self.prompt_set
        if ps is None:
            return {"prompts": self.kind, "input_len": self.input_len, "output_len": self.output_len,
                    "seed": self.seed, "ignore_eos": self.ignore_eos}
        out: dict[str, str | int] = {
            "prompts": ps.format, "dataset_file": ps.name, "dataset_sha256": ps.sha256,
            "dataset_size": len(ps.conversations), "output_len": self.output_len, "seed": self.seed,
            "ignore_eos": self.ignore_eos, "multi_turn": ps.multi_turn and self.max_turns != 1,
        }
        if self.category is not None:
            out["dataset_category"] = self.category
        if self.max_turns is not None:
            out["max_turns"] = self.max_turns
        return out


@dataclass(frozen=True)
class Prompt:
    """One request, or the first turn of a conversation (``later`` holds the rest)."""

    index: int
    input_len: int
    text: str | None = None
    input_ids: tuple[int, ...] | None = None
    #: (role, content) messages sent before ``text`` (a chat file's history).
    history: tuple[tuple[str, str], ...] = ()
    #: Later user turns, each sent after the previous reply arrives.
    later: tuple[str, ...] = ()
    category: str | None = None
    #: This request's output cap (the file's), else the workload's ``output_len``.
    output_len: int | None = None

    @property
    def turns(self) -> int:
        return 1 + len(self.later)


def _word(rng: random.Random) -> str:
    return "".join(rng.choice(_ONSETS) + rng.choice(_VOWELS) + rng.choice(_CODAS)
                   for _ in range(rng.choice((1, 1, 2, 2, 3))))


def _text(rng: random.Random, n_words: int) -> str:
    topic = rng.choice(_TOPICS)
    words = topic.split()
    body = [_word(rng) for _ in range(max(n_words - len(words), 1))]
    return " ".join(words) + ": " + " ".join(body)


def make_prompts(w: Workload, count: int, salt: int = 0, ids: bool = False,
                 vocab: int | None = None) -> list[Prompt]:
    """``count`` prompts (conversations, for a prompt set); ``salt`` separates
    warm-up prompts from measured ones. ``vocab``: random-ids are drawn below
    it (the model's vocabulary size)."""
    if w.prompt_set is not None:
        return _from_set(w, count, salt)
    rng = random.Random(f"{w.seed}:{salt}:{w.kind}")
    if w.kind == "random-ids" or ids:
        high = min(vocab, ID_HIGH) if vocab is not None else ID_HIGH
        low = ID_LOW if high > 2 * ID_LOW else 0
        return [Prompt(i, w.input_len, input_ids=tuple(rng.randrange(low, high) for _ in range(w.input_len)))
                for i in range(count)]
    if w.kind == "fixed":
        text = _text(random.Random(f"{w.seed}:fixed"), w.input_len)
        return [Prompt(i, w.input_len, text=text) for i in range(count)]
    return [Prompt(i, w.input_len, text=_text(rng, w.input_len)) for i in range(count)]


def _from_set(w: Workload, count: int, salt: int) -> list[Prompt]:
    assert w.prompt_set is not None
    turns = w.max_turns
    out = []
    for i, c in enumerate(sample(w.prompt_set, count, w.seed, salt)):
        later = c.turns[1:turns] if turns is not None else c.turns[1:]
        cap = min(c.output_len, w.output_len) if c.output_len is not None else w.output_len
        out.append(Prompt(i, c.words, text=c.turns[0], history=c.history, later=tuple(later),
                          category=c.category, output_len=cap))
    return out


def _block(seed: int, block: int, size: int, ids: bool, low: int, high: int) -> list[int] | list[str]:
    """The content of one hash block: the same for every request that names it."""
    rng = random.Random(f"{seed}:block:{block}")
    if ids:
        return [rng.randrange(low, high) for _ in range(size)]
    return [_word(rng) for _ in range(size)]


def trace_prompts(w: Workload, requests: tuple[TraceRequest, ...], block_size: int, ids: bool,
                  vocab: int | None = None) -> list[Prompt]:
    """One prompt per trace request, built from its ``hash_ids``: each id is a
    block of ``block_size`` tokens (ids, or one word per token for text
    APIs), the same block wherever the id appears, so requests that share
    leading ids share a prefix the server's cache can reuse (as AIPerf and
    sglang's trace replay build them). A request without hash ids gets
    tokens of its own. Output lengths are the trace's."""
    high = min(vocab, ID_HIGH) if vocab is not None else ID_HIGH
    low = ID_LOW if high > 2 * ID_LOW else 0
    cache: dict[int, list[int] | list[str]] = {}
    out = []
    for i, r in enumerate(requests):
        parts: list[int | str] = []
        if r.hash_ids:
            for h in r.hash_ids:
                blk = cache.get(h)
                if blk is None:
                    blk = cache[h] = _block(w.seed, h, block_size, ids, low, high)
                parts.extend(blk)
        else:
            parts.extend(_block(w.seed, -1 - i, r.input_length, ids, low, high))
        parts = parts[:r.input_length]
        if ids:
            out.append(Prompt(i, r.input_length, input_ids=tuple(int(x) for x in parts),
                              output_len=r.output_length))
        else:
            out.append(Prompt(i, r.input_length, text=" ".join(str(x) for x in parts), output_len=r.output_length))
    return out
