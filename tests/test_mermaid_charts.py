"""Every mermaid block of every committed document, rendered by mermaid
itself (the version GitHub renders, pinned in tools/mermaid/package.json)
in headless Chromium: a parse or render error fails the test. The SVG and a
screenshot of each chart go to build/charts/ (issue 17).

`make test` provisions the tools first (tools/get_mermaid.sh) and sets
FINDINGS_REQUIRE_BROWSER=1, so there a missing browser fails; a bare
`pytest` elsewhere skips, saying why.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from conftest import ROOT

TOOLS = ROOT / "tools" / "mermaid"
OUT = ROOT / "build" / "charts"
BLOCK = re.compile(r"```mermaid\n(.*?)```", re.S)


def documents() -> list[Path]:
    return [ROOT / "eagle-fast-verify.md", *sorted((ROOT / "docs").glob("*.md")),
            *sorted((ROOT / "tests" / "golden").glob("*.md"))]


def blocks() -> list[dict[str, str]]:
    out = []
    for doc in documents():
        for i, source in enumerate(BLOCK.findall(doc.read_text(encoding="utf-8")), start=1):
            stem = str(doc.relative_to(ROOT).with_suffix("")).replace("/", "-")
            out.append({"name": f"{stem}-{i}", "source": source, "file": str(doc)})
    return out


def _tools_missing() -> str | None:
    if not (TOOLS / "node_modules" / "mermaid").is_dir():
        return "tools/mermaid/node_modules is missing: run tools/get_mermaid.sh (make test does)"
    if shutil.which("node") is None:
        return "node is missing"
    if shutil.which(os.environ.get("CHROMIUM", "chromium")) is None:
        return "chromium is missing: run tools/get_mermaid.sh (make test does)"
    return None


@pytest.fixture(scope="module")
def rendered(tmp_path_factory: pytest.TempPathFactory) -> list[dict[str, object]]:
    missing = _tools_missing()
    if missing:
        if os.environ.get("FINDINGS_REQUIRE_BROWSER") == "1":
            pytest.fail(missing)
        pytest.skip(missing)
    found = blocks()
    spec = tmp_path_factory.mktemp("mermaid") / "blocks.json"
    spec.write_text(json.dumps(found), encoding="utf-8")
    r = subprocess.run(["node", str(TOOLS / "render.mjs"), str(spec), str(OUT)], capture_output=True, text=True,
                       timeout=600)
    results = [json.loads(line) for line in r.stdout.splitlines() if line.startswith("{")]
    assert len(results) == len(found), r.stderr[-2000:]
    return [{**res, "file": b["file"]} for res, b in zip(results, found)]


def test_the_documents_have_charts() -> None:
    found = blocks()
    assert len(found) >= 10 and any(b["file"].endswith("eagle-fast-verify.md") for b in found)


def test_every_chart_parses_and_renders_with_githubs_mermaid(rendered: list[dict[str, object]]) -> None:
    pinned = json.loads((TOOLS / "package.json").read_text())["dependencies"]["mermaid"]
    assert {r["version"] for r in rendered} == {pinned}
    bad = [f"{r['file']}: {r['name']}: {r['error']}" for r in rendered if not r["ok"]]
    assert not bad, "\n".join(bad)
    for r in rendered:
        svg = (OUT / f"{r['name']}.svg").read_text(encoding="utf-8")
        assert svg.startswith("<svg") and "output tokens/s" in svg and "concurrency C" in svg, r["name"]
        assert (OUT / f"{r['name']}.png").stat().st_size > 5000


def test_a_broken_chart_is_caught(tmp_path: Path) -> None:
    missing = _tools_missing()
    if missing:
        pytest.skip(missing)
    spec = tmp_path / "bad.json"
    spec.write_text(json.dumps([{"name": "broken", "source": "xychart-beta\n    x-axis [1, 2\n    line [1, 2]\n"}]))
    r = subprocess.run(["node", str(TOOLS / "render.mjs"), str(spec), str(tmp_path)], capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 1
    assert json.loads(r.stdout.splitlines()[0])["error"].startswith("Parse error on line 2")
