"""Per-request records in sidecars (store schema 4, docs/store.md, D76).

The run file stays reviewable JSON; the records go to
``runs/<run_id>.requests.json.gz``, whose sha256 the run file records. Old
stores (records inline) read unchanged, `findings store migrate` moves them,
and the documents render to the same bytes before and after.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import shutil
from pathlib import Path

import pytest

from findings.core.series import window_series

from conftest import ROOT, cache_off, cli, run_docs
from findings import store as store_mod
from findings.core.errors import StoreError
from findings.core.model import THROUGHPUT, Campaign, Point, Run
from findings.store.schema import SCHEMA_VERSION, SIDECAR_SUFFIX, point_id


def _run(run_id: str, records: dict[int, dict[str, object]], n: int = 3) -> Run:
    points = tuple(
        Point(id=point_id(run_id, i), run_id=run_id, campaign="c1", config="baseline", workload="w",
              concurrency=1 + i, metrics={THROUGHPUT: 100.0 + i, "completed": 4.0, "failed": 0.0, "planned": 4.0},
              source="runner", source_file=None, source_line=None, requests=records.get(i))
        for i in range(n))
    return Run(schema_version=SCHEMA_VERSION, run_id=run_id, source="runner", importer="findings-bench",
               importer_version="1", tool_version="t", created_at="2026-12-01T00:00:00Z", source_file=None,
               source_sha256=hashlib.sha256(run_id.encode()).hexdigest(), environment={},
               campaigns=(Campaign("c1", "2026-12-01"),), configs={"baseline": {"tp_size": 1}}, points=points)


RECORDS = {0: {"sent_s": [0.0, 0.01, 0.02, 0.03], "ttft_s": [0.1, 0.1, 0.2, 0.1], "error": ["", "", "", ""],
               "event_s": [[0.1, 0.2], [0.1], [0.2, 0.3, 0.4], [0.1]], "event_tokens": [[1, 2], [2], [1, 2, 3], [2]],
               "finish_reason": ["length", "length", None, "stop"], "spec_verify_ct": [None, 2, 1, None]},
           2: {"sent_s": [0.5], "ttft_s": [1e-300], "error": ["timeout"], "note": "ünïcode"}}


def test_records_go_to_a_hashed_sidecar_and_read_back_exactly(tmp_path: Path) -> None:
    store = tmp_path / "st"
    run = _run("r1", RECORDS)
    store_mod.add_run(store, run, create=True)
    doc = json.loads((store / "runs" / "r1.json").read_text())
    assert doc["schema_version"] == SCHEMA_VERSION == 5
    assert all("requests" not in p for p in doc["points"])  # the run file stays small and reviewable
    side = store / "runs" / f"r1{SIDECAR_SUFFIX}"
    assert doc["requests"] == {"file": side.name, "sha256": hashlib.sha256(side.read_bytes()).hexdigest(),
                               "points": [0, 2]}
    back = store_mod.load(store).points
    assert [p.requests for p in back] == [RECORDS[0], None, RECORDS[2]]
    assert [p.metrics for p in back] == [p.metrics for p in run.points]
    assert run_docs(store)[0]["points"][2]["requests"] == RECORDS[2]
    # The same records give the same bytes (no time stamp in the gzip header).
    other = tmp_path / "other"
    store_mod.add_run(other, run, create=True)
    assert (other / "runs" / side.name).read_bytes() == side.read_bytes()
    assert gzip.decompress(side.read_bytes()).startswith(b'{"kind":"findings-requests","run_id":"r1"')
    # A run without records has no sidecar.
    store_mod.add_run(store, _run("r2", {}))
    assert not (store / "runs" / f"r2{SIDECAR_SUFFIX}").exists()
    assert "requests" not in json.loads((store / "runs" / "r2.json").read_text())


def test_a_missing_changed_or_foreign_sidecar_is_named(tmp_path: Path) -> None:
    store = tmp_path / "st"
    store_mod.add_run(store, _run("r1", RECORDS), create=True)
    side = store / "runs" / f"r1{SIDECAR_SUFFIX}"
    good = side.read_bytes()
    (store / "runs" / f"ghost{SIDECAR_SUFFIX}").write_bytes(good)
    r = cli("store", "check", store=store)
    assert r.exit_code == 0 and f"warning: {store / 'runs' / ('ghost' + SIDECAR_SUFFIX)}: per-request records " \
        "that no run file names" in r.output, r.output

    side.write_bytes(gzip.compress(b'{"kind":"findings-requests","run_id":"r1","points":{"0":{}}}', mtime=0))
    with pytest.raises(StoreError, match="does not match the sha256 its run file recorded"):
        store_mod.load(store)
    r = cli("store", "check", store=store)
    assert r.exit_code == 1 and "does not match the sha256" in r.output and "git checkout" in r.output

    side.unlink()
    r = cli("--store", str(store), "conclusions")
    assert r.exit_code == 1
    line = r.output.strip()
    assert "\n" not in line and line == (f"Error: {store / 'runs' / 'r1.json'}: its per-request records {side} "
                                         f"are missing (restore the file, e.g. git checkout -- {side})")
    # Reading without the records (a writer's duplicate check) does not need it.
    assert len(store_mod.load_runs(store, requests=False)) == 1
    side.write_bytes(good)
    assert store_mod.load(store).points[0].requests == RECORDS[0]


def test_a_writer_killed_between_the_sidecar_and_the_run_file_is_taken_over(tmp_path: Path) -> None:
    """The sidecar is written first; a retry with the same records adopts it,
    one with other bytes is refused and writes nothing."""
    store = tmp_path / "st"
    run = _run("r1", RECORDS)
    _, data = store_mod.stored_form(run)
    assert data is not None
    (store / "runs").mkdir(parents=True)
    (store / "runs" / f"r1{SIDECAR_SUFFIX}").write_bytes(data)  # what the killed writer left
    assert store_mod.load(store).points == ()  # readers ignore it
    store_mod.add_run(store, run)
    assert store_mod.load(store).points[0].requests == RECORDS[0]

    other = tmp_path / "other"
    (other / "runs").mkdir(parents=True)
    (other / "runs" / f"r1{SIDECAR_SUFFIX}").write_bytes(b"something else")
    with pytest.raises(StoreError, match="already exists with other content; nothing was written"):
        store_mod.add_run(other, run)
    assert not (other / "runs" / "r1.json").exists()


def _render(settings: Path, store: Path, out: Path) -> bytes:
    r = cli("--settings", str(settings), "--store", str(store), "render", "--output", str(out))
    assert r.exit_code == 0, r.output
    return out.read_bytes()


@pytest.mark.parametrize("name,settings", [("results-llamacpp", "llamacpp.findings.toml"),
                                           ("results-vllm", "vllm.findings.toml")])
def test_an_old_store_reads_unchanged_and_migrates_to_the_same_document(tmp_path: Path, name: str,
                                                                        settings: str) -> None:
    """A committed store written before schema 4 (records inline): it reads
    as it is, `findings store migrate` moves its records to sidecars, and
    its document renders to the same bytes before and after, with the
    render cache and without. (Its runs of schema 4, measured later with
    sidecars, are left out: the old runs are the store under test.)"""
    src = ROOT / "benchmarks" / name
    store = tmp_path / name
    (store / "runs").mkdir(parents=True)
    for run in sorted((src / "runs").glob("*.json")):
        if json.loads(run.read_bytes())["schema_version"] < 4:
            shutil.copy(run, store / "runs" / run.name)
    conf = ROOT / "benchmarks" / settings
    inline = [json.loads(p.read_bytes()) for p in sorted((store / "runs").glob("*.json"))]
    assert inline and max(d["schema_version"] for d in inline) < 4
    assert any("requests" in p for d in inline for p in d["points"])
    before = store_mod.load(store)
    with cache_off():
        doc_before = _render(conf, store, tmp_path / "before.md")

    r = cli("store", "migrate", store=store)
    assert r.exit_code == 0 and "migrated" in r.output, r.output
    after = store_mod.load(store)
    assert [(p.id, p.metrics, p.requests) for p in after.points] == \
        [(p.id, p.metrics, p.requests) for p in before.points]
    for old, new in zip(inline, run_docs(store)):
        # The migrated points gain their time-window series (D109), computed from the same records.
        assert new["schema_version"] == SCHEMA_VERSION
        assert [{k: v for k, v in p.items() if k != "series"} for p in new["points"]] == old["points"]
        for p in new["points"]:
            assert ("series" in p) == ("requests" in p)
            if "requests" in p:
                assert tuple(p["series"]["values"]) == window_series(p["requests"], concurrency=p["concurrency"])
    with cache_off():
        assert _render(conf, store, tmp_path / "after.md") == doc_before
    assert _render(conf, store, tmp_path / "cold.md") == doc_before
    assert _render(conf, store, tmp_path / "warm.md") == doc_before
    r = cli("store", "check", store=store)
    assert r.exit_code == 0 and "0 errors, 0 warnings" in r.output, r.output
    r = cli("store", "migrate", store=store)
    assert r.exit_code == 0 and "nothing to migrate" in r.output
    sizes = [sum(f.stat().st_size for f in (s / "runs").iterdir()) for s in (src, store)]
    assert sizes[1] < sizes[0] / 2, sizes  # bytes per point: measured in make perf


# ------------------------------------------------------------------ the time-window series, written with the run (D109)

def _runner_records(n: int, c: int) -> dict[str, object]:
    """A closed loop at C=c as the runner records it: enough waves for a series."""
    sent, ev_s, ev_n = [], [], []
    for i in range(n):
        sent.append(round((i // c) * 0.3 + 0.001 * (i % c), 6))
        ev_s.append([0.05, 0.1, 0.2 + 0.01 * (i % 3)])
        ev_n.append([1, 3, 4 + i % 2])
    return {"sent_s": sent, "event_s": ev_s, "event_tokens": ev_n, "error": [""] * n,
            "ttft_s": [0.05] * n, "e2e_s": [e[-1] for e in ev_s]}


def test_the_series_is_written_with_the_run_and_a_render_reads_no_sidecar(tmp_path: Path) -> None:
    from findings.core.series import SERIES_KEY

    store = tmp_path / "st"
    records = {0: _runner_records(24, 1), 1: _runner_records(24, 2)}
    store_mod.add_run(store, _run("r1", records, n=2), create=True)
    doc = json.loads((store / "runs" / "r1.json").read_text())
    for i, p in enumerate(doc["points"]):
        expect = window_series(records[i], concurrency=p["concurrency"])
        assert expect and p["series"] == {"key": SERIES_KEY, "values": list(expect)}
    with cache_off():
        before = cli("conclusions", "--json", store=store)
    assert before.exit_code == 0, before.output
    # Records that no longer match the hash the run file recorded: every reader of
    # the records refuses them, store check says so, and the render, which reads
    # the series from the sealed run file, never opens them.
    side = store / "runs" / f"r1{SIDECAR_SUFFIX}"
    side.write_bytes(gzip.compress(b'{"kind":"findings-requests","run_id":"r1","points":{"0":{},"1":{}}}', mtime=0))
    with cache_off():
        after = cli("conclusions", "--json", store=store)
    assert after.exit_code == 0 and after.output == before.output
    with pytest.raises(StoreError, match="does not match the sha256 its run file recorded"):
        store_mod.load(store)
    r = cli("store", "check", store=store)
    assert r.exit_code == 1 and "does not match the sha256" in r.output
    # A missing sidecar is still named, though the render would not read it.
    side.unlink()
    with cache_off():
        r = cli("conclusions", store=store)
    assert r.exit_code == 1 and "its per-request records" in r.output and "are missing" in r.output


def test_a_series_of_another_computation_is_ignored_and_one_that_disagrees_is_an_error(tmp_path: Path) -> None:
    from findings.store.schema import run_from_dict, seal

    store = tmp_path / "st"
    records = {0: _runner_records(24, 1)}
    store_mod.add_run(store, _run("r1", records, n=1), create=True)
    path = store / "runs" / "r1.json"
    doc = json.loads(path.read_text())
    doc.pop("content_sha256", None)
    other = json.loads(json.dumps(doc))
    other["points"][0]["series"]["key"] = "w7-m1-v0"  # made by other code: not used
    assert run_from_dict(other, "x").points[0].series is None
    assert run_from_dict(doc, "x").points[0].series == window_series(records[0], concurrency=1)
    # A sealed run file whose series its records do not give: store check names it.
    doc["points"][0]["series"]["values"][0] += 1.0
    path.write_bytes(seal((json.dumps(doc, indent=1) + "\n").encode()))
    r = cli("store", "check", store=store)
    assert r.exit_code == 1 and "points[0].series does not match its per-request records" in r.output, r.output
