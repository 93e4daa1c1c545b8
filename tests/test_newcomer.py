"""The newcomer's path, outside this checkout (issue 36): build the wheel,
install it into a fresh venv in a temporary folder, `git init` and
`findings init` a new repository, measure with `findings bench --url`
against `findings emulate`, render and commit; add a campaign and see
`render --check` fail; render, commit and `findings diff HEAD~1 HEAD`.

Every command is the installed console script of the fresh venv, run in
the new repository with no file of this one on its path."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from conftest import ROOT

GIT_ENV = {"GIT_CONFIG_GLOBAL": os.devnull, "GIT_CONFIG_NOSYSTEM": "1", "GIT_AUTHOR_NAME": "New User",
           "GIT_AUTHOR_EMAIL": "new@example.com", "GIT_COMMITTER_NAME": "New User",
           "GIT_COMMITTER_EMAIL": "new@example.com"}


def _env(home: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPATH", "VIRTUAL_ENV", "FINDINGS_STORE", "PYTHONHOME")}
    return {**env, **GIT_ENV, "HOME": str(home), "FINDINGS_CACHE_DIR": str(home / "cache"),
            "PIP_DISABLE_PIP_VERSION_CHECK": "1", "PIP_CACHE_DIR": os.environ.get("PIP_CACHE_DIR", str(
                Path.home() / ".cache" / "pip"))}


def run(cmd: list[str], cwd: Path, env: dict[str, str], timeout: float = 600) -> subprocess.CompletedProcess[str]:
    return subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout,
                          stdin=subprocess.DEVNULL)


def ok(r: subprocess.CompletedProcess[str]) -> str:
    assert r.returncode == 0, f"{r.args}: exit {r.returncode}\n{r.stdout}\n{r.stderr}"
    return r.stdout


@pytest.fixture(scope="module")
def venv(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, str]]:
    """The wheel, built from a copy of the package's sources (pyproject.toml,
    README.md, findings/) and installed, with its dependencies, into a fresh
    venv outside this checkout."""
    base = tmp_path_factory.mktemp("newcomer")
    home = base / "home"
    home.mkdir()
    env = _env(home)
    src = base / "src"
    src.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, src / name)
    shutil.copytree(ROOT / "findings", src / "findings", ignore=shutil.ignore_patterns("__pycache__"))
    dist = base / "dist"
    ok(run([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "-w", str(dist), str(src)], base, env))
    wheels = list(dist.glob("findings-*.whl"))
    assert len(wheels) == 1, wheels
    names = set(zipfile.ZipFile(wheels[0]).namelist())
    assert "findings/templates/base.md.j2" in names
    assert "findings/templates/partials/conclusion.md.j2" in names
    assert "findings/scaffold/files/workflow.yml" in names
    venv = base / "venv"
    ok(run([sys.executable, "-m", "venv", str(venv)], base, env))
    ok(run([str(venv / "bin" / "python"), "-m", "pip", "install", "--quiet", str(wheels[0])], base, env,
           timeout=900))
    return venv, env


def _emulator(venv: Path, env: dict[str, str], cwd: Path, profile: str) -> tuple[subprocess.Popen[str], str]:
    proc = subprocess.Popen([str(venv / "bin" / "findings"), "emulate", "--port", "0", "--profile", profile,
                             "--speed", "25"], cwd=cwd, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    assert proc.stdout is not None
    line = proc.stdout.readline()
    assert "listening on" in line, line
    return proc, line.split("listening on ", 1)[1].split()[0]


def test_a_new_repository_from_the_wheel(venv: tuple[Path, dict[str, str]], tmp_path: Path) -> None:
    env_dir, env = venv
    findings = str(env_dir / "bin" / "findings")
    repo = tmp_path / "team-repo"
    repo.mkdir()

    # The installed package is the one that runs: not this checkout's.
    where = ok(run([str(env_dir / "bin" / "python"), "-c", "import findings; print(findings.__file__)"],
                   repo, env))
    assert where.startswith(str(env_dir)), where

    ok(run(["git", "init", "-q", "-b", "main"], repo, env))
    out = ok(run([findings, "init", "--title", "Speculation on our cluster", "--simulated"], repo, env))
    for made in ("findings.toml", "templates/findings.md.j2", ".github/workflows/findings.yml",
                 "benchmarks/results"):
        assert f"created {made}" in out, out
        assert (repo / made).exists()
    assert "/benchmarks/results/.lock" in (repo / ".gitignore").read_text()
    # A second init overwrites nothing, and says so in one line.
    again = run([findings, "init"], repo, env)
    assert again.returncode == 1
    assert again.stderr.strip().splitlines() == [
        f"Error: findings.toml: already exists; findings init overwrites nothing "
        f"(move it away, or run init in another folder)"]
    ok(run(["git", "add", "-A"], repo, env))
    ok(run(["git", "commit", "-q", "-m", "findings init"], repo, env))

    procs = [_emulator(env_dir, env, repo, "baseline"), _emulator(env_dir, env, repo, "eagle3-topk1-v2")]
    try:
        def bench(campaign: str) -> None:
            for (_, url), config in zip(procs, ("baseline", "eagle3-topk1-v2")):
                ok(run([findings, "bench", "--url", url, "--config", config, "--campaign", campaign,
                        "--workload", "chat", "--concurrency", "1,4", "--num-prompts", "8", "--input-len", "16",
                        "--output-len", "12", "--warmup", "1", "--no-progress"], repo, env))

        bench("first")
        assert "wrote" in ok(run([findings, "render"], repo, env))
        doc = (repo / "findings.md").read_text()
        assert doc.count("# Speculation on our cluster") == 1
        assert "eagle3-topk1-v2" in doc and "chat (simulated)" in doc
        assert "_None yet: write the team's notes in the notes block of templates/findings.md.j2._" in doc
        # Nothing of this repository's own document reaches the newcomer's.
        for ours in ("RTX PRO 6000", "SM120", "8x", "seed campaigns", "profiling"):
            assert ours not in doc, ours
        ok(run(["git", "add", "-A"], repo, env))
        ok(run(["git", "commit", "-q", "-m", "first campaign"], repo, env))

        bench("second")
    finally:
        for proc, _ in procs:
            proc.terminate()
            proc.wait(10)
    stale = run([findings, "render", "--check"], repo, env)
    assert stale.returncode == 1
    assert stale.stderr.strip().splitlines()[-1] == (
        f"Error: {repo / 'findings.md'} is stale; run 'findings render' and commit")
    ok(run([findings, "render"], repo, env))
    assert "is up to date" in ok(run([findings, "render", "--check"], repo, env))
    ok(run(["git", "add", "-A"], repo, env))
    ok(run(["git", "commit", "-q", "-m", "second campaign"], repo, env))
    diff = ok(run([findings, "diff", "HEAD~1", "HEAD"], repo, env))
    assert "HEAD~1" in diff and "HEAD" in diff
    assert "working tree" not in diff, diff
