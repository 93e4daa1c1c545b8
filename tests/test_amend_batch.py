"""`store relabel` and `store retract` over a selection (issue 36): a
mislabelled sweep that `bench` stored as one run per point is fixed by one
command, all or nothing, one amendment record per run."""

from __future__ import annotations

import json
from pathlib import Path

from conftest import cli, run_docs
from test_bench_e2e import attach, emulator  # noqa: F401  (the fixture)


def _labels(store: Path) -> list[tuple[str, str, int]]:
    return sorted((p["campaign"], p["config"], p["concurrency"]) for d in run_docs(store) for p in d["points"])


def _bytes(store: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted((store / "runs").glob("*.json"))}


def test_a_mislabelled_sweep_is_fixed_in_one_command(emulator, tmp_path):  # noqa: F811
    store = tmp_path / "store"
    url = emulator("--profile", "baseline", "--speed", "25")
    assert attach(store, url, config="baseline", campaign="c0", concurrency="1,2").exit_code == 0
    assert attach(store, url, config="wrong", campaign="c1", concurrency="1,2").exit_code == 0
    assert attach(store, url, config="other", campaign="c1", concurrency="1").exit_code == 0
    assert len(run_docs(store)) == 5  # one run per point

    # A selector that matches nothing: one line, nothing changed.
    before = _bytes(store)
    r = cli("store", "relabel", "--select", "campaign=c9", "--config", "x", store=store)
    assert r.exit_code == 1
    assert r.output.strip() == (f"Error: {store}: no run holds a point with campaign=c9 ('findings store list' "
                                "lists the labels); nothing was changed")
    # One run of the selection cannot take the rename: none is changed.
    r = cli("store", "relabel", "--select", "campaign=c1", "--config", "wrong=eagle3", store=store)
    assert r.exit_code == 1 and r.output.count("\n") == 1, r.output
    assert "the run holds no config 'wrong' (it holds other); nothing was changed" in r.output
    assert _bytes(store) == before and not (store / "amendments").exists()

    # The sweep: two runs, one command, one record each.
    r = cli("store", "relabel", "--select", "campaign=c1", "--select", "config=wrong", "--config", "eagle3",
            "--why", "the eagle3 server was mislabelled", store=store)
    assert r.exit_code == 0, r.output
    lines = r.output.strip().splitlines()
    assert len(lines) == 2 and all("(config wrong -> eagle3)" in line for line in lines), lines
    assert len(list((store / "amendments").glob("*.json"))) == 2
    assert _labels(store) == [("c0", "baseline", 1), ("c0", "baseline", 2), ("c1", "eagle3", 1),
                              ("c1", "eagle3", 2), ("c1", "other", 1)]
    # Run again, it has nothing left to do, and says so.
    r = cli("store", "relabel", "--select", "config=eagle3", "--config", "eagle3", store=store)
    assert r.exit_code == 1 and "already has those labels" in r.output, r.output
    check = cli("store", "check", store=store)
    assert check.exit_code == 0 and "0 errors" in check.output, check.output

    # Retract a whole campaign: every run of it, under one lock.
    r = cli("store", "retract", "--campaign", "c1", "--why", "measured on the wrong host", store=store)
    assert r.exit_code == 0, r.output
    assert len(r.output.strip().splitlines()) == 3
    assert _labels(store) == [("c0", "baseline", 1), ("c0", "baseline", 2)]
    records = [json.loads(p.read_text()) for p in (store / "amendments").glob("*.json")]
    assert sorted(r["action"] for r in records) == ["relabel", "relabel", "retract", "retract", "retract"]
    check = cli("store", "check", store=store)
    assert check.exit_code == 0 and "0 errors" in check.output, check.output
    # Several run ids, one unknown: refused before any is removed.
    keep = _bytes(store)
    ids = [p[:-5] for p in keep]
    r = cli("store", "retract", ids[0], "no-such-run", "--why", "x", store=store)
    assert r.exit_code == 1 and "no run 'no-such-run'" in r.output and _bytes(store) == keep
