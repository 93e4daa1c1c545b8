"""The emulator's continuous-batching engine. Pure: no I/O, no clocks, no asyncio.

The server drives it: ``step = engine.next_step()`` says what the next
scheduler step is and how long it takes in model time; the server sleeps
that long (divided by its speed) and calls ``engine.apply(step)``, which hands
out the step's tokens. The same engine runs in virtual time in
``simulate_closed_loop`` (used by tools/calibrate_emulator.py --simulate).

Scheduling follows SGLang's default policy: a waiting request is admitted
when a slot is free; admissions run as a separate prefill step (up to
``max_prefill_tokens`` uncached prompt tokens, at least one request), which
pauses decoding and gives each admitted request its first token; otherwise
every running request takes part in one decode step.

Tokenization is deterministic and cheap: a text prompt has one token per
whitespace-separated word (at least 1); output tokens are pseudo-words drawn
from :data:`VOCAB` by a generator seeded per request, joined by spaces.
The emulator never emits an end-of-sequence token, so an output runs to
``max_new_tokens`` unless a stop string or stop token id matches.

The prefix cache works like SGLang's radix cache with pages: a prompt's tokens
(its ``input_ids``, or a text's words) are cut into pages of ``page_size``
tokens, and page k's key chains page k-1's key with the page's tokens
(:func:`page_keys`), so a key stands for the whole prefix up to its page. A
request's cached tokens are those of its longest run of leading pages found in
the cache, capped at ``prompt_tokens - 1`` (the last token is always computed).
See :class:`Engine` for the partial last page, insertion and eviction.
"""

from __future__ import annotations

import hashlib
import random
from collections import OrderedDict, deque
from dataclasses import dataclass, field
from typing import Any, Hashable, Sequence

from findings.emulator.model import Profile, draw_step_tokens

__all__ = [
    "VOCAB",
    "Engine",
    "Seq",
    "Step",
    "count_prompt_tokens",
    "page_keys",
    "prompt_tokens_of",
    "seed_for",
    "simulate_closed_loop",
    "token_id",
]

VOCAB: tuple[str, ...] = (
    "alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel",
    "india", "juliet", "kilo", "lima", "mike", "november", "oscar", "papa",
    "quebec", "romeo", "sierra", "tango", "uniform", "victor", "whiskey", "xray",
    "yankee", "zulu", "amber", "basil", "cedar", "dune", "ember", "fern",
    "granite", "harbor", "iris", "jade", "kelp", "lumen", "maple", "nectar",
    "onyx", "pearl", "quartz", "river", "slate", "thistle", "umber", "velvet",
    "willow", "yarrow", "zephyr", "aspen", "birch", "clover", "drift", "ember2",
    "flint", "grove", "heath", "ivy", "juniper", "knoll", "lark", "moss",
)  # fmt: skip

#: The fractional part of the golden ratio (Weyl-sequence increment).
GOLDEN = 0.6180339887498949

#: Output token ids are ``TOKEN_ID_BASE + index into VOCAB``.
TOKEN_ID_BASE = 1000


def token_id(word_index: int) -> int:
    return TOKEN_ID_BASE + word_index


def seed_for(*parts: object) -> int:
    """A stable 64-bit seed from any printable parts (Python's hash() is salted)."""
    digest = hashlib.blake2b("\x1f".join(map(str, parts)).encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big")


def count_prompt_tokens(prompt: str | list[int]) -> int:
    """Prompt tokens: ``len(input_ids)``, or one per whitespace-separated word (at least 1)."""
    if isinstance(prompt, str):
        return max(1, len(prompt.split()))
    return len(prompt)


def prompt_tokens_of(prompt: str | list[int]) -> Sequence[Hashable]:
    """The tokens the prefix cache sees: the ``input_ids``, or a text's words (as
    :func:`count_prompt_tokens` counts them; an empty text has none to cache)."""
    return prompt.split() if isinstance(prompt, str) else prompt


#: Default prefix-cache page size in tokens (``--prefix-page-size``).
PAGE_SIZE = 16


def page_keys(tokens: Sequence[Hashable], page_size: int = PAGE_SIZE) -> tuple[int, ...]:
    """Chained keys of the prompt's pages: key k = hash((key k-1, tokens of page k)).

    Every page is full but perhaps the last, whose key covers its fewer tokens.
    O(len(tokens)) with Python's built-in tuple hash: cheap, and salted per
    process (the cache lives in one process, so it need not be stable).
    """
    keys: list[int] = []
    key = 0
    for start in range(0, len(tokens), page_size):
        key = hash((key, tuple(tokens[start:start + page_size])))
        keys.append(key)
    return tuple(keys)


@dataclass(eq=False)
class Seq:
    """One request inside the engine. Mutated only by :class:`Engine`."""

    sid: int
    rid: str
    prompt_tokens: int
    max_new_tokens: int
    min_new_tokens: int = 0
    stop: tuple[str, ...] = ()
    stop_token_ids: frozenset[int] = frozenset()
    seed: int = 0
    internal: bool = False  # health checks: not counted anywhere
    cached_tokens: int = 0
    output_ids: list[int] = field(default_factory=list)
    text: str = ""
    finish_reason: dict[str, Any] | None = None
    verify_ct: int = 0
    correct_drafts: int = 0
    histogram: list[int] = field(default_factory=list)
    paused: bool = False  # the engine gives a paused request no decode tokens
    aborted: bool = False
    #: The prompt's chained page keys (:func:`page_keys`); () = nothing to cache.
    page_keys: tuple[int, ...] = ()
    #: This request's draft acceptance (model.accept_p of its prompt); None: the profile's.
    accept_p: float | None = None
    #: sha1 of each chat message's content, for the ground-truth log (multi-turn tests).
    messages_sha1: tuple[str, ...] = ()
    _words: random.Random = field(init=False, repr=False)
    _accept_u: float = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self._words = random.Random(seed_for("words", self.seed))
        self._accept_u = (seed_for("accept", self.seed) % 1_000_003) / 1_000_003

    def _next_accept_draw(self) -> float:
        """The next uniform draw of a golden-ratio (Weyl) sequence: low discrepancy, so a
        request's mean accept length converges in a few steps instead of ~1/sqrt(steps)."""
        self._accept_u = (self._accept_u + GOLDEN) % 1.0
        return self._accept_u

    @property
    def completion_tokens(self) -> int:
        return len(self.output_ids)

    @property
    def finished(self) -> bool:
        return self.finish_reason is not None

    @property
    def remaining(self) -> int:
        return self.max_new_tokens - len(self.output_ids)

    def _emit(self, n: int) -> None:
        """Append ``n`` tokens, stopping early at a stop string/id or the length limit."""
        for _ in range(n):
            index = self._words.randrange(len(VOCAB))
            tid = token_id(index)
            prev_len = len(self.text)
            self.text = VOCAB[index] if not self.text else f"{self.text} {VOCAB[index]}"
            self.output_ids.append(tid)
            if len(self.output_ids) > self.min_new_tokens:
                if tid in self.stop_token_ids:
                    self.finish_reason = {"type": "stop", "matched": tid}
                    return
                for s in self.stop:
                    at = self.text.find(s, max(0, prev_len - len(s)))
                    if s and at >= 0:
                        self.text = self.text[:at]
                        self.finish_reason = {"type": "stop", "matched": s}
                        return
            if len(self.output_ids) >= self.max_new_tokens:
                self.finish_reason = {"type": "length", "length": self.max_new_tokens}
                return


@dataclass(frozen=True)
class Step:
    """One scheduler step: which requests take part and its model duration."""

    kind: str  # "prefill" | "decode"
    seqs: tuple[Seq, ...]
    duration_ms: float
    new_tokens: int = 0  # uncached prompt tokens (prefill)


@dataclass
class StepResult:
    """What one applied step produced."""

    updated: list[Seq]  # got tokens or finished in this step
    tokens: int  # output tokens emitted
    verify_calls: int  # speculative verify forward passes (one per request per decode step)
    retired: list[Seq]


class Engine:
    """Waiting queue + running set capped at ``max_running``; see the module doc.

    The prefix cache is an LRU of page keys (``Seq.page_keys``, made by
    :func:`page_keys`) holding at most ``prefix_cache_size`` pages; None (the
    default) sizes it to the profile's KV pool (``kv_capacity_tokens //
    page_size`` pages: 62,500 pages, a million tokens, at the default page of
    16), as SGLang's radix cache may fill its KV pool; 0 turns it off. A
    request's pages go in when its prefill step is applied; a hit touches the
    pages it matched. Pages are inserted and touched last page first, so a
    prefix's first pages are the most recent and eviction takes the deepest
    pages first (SGLang evicts leaves first). Pages of running requests are not
    pinned.

    The partial last page: a prompt whose length is not a multiple of
    ``page_size`` keeps its last, partial page under its own chained key too,
    and only the same whole prompt matches that key. So a repeated prompt is
    cached but for its last token whatever its length (as SGLang's default
    page size of 1 caches it), while prompts that only share a prefix share
    whole pages only, the partial page counting for nothing (like SGLang with
    ``page_size`` > 1).
    """

    def __init__(self, profile: Profile, max_running: int | None = None, prefix_cache_size: int | None = None,
                 page_size: int = PAGE_SIZE) -> None:
        if page_size < 1:
            raise ValueError("the prefix cache page size must be >= 1")
        if prefix_cache_size is not None and prefix_cache_size < 0:
            raise ValueError("the prefix cache size must be >= 0 pages")
        self.profile = profile
        self.max_running = max_running or profile.max_running_requests
        self.waiting: deque[Seq] = deque()
        self.running: list[Seq] = []
        self.page_size = page_size
        self._cache: OrderedDict[int, None] = OrderedDict()
        self._cache_size = (max(1, profile.kv_capacity_tokens // page_size) if prefix_cache_size is None
                            else prefix_cache_size)

    # -- admission ----------------------------------------------------------
    def add(self, seq: Seq) -> None:
        self.waiting.append(seq)

    def abort(self, seq: Seq) -> None:
        """Remove a request wherever it is (a client went away, or a fault)."""
        seq.aborted = True
        if seq.finish_reason is None:
            seq.finish_reason = {"type": "abort"}
        if seq in self.running:
            self.running.remove(seq)
        else:
            try:
                self.waiting.remove(seq)
            except ValueError:
                pass

    @property
    def busy(self) -> bool:
        return bool(self.waiting or self.running)

    def flush_cache(self) -> None:
        self._cache.clear()

    @property
    def cached_pages(self) -> int:
        """Pages in the prefix cache now."""
        return len(self._cache)

    def page_keys(self, prompt: str | list[int]) -> tuple[int, ...]:
        """A prompt's chained page keys at this engine's page size."""
        return page_keys(prompt_tokens_of(prompt), self.page_size)

    def match(self, keys: Sequence[int], prompt_tokens: int) -> int:
        """Cached tokens of a prompt with these page keys: its longest run of leading
        pages in the cache (touched), capped at ``prompt_tokens - 1``."""
        cache = self._cache
        n = 0
        for key in keys:
            if key not in cache:
                break
            n += 1
        for key in reversed(keys[:n]):
            cache.move_to_end(key)
        return max(0, min(n * self.page_size, prompt_tokens - 1))

    def insert(self, keys: Sequence[int]) -> None:
        """Put a prompt's pages in the cache (last page first), evicting the least recent."""
        if not self._cache_size:
            return
        cache = self._cache
        for key in reversed(keys):
            if key in cache:
                cache.move_to_end(key)
            else:
                cache[key] = None
        while len(cache) > self._cache_size:
            cache.popitem(last=False)

    def kv_tokens(self) -> int:
        return sum(s.prompt_tokens + s.completion_tokens for s in self.running)

    # -- stepping -----------------------------------------------------------
    def next_step(self) -> Step | None:
        """The next step to run, or None when there is nothing to do now."""
        free = self.max_running - len(self.running)
        if self.waiting and free > 0:
            admitted: list[Seq] = []
            budget = self.profile.max_prefill_tokens
            new_tokens = 0
            while self.waiting and len(admitted) < free:
                seq = self.waiting[0]
                uncached = seq.prompt_tokens - self._cached(seq)
                if admitted and new_tokens + uncached > budget:
                    break
                self.waiting.popleft()
                seq.cached_tokens = seq.prompt_tokens - uncached
                admitted.append(seq)
                new_tokens += uncached
            self.running.extend(admitted)
            return Step("prefill", tuple(admitted), self.profile.prefill_step_ms(new_tokens), new_tokens)
        batch = tuple(s for s in self.running if not s.paused)
        if not batch:
            return None
        return Step("decode", batch, self.profile.decode_step_ms(len(batch)))

    def _cached(self, seq: Seq) -> int:
        """The request's cached prompt tokens now (see the class doc)."""
        return self.match(seq.page_keys, seq.prompt_tokens) if seq.page_keys else 0

    def apply(self, step: Step) -> StepResult:
        """Hand out the tokens of a step that has run; retire finished requests."""
        updated: list[Seq] = []
        tokens = verify_calls = 0
        for seq in step.seqs:
            if seq.aborted or seq.finished:
                continue
            if step.kind == "prefill":
                if seq.page_keys:
                    self.insert(seq.page_keys)
                if seq.max_new_tokens <= 0:
                    seq.finish_reason = {"type": "length", "length": 0}
                else:
                    seq._emit(1)
                    tokens += 1
            else:
                want, _ = draw_step_tokens(self.profile, seq._next_accept_draw(), seq.remaining, seq.accept_p)
                before = seq.completion_tokens
                seq._emit(want)
                got = seq.completion_tokens - before
                tokens += got
                if self.profile.speculative:
                    verify_calls += 1
                    seq.verify_ct += 1
                    correct = got - 1
                    seq.correct_drafts += correct
                    if not seq.histogram:
                        seq.histogram = [0] * ((self.profile.speculative_num_steps or 0) + 1)
                    seq.histogram[min(correct, len(seq.histogram) - 1)] += 1
            updated.append(seq)
        retired = [s for s in self.running if s.finished]
        if retired:
            self.running = [s for s in self.running if not s.finished]
        return StepResult(updated, tokens, verify_calls, retired)


@dataclass(frozen=True)
class SimResult:
    concurrency: int
    requests: int
    output_tokens: int
    duration_s: float

    @property
    def throughput(self) -> float:
        return self.output_tokens / self.duration_s if self.duration_s else float("inf")


def simulate_closed_loop(
    profile: Profile,
    concurrency: int,
    num_prompts: int,
    input_len: int = 256,
    output_len: int = 128,
    seed: int = 0,
    max_running: int | None = None,
) -> SimResult:
    """Virtual-time closed loop: exactly ``concurrency`` requests in flight.

    A finished request is replaced by the next prompt at the end of the same
    step (zero client latency), as an ideal client would.
    """
    engine = Engine(profile, max_running)
    sent = 0
    now_ms = 0.0
    tokens = 0

    def submit() -> None:
        nonlocal sent
        engine.add(Seq(sid=sent, rid=f"sim-{sent}", prompt_tokens=input_len, max_new_tokens=output_len,
                       seed=seed_for(seed, sent)))  # distinct prompts: no page keys, nothing cached
        sent += 1

    while sent < min(concurrency, num_prompts):
        submit()
    while engine.busy:
        step = engine.next_step()
        if step is None:  # pragma: no cover - nothing is ever paused here
            break
        now_ms += step.duration_ms
        result = engine.apply(step)
        tokens += result.tokens
        for _ in result.retired:
            if sent < num_prompts:
                submit()
    return SimResult(concurrency, sent, tokens, now_ms / 1000.0)
