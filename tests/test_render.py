"""The rendered document: golden file, determinism, --check, escaping."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest
from conftest import FIXTURES, ROOT, cli, render_golden

GOLDEN = Path(__file__).parent / "golden" / "fixture-store.md"


def render(project: Path, store: Path, out: Path, *extra: str):
    return cli("--settings", str(project / "findings.toml"), "--store", str(store),
               "render", "--output", str(out), *extra)


def test_golden_document_from_fixture_store(project, tmp_path):
    # The store inside the project, as in a real repository: the banner names it
    # relative to the project root, so the golden file is location-independent.
    shutil.copytree(FIXTURES / "store", project / "benchmarks" / "results")
    with open(project / "findings.toml", "a") as fh:  # exercise the SLO views too
        fh.write("slo_ttft_p99_ms = 300\nslo_tpot_p99_ms = 50\n")
    render_golden(project, tmp_path / "doc.md", GOLDEN, "tests/test_render.py")


def test_document_sections_in_order(project, tmp_path):
    out = tmp_path / "doc.md"
    render(project, FIXTURES / "store", out)
    text = out.read_text()
    marks = ["GENERATED FILE", "## Current deployment conclusion", "**Latency-sensitive single requests:**",
             "**Throughput-focused workloads:**", "**Dynamic speculation disable**", "## Conclusion history",
             "## Environment", "## Campaigns", "### `single-stream`", "### `parallel-sweep`",
             "### `overlap-topk1`", "### `tp8-random`", "## Methodology", "## Team notes", "97%"]
    positions = [text.index(m) for m in marks]
    assert positions == sorted(positions)


def test_render_is_byte_identical_and_store_order_independent(project, tmp_path):
    a, b = tmp_path / "a.md", tmp_path / "b.md"
    render(project, FIXTURES / "store", a)
    # Same runs in a store copied in another order: same bytes.
    other = tmp_path / "other"
    (other / "runs").mkdir(parents=True)
    for p in sorted((FIXTURES / "store" / "runs").glob("*.json"), reverse=True):
        shutil.copy(p, other / "runs" / p.name)
    render(project, other, b)
    assert render(project, FIXTURES / "store", a, "--check").exit_code == 0  # byte-identical re-render
    # The banner and the open questions' commands name the store folder; all else is identical.
    body = [x.read_bytes().split(b"-->", 1)[1] for x in (a, b)]
    label = re.compile(rb"--store \S+ ")
    assert label.sub(b"--store S ", body[0]) == label.sub(b"--store S ", body[1])


def test_check_passes_when_fresh_and_fails_with_diff_when_stale(project, tmp_path):
    out = tmp_path / "doc.md"
    render(project, FIXTURES / "store", out)
    r = render(project, FIXTURES / "store", out, "--check")
    assert r.exit_code == 0 and "up to date" in r.output
    out.write_text(out.read_text().replace("on-above", "always-on", 1))
    r = render(project, FIXTURES / "store", out, "--check")
    assert r.exit_code == 1
    assert "-" in r.output and "+" in r.output and "is stale" in r.output
    assert "(fresh render)" in r.output
    missing = tmp_path / "missing.md"
    r = render(project, FIXTURES / "store", missing, "--check")
    assert r.exit_code == 1 and "does not exist" in r.output
    assert not missing.exists()


def test_committed_document_is_fresh():
    r = cli("--settings", str(ROOT / "findings.toml"), "render", "--check")
    assert r.exit_code == 0, r.output


def test_hostile_names_are_escaped(project, tmp_path):
    store = tmp_path / "store"
    csv = tmp_path / "m.csv"
    csv.write_text(
        "campaign,order,workload,config,concurrency,output_throughput_tok_s,note\n"
        'evil|camp,1,w<b>,baseline,1,100,"note with | pipe\nand newline"\n'
        "evil|camp,1,w<b>,<script>alert(1)</script>|x,1,120,[link](http://x)\n"
    )
    env = tmp_path / "env.toml"
    env.write_text('[environment]\nmodel = "m|o<i>del\\n| injected | row |"\n')
    assert cli("ingest", "table", str(csv), "--environment", str(env), "--create", store=store).exit_code == 0
    out = tmp_path / "doc.md"
    r = render(project, store, out)
    assert r.exit_code == 0, r.output
    text = out.read_text()
    assert "<script>" not in text and "<b>" not in text and "<i>" not in text
    assert "[link](http" not in text
    assert "\n| injected" not in text
    for line in text.splitlines():
        if line.startswith("|"):
            # every row of a table has the same number of unescaped pipes as its header
            assert line.replace("\\|", "").count("|") >= 3


def test_template_errors_are_one_line(project, tmp_path):
    (project / "templates" / "eagle-fast-verify.md.j2").write_text("{{ doc.no_such_key }}\n")
    r = render(project, FIXTURES / "store", tmp_path / "x.md")
    assert r.exit_code == 1 and "undefined value in template" in r.output
    (project / "templates" / "eagle-fast-verify.md.j2").write_text("{% for %}\n")
    r = render(project, FIXTURES / "store", tmp_path / "x.md")
    assert r.exit_code == 1 and "template syntax error" in r.output


def test_templates_are_sandboxed(project, tmp_path):
    (project / "templates" / "eagle-fast-verify.md.j2").write_text(
        "{{ doc.__class__.__mro__[1].__subclasses__() }}\n")
    r = render(project, FIXTURES / "store", tmp_path / "x.md")
    assert r.exit_code == 1
    assert "sandbox" in r.output or "undefined" in r.output


def test_empty_store_is_a_clear_error(project, tmp_path):
    r = render(project, tmp_path / "nothing", tmp_path / "x.md")
    assert r.exit_code == 2 and "not a findings store (no such folder)" in r.output
    (tmp_path / "empty" / "runs").mkdir(parents=True)
    r = render(project, tmp_path / "empty", tmp_path / "x.md")
    assert r.exit_code == 1 and "holds no points" in r.output


@pytest.mark.parametrize("name", ["10-profiling.md"])
def test_team_notes_are_included_verbatim(project, tmp_path, name):
    out = tmp_path / "doc.md"
    render(project, FIXTURES / "store", out)
    note = (project / "templates" / "notes" / name).read_text().rstrip("\n")
    assert note in out.read_text()
