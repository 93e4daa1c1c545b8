"""The store's write index (issue 18, part 1): derived, rebuildable, and
never trusted over the run files."""

from __future__ import annotations

import json
import shutil
import sqlite3
from pathlib import Path

import pytest
from conftest import FIXTURES, HISTORY, cli

from findings import store
from findings.store import index as storeindex
from findings.core.errors import DuplicateError


def seeded(tmp_path: Path) -> Path:
    st = tmp_path / "st"
    r = cli("ingest", "table", str(HISTORY / "measurements.csv"), "--configs", str(HISTORY / "configs.csv"),
            "--create", store=st)
    assert r.exit_code == 0, r.output
    return st


def rigor_run():
    from findings.importers import common, table
    return table.read(common.read_source(str(FIXTURES / "rigor.csv")))


def test_first_write_builds_it_and_store_check_reports_it(tmp_path: Path) -> None:
    st = seeded(tmp_path)
    assert storeindex.status(st).state == "current"
    out = cli("store", "check", store=st).output
    assert out.strip().endswith("0 errors, 0 warnings; index current: 1 runs")
    assert (st / ".gitignore").read_text() == storeindex.GITIGNORE
    con = sqlite3.connect(storeindex.path(st))
    # The seed table's 30 rows, each by its bytes and by its content (D99).
    assert con.execute("SELECT count(*) FROM lines").fetchone()[0] == 60


@pytest.mark.parametrize("damage", ["missing", "garbage", "other-version"])
def test_missing_or_damaged_index_is_rebuilt_and_still_refuses_duplicates(tmp_path: Path, damage: str) -> None:
    st = seeded(tmp_path)
    p = storeindex.path(st)
    if damage == "missing":
        p.unlink()
    elif damage == "garbage":
        p.write_bytes(b"not a database" * 100)
    else:
        con = sqlite3.connect(p)
        with con:
            con.execute("UPDATE meta SET value = '0' WHERE key = 'version'")
        con.close()
    assert storeindex.status(st).state == ("missing" if damage == "missing" else "damaged")
    r = cli("ingest", "table", str(HISTORY / "measurements.csv"), store=st)
    assert r.exit_code == 1 and "already ingested as run table-0041a71bbc6e" in r.output
    r = cli("ingest", "table", str(FIXTURES / "rigor.csv"), store=st)
    assert r.exit_code == 0, r.output
    assert storeindex.status(st) == storeindex.Status("current", "2 runs")


def test_run_files_added_behind_its_back_are_seen(tmp_path: Path) -> None:
    """A git pull (or a writer killed after its file was linked, before the
    index was updated) adds run files the index does not know."""
    st = seeded(tmp_path)
    other = tmp_path / "other"
    assert cli("ingest", "table", str(FIXTURES / "rigor.csv"), "--create", store=other).exit_code == 0
    for f in (other / "runs").glob("*.json"):
        shutil.copy(f, st / "runs" / f.name)
    status = storeindex.status(st)
    assert status.state == "stale" and "1 run files not in it" in status.detail
    with pytest.raises(DuplicateError, match="this content was already ingested"):
        store.add_run(st, rigor_run())
    assert storeindex.status(st).state == "current"


def test_a_removed_run_file_rebuilds_it(tmp_path: Path) -> None:
    st = seeded(tmp_path)
    assert cli("ingest", "table", str(FIXTURES / "rigor.csv"), store=st).exit_code == 0
    victim = next(p for p in (st / "runs").glob("*.json") if "0041a71bbc6e" not in p.name)
    victim.unlink()
    assert "runs no longer on disk" in storeindex.status(st).detail
    store.add_run(st, rigor_run())  # its content is gone from the store: accepted again
    assert storeindex.status(st).state == "current"


def test_the_index_agrees_with_the_full_check_on_every_refusal(tmp_path: Path) -> None:
    """Each kind of refusal still happens, with the full check's exact message."""
    st = seeded(tmp_path)
    csv = tmp_path / "c.csv"
    csv.write_text("campaign,order,workload,config,concurrency,output_throughput_tok_s\n"
                   "parallel-sweep,9,diverse-prompts,baseline,1,90\n")
    r = cli("ingest", "table", str(csv), store=st)
    assert r.exit_code == 1 and "campaign 'parallel-sweep' has date/order None/9" in r.output
    grown = tmp_path / "grown.csv"
    grown.write_text((HISTORY / "measurements.csv").read_text() + "late,9,diverse-prompts,baseline,1,90.0,\n")
    r = cli("ingest", "table", str(grown), store=st)
    assert r.exit_code == 1 and "30 of its records were already ingested" in r.output
    r = cli("ingest", "table", str(grown), "--skip-existing", store=st)
    assert r.exit_code == 0, r.output
    docs = [json.loads(p.read_text()) for p in (st / "runs").glob("*.json")]
    assert len(docs) == 2 and storeindex.status(st).state == "current"


def _variant(run, tag: str, **points_changes):
    """``run`` as another file (its own id, content hash and lines), its points changed."""
    import dataclasses
    rid = f"{run.run_id}-{tag}"
    pts = tuple(p._replace(id=f"{rid}/{i}", run_id=rid, source_line=None, **points_changes)
                for i, p in enumerate(run.points))
    return dataclasses.replace(run, run_id=rid, source_sha256=f"{tag:0>64}"[-64:], points=pts,
                               line_hashes=frozenset(f"{h}-{tag}" for h in run.line_hashes))


def test_a_batch_is_checked_against_its_own_earlier_runs(tmp_path: Path) -> None:
    """Issue 28: the index checks each run of a batch against the runs before
    it in one pass (a Pending set, not every earlier run again); every
    refusal between runs of one batch still happens, and writes nothing."""
    import dataclasses

    from findings.core.errors import LabelError, StoreError
    st = seeded(tmp_path)
    base = rigor_run()
    before = sorted(p.name for p in (st / "runs").iterdir())
    a = _variant(base, "a")
    # The same run twice in one batch; another file with the same records.
    with pytest.raises(DuplicateError):
        store.add_runs(st, [a, dataclasses.replace(a)])
    with pytest.raises(DuplicateError, match="already ingested"):
        store.add_runs(st, [a, dataclasses.replace(_variant(base, "x"), line_hashes=a.line_hashes)])
    # One campaign dated two ways within the batch.
    b = _variant(base, "b")
    other = dataclasses.replace(b, campaigns=(dataclasses.replace(b.campaigns[0], date="2026-11-16"),))
    with pytest.raises(StoreError, match="rigor-check"):
        store.add_runs(st, [a, other])
    # One workload name given two definitions within the batch.
    c = _variant(base, "c", workload_params={"input_len": 512})
    d = _variant(base, "d", workload_params={"input_len": 1024})
    with pytest.raises(LabelError, match="chat-512"):
        store.add_runs(st, [c, d])
    assert sorted(p.name for p in (st / "runs").iterdir()) == before
    # Runs that agree are all written, the index still current.
    store.add_runs(st, [a, b, _variant(base, "e")])
    assert len(list((st / "runs").glob("*.json"))) == len([n for n in before if n.endswith(".json")]) + 3
    assert storeindex.status(st).state == "current"


def _pairwise(existing, runs):
    """The refusal of checking each run against every one before it (as
    store.add_runs did before D179), or None."""
    for i, run in enumerate(runs):
        try:
            store._check_not_stored(existing + runs[:i], run)
        except DuplicateError as exc:
            return str(exc)
    return None


def test_a_batch_checked_by_lookups_refuses_as_every_pair_did() -> None:
    """D179: ``_check_none_stored`` finds, for each run of a batch, the first
    run before it (stored, then earlier in the batch) with its content, its
    id or one of its records, and gives that run's refusal: the same as
    comparing it with every run before it, over random batches where runs
    share each of these with others, one or several at once."""
    import dataclasses
    import random

    base = rigor_run()
    hashes = sorted(base.line_hashes)
    rng = random.Random(7)
    refused = passed = 0
    for trial in range(300):
        runs = []
        for k in range(rng.randint(1, 9)):
            run = dataclasses.replace(base, run_id=f"r{rng.randint(0, 12)}", source_sha256=f"{rng.randint(0, 12):064d}",
                                      line_hashes=frozenset(rng.sample(hashes, rng.randint(0, 3))) if rng.random() < 0.5
                                      else frozenset(f"own-{trial}-{k}-{j}" for j in range(2)))
            runs.append(run)
        cut = rng.randint(0, len(runs))
        existing, batch = runs[:cut], runs[cut:]
        want = _pairwise(existing, batch)
        try:
            store._check_none_stored(existing, batch)
            got = None
        except DuplicateError as exc:
            got = str(exc)
        assert got == want, (trial, [(r.run_id, r.source_sha256[-2:], sorted(r.line_hashes)) for r in runs], cut)
        refused += want is not None
        passed += want is None
    assert refused > 50 and passed > 20  # both outcomes taken many times


def test_a_workload_defined_again_is_found_through_the_whole_index(tmp_path: Path) -> None:
    """D179: the latest definition of a workload key is read through the
    index's whole key (its time and run), not by visiting every run that
    defined it: a store of one run file per point no longer checks each new
    file against every earlier one. A different definition is still found."""
    from findings.core.errors import LabelError
    st = seeded(tmp_path)
    base = rigor_run()
    store.add_runs(st, [_variant(base, f"v{i}", workload_params={"input_len": 512}) for i in range(3)])
    store.add_runs(st, [_variant(base, "same", workload_params={"input_len": 512})])  # the same definition: stored
    with pytest.raises(LabelError, match="chat-512"):
        store.add_runs(st, [_variant(base, "other", workload_params={"input_len": 1024})])
    con = sqlite3.connect(storeindex.path(st))
    plan = con.execute("EXPLAIN QUERY PLAN SELECT value FROM workloads WHERE name = ? AND key = ? AND created = ? "
                       "AND run_id = ?", ("a", "b", "c", "d")).fetchall()
    assert "created=? AND run_id=?" in str(plan)
