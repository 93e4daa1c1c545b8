"""The long CSV importer: the seed format, and every kind of bad row."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import HISTORY, cli

from findings.core.errors import InputError
from findings.importers import common, table

HEADER = "campaign,order,workload,config,concurrency,output_throughput_tok_s,note\n"


def read(text: str, configs: str | None = None):
    return table.read(common.Source("t.csv", text.encode()),
                      configs_src=common.Source("c.csv", configs.encode()) if configs else None)


def test_seed_table_keeps_names_exactly():
    run = table.read(common.read_source(str(HISTORY / "measurements.csv")),
                     configs_src=common.read_source(str(HISTORY / "configs.csv")))
    assert {c.name: c.order for c in run.campaigns} == {
        "single-stream": 1, "parallel-sweep": 2, "overlap-topk1": 3}
    assert {p.workload for p in run.points} == {"fixed-prompt", "diverse-prompts"}
    assert {p.config for p in run.points} == {"baseline", "eagle3-topk4-v1", "eagle3-topk1-v2"}
    assert len(run.points) == 30
    p = run.points[1]
    assert (p.campaign, p.config, p.concurrency, p.throughput) == ("single-stream", "baseline", 1, 93.0)
    assert p.note == "recorded only as a rounded figure"
    assert run.configs["eagle3-topk1-v2"]["worker_path"] == "EAGLEWorkerV2 (spec v2)"
    assert run.configs["baseline"]["speculative_algorithm"] == "none"


def test_extra_numeric_columns_become_metrics():
    run = read("campaign,workload,config,concurrency,output_throughput_tok_s,p99_ttft_ms\n"
               "a,w,baseline,1,100,25.5\n" "a,w,baseline,2,180,\n")
    assert run.points[0].metrics["p99_ttft_ms"] == 25.5
    assert "p99_ttft_ms" not in run.points[1].metrics


def test_dates_are_accepted():
    run = read("campaign,date,workload,config,concurrency,output_throughput_tok_s\na,2026-01-02,w,b,1,1\n")
    assert run.campaigns[0].date == "2026-01-02"


@pytest.mark.parametrize(
    ("text", "line", "field", "message"),
    [
        ("campaign,workload,config,concurrency\na,w,b,1\n", 1, "output_throughput_tok_s", "required column"),
        (HEADER + "a,1,w,baseline,0,100,\n", 2, "concurrency", ">= 1"),
        (HEADER + "a,1,w,baseline,two,100,\n", 2, "concurrency", "expected an integer"),
        (HEADER + "a,1,w,baseline,1,nan,\n", 2, "output_throughput_tok_s", "finite"),
        (HEADER + "a,1,w,baseline,1,-5,\n", 2, "output_throughput_tok_s", ">= 0"),
        (HEADER + "a,1,w,baseline,1,100,\na,2,w,baseline,2,100,\n", 3, "order", "another date/order"),
        (HEADER + ",1,w,baseline,1,100,\n", 2, "campaign", "non-empty name"),
        (HEADER + "a,1,w,baseline,1,100\n", 2, None, "expected 7 cells"),
        (HEADER + "a,x,w,baseline,1,100,\n", 2, "order", "expected an integer"),
        ("campaign,date,workload,config,concurrency,output_throughput_tok_s\na,2026-13-01,w,b,1,1\n",
         2, "date", "YYYY-MM-DD"),
        (HEADER + "a,1,w,baseline,1,100,\na,1,w,baseline,1,100,\n", 3, None, "repeats an earlier row"),
        (HEADER, None, None, "no data rows"),
        ("", None, None, "empty"),
        (HEADER + 'a,1,w,baseline,1,100,"open\n', 2, None, "bad CSV"),
    ],
)
def test_bad_rows(text, line, field, message):
    with pytest.raises(InputError) as exc:
        read(text)
    assert exc.value.line == line
    assert exc.value.field == field
    assert message in str(exc.value)
    assert "\n" not in str(exc.value)


def test_config_missing_from_configs_file():
    with pytest.raises(InputError, match="config 'x' is not in c.csv"):
        read(HEADER + "a,1,w,x,1,100,\n", configs="config,notes\nbaseline,b\n")


def test_duplicate_config_in_configs_file():
    with pytest.raises(InputError, match="listed twice"):
        read(HEADER + "a,1,w,baseline,1,100,\n", configs="config\nbaseline\nbaseline\n")


def test_not_utf8_is_one_line_error(store, tmp_path):
    bad = tmp_path / "bin.csv"
    bad.write_bytes(b"\xff\xfe\x00garbage")
    r = cli("ingest", "table", str(bad), store=store)
    assert r.exit_code == 1 and "not UTF-8" in r.output
    assert not (store / "runs").exists() or not list((store / "runs").glob("*.json"))


def test_missing_file_is_one_line_error(store):
    r = cli("ingest", "table", "/nonexistent/m.csv", store=store)
    assert r.exit_code == 1
    assert r.output.strip().startswith("Error: /nonexistent/m.csv: cannot read")


def test_environment_file(store, tmp_path):
    env = tmp_path / "env.toml"
    env.write_text('[environment]\ngpus = "1x test"\nbad = [1, 2]\n')
    r = cli("ingest", "table", str(HISTORY / "measurements.csv"), "--environment", str(env), store=store)
    assert r.exit_code == 1 and "field 'bad'" in r.output
    env.write_text("not toml = = =\n")
    r = cli("ingest", "table", str(HISTORY / "measurements.csv"), "--environment", str(env), store=store)
    assert r.exit_code == 1 and "not valid TOML" in r.output
    assert not Path(store, "runs").exists() or not list(Path(store, "runs").glob("*.json"))
