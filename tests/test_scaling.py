"""What keeps large stores fast must not change a single number.

The incremental history, the vectorised bootstrap and windowing, the
verdict-only comparisons, the fast store reader and table writer, each
against the plain version it replaces; the document's cap on campaign
sections; batch writes. Speed itself is measured in
benchmarks/perf/render_scaling.py, never here.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import math
import random
import sqlite3
import subprocess
import zlib
from pathlib import Path
from typing import Any

import pytest
from conftest import ROOT, cli
from hypothesis import given, settings
from hypothesis import strategies as st

from findings.document import report
from findings.derive import stats
from findings import store
from findings.derive.analysis import Rules, Table, cells, conclude_table
from findings.derive.regressions import conclude
from findings.core.errors import DuplicateError, SettingsError, StoreError
from findings.decide import decide
from findings.derive.derived import derive
from findings.derive.history import replay, steps
from findings.core.model import THROUGHPUT, Campaign, Dataset, Point, Run
from findings.document.render import github_table
from findings.store.schema import run_from_dict, run_to_dict
from findings.document.settings import load as load_settings


def synthetic(seed: int, campaigns: int = 12) -> Dataset:
    """Campaigns named against their order, configs that come and go, repeats,
    workloads measured now and then, some points with per-request records."""
    rng = random.Random(seed)
    names = [f"c{rng.randrange(1000):03d}-{i}" for i in range(campaigns)]
    points: list[Point] = []
    for rank, name in enumerate(names):
        configs = ["baseline"] + rng.sample(["spec-a", "spec-b", "spec-c"], rng.randint(0, 3))
        if rng.random() < 0.15:
            configs.remove("baseline")  # a campaign without the baseline: unpaired comparisons
        for workload in rng.sample(["w1", "w2"], rng.randint(1, 2)):
            for c in rng.sample([1, 2, 4, 8, 16], rng.randint(1, 5)):
                for config in configs:
                    for _ in range(rng.choice([1, 1, 2, 3])):
                        speed = {"baseline": 1.0, "spec-a": 1.3 - 0.04 * c, "spec-b": 1.02, "spec-c": 0.9}[config]
                        tput = 100.0 * c * speed * rng.gauss(1.0, 0.03)
                        requests = _records(rng, c) if rng.random() < 0.3 else None
                        points.append(Point(id=f"r{rank}/{len(points)}", run_id=f"r{rank}", campaign=name,
                                            config=config, workload=workload, concurrency=c,
                                            metrics={THROUGHPUT: tput}, source="runner", source_file=None,
                                            source_line=None, requests=requests))
    return Dataset(campaigns=tuple(Campaign(n, order=i) for i, n in enumerate(names)), points=tuple(points),
                   configs={})


def _records(rng: random.Random, c: int, n: int | None = None) -> dict[str, Any]:
    n = n or rng.randint(3 * c, 3 * c + 40)
    sent = [round(i // c * 0.5 + rng.uniform(0, 0.01), 6) for i in range(n)]
    events, counts = [], []
    for _ in range(n):
        t, k, ts, ks = rng.uniform(0.01, 0.1), 0, [], []
        for _ in range(rng.randint(1, 12)):
            k += rng.randint(1, 4)
            ts.append(round(t, 6))
            ks.append(k)
            t += rng.uniform(0.005, 0.05)
        events.append(ts)
        counts.append(ks)
    errors = [None if rng.random() > 0.05 else "reset" for _ in range(n)]
    return {"sent_s": sent, "event_s": events, "event_tokens": counts, "error": errors}


def _summary(wc: Any) -> Any:
    best = [(b.config, b.decisive, b.cell.point_ids) if b else None for b in (wc.latency, wc.throughput)]
    cands = [(c.config, c.policy, c.threshold,
              [(x.concurrency, x.verdict, x.ratio, x.band, x.a.point_ids, x.b.point_ids) for x in c.comparisons])
             for c in wc.candidates]
    return (wc.workload, wc.concurrencies, wc.configs, wc.baseline_measured, best, cands)


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("interval", ["auto", "band"])
def test_incremental_history_equals_rederiving_every_prefix(seed, interval):
    data = synthetic(seed)
    rules = Rules(interval=interval, resamples=200)
    entries = replay(data, rules)
    assert [e.campaign for e in entries] == list(data.campaigns)
    stepped = list(steps(data, rules))
    assert [c for c, _ in stepped] == list(data.campaigns)
    for entry, (campaign, at) in zip(entries, stepped):
        full = conclude(data.upto(campaign.name), rules)
        assert [_summary(w) for w in at.workloads] == [_summary(w) for w in full.workloads]
        assert entry.policies == {w.workload: {c.config: c.policy for c in w.candidates} for w in full.workloads}
    # the last entry is today's conclusion
    assert [_summary(w) for w in stepped[-1][1].workloads] == [_summary(w) for w in conclude(data, rules).workloads]


@pytest.mark.parametrize("seed", range(4))
def test_a_table_built_campaign_by_campaign_equals_one_built_at_once(seed):
    data = synthetic(seed)
    rules = Rules(resamples=200)
    valid = [c for c in cells(data, rules) if c.workload == "w1"]
    whole = Table(valid, rules)
    grown = Table([], rules)
    for rank in range(len(data.campaigns)):
        grown.add([c for c in valid if c.rank == rank])
    assert (grown.configs, grown.concurrencies, grown.drift) == (whole.configs, whole.concurrencies, whole.drift)
    assert _summary(conclude_table("w1", grown)) == _summary(conclude_table("w1", whole))


@pytest.mark.parametrize("seed", range(4))
def test_verdict_only_comparisons_keep_every_verdict(seed):
    data = synthetic(seed, campaigns=8)
    rules = Rules(resamples=300)
    valid = cells(data, rules)
    for w in ("w1", "w2"):
        mine = [c for c in valid if c.workload == w]
        table = Table(mine, rules)
        for a in mine:
            for b in mine:
                if a.concurrency != b.concurrency or a is b:
                    continue
                full, quick = table.compare_cells(a, b), table.compare_cells(a, b, verdict_only=True)
                assert full is not None and quick is not None
                assert (quick.verdict, quick.ratio, quick.band, quick.method) == \
                    (full.verdict, full.ratio, full.band, full.method)
                assert quick.ci is None or quick.ci == full.ci


@given(n=st.integers(1, 40), resamples=st.integers(1, 300), seed=st.text(max_size=12),
       data=st.data())
@settings(max_examples=150, deadline=None)
def test_vectorised_bootstrap_is_the_reference_bit_for_bit(n, resamples, seed, data):
    values = st.floats(0, 1e6, allow_nan=False, allow_infinity=False)
    a = tuple(data.draw(st.lists(values, min_size=n, max_size=n)))
    b = tuple(data.draw(st.lists(values, min_size=n, max_size=n)))
    state = random.Random(seed).getstate()
    ref, fast = random.Random(), random.Random()
    ref.setstate(state)
    fast.setstate(state)
    assert stats._ratios_vectorised(fast, a, b, resamples).tolist() == sorted(stats._ratios(ref, a, b, resamples))


def test_a_resample_whose_mean_underflows_to_zero_is_left_out_by_both():
    """Found by the test above: b = (0, 5e-324) resamples to a positive sum
    whose mean over 2 rounds to 0; neither implementation may divide by it."""
    a, b = (0.0, 0.0), (0.0, 5e-324)
    for seed in range(20):
        ref, fast = random.Random(seed), random.Random(seed)
        assert stats._ratios_vectorised(fast, a, b, 50).tolist() == sorted(stats._ratios(ref, a, b, 50))


def test_bootstrap_of_unequal_sizes_takes_the_reference():
    lo, hi = stats.ratio_ci((1.0, 2.0, 3.0), (1.0, 2.0), 0.95, 200, "x")
    rng = random.Random(zlib.crc32(b"x"))
    ratios = sorted(stats._ratios(rng, (1.0, 2.0, 3.0), (1.0, 2.0), 200))
    assert (lo, hi) == (stats.percentile(ratios, 0.025), stats.percentile(ratios, 0.975))


def test_ratio_bounds_hold_every_resample():
    rng = random.Random(3)
    for _ in range(200):
        n = rng.randint(1, 6)
        a = tuple(rng.uniform(0, 10) for _ in range(n))
        b = tuple(rng.uniform(0.1, 10) for _ in range(n))
        lo, hi = stats.ratio_bounds(a, b) or (0, 0)
        ratios = stats._ratios(random.Random(rng.random()), a, b, 100)
        assert all(lo <= r <= hi for r in ratios)
    assert stats.ratio_bounds((1.0,), (0.0, 1.0)) is None and stats.ratio_bounds((-1.0,), (1.0,)) is None


def test_vectorised_windows_are_the_reference_bit_for_bit():
    rng = random.Random(7)
    for _ in range(200):
        c = rng.randint(1, 8)
        rec = _records(rng, c)
        fast = stats._window_series_vectorised(rec["sent_s"], rec["event_s"], rec["event_tokens"], rec["error"], 10)
        assert fast == stats._window_series(rec["sent_s"], rec["event_s"], rec["event_tokens"], rec["error"], 10)
        assert stats.window_series(rec, concurrency=c) == fast


@pytest.mark.parametrize("odd", [
    lambda r: r["event_s"][0].__setitem__(0, None),            # a missing time
    lambda r: r["event_tokens"][1].__setitem__(0, 2.5),        # a fractional count
    lambda r: r["event_tokens"][1].append(99),                 # ragged: zip() stops early
    lambda r: r["event_s"][2].__setitem__(0, -50.0),           # before the first send
    lambda r: r.__setitem__("error", "all"),                   # not a list
    lambda r: r["sent_s"].__setitem__(0, True),                # a bool
])
def test_odd_records_take_the_reference_path(odd):
    rec = _records(random.Random(1), 2, n=30)
    odd(rec)
    assert stats._window_series_vectorised(rec["sent_s"], rec["event_s"], rec["event_tokens"], rec["error"],
                                           10) is None
    errors = rec["error"] if isinstance(rec["error"], list) else rec["error"] or []

    def outcome(fn: Any) -> Any:
        try:
            return fn()
        except Exception as exc:  # whatever the reference makes of it, as before
            return type(exc)
    assert outcome(lambda: stats.window_series(rec, concurrency=2)) == outcome(
        lambda: stats._window_series(rec["sent_s"], rec["event_s"], rec["event_tokens"], errors, 10))


@given(st.data())
@settings(max_examples=300, deadline=None)
def test_github_table_is_what_tabulate_writes(data):
    from tabulate import tabulate
    text = st.text(st.sampled_from(list("ab Z9|-_*—⚠…±≤é中\u3000\u2028\u0301\xa0\\")), max_size=9)
    n = data.draw(st.integers(1, 5))
    headers = data.draw(st.lists(text, min_size=n, max_size=n))
    rows = data.draw(st.lists(st.lists(text, min_size=n, max_size=n), min_size=1, max_size=6))
    align = tuple(data.draw(st.lists(st.sampled_from(["left", "right", "center"]), min_size=n, max_size=n)))
    expected = tabulate(rows, headers=headers, tablefmt="github", disable_numparse=True, colalign=list(align))
    assert github_table(headers, rows, align) == expected


@given(st.text(st.sampled_from(list("ab9 _-.é\\|*`[]<>&#\n\r\t")), max_size=12))
def test_text_skips_only_what_needs_no_escaping(value):
    from findings.core.fmt import _EDGE_UNDERSCORE, _MD_SPECIAL, text
    assert text(value) == _EDGE_UNDERSCORE.sub(r"\\_", value.translate(_MD_SPECIAL))


def test_github_table_leaves_control_characters_to_tabulate():
    assert github_table(["a"], [["\x1b[31mred\x1b[0m"]], ("left",)) is None
    assert github_table(["a"], [["x"]], ("decimal",)) is None


# ---------------------------------------------------------------- the store

def _run(run_id: str, campaign: str = "c1", date: str = "2026-01-01", sha: str | None = None,
         facts: dict[str, Any] | None = None, source: str = "runner") -> Run:
    pts = tuple(Point(id=f"{run_id}/{i}", run_id=run_id, campaign=campaign, config="baseline", workload="w",
                      concurrency=c, metrics={THROUGHPUT: 100.0 * c}, source=source, source_file=None,
                      source_line=None) for i, c in enumerate((1, 2)))
    return Run(schema_version=2, run_id=run_id, source=source, importer="t", importer_version="1",
               tool_version="0", created_at="2026-01-01T00:00:00Z", source_file=None,
               source_sha256=sha or run_id * 4, environment={}, campaigns=(Campaign(campaign, date=date),),
               configs={"baseline": facts or {}}, points=pts)


def test_add_runs_checks_the_batch_then_writes_it(tmp_path):
    s = tmp_path / "store"
    paths = store.add_runs(s, [_run("r1"), _run("r2", "c2", "2026-01-02")], create=True)
    assert [p.name for p in paths] == ["r1.json", "r2.json"]
    with pytest.raises(DuplicateError, match="already exists"):
        store.add_runs(s, [_run("r3", "c3"), _run("r1", sha="other")])  # the second is stored already
    with pytest.raises(DuplicateError, match="already ingested"):
        store.add_runs(s, [_run("r4", "c4"), _run("r5", "c5", sha="r4" * 4)])  # within the batch
    with pytest.raises(StoreError, match="campaign 'c1'"):
        store.add_runs(s, [_run("r6", "c6"), _run("r7", "c1", "2026-02-02")])  # contradicts the store
    with pytest.raises(StoreError, match="mix simulated and real"):
        store.add_runs(s, [_run("r8", "c8"), _run("r9", "c8", source="simulated")])
    assert sorted(p.name for p in (s / "runs").glob("*.json")) == ["r1.json", "r2.json"]  # nothing else


def test_the_fast_reader_falls_back_to_json_where_orjson_would_differ(tmp_path):
    s = tmp_path / "store"
    big = 2 ** 70 + 1  # orjson would round it to a float
    store.add_run(s, _run("r1", facts={"seed": big, "serial": -(2 ** 64)}), create=True)
    run = store.load_runs(s)[0]
    assert run.configs["baseline"] == {"seed": big, "serial": -(2 ** 64)}
    assert type(run.configs["baseline"]["seed"]) is int
    bad = s / "runs" / "r2.json"
    bad.write_text('{"schema_version": 2, "kind": NaN}')
    with pytest.raises(StoreError, match="r2.json: not valid JSON: NaN is not allowed in the store"):
        store.load_runs(s)


def test_a_point_reads_the_same_on_the_fast_and_the_checked_path():
    doc = run_to_dict(_run("r1"))
    fast = {"campaign": "c1", "config": "baseline", "workload": "w", "concurrency": 3,
            "metrics": {THROUGHPUT: 5.0, "ttft_ms": 12.5},
            "workload_params": {"rate": "inf", "on": True, "n": None, "big": 2 ** 80, "f": 0.5},
            "note": "n", "source_line": 7, "requests": {"sent_s": [0.0]}}
    checked = dict(fast, metrics={THROUGHPUT: 5, "ttft_ms": 12.5})  # an int metric takes the checked path
    doc["points"] = [checked, fast]
    a, b = run_from_dict(json.loads(json.dumps(doc)), "x").points
    assert (a.metrics, a.workload_params, a.note, a.source_line, a.requests, a.concurrency, a.source_file) == \
        (b.metrics, b.workload_params, b.note, b.source_line, b.requests, b.concurrency, b.source_file)
    assert all(type(v) is float for v in a.metrics.values())
    # a float so large it may have been an integer that orjson rounded: read again exactly
    doc["points"] = [dict(fast, metrics={THROUGHPUT: 5.0, "x": 2.0 ** 70})]
    assert run_from_dict(json.loads(json.dumps(doc)), "x").points[0].metrics["x"] == 2.0 ** 70
    with pytest.raises(StoreError, match="may have been an integer"):
        run_from_dict(json.loads(json.dumps(doc)), "x", big_floats=False)


# ---------------------------------------------------------------- the document

def _store_of(tmp_path: Path, campaigns: int) -> Path:
    s = tmp_path / "store"
    runs = []
    for i in range(campaigns):
        run = _run(f"r{i}", f"night-{i:02d}", f"2026-01-{i + 1:02d}")
        spec = tuple(Point(id=f"r{i}/{j + 2}", run_id=f"r{i}", campaign=p.campaign, config="spec", workload="w",
                           concurrency=p.concurrency, metrics={THROUGHPUT: p.throughput * (1.2 if i % 3 else 0.8),
                                                               "client_loop_lag_p99_ms": 90.0 if i == 1 else 1.0},
                           source="runner", source_file=None, source_line=None)
                     for j, p in enumerate(run.points))
        runs.append(dataclasses.replace(run, points=run.points + spec,
                                        environment={"driver": f"5{i // 4}", "gpu": "H200"}))
    store.add_runs(s, runs, create=True)
    return s


def test_the_document_details_only_the_latest_campaigns(tmp_path):
    data = store.load(_store_of(tmp_path, 7))
    rules = Rules()
    d = derive(data, rules)
    capped, full = report.build(d, decide(d), "t", "s", detail=3), report.build(d, decide(d), "t", "s")
    assert [c["name"] for c in capped["campaigns"]] == ["night-04", "night-05", "night-06"]
    assert capped["hidden_campaigns"] == {"count": 4, "shown": 3, "first": "night-00", "first_when": "2026-01-01",
                                          "last": "night-03", "last_when": "2026-01-04", "points": 16}
    assert full["hidden_campaigns"] is None and len(full["campaigns"]) == 7
    # the appendix keeps what the document cites: every point of a shown campaign, and the pairs behind
    # today's verdicts, which are all in the latest campaign here
    cited = {row[2] for row in capped["appendix"].rows}
    assert cited == {"night-04", "night-05", "night-06"} and capped["appendix_left_out"] == 16
    assert len(full["appendix"].rows) == 28 and full["appendix_left_out"] == 0
    # the flagged point of night-01 is counted, not listed; the history keeps its latest entries
    assert capped["workloads"][0]["left_out"] == [
        "2 flagged points of the 4 earlier campaigns, not listed here "
        "(findings conclusions --json lists every flagged point)"]
    assert len(capped["history"]) <= 3 and capped["history"][-1]["number"] == full["history"][-1]["number"]
    assert capped["history_earlier"]["first"] == "night-00"
    assert ("driver", "50", "4 campaigns, from night-00 to night-03") in capped["environment"].rows
    assert ("driver", "51", "night-04, night-05, night-06") in capped["environment"].rows
    assert ("gpu", "H200", "7 campaigns, from night-00 to night-06") in capped["environment"].rows
    assert ("driver", "50", "night-00, night-01, night-02, night-03") in full["environment"].rows


def test_detail_campaigns_setting(tmp_path):
    f = tmp_path / "findings.toml"
    f.write_text("[findings]\n")
    assert load_settings(str(f)).detail_campaigns == 20
    f.write_text("[findings]\ndetail_campaigns = 0\n")
    assert load_settings(str(f)).detail_campaigns == 0
    for bad in ("-1", "2.5", "true", '"5"'):
        f.write_text(f"[findings]\ndetail_campaigns = {bad}\n")
        with pytest.raises(SettingsError, match="detail_campaigns"):
            load_settings(str(f))


def test_a_capped_document_renders_with_its_notes(tmp_path, project):
    s = _store_of(tmp_path, 5)
    settings = project / "findings.toml"
    settings.write_text(settings.read_text() + "detail_campaigns = 2\n")
    out = tmp_path / "doc.md"
    r = cli("--settings", str(settings), "render", "--output", str(out), store=s)
    assert r.exit_code == 0, r.output
    text = out.read_text()
    assert "Only the latest 2 campaigns have a section. The 3 earlier ones" in text
    assert text.count("\n### `night-0") == 2
    assert "Only the points this document cites are listed" in text


# ---------------------------------------------------------------- the benchmark script

def test_render_scaling_builds_exact_deterministic_stores(tmp_path):
    spec = importlib.util.spec_from_file_location("render_scaling", ROOT / "benchmarks/perf/render_scaling.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    a, b = tmp_path / "a", tmp_path / "b"
    stats_a = mod.build_store(a, 300, seed=3, request_fraction=0.2)
    assert stats_a == mod.build_store(b, 300, seed=3, request_fraction=0.2)
    assert stats_a["points"] == 300 and stats_a["points_with_requests"] > 0
    assert [p.read_bytes() for p in sorted((a / "runs").glob("*"))] == \
        [p.read_bytes() for p in sorted((b / "runs").glob("*"))]
    data = store.load(a)
    assert len(data.points) == 300 and data.campaigns == tuple(sorted(data.campaigns, key=lambda c: c.sort_key))
    assert list((a / "runs").glob(f"*{store.SIDECAR_SUFFIX}"))  # the records in sidecars, the same bytes too
    rows = mod.measure([120], tmp_path / "work")  # also checks the cached document against the uncached one
    assert [r["command"] for r in rows] == ["render", "conclusions", "parse-floor", "render-cold-cache",
                                            "render-new-campaign", "render-warm", "write"]
    # The floor (D160) read every run file: it prints the points it parsed.
    assert (tmp_path / "work" / "parse-floor-120.out").read_text().split() == ["120"]
    assert {"size", "command", "wall_s", "peak_rss_mib", "store_mib", "bytes_per_point", "runs",
            "points_with_requests"} <= set(rows[0])
    assert all(r["wall_s"] > 0 and r["bytes_per_point"] > 0 for r in rows)
    assert sorted(p.name for p in (tmp_path / "work" / "store-120" / "runs").glob("perf-write-*")) == []
    # ...and the index as it was before them: no run it knows is gone, so the next write does not rebuild it (D179).
    from findings.store import index as storeindex
    assert storeindex.status(tmp_path / "work" / "store-120").state == "current"
    assert not any(r.startswith("perf-write-") for r in storeindex.Index(
        tmp_path / "work" / "store-120", sqlite3.connect(storeindex.path(tmp_path / "work" / "store-120"))).run_ids())
    # The same points one run file per point, as `findings bench --url` writes them (item 4 of issue 38).
    bench = tmp_path / "bench"
    stats_bench = mod.build_store(bench, 300, seed=3, request_fraction=0.2, shape="bench")
    assert stats_bench["points"] == 300 and stats_bench["runs"] == 300
    shaped = store.load(bench)
    assert len(shaped.points) == 300 and len({p.run_id for p in shaped.points}) == 300
    assert sorted((p.campaign, p.config, p.workload, p.concurrency, sorted(p.metrics.items())) for p in shaped.points) == \
        sorted((p.campaign, p.config, p.workload, p.concurrency, sorted(p.metrics.items())) for p in data.points)
    row, floor = mod.measure_bench_shape(300, tmp_path / "work")
    assert row["command"] == "render-bench-shape" and row["runs"] == 300 and row["wall_s"] > 0
    assert floor["command"] == "parse-floor-bench-shape" and floor["runs"] == 300 and floor["wall_s"] > 0
    # 300 files: two processes read them, as the render does from 256 on, and every point is counted once.
    assert mod.PARSE_FLOOR.is_file() and (tmp_path / "work" / "parse-floor-bench-300.out").read_text().split() == ["300"]


@pytest.mark.parametrize("seed", range(4))
def test_the_replay_resumed_from_its_cache_equals_a_full_replay(seed):
    """Issue 28: the history's state after a prefix, kept between commands,
    makes a new campaign cost one campaign; resumed or not, the same entries."""
    import pickle

    from findings.derive.history import HistoryCache
    data = synthetic(seed, campaigns=10)
    rules = Rules(resamples=200)
    earlier = data.upto(data.campaigns[-2].name)
    cache = HistoryCache()
    assert replay(earlier, rules, cache=cache) == replay(earlier, rules)
    assert cache.replayed == len(earlier.campaigns)
    cache = pickle.loads(pickle.dumps(cache))  # as the render cache keeps it
    resumed = replay(data, rules, cache=cache)
    assert resumed == replay(data, rules)
    assert cache.replayed == 1  # the new campaign only
    # Nothing changed: nothing replayed, the same entries.
    assert replay(data, rules, cache=cache) == resumed and cache.replayed == 0


def test_a_changed_earlier_campaign_replays_from_the_start():
    from findings.derive.history import HistoryCache
    data = synthetic(3, campaigns=8)
    rules = Rules(resamples=200)
    cache = HistoryCache()
    replay(data, rules, cache=cache)
    first = data.campaigns[0].name
    changed = Dataset(campaigns=data.campaigns, configs=data.configs, points=tuple(
        p._replace(metrics={THROUGHPUT: p.metrics[THROUGHPUT] * 1.5}) if p.campaign == first else p
        for p in data.points))
    assert replay(changed, rules, cache=cache) == replay(changed, rules)
    assert cache.replayed == len(data.campaigns)
    # Other rules: another chain from the first link.
    other = Rules(resamples=200, noise_floor=0.08)
    assert replay(changed, other, cache=cache) == replay(changed, other)
    assert cache.replayed == len(data.campaigns)


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("interval", ["auto", "repeats", "band"])
def test_cross_checks_equal_comparing_each_baseline_cell(seed, interval):
    """Table.cross_of, which looks up what a candidate's cross-checks share
    once, is compare_cells(verdict_only=True) against each other campaign's
    baseline cell, in rank order."""
    data = synthetic(seed, campaigns=10)
    rules = Rules(interval=interval, resamples=200)
    for w in ("w1", "w2"):
        table = Table([c for c in cells(data, rules) if c.workload == w], rules)
        for config in table.configs:
            for conc in table.concurrencies:
                comp = table.compare(config, rules.baseline, conc)
                if comp is None:
                    continue
                others = sorted(table.cells_of(rules.baseline, conc).values(), key=lambda c: c.rank)
                plain = [x for o in others if o.campaign != comp.b.campaign
                         and (x := table.compare_cells(comp.a, o, verdict_only=True)) is not None]
                assert table.cross_of(comp) == plain


def _w1_in_two_orders(seed: int) -> tuple[Any, Rules, list[Any], tuple[list[int], list[int]]]:
    """A synthetic store's valid cells of workload w1, and its campaign ranks
    in order and shuffled (the orders a table is grown in)."""
    data = synthetic(seed)
    rules = Rules(resamples=200)
    valid = [c for c in cells(data, rules) if c.workload == "w1"]
    ranks = list(range(len(data.campaigns)))
    random.Random(seed).shuffle(ranks)
    return data, rules, valid, (sorted(ranks), ranks)


@pytest.mark.parametrize("seed", range(4))
def test_before_is_the_latest_earlier_cell_however_cells_arrive(seed):
    """Table.before (a bisection) against a walk over every cell, with
    campaigns added in order and out of it."""
    data, rules, valid, orders = _w1_in_two_orders(seed)
    for order in orders:
        table = Table([], rules)
        for rank in order:
            table.add([c for c in valid if c.rank == rank])
        for (config, conc), mine in table.by_key.items():
            assert [c.rank for c in mine.values()] == sorted(c.rank for c in mine.values())
            for rank in range(len(data.campaigns) + 1):
                walk = [c for c in valid if (c.config, c.concurrency) == (config, conc) and c.rank < rank]
                expect = max(walk, key=lambda c: c.rank) if walk else None
                assert table.before(config, conc, rank) == expect


@pytest.mark.parametrize("seed", range(6))
def test_history_entries_equal_those_of_the_full_replay(seed):
    """The replay without a step callback skips what no entry reads (the
    crossover estimates): its entries are those of the full one."""
    data = synthetic(seed)
    rules = Rules(resamples=200)
    full: list[Any] = []
    with_steps = replay(data, rules, on_step=lambda c, k: full.append(c))
    assert replay(data, rules) == with_steps
    assert full == list(data.campaigns)


@pytest.mark.parametrize("seed", range(6))
def test_moves_settled_by_bounds_equal_those_of_the_bootstrap(seed, monkeypatch):
    """regressions._beyond skips the bootstrap where every resampled ratio
    lies on one side of 1 (stats.ratio_bounds): the moves are those found
    with the bootstrap run every time."""
    from findings.derive import regressions
    data = synthetic(seed, campaigns=16)
    rules = Rules(resamples=200, noise_floor=0.01)
    valid = cells(data, rules)
    quick = regressions.moves(valid, data.facts_of, rules)
    monkeypatch.setattr(regressions, "ratio_bounds", lambda a, b: None)
    assert regressions.moves(valid, data.facts_of, rules) == quick
    assert quick  # the synthetic stores move beyond a 1% band


@pytest.mark.parametrize("seed", range(4))
def test_kept_peaks_and_compare_at_equal_computing_them_afresh(seed):
    """Table.peak is kept until one of the config's latest cells changes, and
    Table.compare_at is compare at each C: both against a fresh table, as
    campaigns arrive in order and out of it."""
    _, rules, valid, orders = _w1_in_two_orders(seed)
    for order in orders:
        grown = Table([], rules, verdicts_only=True)
        for rank in order:
            grown.add([c for c in valid if c.rank == rank])
            fresh = Table([c for c in valid if c.rank in order[:order.index(rank) + 1]], rules, verdicts_only=True)
            for config in fresh.configs:
                assert grown.peak(config) == fresh.peak(config)
                assert grown.compare_at(config, rules.baseline, fresh.concurrencies) == \
                    [grown.compare(config, rules.baseline, c) for c in fresh.concurrencies]


def _cells_point_by_point(data: Dataset, flags: dict[str, tuple[str, ...]]) -> list[Any]:
    """What ``cells`` computed before it grouped in columns (issue 38): the
    specification, point by point."""
    from findings.derive.analysis import SIMULATED_SUFFIX, Cell, point_series
    rank = {c.name: i for i, c in enumerate(data.campaigns)}
    groups: dict[tuple[str, str, int, str, int], list[Point]] = {}
    for p in data.points:
        if p.id in flags or THROUGHPUT not in p.metrics or "load" in p.workload_params:
            continue
        key = (p.workload + (SIMULATED_SUFFIX if p.source == "simulated" else ""), p.campaign, rank[p.campaign],
               p.config, p.concurrency)
        groups.setdefault(key, []).append(p)
    out = []
    for key in sorted(groups):
        pts = sorted(groups[key], key=lambda p: p.id)
        values = tuple(p.metrics[THROUGHPUT] for p in pts)
        mean = math.fsum(values) / len(values)
        out.append(Cell(*key, mean, min(values), max(values), len(values), tuple(p.id for p in pts), values,
                        point_series(pts[0]) if len(pts) == 1 else ()))
    return out


@pytest.mark.parametrize("seed", range(6))
def test_cells_in_columns_are_the_cells_point_by_point(seed):
    """The cells grouped by a stable sort of coded keys (stats.group_runs):
    the same cells, bit for bit and in the same order, as grouping point by
    point, whatever the order of the points, with simulated, flagged,
    open-loop and unmeasured points among them."""
    rng = random.Random(seed)
    data = synthetic(seed, campaigns=14)
    points = []
    for p in data.points:
        roll = rng.random()
        if roll < 0.1:
            p = p._replace(source="simulated")
        elif roll < 0.15:
            p = p._replace(workload_params={"load": "poisson"})
        elif roll < 0.2:
            p = p._replace(metrics={"mean_ttft_ms": 12.0})
        points.append(p)
    rng.shuffle(points)
    data = dataclasses.replace(data, points=tuple(points))
    flags = {p.id: ("flagged",) for p in points if rng.random() < 0.1}
    want = _cells_point_by_point(data, flags)
    got = cells(data, Rules(), flags)
    assert [tuple(c) for c in got] == [tuple(c) for c in want]
    assert any(c.n > 1 for c in got) and any(c.workload.endswith(" (simulated)") for c in got)
    assert [c.mean.hex() for c in got] == [c.mean.hex() for c in want]


def test_the_replay_chain_hashes_every_field_by_value():
    """history._cells_digest: equal cells hash alike whichever string
    objects hold their names (marshal's format 2 writes no references), and
    a change of any field, a float by one bit included, changes the hash."""
    import hashlib
    import sys

    from findings.derive.analysis import Cell
    from findings.derive.history import _cells_digest

    def digest(cs: list[Cell]) -> str:
        h = hashlib.sha256()
        _cells_digest(h, cs)
        return h.hexdigest()

    name = "".join(["base", "line"])  # not the interned "baseline"
    a = [Cell("w", "c1", 0, "baseline", 8, 101.5, 100.0, 103.0, 2, ("r/0", "r/1"), (100.0, 103.0)),
         Cell("w", "c1", 0, "spec", 8, 120.0, 120.0, 120.0, 1, ("r/2",), (120.0,), (1.0, 2.0))]
    b = [a[0]._replace(config=name, point_ids=tuple("".join(["r/", d]) for d in "01")), a[1]]
    assert a[0].config is not b[0].config and sys.intern(b[0].config) is a[0].config
    assert digest(a) == digest(b)
    changed = [a[0]._replace(mean=math.nextafter(101.5, 200.0)), a[0]._replace(point_ids=("r/0", "r/9")),
               a[0]._replace(n=3), a[0]._replace(concurrency=16), a[0]._replace(values=(100.0, 103.5)),
               a[0]._replace(workload="w2"), a[0]._replace(series=(0.0,))]
    seen = {digest(a)} | {digest([c, a[1]]) for c in changed}
    assert len(seen) == len(changed) + 1
    assert digest(a[::-1]) != digest(a)


def test_render_scaling_times_the_stores_other_readers(tmp_path):
    """make perf's rows for deploy, plan, store check, export and diff
    (D164, D165): each command runs for real on a small store, and diff
    over a git repository whose last commit adds the store's last campaign."""
    spec = importlib.util.spec_from_file_location("render_scaling", ROOT / "benchmarks/perf/render_scaling.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    work = tmp_path / "work"
    rows = mod.measure_commands(150, work)
    assert [r["command"] for r in rows] == ["deploy", "plan", "store-check", "export-csv"]
    assert all(r["wall_s"] > 0 and r["peak_rss_mib"] > 0 for r in rows)
    assert (work / "export-csv-150.csv").read_text().count("\n") == 151  # a header and a row per point
    assert json.loads((work / "deploy-150.out").read_text())  # deploy --json printed its plans
    row = mod.measure_diff(150, work)
    assert row["command"] == "diff" and row["wall_s"] > 0
    out = (work / "diff-150.out").read_text()
    assert out.startswith("### findings diff: `HEAD~1`") and "**New campaigns**" in out
    repo = work / "diffrepo-150"
    built = (repo / ".perf-built").stat().st_mtime_ns
    commits = subprocess.run(["git", "rev-list", "--count", "HEAD"], cwd=repo, capture_output=True, text=True,
                             check=True).stdout.strip()
    assert commits == "2"
    again = mod.measure_diff(150, work)  # the repository is built once, then reused
    assert again["command"] == "diff" and (repo / ".perf-built").stat().st_mtime_ns == built


@pytest.mark.parametrize("seed", range(4))
def test_by_rank_groups_as_group_runs_does(seed):
    """stats.by_rank (the document's labels, D177): the rows grouped by rank
    as group_runs groups one column, and each rank's span among them."""
    from findings.derive.stats import by_rank, group_runs
    rng = random.Random(seed)
    ranks = [rng.choice([0, 3, 4, 9, 250, 1000]) for _ in range(rng.randint(1, 400))]
    order, spans = by_rank(iter(ranks), len(ranks))
    want, starts = group_runs([ranks])
    assert list(order) == list(want)
    assert spans == {ranks[want[lo]]: (lo, hi) for lo, hi in zip(starts, starts[1:])}
    assert by_rank([], 0)[1] == {} and len(by_rank([], 0)[0]) == 0


@pytest.mark.parametrize("seed", range(3))
def test_rows_read_their_values_from_shared_places(seed):
    """model.rows_in (D177): rows of any widths (none included) laid in one
    buffer, longer than a block or not, each read back as its own values,
    from a place below a block's length that is one int shared by every row
    at that place."""
    from array import array

    from findings.core import model
    rng = random.Random(seed)
    orders = [tuple(f"k{i}" for i in range(k)) for k in range(9)]
    keys = [rng.choice(orders) for _ in range(rng.choice([50, 40_000]))]
    flat = [rng.random() for _ in range(sum(map(len, keys)))]
    for rows in (model.packed_rows(keys, flat),
                 model.rows_in(map(model._index_of, keys), memoryview(array("d", flat)), list(map(len, keys)))):
        assert len(rows) == len(keys)
        at = 0
        for k, m in zip(keys, rows):
            assert [m[x] for x in k] == flat[at:at + len(k)] and list(m.row()) == flat[at:at + len(k)]
            assert m._at is model._STARTS[m._at]
            at += len(k)
        assert len({id(m._values) for m in rows}) == -(-len(flat) // model._BLOCK) or len(flat) < model._BLOCK
