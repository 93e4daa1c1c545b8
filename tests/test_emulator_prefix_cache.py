"""The emulator's prefix cache: chained page keys, as SGLang's radix cache with pages.

Unit tests drive the pure engine (and the Emulator state without its loop); two
tests start real emulator processes and talk HTTP to them.
"""

from __future__ import annotations

import re
from typing import Iterator

import pytest

from findings.emulator.engine import PAGE_SIZE, Engine, Seq, Step, page_keys
from findings.emulator.model import PROFILES
from findings.emulator.protocol import SeqSpec
from findings.emulator.state import Emulator as EmulatorState
from findings.emulator.state import EmulatorOptions
from test_emulator import Emulator

BASE = PROFILES["baseline"]
P = PAGE_SIZE


def _prefill(engine: Engine, prompt: str | list[int], sid: int = 0, max_new_tokens: int = 1) -> tuple[Seq, Step]:
    """Submit one request alone and apply its prefill step; (the request, the step)."""
    tokens = len(prompt.split()) if isinstance(prompt, str) else len(prompt)
    seq = Seq(sid=sid, rid=f"r{sid}", prompt_tokens=max(1, tokens), max_new_tokens=max_new_tokens, seed=sid,
              page_keys=engine.page_keys(prompt))
    engine.add(seq)
    step = engine.next_step()
    assert step is not None and step.kind == "prefill" and step.seqs == (seq,)
    engine.apply(step)
    return seq, step


def _ids(start: int, n: int) -> list[int]:
    return list(range(start, start + n))


def test_page_keys_chain_over_whole_pages() -> None:
    a = page_keys(_ids(0, 3 * P))
    b = page_keys(_ids(0, 2 * P) + _ids(5000, P))
    assert len(a) == 3 and a[:2] == b[:2] and a[2] != b[2]
    # A page's key depends on every page before it, not only on its own tokens.
    c = page_keys(_ids(9000, P) + _ids(P, P))
    assert c[1] != a[1]
    assert len(page_keys(_ids(0, 2 * P + 1))) == 3 and page_keys([]) == ()  # a partial last page has a key
    assert len(page_keys(_ids(0, 10), page_size=4)) == 3


def test_shared_leading_pages_are_cached_and_cost_no_prefill() -> None:
    engine = Engine(BASE)
    first, step1 = _prefill(engine, _ids(0, 3 * P) + _ids(100, 20))
    assert first.cached_tokens == 0 and step1.new_tokens == 3 * P + 20
    second, step2 = _prefill(engine, _ids(0, 3 * P) + _ids(200, 30), sid=1)
    assert second.cached_tokens == 3 * P
    assert step2.new_tokens == second.prompt_tokens - 3 * P == 30
    assert step2.duration_ms == pytest.approx(BASE.prefill_step_ms(30))


def test_no_shared_first_page_caches_nothing() -> None:
    engine = Engine(BASE)
    _prefill(engine, _ids(0, 4 * P))
    other, step = _prefill(engine, [7] + _ids(1, 4 * P - 1), sid=1)  # differs in the first token only
    assert other.cached_tokens == 0 and step.new_tokens == 4 * P
    text, _ = _prefill(engine, " ".join(f"w{i}" for i in range(4 * P)), sid=2)
    assert text.cached_tokens == 0  # words never equal ids


def test_repeated_prompt_is_cached_but_for_its_last_token() -> None:
    engine = Engine(BASE)
    prompt = _ids(0, 4 * P)  # a multiple of the page size
    _prefill(engine, prompt)
    again, step = _prefill(engine, prompt, sid=1)
    assert again.cached_tokens == 4 * P - 1 and step.new_tokens == 1
    # Not a multiple: the same whole prompt still matches its partial last page...
    odd = _ids(500, 3 * P + 5)
    _prefill(engine, odd, sid=2)
    assert _prefill(engine, odd, sid=3)[0].cached_tokens == 3 * P + 4
    # ...which a prompt that only shares a prefix with it does not: whole pages only.
    longer = odd + _ids(900, 7)
    assert _prefill(engine, longer, sid=4)[0].cached_tokens == 3 * P
    # Text prompts: one token per word.
    words = " ".join(f"w{i}" for i in range(2 * P))
    _prefill(engine, words, sid=5)
    assert _prefill(engine, words, sid=6)[0].cached_tokens == 2 * P - 1
    assert _prefill(engine, words + " more words", sid=7)[0].cached_tokens == 2 * P


def test_one_token_prompt_and_page_size_option() -> None:
    engine = Engine(BASE, page_size=4)
    _prefill(engine, [42])
    assert _prefill(engine, [42], sid=1)[0].cached_tokens == 0  # the last token is always computed
    _prefill(engine, _ids(0, 10))
    assert _prefill(engine, _ids(0, 9) + [77], sid=2)[0].cached_tokens == 8  # two pages of 4
    with pytest.raises(ValueError):
        Engine(BASE, page_size=0)


def test_flush_cache_empties_it() -> None:
    engine = Engine(BASE)
    prompt = _ids(0, 2 * P)
    _prefill(engine, prompt)
    assert engine.cached_pages == 2
    engine.flush_cache()
    assert engine.cached_pages == 0
    assert _prefill(engine, prompt, sid=1)[0].cached_tokens == 0


def test_lru_evicts_the_least_recent_pages_deepest_first() -> None:
    engine = Engine(BASE, prefix_cache_size=4)
    a, b = _ids(0, 2 * P), _ids(1000, 2 * P)
    _prefill(engine, a)
    _prefill(engine, b, sid=1)
    assert engine.cached_pages == 4
    assert _prefill(engine, a, sid=2)[0].cached_tokens == 2 * P - 1  # a hit touches a's pages
    c = _ids(2000, P)
    _prefill(engine, c, sid=3)  # one page over capacity: b's, the least recent, goes; its deepest page first
    assert engine.cached_pages == 4
    assert _prefill(engine, a, sid=4)[0].cached_tokens == 2 * P - 1
    assert _prefill(engine, b + _ids(3000, 3), sid=5)[0].cached_tokens == P  # b's first page is still there
    big = _ids(5000, 10 * P)
    _prefill(engine, big, sid=6)  # more pages than fit: the cache holds its first 4
    assert engine.cached_pages == 4
    assert _prefill(engine, big + [1], sid=7)[0].cached_tokens == 4 * P
    assert _prefill(engine, a, sid=8)[0].cached_tokens == 0
    off = Engine(BASE, prefix_cache_size=0)
    _prefill(off, a)
    assert off.cached_pages == 0 and _prefill(off, a, sid=1)[0].cached_tokens == 0


def test_default_capacity_is_the_kv_pool() -> None:
    engine = Engine(BASE)
    assert engine._cache_size == BASE.kv_capacity_tokens // P
    assert Engine(BASE, page_size=1)._cache_size == BASE.kv_capacity_tokens


def _metric(text: str, name: str) -> float:
    match = re.search(rf"^{re.escape(name)}\{{[^}}]*\}} (\S+)$", text, re.M)
    assert match, (name, text)
    return float(match.group(1))


def _run_all(emu: EmulatorState) -> None:
    """Drive the state's engine without its wall-clock loop."""
    while True:
        step = emu.engine.next_step()
        if step is None:
            return
        emu._after(step, emu.engine.apply(step))


def test_counter_and_gauge_count_user_requests_only() -> None:
    emu = EmulatorState(EmulatorOptions(prefix_page_size=8))
    shared = _ids(0, 24)
    emu.submit([SeqSpec(shared + _ids(100, 6), None, 2, 0, (), frozenset())])
    _run_all(emu)
    text = emu.metrics_text()
    assert "# TYPE sglang:cached_tokens_total counter" in text and "# TYPE sglang:cache_hit_rate gauge" in text
    assert ('sglang:cached_tokens_total{model_name="findings-emulator/baseline",cache_source="device"} 0.0'
            in text.splitlines())
    assert _metric(text, "sglang:cache_hit_rate") == 0.0
    group = emu.submit([SeqSpec(shared + _ids(200, 10), None, 3, 0, (), frozenset())])
    _run_all(emu)
    assert group.seqs[0].cached_tokens == 24 and emu.meta_info(group.seqs[0])["cached_tokens"] == 24
    text = emu.metrics_text()
    assert _metric(text, "sglang:cached_tokens_total") == 24
    assert _metric(text, "sglang:cache_hit_rate") == pytest.approx(24 / 34)
    # Internal requests (health checks) are cached like any other, but counted nowhere.
    emu.submit([SeqSpec(shared + _ids(300, 2), None, 1, 0, (), frozenset())], internal=True)
    _run_all(emu)
    text = emu.metrics_text()
    assert _metric(text, "sglang:cached_tokens_total") == 24
    assert _metric(text, "sglang:cache_hit_rate") == pytest.approx(24 / 34)
    emu.flush()
    assert emu.engine.cached_pages == 0
    with pytest.raises(ValueError):
        EmulatorState(EmulatorOptions(prefix_page_size=0))


# ---------------------------------------------------------------------------
# Over HTTP, real processes


def _scrape(emu: Emulator) -> str:
    r = emu.client.get("/metrics")
    assert r.status_code == 200
    return r.text


@pytest.fixture
def fresh() -> Iterator[Emulator]:
    emu = Emulator("--profile", "baseline", "--speed", "50")
    yield emu
    assert emu.stop() == 0


def test_shared_prefix_over_http_shows_in_metrics_and_meta_info(fresh: Emulator) -> None:
    shared = _ids(10, 64)
    before = _scrape(fresh)
    assert _metric(before, "sglang:cached_tokens_total") == 0.0
    first = fresh.client.post("/generate", json={"input_ids": shared + _ids(1000, 20),
                                                  "sampling_params": {"max_new_tokens": 3}})
    assert first.status_code == 200 and first.json()["meta_info"]["cached_tokens"] == 0
    second = fresh.client.post("/generate", json={"input_ids": shared + _ids(2000, 30),
                                                   "sampling_params": {"max_new_tokens": 3}}).json()
    after = _scrape(fresh)
    delta = _metric(after, "sglang:cached_tokens_total") - _metric(before, "sglang:cached_tokens_total")
    assert delta == 64 == second["meta_info"]["cached_tokens"]
    assert second["meta_info"]["prompt_tokens"] == 94
    assert _metric(after, "sglang:cache_hit_rate") == pytest.approx(64 / 94)
    assert 'cache_source="device"' in after
    # /flush_cache empties it: the same prompt again has nothing cached.
    assert fresh.client.post("/flush_cache").status_code == 200
    again = fresh.client.post("/generate", json={"input_ids": shared + _ids(2000, 30),
                                                  "sampling_params": {"max_new_tokens": 3}}).json()
    assert again["meta_info"]["cached_tokens"] == 0


def test_firehose_fast_path_reports_its_cached_tokens() -> None:
    emu = Emulator("--profile", "firehose")
    try:
        shared = _ids(10, 64)
        body = {"stream": True, "sampling_params": {"max_new_tokens": 5}}
        first = emu.sse("/generate", {**body, "input_ids": shared + _ids(1000, 8)})
        second = emu.sse("/generate", {**body, "input_ids": shared + _ids(3000, 8)})
        assert {ev["meta_info"]["cached_tokens"] for ev in first[:-1]} == {0}
        assert {ev["meta_info"]["cached_tokens"] for ev in second[:-1]} == {64}
        assert second[-2]["meta_info"]["completion_tokens"] == 5  # the fast path (one event per token)
        assert _metric(_scrape(emu), "sglang:cached_tokens_total") == 64
    finally:
        assert emu.stop() == 0
