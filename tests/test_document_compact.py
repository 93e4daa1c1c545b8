"""Fewer lines, nothing lost (issue 36, item 3; D105): paragraphs on one
line, one table per campaign and workload, server configurations side by
side, and one launch block per Deploy block that writes the very file
`findings deploy` writes."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

from conftest import FIXTURES, cli
from test_first_screen import _render

from findings.document.render import paragraphs


def test_paragraphs_joins_soft_breaks_and_keeps_blocks():
    text = ("Para one\ntwo `code`\n\n- **a** item\n  continued\n  - sub\n    more\n- b\n\n"
            "> quote\n> goes on\n\n| h | i |\n|---|---|\n| 1 | 2 |\n\n```sh\nx \\\n    y\n```\n"
            "## Heading\n<details>\n<summary>s</summary>\n")
    assert paragraphs(text) == ("Para one two `code`\n\n- **a** item continued\n  - sub more\n- b\n\n"
                                "> quote goes on\n\n| h | i |\n|---|---|\n| 1 | 2 |\n\n```sh\nx \\\n    y\n```\n"
                                "## Heading\n<details>\n<summary>s</summary>\n")


def test_packaged_prose_is_one_line_per_paragraph(project, tmp_path):
    text = _render(project, tmp_path)
    methodology = text.split("\n## Methodology\n", 1)[1].split("\n## ", 1)[0]
    bullets = [line for line in methodology.splitlines() if line.startswith("- **")]
    assert len(bullets) >= 12
    # No bullet is followed by an indented continuation line.
    assert not re.search(r"\n- \*\*[^\n]*\n  [^- ]", methodology)
    assert "Whether EAGLE-3 speculative decoding pays on this deployment, derived from 45 stored" in text


def _table_after(text: str, marker: str) -> list[list[str]]:
    rest = text.split(marker, 1)[1]
    lines = []
    for line in rest.splitlines()[1:]:
        if line.startswith("|"):
            lines.append([c.strip() for c in line.strip().strip("|").split("|")])
        elif lines:
            break
    return lines


def test_one_campaign_table_holds_throughput_verdicts_and_latency(project, tmp_path):
    text = _render(project, tmp_path)
    rows = _table_after(text, "### `rigor-check`")
    head, body = rows[0], rows[2:]
    assert head[:4] == ["C", "config", "tok/s", "vs baseline"] and head[-1] == "points"
    assert {"TTFT p50 / p99 ms", "TPOT p50 / p99 ms", "Pareto"} <= set(head)
    by = {(r[0], r[1]): dict(zip(head, r)) for r in body}
    # A row per config and C; the baseline has no verdict of its own.
    assert by[("1", "baseline")]["vs baseline"] == ""
    assert by[("1", "eagle3-topk1-v2")]["vs baseline"].startswith("+8.0% (CI")
    # A flagged point keeps its mark on the throughput cell.
    assert "⚠ 1 flagged" in by[("32", "eagle3-topk1-v2")]["tok/s"]
    # No separate latency table any more.
    assert "Latency: TTFT, TPOT" not in text


def test_server_configurations_side_by_side(project, tmp_path):
    text = _render(project, tmp_path)
    rows = _table_after(text, "<summary>Server configurations")
    head = rows[0]
    assert head[0] == "Fact" and head[1] == "baseline" and len(head) == len(set(head)) >= 3
    facts = [r[0] for r in rows[2:]]
    assert facts == sorted(facts) and len(facts) == len(set(facts))


def test_the_launch_block_writes_the_file_findings_deploy_writes(project, tmp_path):
    text = _render(project, tmp_path)
    blocks = re.findall(r"```sh\n(# SGLang: the step schedule file.*?)```", text, re.S)
    assert blocks
    out = tmp_path / "deploy"
    r = cli("--settings", str(project / "findings.toml"), "--store", str(FIXTURES / "store"),
            "deploy", "--out", str(out))
    assert r.exit_code == 0, r.output
    for block in blocks:
        name = re.search(r"^cat > (\S+) <<'EOF'$", block, re.M).group(1)  # type: ignore[union-attr]
        here = tmp_path / "sh"
        here.mkdir(exist_ok=True)
        # Run only the block's file-writing part, as a shell would.
        script = block[:block.index("\nEOF\n") + len("\nEOF\n")]
        subprocess.run(["bash", "-c", script], cwd=here, check=True)
        written = (here / name).read_text()
        assert __import__("json").loads(written) == __import__("json").loads((out / name).read_text())
