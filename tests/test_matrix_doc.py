"""docs/matrix.md is the matrix format's page (issue 36): every example on it
loads with the real loader, every key the loader accepts has its row there
(the key list is the loader's own, findings.bench.matrix.KEYS), no row names a
key the loader refuses, and a key it does not know is one line."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from conftest import ROOT, cli

from findings.bench import matrix
from findings.core.errors import InputError

PAGE = ROOT / "docs" / "matrix.md"
ROW = re.compile(r"^\| `([a-z_]+)` \|", re.M)


def examples() -> list[str]:
    return re.findall(r"^```toml\n(.*?)^```", PAGE.read_text(), re.M | re.S)


def test_the_page_has_examples() -> None:
    assert len(examples()) >= 6


@pytest.mark.parametrize("i", range(len(examples())))
def test_every_example_loads(i: int) -> None:
    text = examples()[i]
    # As if the file sat in benchmarks/, beside the shipped matrices (relative paths start there).
    m = matrix.parse(str(ROOT / "benchmarks" / f"matrix-doc-{i}.toml"), text)
    assert m.campaigns and m.configs and m.workloads


def test_every_key_the_loader_accepts_has_its_row() -> None:
    text = PAGE.read_text()
    rows = set(ROW.findall(text))
    accepted = set().union(*matrix.KEYS.values())
    assert accepted, "the loader's key list is empty"
    assert sorted(accepted - rows) == [], "keys the loader accepts but docs/matrix.md does not document"
    assert sorted(rows - accepted) == [], "keys docs/matrix.md documents but the loader refuses"
    for table in matrix.KEYS:
        heading = f"`[[{table}]]`" if table == "campaigns" else \
            f"`[{table}]`" if table in ("defaults", "vars", "tune") else f"`[{table}.NAME]`"
        assert heading in text, heading
    used = {k for ex in examples() for k in re.findall(r"^([a-z_]+) =", ex, re.M)}
    assert sorted(accepted - used) == [], "keys no example on the page shows"


def test_an_unknown_key_is_one_line(tmp_path: Path) -> None:
    m = tmp_path / "m.toml"
    m.write_text(examples()[0].replace("concurrency = [1, 4, 16]", "concurency = [1, 4, 16]"))
    r = cli("--store", str(tmp_path / "st"), "bench", str(m), "--create")
    assert r.exit_code == 1
    assert r.output.strip().splitlines() == [
        f"Error: {m}: field 'campaigns[0].concurency': unknown key; expected one of {', '.join(sorted(matrix.CAMPAIGN_KEYS))}"]
    m.write_text(examples()[0] + "\n[workload.extra]\nprompts = \"fixed\"\n")
    with pytest.raises(InputError, match="field 'workload': unknown table; expected defaults, workloads, vars, "
                                         "configs, campaigns"):
        matrix.parse(str(m), m.read_text())


def test_the_page_is_linked() -> None:
    assert "(docs/matrix.md)" in (ROOT / "README.md").read_text()
    assert "(matrix.md)" in (ROOT / "docs" / "bench.md").read_text()
    assert "(matrix.md)" in (ROOT / "docs" / "cli.md").read_text()
