"""Intervals, validity gates, latency views, charts and traceability."""

from __future__ import annotations

import json

import pytest
from conftest import FIXTURES, cli, dataset

from findings.derive.analysis import Rules
from findings.derive.regressions import conclude
from findings.core.model import THROUGHPUT, Campaign, Dataset, Point
from findings.derive.stats import ratio_ci, window_series
from findings.derive.validity import Gates, reasons
from findings.document.views import CellView, Slo, goodput, mermaid_xychart, pareto


def point(i: int, config: str, c: int, tput: float, campaign: str = "a", source: str = "runner", **metrics):
    return Point(id=f"t/{i}", run_id="t", campaign=campaign, config=config, workload="w", concurrency=c,
                 metrics={THROUGHPUT: tput, **metrics}, source=source, source_file=None, source_line=i)


def data_of(points, configs=None):
    return Dataset(campaigns=(Campaign("a", order=1),), points=tuple(points), configs=configs or {})


def test_a_30_percent_failed_point_is_flagged_and_left_out(rules):
    pts = [point(0, "baseline", 1, 100.0, planned=10, completed=10, failed=0),
           point(1, "spec", 1, 200.0, planned=10, completed=7, failed=3),  # would be a big win
           point(2, "spec", 1, 99.0, planned=10, completed=10, failed=0)]
    wc = conclude(data_of(pts), rules).workload("w")
    comp = wc.candidate("spec").comparisons[0]
    assert comp.a.point_ids == ("t/2",)
    assert comp.verdict == "tie"
    assert reasons(pts[1], {}, Gates()) == ("30% of requests failed (3 of 10; limit 5%)",)


def test_other_gates():
    g = Gates()
    assert reasons(point(0, "x", 1, 1.0, planned=10, completed=6, failed=0), {}, g) == (
        "finished 6 of 10 planned requests",)
    assert "client-bound" in reasons(point(0, "x", 1, 1.0, client_loop_lag_p99_ms=40.0), {}, g)[0]
    assert "runs no speculation" in reasons(point(0, "x", 1, 1.0, accept_length=2.0),
                                            {"speculative_algorithm": "none"}, g)[0]
    assert "reported no acceptance" in reasons(point(0, "x", 1, 1.0, completed=3.0),
                                               {"speculative_algorithm": "EAGLE3"}, g)[0]
    # llama.cpp reports the accepted share of drafted tokens instead of an accept length
    assert reasons(point(0, "x", 1, 1.0, completed=3.0, draft_acceptance=0.0),
                   {"speculative_algorithm": "draft-model"}, g) == ()
    assert "runs no speculation" in reasons(point(0, "x", 1, 1.0, draft_acceptance_metrics=0.5),
                                            {"speculative_algorithm": "none"}, g)[0]
    # imported points without acceptance are not judged; unknown facts are not judged
    assert reasons(point(0, "x", 1, 1.0, source="import", completed=3.0), {"speculative_algorithm": "EAGLE3"}, g) == ()
    assert reasons(point(0, "x", 1, 1.0, accept_length=2.0), {}, g) == ()


def test_bootstrap_interval_over_repeats_decides_with_the_band(rules):
    tight = [("a", "baseline", "w", 1, v) for v in (100.0, 100.5, 99.5)] + \
            [("a", "spec", "w", 1, v) for v in (108.0, 108.4, 107.6)]
    comp = conclude(dataset(tight), rules).workload("w").candidate("spec").comparisons[0]
    assert comp.method == "bootstrap-repeats" and comp.ci is not None
    assert comp.ci[0] > 1.0 and comp.ci[0] <= comp.ratio <= comp.ci[1]
    assert comp.verdict == "win"
    # The same means with wildly spread repeats: the interval straddles 1, so a tie.
    loose = [("a", "baseline", "w", 1, v) for v in (70.0, 130.0, 100.0)] + \
            [("a", "spec", "w", 1, v) for v in (60.0, 160.0, 104.0)]
    comp = conclude(dataset(loose), rules).workload("w").candidate("spec").comparisons[0]
    assert comp.ci is not None and comp.ci[0] < 1.0 < comp.ci[1]
    assert comp.verdict == "tie"


def test_bootstrap_is_deterministic_and_level_matters():
    a, b = (10.0, 11.0, 12.0, 10.5), (10.0, 10.2, 9.8, 10.1)
    assert ratio_ci(a, b, 0.95, 1000, "s") == ratio_ci(a, b, 0.95, 1000, "s")
    lo95, hi95 = ratio_ci(a, b, 0.95, 2000, "s")
    lo80, hi80 = ratio_ci(a, b, 0.80, 2000, "s")
    assert lo95 <= lo80 <= hi80 <= hi95


def test_window_series_from_runner_records():
    # Two requests, tokens arriving evenly over 1 s.
    req = {"sent_s": [0.0, 0.0, 0.0], "event_s": [[0.1 * i for i in range(1, 11)]] * 3,
           "event_tokens": [list(range(1, 11))] * 3, "error": ["", "", ""]}
    series = window_series(req)
    assert len(series) == 10 and sum(series) / len(series) == pytest.approx(30.0)
    assert window_series(req, concurrency=1) == series and window_series(req, concurrency=2) == ()
    assert window_series({"ttft_s": [0.1]}) == ()  # imported details: no series


def test_pareto_and_goodput():
    v = [CellView("a", 1, "x", 100.0, {"median_tpot_ms": 10.0, "p99_tpot_ms": 12.0, "p99_ttft_ms": 50.0}, ()),
         CellView("a", 32, "x", 700.0, {"median_tpot_ms": 40.0, "p99_tpot_ms": 60.0, "p99_ttft_ms": 400.0}, ()),
         CellView("b", 32, "x", 600.0, {"median_tpot_ms": 45.0, "p99_tpot_ms": 50.0, "p99_ttft_ms": 300.0}, ())]
    assert pareto(v) == {("a", 1), ("a", 32)}
    g = {x.config: x for x in goodput(v, Slo(ttft_p99_ms=300, tpot_p99_ms=55))}
    assert g["a"].best is not None and g["a"].best.concurrency == 1 and g["a"].largest_c == 1
    assert g["b"].best is not None and g["b"].largest_c == 32
    assert goodput([CellView("c", 1, "x", 1.0, {}, ())], Slo(ttft_p99_ms=1))[0].unknown


def test_mermaid_block_is_safe():
    block = mermaid_xychart('x"y\n]evil', [1, 2], [("a", [1.0, 2.0]), ("b", [3.0, 4.0])])
    lines = block.splitlines()
    assert lines[:4] == ["```mermaid", "---",
                         'config: {themeVariables: {xyChart: {plotColorPalette: "#1f77b4, #ff7f0e"}}}', "---"]
    assert lines[4] == "xychart-beta" and lines[-1] == "```"
    assert lines[5] == '    title "x_y__evil"'
    assert "line [1.0, 2.0]" in block and 'x-axis "concurrency C" [1, 2]' in block


def test_document_traces_numbers_to_points_and_shows_charts(project, tmp_path):
    out = tmp_path / "doc.md"
    r = cli("--settings", str(project / "findings.toml"), "--store", str(FIXTURES / "store"),
            "render", "--output", str(out))
    assert r.exit_code == 0, r.output
    text = out.read_text()
    assert "```mermaid\n---\nconfig:" in text and "\n---\nxychart-beta\n" in text
    assert "## Appendix: stored points" in text
    assert "| P45 " in text and "30% of requests failed" in text
    assert "+10.1% (±4.0%) win (overlap-topk1: P24 vs P20)" in text
    assert "+0.2% (±4.0%) tie" in text and "+5.1% (±7.2%) tie" in text


def test_json_has_intervals_and_flags():
    out = json.loads(cli("conclusions", "--json", store=FIXTURES / "store").output)
    chat = out["workloads"]["chat-512"]["candidates"]["eagle3-topk1-v2"]
    lo, hi = chat["intervals"]["32"]
    assert lo > 1.0 and lo < chat["ratios"]["32"] < hi
    assert list(out["flagged"]) == ["table-003ea6253593/8"]


def test_optional_svg_plots_are_deterministic(project, tmp_path):
    pytest.importorskip("matplotlib")
    with open(project / "findings.toml", "a") as fh:
        fh.write("plots = true\n")
    out = tmp_path / "doc.md"
    args = ["--settings", str(project / "findings.toml"), "--store", str(FIXTURES / "store"), "render",
            "--output", str(out)]
    assert cli(*args).exit_code == 0
    svgs = sorted((tmp_path / "doc-plots").glob("*.svg"))
    assert [p.name for p in svgs] == ["overlap-topk1--diverse-prompts.svg", "parallel-sweep--diverse-prompts.svg",
                                      "rigor-check--chat-512.svg", "tp8-random--random-1024-512.svg"]
    first = {p.name: p.read_bytes() for p in svgs}
    assert b"<svg" in first["overlap-topk1--diverse-prompts.svg"]
    assert "![overlap-topk1: diverse-prompts](doc-plots/overlap-topk1--diverse-prompts.svg)" in out.read_text()
    for p in svgs:
        p.unlink()
    assert cli(*args).exit_code == 0
    assert {p.name: p.read_bytes() for p in sorted((tmp_path / "doc-plots").glob("*.svg"))} == first


def test_interval_method_is_configurable():
    rows = [("a", "baseline", "w", 1, v) for v in (100.0, 100.5, 99.5)] + \
           [("a", "spec", "w", 1, v) for v in (108.0, 108.4, 107.6)]
    comp = conclude(dataset(rows), Rules(interval="band")).workload("w").candidate("spec").comparisons[0]
    assert comp.ci is None and comp.method == "band"
    comp = conclude(dataset(rows), Rules(interval="repeats")).workload("w").candidate("spec").comparisons[0]
    assert comp.method == "bootstrap-repeats"
