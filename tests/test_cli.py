"""The installed console script, and the CLI reference staying in step."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import click
from conftest import HISTORY, ROOT

from findings.cli import main


def findings_exe() -> str:
    exe = Path(sys.executable).parent / "findings"
    return str(exe) if exe.exists() else shutil.which("findings") or "findings"


def run(*args: str, cwd: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([findings_exe(), *args], cwd=cwd, capture_output=True, text=True,
                          env={**os.environ, **(env or {})}, timeout=120)


def test_console_script_end_to_end(tmp_path):
    store = tmp_path / "store"
    r = run("--store", str(store), "ingest", "table", str(HISTORY / "measurements.csv"),
            "--configs", str(HISTORY / "configs.csv"), "--create", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert "ingested 30 points" in r.stdout
    r = run("conclusions", "--json", cwd=tmp_path, env={"FINDINGS_STORE": str(store)})
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["workloads"]["diverse-prompts"]["candidates"]["eagle3-topk1-v2"]["threshold"] == 30
    r = run("--store", str(store), "ingest", "table", str(HISTORY / "measurements.csv"), cwd=tmp_path)
    assert r.returncode == 1
    assert r.stderr.startswith("Error: ") and r.stderr.count("\n") == 1
    assert "Traceback" not in r.stderr


def test_console_script_render_check_in_repo():
    r = run("render", "--check", cwd=ROOT)
    assert r.returncode == 0, r.stdout + r.stderr


def test_python_dash_m(tmp_path):
    r = subprocess.run([sys.executable, "-m", "findings", "--version"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and "findings" in r.stdout


def _commands(group: click.Group, prefix: str = "") -> list[str]:
    out = []
    for name, cmd in sorted(group.commands.items()):
        full = f"{prefix}{name}"
        if isinstance(cmd, click.Group):
            out.extend(_commands(cmd, full + " "))
        else:
            out.append(full)
    return out


def test_every_command_and_option_is_documented():
    doc = (ROOT / "docs" / "cli.md").read_text()
    for command in _commands(main):
        assert f"findings {command}" in doc, f"docs/cli.md lacks `findings {command}`"
    ctx = click.Context(main)
    stack: list[click.Command] = [main]
    while stack:
        cmd = stack.pop()
        for p in cmd.params:
            for opt in getattr(p, "opts", []):
                if opt.startswith("--") and opt != "--help":
                    assert re.search(re.escape(opt) + r"\b", doc), f"docs/cli.md lacks {opt}"
        if isinstance(cmd, click.Group):
            stack.extend(cmd.commands.values())
    assert ctx is not None


def test_importing_the_package_has_no_side_effects():
    code = ("import sys, findings; import findings.derive.analysis, findings.store, findings.document.render;"
            "print('click' in sys.modules, 'aiohttp' in sys.modules)")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and r.stdout.strip() == "False False"


def test_a_render_the_cache_answers_imports_neither_numpy_nor_jinja2(tmp_path):
    """A render whose document the render cache holds, and every command's
    start, skip the document's modules and the decisions (D161): a real
    render fills the cache, then a second process renders again and says
    what it imported."""
    store = tmp_path / "store"
    env = {**os.environ, "FINDINGS_CACHE_DIR": str(tmp_path / "cache")}
    env.pop("FINDINGS_CACHE", None)
    subprocess.run([sys.executable, "-m", "findings", "--store", str(store), "ingest", "table",
                    str(HISTORY / "measurements.csv"), "--configs", str(HISTORY / "configs.csv"), "--create"],
                   check=True, capture_output=True, env=env, timeout=120, cwd=tmp_path)
    out = tmp_path / "doc.md"
    argv = ["--store", str(store), "render", "--output", str(out)]
    first = subprocess.run([sys.executable, "-m", "findings", *argv], capture_output=True, text=True, env=env,
                           timeout=120, cwd=tmp_path)
    assert first.returncode == 0, first.stderr
    code = ("import sys, runpy; sys.argv = ['findings', *sys.argv[1:]]\n"
            "try:\n    runpy.run_module('findings', run_name='__main__')\n"
            "except SystemExit as e:\n    code = e.code\nelse:\n    code = 0\n"
            "heavy = [m for m in ('numpy', 'jinja2', 'findings.document.report', 'findings.decide') if m in sys.modules]\n"
            "print('IMPORTED', ' '.join(heavy) or '-', code)")
    again = subprocess.run([sys.executable, "-c", code, *argv], capture_output=True, text=True, env=env, timeout=120,
                           cwd=tmp_path)
    assert again.returncode == 0, again.stderr
    assert f"unchanged {out}" in again.stdout
    assert again.stdout.strip().splitlines()[-1] == "IMPORTED - 0"
    # The same check on a cold cache imports them (so the check above can fail).
    env["FINDINGS_CACHE_DIR"] = str(tmp_path / "cold")
    cold = subprocess.run([sys.executable, "-c", code, *argv[:-1], str(tmp_path / "doc2.md")], capture_output=True,
                          text=True, env=env, timeout=120, cwd=tmp_path)
    assert cold.returncode == 0, cold.stderr
    assert "numpy" in cold.stdout.strip().splitlines()[-1] and "jinja2" in cold.stdout
