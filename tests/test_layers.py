"""The package's shape (issue 28): import-linter's contracts in pyproject.toml
hold, and no module imports itself back through any chain, lazy imports included."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import grimp
import pytest

ROOT = Path(__file__).resolve().parents[1]


def test_lint_imports_keeps_every_contract() -> None:
    exe = shutil.which("lint-imports", path=str(Path(sys.executable).parent))
    assert exe is not None, "import-linter is a dev dependency: pip install -e '.[dev]'"
    out = subprocess.run([exe], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "Contracts: 2 kept, 0 broken." in out.stdout


def _cycles(graph: grimp.ImportGraph) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    modules = sorted(m for m in graph.modules if m.startswith("findings"))
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []
    counter = [0]

    def visit(v: str) -> None:
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(graph.find_modules_directly_imported_by(v)):
            if not w.startswith("findings"):
                continue
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    sys.setrecursionlimit(max(sys.getrecursionlimit(), 10_000))
    for m in modules:
        if m not in index:
            visit(m)
    return out


def test_no_module_import_cycle() -> None:
    graph = grimp.build_graph("findings", include_external_packages=False, exclude_type_checking_imports=True)
    assert _cycles(graph) == []


@pytest.mark.parametrize("module", ["findings.derive.analysis", "findings.store.index"])
def test_the_two_old_cycles_are_gone(module: str) -> None:
    graph = grimp.build_graph("findings", include_external_packages=False)
    up = {"findings.derive.analysis": "findings.derive.regressions", "findings.store.index": "findings.store"}[module]
    assert not graph.chain_exists(importer=module, imported=up)
