"""findings.frame, findings.conclusions and findings export (issue 17)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
from conftest import ROOT, cli

import findings
from findings import dataframe


def test_frame_of_the_seed_store_reproduces_the_c30_ratio() -> None:
    points = findings.frame(ROOT / "benchmarks" / "results")
    assert points.shape[0] == 30
    assert list(points.columns[:14]) == [name for name, _ in dataframe.FIXED]
    assert str(points["concurrency"].dtype) == "Int64" and str(points["flagged"].dtype) == "boolean"
    at30 = points[(points.campaign == "overlap-topk1") & (points.concurrency == 30)].set_index("config")
    ratio = at30.loc["eagle3-topk1-v2", "output_throughput_tok_s"] / at30.loc["baseline", "output_throughput_tok_s"]
    doc = findings.conclusions(ROOT / "benchmarks" / "results")
    assert round(ratio, 4) == doc["workloads"]["diverse-prompts"]["candidates"]["eagle3-topk1-v2"]["ratios"]["30"]
    # the config's facts in that campaign, typed
    assert at30.loc["eagle3-topk1-v2", "fact_eagle_topk"] == 1 and str(points["fact_eagle_topk"].dtype) == "Int64"
    assert pd.isna(at30.loc["baseline", "fact_eagle_topk"])


def test_import_findings_in_the_repository_prints_the_point_count() -> None:
    r = subprocess.run([sys.executable, "-c", "import findings; print(findings.frame().shape)"], cwd=ROOT,
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip().startswith("(30, ")


def test_the_worked_example_in_docs_frame_md_runs() -> None:
    text = (ROOT / "docs" / "frame.md").read_text()
    code = re.findall(r"```python\n(.*?)```", text, re.S)[-1]
    r = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert "C=30: 1.1014" in r.stdout and r.stdout.startswith("30\n")


def test_render_and_conclusions_never_import_pandas_or_pyarrow(tmp_path: Path) -> None:
    probe = ("import sys\nfrom findings.cli import main\n"
             "for args in (['render', '--output', sys.argv[1]], ['conclusions', '--json'], ['conclusions']):\n"
             "    try:\n        main(args, standalone_mode=False)\n    except SystemExit:\n        pass\n"
             "print('HEAVY', sorted(m for m in ('pandas', 'pyarrow', 'matplotlib') if m in sys.modules))\n")
    r = subprocess.run([sys.executable, "-c", probe, str(tmp_path / "doc.md")], cwd=ROOT, capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip().endswith("HEAVY []"), r.stdout[-500:]


def test_export_csv_round_trips_and_refuses_to_overwrite(tmp_path: Path) -> None:
    store = ROOT / "benchmarks" / "results-vllm"
    points = findings.frame(store)
    out = tmp_path / "points.csv"
    r = cli("export", "--output", str(out), store=store)
    assert r.exit_code == 0 and f"wrote {len(points)} rows to {out} (csv)" in r.output, r.output
    back = pd.read_csv(out, dtype=dict(points.dtypes))
    pd.testing.assert_frame_equal(back, points)
    r = cli("export", "--output", str(out), store=store)
    assert r.exit_code == 1 and "exists: pass --force" in r.output
    assert cli("export", "--output", str(out), "--force", store=store).exit_code == 0


def test_export_requests_jsonl_and_parquet(tmp_path: Path) -> None:
    store = ROOT / "benchmarks" / "results-vllm"
    _, requests = findings.frame(store, requests=True)
    r = cli("export", "--requests", "--format", "jsonl", store=store)
    rows = [json.loads(x) for x in r.output.splitlines()]
    assert len(rows) == len(requests) > 0 and {"point_id", "request", "ttft_s"} <= set(rows[0])
    pq = tmp_path / "points.parquet"
    assert cli("export", "--format", "parquet", "--output", str(pq), store=store).exit_code == 0
    pd.testing.assert_frame_equal(pd.read_parquet(pq), findings.frame(store))
    r = cli("export", "--format", "parquet", store=store)
    assert r.exit_code == 1 and "give --output" in r.output


def test_without_pandas_one_line_names_the_extra(tmp_path: Path) -> None:
    probe = ("import sys\nsys.modules['pandas'] = None\nfrom findings.cli import main\n"
             "main(['export'], standalone_mode=True)\n")
    r = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert r.returncode == 1
    assert r.stderr.strip() == "Error: DataFrames and exports need pandas: pip install 'findings[pandas]'"


@pytest.mark.parametrize("store", ["benchmarks/results", "benchmarks/results-llamacpp"])
def test_repeat_column_counts_repeats(store: str) -> None:
    points = findings.frame(ROOT / store)
    keys = ["campaign", "workload", "config", "concurrency", "source"]
    assert (points.groupby(keys)["repeat"].nunique() == points.groupby(keys).size()).all()


@pytest.mark.parametrize("store", ["benchmarks/results-vllm", "benchmarks/results-sglang", "benchmarks/results-llamacpp"])
def test_every_cell_is_the_stored_value(store: str) -> None:
    """The frame is built in columns (D163): each metric, fact and parameter
    cell is checked here against the point it comes from, one by one."""
    from findings import store as store_lib
    data = store_lib.load(ROOT / store)
    points = findings.frame(ROOT / store)
    by_id = {p.id: p for p in data.points}
    metric_names = sorted({k for p in data.points for k in p.metrics})
    assert len({tuple(p.metrics) for p in data.points}) > 1  # several layouts of metrics
    for _, row in points.iterrows():
        p = by_id[row["point_id"]]
        assert (row["campaign"], row["config"], row["workload"], row["concurrency"]) == (
            p.campaign, p.config, p.workload, p.concurrency)
        for m in metric_names:
            value = row[f"metric_{m}" if m == "concurrency" else m]
            assert (value == p.metrics[m]) if m in p.metrics else pd.isna(value), (p.id, m)
        facts = data.facts_of(p.config, p.campaign)
        for col in (c for c in points.columns if c.startswith("fact_")):
            got, want = row[col], facts.get(col[len("fact_"):])
            assert pd.isna(got) if want is None else str(got) == str(want) or got == want, (p.id, col)
        for col in (c for c in points.columns if c.startswith("param_")):
            got, want = row[col], p.workload_params.get(col[len("param_"):])
            assert pd.isna(got) if want is None else str(got) == str(want) or got == want, (p.id, col)


@pytest.mark.parametrize("fmt", ["csv", "jsonl"])
def test_export_in_pieces_writes_the_whole_tables_bytes(tmp_path: Path, monkeypatch, fmt: str) -> None:
    store = ROOT / "benchmarks" / "results-vllm"
    monkeypatch.setattr(dataframe, "EXPORT_ROWS", 7)  # 162 rows: 24 pieces, the last short
    out = tmp_path / f"points.{fmt}"
    r = cli("export", "--format", fmt, "--output", str(out), store=store)
    assert r.exit_code == 0, r.output
    table = findings.frame(store)
    whole = (table.to_csv(index=False) if fmt == "csv"
             else table.to_json(orient="records", lines=True, force_ascii=False))
    assert out.read_text(encoding="utf-8").rstrip("\n") == whole.rstrip("\n") and out.read_text().endswith("\n")
    assert cli("export", "--format", fmt, store=store).output == out.read_text(encoding="utf-8")


def test_an_export_that_fails_midway_leaves_the_old_file(tmp_path: Path, monkeypatch) -> None:
    store = ROOT / "benchmarks" / "results-vllm"
    out = tmp_path / "points.csv"
    out.write_text("the old export\n")
    pieces = dataframe._pieces

    def failing(table, fmt):
        it = pieces(table, fmt)
        yield next(it)
        raise MemoryError("out of memory while formatting")

    monkeypatch.setattr(dataframe, "EXPORT_ROWS", 10)
    monkeypatch.setattr(dataframe, "_pieces", failing)
    with pytest.raises(MemoryError):
        cli("export", "--output", str(out), "--force", store=store)
    assert out.read_text() == "the old export\n"
    assert [p.name for p in tmp_path.iterdir()] == ["points.csv"]  # no temp file left behind
