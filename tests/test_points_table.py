"""The points table (findings/document/columns.py, findings/document/cache.py
``_Table``, D145): the render cache keeps the runs it read in columns, in
segments. Real run files, a real cache folder: what a load gives is what
reading every file gives, a new campaign adds one segment, too many
segments are written again as fewer, dead runs go, and a damaged segment
costs its own runs only."""

from __future__ import annotations

import io
import pickle
import shutil
import sys
from pathlib import Path

import pytest

from conftest import ROOT, cache_off
from findings import store as store_mod
from findings.core.model import Campaign, Metrics, Point, Run
from findings.document import cache as rendercache
from findings.document import columns

sys.path.insert(0, str(ROOT / "benchmarks" / "perf"))
import render_scaling  # noqa: E402


@pytest.fixture(scope="module")
def full(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("table") / "store"
    folder.mkdir()
    render_scaling.build_store(folder, 700, seed=5, request_fraction=0.3)
    return folder


def _campaigns(store: Path) -> list[list[Path]]:
    """The store's run files and sidecars, by campaign (a campaign a day: the date in the name)."""
    days: dict[str, list[Path]] = {}
    for p in sorted((store / "runs").glob("bench-*")):
        days.setdefault(p.name.split("-")[1], []).append(p)
    return [days[d] for d in sorted(days)]


def _comparable(data: object) -> object:
    return (data.campaigns, data.configs, data.facts,  # type: ignore[attr-defined]
            [(p, type(p.metrics), dict(p.metrics)) for p in data.points],  # type: ignore[attr-defined]
            [(r.run_id, r.path, r.environment, r.configs, r.campaigns, r.provenance, r.sidecar)  # type: ignore[attr-defined]
             for r in data.runs])  # type: ignore[attr-defined]


def _uncached(store: Path) -> object:
    with cache_off():
        return rendercache.load(store, rendercache.scan(store))


def _segments(cache: Path) -> list[Path]:
    return sorted(p for p in cache.glob("points/*/*.pickle") if p.stem != "index")


@pytest.fixture()
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    folder = tmp_path / "cache"
    monkeypatch.setenv("FINDINGS_CACHE_DIR", str(folder))
    monkeypatch.delenv("FINDINGS_CACHE", raising=False)
    monkeypatch.setattr(rendercache, "MAX_SEGMENTS", 3)  # reached within the small store's 10 campaigns
    return folder


def _reads(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    read: list[str] = []
    real = store_mod.read_run

    def counted(path: Path, requests: bool = True, raw: bytes | None = None):  # type: ignore[no-untyped-def]
        read.append(Path(path).name)
        return real(path, requests, raw)

    monkeypatch.setattr(store_mod, "read_run", counted)
    return read


def test_campaign_by_campaign_the_table_stays_small_and_reads_as_the_files(
        full: Path, tmp_path: Path, cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    days = _campaigns(full)
    assert len(days) > 2 * rendercache.MAX_SEGMENTS
    store = tmp_path / "store"
    (store / "runs").mkdir(parents=True)
    read = _reads(monkeypatch)
    most = 0
    for k, day in enumerate(days):
        for p in day:
            shutil.copy2(p, store / "runs" / p.name)
        read.clear()
        data = rendercache.load(store, rendercache.scan(store))
        assert sorted(read) == sorted(p.name for p in day if p.name.endswith(".json"))  # the new files only
        assert _comparable(data) == _comparable(_uncached(store))
        segments = _segments(cache)
        assert 1 <= len(segments) <= rendercache.MAX_SEGMENTS
        most = max(most, len(segments))
        if k == 0:
            assert len(segments) == 1
    assert most == rendercache.MAX_SEGMENTS  # grown to the bound, then written again as fewer
    read.clear()
    data = rendercache.load(store, rendercache.scan(store))
    assert read == [] and _comparable(data) == _comparable(_uncached(store))  # warm: every run from the table


def _two_segments(full: Path, tmp_path: Path, cache: Path) -> tuple[list[list[Path]], Path, Path, Path]:
    """A store of every campaign but the last, loaded twice into the table:
    first without its last two campaigns, then with them (days, the store,
    the first segment, the second)."""
    days = _campaigns(full)
    store = tmp_path / "store"
    (store / "runs").mkdir(parents=True)
    for day in days[:-2]:
        for p in day:
            shutil.copy2(p, store / "runs" / p.name)
    rendercache.load(store, rendercache.scan(store))
    [first] = _segments(cache)
    for p in days[-2]:
        shutil.copy2(p, store / "runs" / p.name)
    rendercache.load(store, rendercache.scan(store))
    assert first in _segments(cache)
    [second] = [s for s in _segments(cache) if s != first]
    return days, store, first, second


def test_dead_runs_go_and_a_damaged_segment_costs_its_own_runs(
        full: Path, tmp_path: Path, cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    days, store, first, second = _two_segments(full, tmp_path, cache)
    read = _reads(monkeypatch)
    second.write_bytes(b"not a segment")  # damaged: its runs are read again, the others are not
    data = rendercache.load(store, rendercache.scan(store))
    assert sorted(read) == sorted(p.name for p in days[-2] if p.name.endswith(".json"))
    assert _comparable(data) == _comparable(_uncached(store))
    assert rendercache._read_segment(second) is not None and first.exists()  # written again, same runs
    # More than half the rows of a segment gone: written again with the live runs only.
    gone = [p for day in days[:-2][: len(days) * 2 // 3] for p in day]
    for p in gone:
        (store / "runs" / p.name).unlink()
    read.clear()
    data = rendercache.load(store, rendercache.scan(store))
    assert read == [] and _comparable(data) == _comparable(_uncached(store))
    assert not first.exists()
    index = pickle.loads((cache.glob("points/*/index.pickle").__next__()).read_bytes())
    held = [k for keys in index["segments"].values() for k in keys]
    assert len(held) == len(set(held)) == len(list((store / "runs").glob("*.json")))
    # A foreign index: a miss, every run read again, the same data.
    next(cache.glob("points/*/index.pickle")).write_bytes(pickle.dumps({"format": "other"}))
    read.clear()
    data = rendercache.load(store, rendercache.scan(store))
    assert sorted(read) == sorted(p.name for p in (store / "runs").glob("*.json"))
    assert _comparable(data) == _comparable(_uncached(store))


@pytest.mark.parametrize("damage", ["missing", "short", "another segment's", "bytes changed in its header"])
def test_a_segment_whose_values_file_is_not_its_own_costs_its_own_runs(
        full: Path, tmp_path: Path, cache: Path, monkeypatch: pytest.MonkeyPatch, damage: str) -> None:
    """A segment's doubles are kept apart and mapped (D176): a values file
    that is missing, cut short, another segment's, or whose header does not
    name the segment is a miss; its runs are read from their files again."""
    days, store, first, second = _two_segments(full, tmp_path, cache)
    values = second.with_suffix(rendercache.VALUES_SUFFIX)
    body = values.read_bytes()
    assert body.startswith(columns.VALUES_MAGIC) and len(body) > columns.VALUES_HEADER
    if damage == "missing":
        values.unlink()
    elif damage == "short":
        values.write_bytes(body[:-8])
    elif damage == "another segment's":
        values.write_bytes(first.with_suffix(rendercache.VALUES_SUFFIX).read_bytes())
    else:
        values.write_bytes(body[:len(columns.VALUES_MAGIC)] + bytes(16) + body[columns.VALUES_HEADER:])
    assert rendercache._read_segment(second) is None and rendercache._read_segment(first) is not None
    read = _reads(monkeypatch)
    data = rendercache.load(store, rendercache.scan(store))
    assert sorted(read) == sorted(p.name for p in days[-2] if p.name.endswith(".json"))
    assert _comparable(data) == _comparable(_uncached(store))
    # Written again: a segment with its own values file, read from the table next time.
    read.clear()
    data = rendercache.load(store, rendercache.scan(store))
    assert read == [] and _comparable(data) == _comparable(_uncached(store))
    kept = {p.stem for p in _segments(cache)}
    assert kept == {p.stem for p in cache.glob(f"points/*/*{rendercache.VALUES_SUFFIX}")}


def test_a_values_file_that_cannot_be_mapped_is_read_whole(
        full: Path, tmp_path: Path, cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A file system that cannot map the values file (D176): read whole, and
    every run still comes from the table."""
    days, store, first, second = _two_segments(full, tmp_path, cache)

    def refuse(*args: object, **kwargs: object) -> None:
        raise OSError("no mmap here")

    monkeypatch.setattr(rendercache.mmap, "mmap", refuse)
    assert rendercache._read_segment(second) is not None
    read = _reads(monkeypatch)
    data = rendercache.load(store, rendercache.scan(store))
    assert read == [] and _comparable(data) == _comparable(_uncached(store))


def test_a_segment_keeps_every_field_as_it_was() -> None:
    """Metrics packed or a dict, parameters shared or with a float, records,
    series, notes, lines and files: equal after a round trip, with the
    types they had."""
    camp = Campaign("c1", "2026-01-02", None)
    base = Point(id="r/0", run_id="r", campaign="c1", config="baseline", workload="w", concurrency=1,
                 metrics=Metrics.of({"output_throughput_tok_s": 1.5, "x": -0.0}), source="import",
                 source_file="bench.jsonl", source_line=3)  # no parameters: model._NO_PARAMS
    points = (base,
              base._replace(id="r/1", concurrency=2, metrics={"output_throughput_tok_s": 2.0}, note="n",
                            workload_params={"n": 1, "rate": 0.0}),
              base._replace(id="r/2", concurrency=4, metrics=Metrics.of({"output_throughput_tok_s": 3.0}),
                            workload_params={"n": 1, "api": "chat", "ok": True}, requests={"failed": 0},
                            series=(1.0, 2.5)))
    run = Run(schema_version=5, run_id="r", source="import", importer="sglang-bench", importer_version="1",
              tool_version="0.5", created_at="2026-01-02T00:00:00Z", source_file="bench.jsonl",
              source_sha256="1" * 64, environment={"gpu": "H100", "tp": 8, "fast": True, "x": 1.5},
              campaigns=(camp,), configs={"baseline": {"tp_size": 8}}, points=points,
              line_hashes=frozenset({"ab"}), provenance={"url": "http://x"})
    empty = Run(schema_version=5, run_id="e", source="runner", importer="findings-bench", importer_version="1",
                tool_version="0", created_at="2026-01-02T00:00:00Z", source_file=None, source_sha256="2" * 64,
                environment={}, campaigns=(camp,), configs={}, points=())
    decoded = columns.decode(columns.encode(["a", "b"], [run, empty]))
    assert decoded is not None
    keys, headers, counts, got = decoded
    assert keys == ["a", "b"] and counts == [3, 0]
    back = columns.run(headers[0], tuple(got), "runs/r.json")
    assert back == Run(**{**{f: getattr(run, f) for f in Run.__slots__}, "path": "runs/r.json"})
    assert [type(p.metrics) for p in back.points] == [Metrics, dict, Metrics]
    assert [type(v) for v in back.points[2].workload_params.values()] == [int, str, bool]
    assert str(back.points[0].metrics["x"]) == "-0.0"
    assert back.points[0].workload_params is Point._field_defaults["workload_params"]
    assert columns.run(headers[1], (), "runs/e.json").points == ()
    assert columns.decode(b"garbage") is None
    assert columns.decode(pickle.dumps({"format": "points-table-0"})) is None
    # The doubles kept apart (D176): the same run back, its metrics read through the values file's bytes.
    blob, values = columns.encode_apart(["a", "b"], [run, empty])
    assert values.startswith(columns.VALUES_MAGIC) and len(values) == columns.VALUES_HEADER + 8 * 3
    found: list[tuple[int, bytes]] = []

    def apart(size: int, token: bytes) -> memoryview | None:
        found.append((size, token))
        return columns.values_of(values, size, token)

    again = columns.read(io.BytesIO(blob), apart)
    assert again is not None and found == [(24, values[len(columns.VALUES_MAGIC):columns.VALUES_HEADER])]
    assert columns.run(again[1][0], tuple(again[3]), "runs/r.json") == back
    assert columns.read(io.BytesIO(blob)) is None  # no values file: a miss
    assert columns.read(io.BytesIO(blob), lambda size, token: columns.values_of(values[:-1], size, token)) is None
    assert columns.values_of(values, 24, bytes(16)) is None
