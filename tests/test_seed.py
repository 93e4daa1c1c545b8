"""The project's reference case: the seed results replayed (issue's Done means)."""

from __future__ import annotations

import json

from conftest import HISTORY, cli


def test_seed_conclusions(seed_store):
    r = cli("conclusions", "--json", store=seed_store)
    assert r.exit_code == 0, r.output
    out = json.loads(r.output)
    assert out["baseline"] == "baseline"
    w = out["workloads"]["diverse-prompts"]
    assert w["candidates"]["eagle3-topk4-v1"]["policy"] == "off"
    topk1 = w["candidates"]["eagle3-topk1-v2"]
    assert topk1["policy"] == "on-above"
    assert topk1["threshold"] == 30
    assert topk1["verdicts"]["1"] == "loss"
    assert topk1["verdicts"]["30"] == "win"
    assert round((topk1["ratios"]["1"] - 1) * 100, 1) == -6.4
    assert round((topk1["ratios"]["30"] - 1) * 100, 1) == 10.1
    # C=100 and 250 fall inside the noise the two baseline campaigns show.
    assert topk1["verdicts"]["100"] == "tie"
    assert topk1["verdicts"]["250"] == "tie"
    assert w["latency"] == {**w["latency"], "concurrency": 1, "best": "baseline", "decisive": True}
    assert [h["campaign"] for h in out["history"]] == ["single-stream", "parallel-sweep", "overlap-topk1"]
    # Concurrency keys are strings, and the history policies are per workload.
    assert all(isinstance(k, str) for k in topk1["verdicts"])
    assert out["history"][2]["policies"]["diverse-prompts"] == {
        "eagle3-topk1-v2": "on-above", "eagle3-topk4-v1": "off"}


def test_overlap_topk1_is_the_campaign_that_changed_the_throughput_verdict(seed_store):
    out = json.loads(cli("conclusions", "--json", store=seed_store).output)
    changed = [h["campaign"] for h in out["history"]
               if any(c.startswith("diverse-prompts: throughput best") for c in h["changes"])]
    assert changed == ["parallel-sweep", "overlap-topk1"]  # first derived, then overturned
    last = [c for c in out["history"][2]["changes"] if "throughput best" in c][0]
    assert "beyond noise" in last and "within noise" in last
    assert "784.2" in last and "775.0" in last


def test_default_floor_stays_under_six_percent():
    from findings.document.settings import DEFAULT_FLOOR
    assert DEFAULT_FLOOR < 0.06  # the C=1 loss of eagle3-topk1-v2 is -6.4%


def test_floor_above_the_c1_loss_turns_it_into_a_tie(seed_store):
    out = json.loads(cli("--noise-floor", "0.07", "conclusions", "--json", store=seed_store).output)
    topk1 = out["workloads"]["diverse-prompts"]["candidates"]["eagle3-topk1-v2"]
    assert topk1["verdicts"]["1"] == "tie"
    assert topk1["policy"] == "always-on"


def test_history_follows_campaign_order_not_ingest_order(store, tmp_path):
    # Ingest the later campaign first, from a separate file.
    src = (HISTORY / "measurements.csv").read_text().splitlines()
    header, body = src[0], src[1:]
    late = tmp_path / "late.csv"
    early = tmp_path / "early.csv"
    late.write_text("\n".join([header] + [r for r in body if r.startswith("overlap-topk1")]) + "\n")
    early.write_text("\n".join([header] + [r for r in body if not r.startswith("overlap-topk1")]) + "\n")
    assert cli("ingest", "table", str(late), store=store).exit_code == 0
    assert cli("ingest", "table", str(early), store=store).exit_code == 0
    out = json.loads(cli("conclusions", "--json", store=store).output)
    assert [h["campaign"] for h in out["history"]] == ["single-stream", "parallel-sweep", "overlap-topk1"]
    assert out["workloads"]["diverse-prompts"]["candidates"]["eagle3-topk1-v2"]["policy"] == "on-above"


def test_cross_check_shows_the_seed_nuance(seed_store):
    """The seed README: against the other campaign's baseline (711.0 at C=30,
    772.1 at C=250) part of the "exceeds baseline" margin is within noise."""
    out = json.loads(cli("conclusions", "--json", store=seed_store).output)
    cross = out["workloads"]["diverse-prompts"]["candidates"]["eagle3-topk1-v2"]["cross_ratios"]
    assert cross["30"]["parallel-sweep"] == round(759.3 / 711.0, 4)
    assert cross["250"]["parallel-sweep"] == round(754.4 / 772.1, 4)
    r = cli("render", "--output", str(seed_store / "doc.md"), store=seed_store)
    assert r.exit_code == 0, r.output
    text = (seed_store / "doc.md").read_text()
    assert "at C=30 its win becomes a tie: 759.3 vs 711.0 tok/s from `parallel-sweep`" in text
