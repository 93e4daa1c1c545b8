"""The results store: atomic, append-only, all-or-nothing, versioned."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from conftest import HISTORY, cli

from findings import store as store_mod
from findings.core.errors import StoreError
from findings.store.schema import SCHEMA_VERSION, SEAL_KEY, seal_state


def files(store: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted((store / "runs").glob("*"))
            if p.name != ".gitkeep"} if (store / "runs").exists() else {}


def test_ingest_writes_one_versioned_run_file(seed_store):
    runs = list((seed_store / "runs").glob("*.json"))
    assert len(runs) == 1
    doc = json.loads(runs[0].read_text())
    assert doc["schema_version"] == SCHEMA_VERSION
    assert doc["kind"] == "findings-run"
    assert doc["source"] == "import"
    assert doc["importer"] == {"name": "table", "version": "1"}
    assert doc["inputs"][0]["path"].endswith("measurements.csv") and doc["inputs"][0]["role"] == "data"
    assert len(doc["inputs"][0]["sha256"]) == 64
    assert doc["inputs"][1]["path"].endswith("configs.csv") and doc["inputs"][1]["role"] == "configs"
    assert [c["name"] for c in doc["campaigns"]] == ["single-stream", "parallel-sweep", "overlap-topk1"]
    assert doc["configs"]["eagle3-topk1-v2"]["eagle_topk"] == 1
    assert doc["environment"]["interconnect"] == "PCIe Gen5, no NVLink"
    first = doc["points"][0]
    assert first["source_line"] == 2
    assert first["note"] == "best single-stream result recorded for speculation"
    assert runs[0].stem == doc["run_id"]


def test_reingesting_the_same_content_is_refused_and_writes_nothing(seed_store):
    before = files(seed_store)
    r = cli("ingest", "table", str(HISTORY / "measurements.csv"), store=seed_store)
    assert r.exit_code == 1
    assert "already ingested as run table-" in r.output
    assert r.output.count("\n") == 1  # one line
    assert files(seed_store) == before


def test_overlapping_records_refused_unless_skip_existing(seed_store, tmp_path):
    src = (HISTORY / "measurements.csv").read_text()
    grown = tmp_path / "grown.csv"
    grown.write_text(src + "overlap-topk1,3,diverse-prompts,baseline,70,780.0,\n")
    before = files(seed_store)
    r = cli("ingest", "table", str(grown), store=seed_store)
    assert r.exit_code == 1 and "30 of its records were already ingested" in r.output
    assert files(seed_store) == before
    r = cli("ingest", "table", str(grown), "--skip-existing", store=seed_store)
    assert r.exit_code == 0, r.output
    assert "ingested 1 points" in r.output
    assert len(files(seed_store)) == 2


def test_bad_file_adds_nothing(seed_store, tmp_path):
    bad = tmp_path / "bad.csv"
    bad.write_text("campaign,workload,config,concurrency,output_throughput_tok_s\n"
                   "x,w,baseline,1,100\n" "x,w,baseline,2,fast\n")
    before = files(seed_store)
    r = cli("ingest", "table", str(bad), store=seed_store)
    assert r.exit_code == 1
    assert f"{bad}:3: field 'output_throughput_tok_s': expected a number" in r.output
    assert files(seed_store) == before


def test_write_is_atomic_and_never_overwrites(tmp_path):
    target = tmp_path / "runs" / "r.json"
    target.parent.mkdir()
    store_mod._write_new(target, {"a": 1})
    written = target.read_bytes()
    assert {k: v for k, v in json.loads(written).items() if k != SEAL_KEY} == {"a": 1}
    assert seal_state(written) == "sealed"  # the file's own content hash, its last key (D94)
    with pytest.raises(StoreError):
        store_mod._write_new(target, {"a": 2})
    assert target.read_bytes() == written
    assert [p.name for p in target.parent.iterdir()] == ["r.json"]  # no temp file left


def test_temporary_files_are_ignored_by_readers(seed_store):
    (seed_store / "runs" / ".tmp-half.json").write_text('{"schema_versi')
    assert len(store_mod.load(seed_store).points) == 30


def test_store_newer_than_the_tool_is_refused(seed_store):
    path = next((seed_store / "runs").glob("*.json"))
    doc = json.loads(path.read_text())
    doc["schema_version"] = SCHEMA_VERSION + 1
    path.write_text(json.dumps(doc))
    r = cli("conclusions", store=seed_store)
    assert r.exit_code == 1
    assert "newer than this findings" in r.output


def test_corrupt_store_file_is_named(seed_store):
    path = next((seed_store / "runs").glob("*.json"))
    path.write_text(path.read_text()[:100])
    r = cli("render", "--output", str(seed_store / "doc.md"), store=seed_store)
    assert r.exit_code == 1
    assert str(path) in r.output and "not valid JSON" in r.output


def test_invalid_field_in_store_is_named(seed_store):
    path = next((seed_store / "runs").glob("*.json"))
    doc = json.loads(path.read_text())
    doc["points"][3]["concurrency"] = 0
    path.write_text(json.dumps(doc))
    with pytest.raises(StoreError, match=r"points\[3\]\.concurrency.*>= 1"):
        store_mod.load(seed_store)


def test_contradicting_campaign_dates_are_refused(store):
    sgl = Path(__file__).parent / "fixtures" / "sglang_bench"
    ok = cli("ingest", "sglang-bench", str(sgl / "v0_5_23.jsonl"), "--config", "eagle", "--campaign", "c1",
             "--workload", "w", "--date", "2026-11-01", store=store)
    assert ok.exit_code == 0, ok.output
    r = cli("ingest", "sglang-bench", str(sgl / "v0_5_23_baseline.jsonl"), "--config", "baseline",
            "--campaign", "c1", "--workload", "w", "--date", "2026-11-02", store=store)
    assert r.exit_code == 1
    assert "campaign 'c1'" in r.output
    assert len(files(store)) == 1


def test_simulated_and_real_never_share_a_campaign(seed_store):
    from findings.importers import common, table
    run = table.read(common.Source("sim.csv", b"campaign,order,workload,config,concurrency,output_throughput_tok_s\n"
                                              b"overlap-topk1,3,diverse-prompts,baseline,1,100\n"),
                     source="simulated")
    with pytest.raises(StoreError, match="mix simulated and real"):
        store_mod.add_run(seed_store, run)


def test_store_env_var_and_option(seed_store, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("FINDINGS_STORE", str(seed_store))
    r = cli("conclusions", "--json")
    assert r.exit_code == 0 and "eagle3-topk1-v2" in r.output
    missing = tmp_path / "missing"
    r = cli("--store", str(missing), "conclusions")
    assert r.exit_code == 2 and "not a findings store" in r.output
    empty = tmp_path / "empty"
    (empty / "runs").mkdir(parents=True)
    r = cli("--store", str(empty), "conclusions")
    assert r.exit_code == 0 and "no points" in r.output


def test_files_are_not_rewritten_by_later_ingests(seed_store):
    path = next((seed_store / "runs").glob("*.json"))
    stat = os.stat(path)
    sgl = Path(__file__).parent / "fixtures" / "sglang_bench"
    r = cli("ingest", "sglang-bench", str(sgl / "v0_5_23.jsonl"), "--config", "eagle3-topk1-v2",
            "--campaign", "import-check", "--workload", "random-1024-512", "--date", "2026-11-01",
            store=seed_store)
    assert r.exit_code == 0, r.output
    assert os.stat(path).st_mtime_ns == stat.st_mtime_ns
    assert os.stat(path).st_ino == stat.st_ino


def test_version_1_stores_keep_reading(tmp_path):
    """The fixture store's runs were written by schema version 1."""
    from conftest import FIXTURES
    v1 = sorted((FIXTURES / "store" / "runs").glob("*.json"))
    assert v1 and all(json.loads(p.read_text())["schema_version"] == 1 for p in v1)
    data = store_mod.load(FIXTURES / "store")
    run = [r for r in data.runs if r.run_id == "table-0041a71bbc6e"][0]
    assert run.schema_version == SCHEMA_VERSION == 5
    assert run.source_file == "benchmarks/history/measurements.csv" and len(run.source_sha256) == 64
    # A v1 store can take new (v3) runs: mixed versions read together.
    mixed = tmp_path / "mixed"
    (mixed / "runs").mkdir(parents=True)
    for p in v1:
        (mixed / "runs" / p.name).write_bytes(p.read_bytes())
    r = cli("ingest", "table", str(FIXTURES / "rigor.csv").replace("rigor.csv", "rigor.csv"), store=mixed)
    assert r.exit_code == 1 and "already ingested" in r.output  # same content as a v1 run: still detected
    assert len(store_mod.load(mixed).runs) == len(v1)


def test_migration_function_and_unknown_versions():
    from findings.store.schema import migrate
    doc = {"schema_version": 1, "source_file": {"path": "a.csv", "sha256": "ab"}}
    out = migrate(dict(doc), "x.json")
    assert out["schema_version"] == 5 and out["inputs"] == [{"path": "a.csv", "sha256": "ab", "role": "data"}]
    assert "campaign_configs" not in out  # v2 -> v3: run-wide facts hold in each of the run's campaigns
    for bad in (0, "1", None, True):
        with pytest.raises(StoreError, match="schema_version"):
            migrate({"schema_version": bad}, "x.json")
