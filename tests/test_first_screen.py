"""The document's first screen answers (issue 36, item 3): a summary table of
every workload and candidate near the top, whose deploy links land on a
Deploy block, and each distinct Deploy block shown once."""

from __future__ import annotations

import json
import re
from pathlib import Path

from conftest import FIXTURES, cli

ANCHOR = re.compile(r'<a id="([^"]+)"></a>')
LINK = re.compile(r"\]\(#([^)]+)\)")


def _render(project: Path, tmp_path: Path) -> str:
    out = tmp_path / "doc.md"
    r = cli("--settings", str(project / "findings.toml"), "--store", str(FIXTURES / "store"),
            "render", "--output", str(out))
    assert r.exit_code == 0, r.output
    return out.read_text()


def _slug(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation dropped, spaces to hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def _summary_rows(text: str) -> list[list[str]]:
    section = text.split("\n## Summary\n", 1)[1].split("\n## ", 1)[0]
    rows = [line for line in section.splitlines() if line.startswith("| ")]
    return [[c.strip() for c in line.strip("|").split(" | ")] for line in rows[1:]]


def _deploy_blocks(text: str) -> dict[str, str]:
    """Each full Deploy block (anchor -> its text, without the anchor), up
    to the next block, verdict table or heading."""
    out = {}
    parts = ANCHOR.split(text)
    for anchor, body in zip(parts[1::2], parts[2::2]):
        end = re.search(r"\n(\*\*Deploy |Current verdicts|#+ |Threshold policies deploy)", body)
        out[anchor] = body[:end.start()] if end else body
    return out


def test_the_summary_is_on_the_first_screen_and_lists_every_candidate(project, tmp_path):
    text = _render(project, tmp_path)
    head = text.splitlines()[:40]
    assert "## Summary" in head
    table = [i for i, line in enumerate(head) if line.startswith("| Workload ")]
    assert table, "the summary table starts within the first 40 lines"
    r = cli("--store", str(FIXTURES / "store"), "conclusions", "--json")
    assert r.exit_code == 0, r.output
    listed = {(w, c) for w, body in json.loads(r.output)["workloads"].items() for c in body["candidates"]}
    assert listed, "the fixture store has candidates to list"
    rows = _summary_rows(text)
    shown = {(row[0].replace("\\_", "_"), row[1].strip("`")) for row in rows}
    assert shown == listed
    for row in rows:
        assert row[2], row  # a policy on every row


def test_every_deploy_link_lands_on_an_anchor(project, tmp_path):
    text = _render(project, tmp_path)
    anchors = set(ANCHOR.findall(text))
    headings = {_slug(line.lstrip("#")) for line in text.splitlines() if re.match(r"#{1,6} ", line)}
    links = LINK.findall(text)
    deploy_links = [a for a in links if a.startswith("deploy-")]
    assert deploy_links, "the summary links each candidate to its Deploy block"
    for a in links:
        assert a in anchors or a in headings, f"link #{a} lands nowhere"
    # Every summary row with a Deploy block links to one that is shown in full.
    for row in _summary_rows(text):
        found = LINK.findall(row[5])
        assert found and found[0] in _deploy_blocks(text), row


def test_identical_deploy_blocks_are_shown_once(project, tmp_path):
    text = _render(project, tmp_path)
    blocks = _deploy_blocks(text)
    bodies = list(blocks.values())
    assert len(bodies) == len(set(bodies)), "a Deploy block is shown in full more than once"
    # The fixture store has one (random-1024-512, like chat-512): it refers to the first.
    refs = re.findall(r"\*\*Deploy `[^`]+`\*\* \([^)]*\): the same settings as \[for `([^`]+)`\]\(#([^)]+)\)\.",
                      text)
    assert refs, "the fixture store's repeated Deploy block is a reference"
    for workload, anchor in refs:
        assert anchor in blocks
        assert f"deploy-eagle3-topk1-v2-{workload}" == anchor
