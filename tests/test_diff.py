"""`findings diff`: conclusions at a git revision against the working tree (docs/diff.md)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest
from click.testing import CliRunner
from conftest import HISTORY

from findings.document import settings as settings_mod
from findings.cli import main
from findings.document.diff import diff_markdown
from findings.core.errors import FindingsError, NotAStoreError
from findings.store.schema import SIDECAR_SUFFIX

TOML = """[findings]
store = "benchmarks/results"
baseline = "baseline"
noise_floor = 0.04
"""

# A new campaign in which eagle3-topk1-v2 wins by 15% at every C: its policy
# flips from on-above (threshold C=30) to always-on, and the latency best flips.
NIGHTLY = """campaign,date,workload,config,concurrency,output_throughput_tok_s
nightly-1130,2026-11-30,diverse-prompts,baseline,1,92.7
nightly-1130,2026-11-30,diverse-prompts,baseline,30,689.4
nightly-1130,2026-11-30,diverse-prompts,baseline,100,773.1
nightly-1130,2026-11-30,diverse-prompts,baseline,250,718.1
nightly-1130,2026-11-30,diverse-prompts,eagle3-topk1-v2,1,106.6
nightly-1130,2026-11-30,diverse-prompts,eagle3-topk1-v2,30,792.8
nightly-1130,2026-11-30,diverse-prompts,eagle3-topk1-v2,100,889.1
nightly-1130,2026-11-30,diverse-prompts,eagle3-topk1-v2,250,825.8
"""


def git(repo: Path, *args: str) -> str:
    env = {**os.environ, "GIT_CONFIG_GLOBAL": os.devnull, "GIT_CONFIG_NOSYSTEM": "1"}
    r = subprocess.run(["git", *args], cwd=repo, capture_output=True, text=True, timeout=30, env=env)
    assert r.returncode == 0, r.stderr
    return r.stdout.strip()


def commit(repo: Path, message: str) -> None:
    git(repo, "add", "-A")
    git(repo, "-c", "user.name=Test", "-c", "user.email=test@example.com", "-c", "commit.gpgsign=false",
        "commit", "-q", "-m", message)


def ingest(store: Path, *args: str) -> None:
    r = CliRunner().invoke(main, ["--store", str(store), "ingest", "table", "--create", *args], catch_exceptions=False)
    assert r.exit_code == 0, r.output


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """main: (1) findings.toml only, (2) the seed store; branch pr: (3) a new campaign that flips a policy."""
    repo = tmp_path_factory.mktemp("diff") / "repo"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    (repo / "findings.toml").write_text(TOML)
    commit(repo, "settings")
    store = repo / "benchmarks" / "results"
    ingest(store, str(HISTORY / "measurements.csv"), "--configs", str(HISTORY / "configs.csv"))
    commit(repo, "seed")
    git(repo, "checkout", "-q", "-b", "pr")
    nightly = repo / "nightly.csv"
    nightly.write_text(NIGHTLY)
    ingest(store, str(nightly))
    commit(repo, "nightly")
    return repo


@pytest.fixture
def repo(built: Path, tmp_path: Path) -> Path:
    """A private copy of the built repository, free to edit."""
    dest = tmp_path / "repo"
    shutil.copytree(built, dest, symlinks=True)
    return dest


@pytest.fixture(autouse=True)
def _no_env_store(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("FINDINGS_STORE", raising=False)


def settings_of(repo: Path) -> settings_mod.Settings:
    return settings_mod.load(str(repo / "findings.toml"))


def test_new_campaign_flips_policy(built: Path) -> None:
    md = diff_markdown(settings_of(built), "HEAD~1")
    sha = git(built, "rev-parse", "--short", "HEAD~1")
    assert md.startswith(f"### findings diff: `HEAD~1` ({sha}) → working tree\n")
    assert "**Policies changed**" in md
    assert "- `diverse-prompts` / `eagle3-topk1-v2`: `on-above` (threshold C=30) → `always-on`" in md
    assert "  - C=1: loss → win, ratio 0.936 → 1.150" in md
    assert "**Bests changed**" in md
    assert "- `diverse-prompts` latency: `baseline` (beyond noise) → `eagle3-topk1-v2` (beyond noise)" in md
    assert "**New campaigns**" in md
    assert "- `nightly-1130` (8 points, 2026-11-30): changed" in md
    assert "policy of eagle3-topk1-v2 on-above (threshold C=30) → always-on" in md
    assert "eagle3-topk4-v1" not in md.split("**Policies changed**")[1].split("**Bests changed**")[0]
    assert "WARNING" not in md and "unchanged" not in md
    assert md == diff_markdown(settings_of(built), "HEAD~1")  # deterministic


def test_default_base_is_merge_base_with_main(built: Path) -> None:
    md = diff_markdown(settings_of(built))
    sha = git(built, "rev-parse", "--short", "main")
    assert md.startswith(f"### findings diff: `main` (merge base {sha}) → working tree\n")
    assert md.split("\n", 1)[1] == diff_markdown(settings_of(built), "main").split("\n", 1)[1]


def test_default_base_falls_back_to_parent(repo: Path) -> None:
    git(repo, "branch", "-q", "-m", "main", "trunk")
    md = diff_markdown(settings_of(repo))
    assert md.startswith("### findings diff: `HEAD~1` (")
    assert "`on-above` (threshold C=30) → `always-on`" in md


def test_same_revision_is_unchanged(built: Path) -> None:
    md = diff_markdown(settings_of(built), "HEAD")
    sha = git(built, "rev-parse", "--short", "HEAD")
    assert md == f"findings diff: no change against `HEAD` ({sha}) (4 campaigns, 38 points).\n"  # one line


def test_store_absent_at_base_is_empty(built: Path) -> None:
    md = diff_markdown(settings_of(built), "HEAD~2")
    assert "Store: 0 campaigns, 0 points → 4 campaigns, 38 points." in md
    assert "`eagle3-topk4-v1`: (not compared) → `off`" in md
    for name in ("single-stream", "parallel-sweep", "overlap-topk1", "nightly-1130"):
        assert f"- `{name}` (" in md


def test_uncommitted_run_is_compared(repo: Path) -> None:
    git(repo, "checkout", "-q", "main")
    (repo / "n.csv").write_text(NIGHTLY)
    ingest(repo / "benchmarks" / "results", str(repo / "n.csv"))
    md = diff_markdown(settings_of(repo), "HEAD")
    assert "`on-above` (threshold C=30) → `always-on`" in md and "`nightly-1130`" in md


def test_edits_are_flagged(repo: Path) -> None:
    runs = repo / "benchmarks" / "results" / "runs"
    seed_file = next(p for p in sorted(runs.glob("*.json")) if "parallel-sweep" in p.read_text())
    doc = json.loads(seed_file.read_text())
    for p in doc["points"]:
        if (p["campaign"], p["config"], p["concurrency"]) == ("parallel-sweep", "baseline", 70):
            p["metrics"]["output_throughput_tok_s"] = 700.0
    seed_file.write_text(json.dumps(doc, indent=1))
    nightly_file = next(p for p in runs.glob("*.json") if "nightly-1130" in p.read_text())
    nightly_file.unlink()
    md = diff_markdown(settings_of(repo), "HEAD")
    assert "> [!WARNING]" in md
    assert "> - removed campaign `nightly-1130` (8 points at the base)" in md
    assert f"> - removed run file `runs/{nightly_file.name}`" in md
    assert f"> - rewritten run file `runs/{seed_file.name}`" in md
    assert "- cell `parallel-sweep` / `diverse-prompts` / `baseline` C=70: 784.2 → 700.0 tok/s (-10.7%" in md
    assert "`always-on` → `on-above` (threshold C=30)" in md


def test_errors_are_one_line(repo: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    s = settings_of(repo)
    with pytest.raises(FindingsError, match="unknown git revision 'no-such-ref'"):
        diff_markdown(s, "no-such-ref")
    with pytest.raises(FindingsError, match="not a git revision"):
        diff_markdown(s, "--output=x")
    outside = tmp_path / "outside"
    outside.mkdir()
    monkeypatch.setenv("GIT_CEILING_DIRECTORIES", str(tmp_path))
    with pytest.raises(FindingsError, match="not inside a git repository"):
        diff_markdown(s.with_overrides(store=str(outside / "store")), "HEAD")
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    with pytest.raises(FindingsError, match="git is not installed"):
        diff_markdown(s, "HEAD")


def test_more_points_in_an_existing_campaign(repo: Path) -> None:
    (repo / "repeat.csv").write_text(
        "campaign,order,workload,config,concurrency,output_throughput_tok_s\n"
        "overlap-topk1,3,diverse-prompts,baseline,30,700.0\n")
    ingest(repo / "benchmarks" / "results", str(repo / "repeat.csv"))
    md = diff_markdown(settings_of(repo), "HEAD")
    assert "- `overlap-topk1` (existing campaign): 1 more point" in md
    assert "WARNING" not in md and "cell `overlap-topk1`" not in md  # 689.4 -> 694.7 is within the floor


def test_single_commit_defaults_to_head(tmp_path: Path) -> None:
    repo = tmp_path / "one"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "trunk")
    (repo / "findings.toml").write_text(TOML)
    commit(repo, "settings")
    # no store on either side: not a store (a typo'd --store must not pass green)
    with pytest.raises(NotAStoreError, match="not a findings store"):
        diff_markdown(settings_of(repo))
    (repo / "benchmarks" / "results" / "runs").mkdir(parents=True)
    md = diff_markdown(settings_of(repo))
    assert md.startswith("findings diff: no change against `HEAD` (")
    assert md.endswith("(0 campaigns, 0 points).\n") and md.count("\n") == 1


def test_two_refs_compare_the_stores_at_both(repo: Path) -> None:
    """`findings diff A B` (issue 36): both sides from git, the working tree
    ignored; `diff` and `diff REF` keep comparing with the working tree."""
    def diff(*refs: str) -> tuple[int, str]:
        r = CliRunner().invoke(main, ["--settings", str(repo / "findings.toml"), "diff", *refs])
        return r.exit_code, r.output

    main_sha, pr_sha = git(repo, "rev-parse", "--short", "main"), git(repo, "rev-parse", "--short", "pr")
    # an uncommitted change in the working tree, which A B must not see
    (repo / "repeat.csv").write_text("campaign,order,workload,config,concurrency,output_throughput_tok_s\n"
                                     "overlap-topk1,3,diverse-prompts,baseline,30,700.0\n")
    ingest(repo / "benchmarks" / "results", str(repo / "repeat.csv"))
    code, out = diff("main", "pr")
    assert code == 0, out
    assert out.splitlines()[0] == f"### findings diff: `main` ({main_sha}) → `pr` ({pr_sha})"
    assert "`on-above` (threshold C=30) → `always-on`" in out and "- `nightly-1130` (8 points" in out
    assert "overlap-topk1` (existing campaign)" not in out  # the working tree's extra point is not a side
    code, out = diff("pr", "main")  # the other way round: the campaign is gone
    assert code == 0 and "`always-on` → `on-above` (threshold C=30)" in out, out
    code, out = diff("HEAD", "HEAD")
    assert (code, out) == (0, f"findings diff: no change at `HEAD` ({pr_sha}) against `HEAD` ({pr_sha}) "
                              f"(4 campaigns, 38 points).\n")
    # one ref: against the working tree, as before (its extra point shows)
    code, out = diff("HEAD")
    assert code == 0 and out.splitlines()[0].endswith("→ working tree") and "1 more point" in out, out
    code, out = diff("main", "no-such-ref")
    assert (code, out.strip().splitlines()) == (1, [f"Error: unknown git revision 'no-such-ref' in {repo}"])


def test_a_revisions_runs_read_as_the_render_reads_them_and_sidecars_checked(tmp_path: Path) -> None:
    """runs_at reads each sidecar's records only where the derivation needs
    them, as the render's reader does (issue 38, D165): the same runs as
    findings/document/cache.py's ``load`` gives for that tree. A sidecar
    that does not match its run file's sha256 is still an error, parsed or not."""
    from dataclasses import replace as dc_replace

    from test_sidecars import RECORDS, _run

    from findings import store as store_mod
    from findings.core.errors import StoreError
    from findings.core.model import THROUGHPUT
    from findings.document import cache as rendercache
    from findings.document.diff import runs_at

    repo = tmp_path / "repo"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    (repo / "findings.toml").write_text('[findings]\nstore = "st"\nbaseline = "baseline"\n')
    st = repo / "st"
    store_mod.add_run(st, _run("r1", RECORDS), create=True)  # a failed count: its records are not needed
    needs = _run("r2", RECORDS)
    needs = dc_replace(needs, points=tuple(p._replace(metrics={THROUGHPUT: p.metrics[THROUGHPUT]})
                                           for p in needs.points))  # no failed count: counted from its records
    store_mod.add_run(st, needs)
    commit(repo, "runs")
    head = git(repo, "rev-parse", "HEAD")
    got = runs_at(repo, head, "st")
    want = rendercache.load(st, rendercache.scan(st)).runs
    assert [dc_replace(r, path=None) for r in got] == [dc_replace(r, path=None) for r in want]
    assert [p.requests for p in got[0].points] == [None, None, None]  # r1: not read
    assert got[1].points[2].requests == {"error": ["timeout"]}  # r2: what the validity counts read
    assert "sent_s" not in (got[1].points[0].requests or {})

    side = st / "runs" / f"r1{SIDECAR_SUFFIX}"
    side.write_bytes(side.read_bytes() + b"\n")  # another file under its name
    commit(repo, "a changed sidecar")
    with pytest.raises(StoreError, match="does not match the sha256 its run file recorded"):
        runs_at(repo, git(repo, "rev-parse", "HEAD"), "st")


def test_the_head_side_derived_aside_gives_the_same_summary(built: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`diff A B` derives the head revision in a forked process while this
    one derives the base (D166): the summary is the one derived here, and an
    error of the head side is raised here, with its own words."""
    from findings.core import aside
    started: list[str] = []

    class Spy(aside._Forked):
        def __init__(self, fn):
            started.append(fn.__name__)
            super().__init__(fn)

    monkeypatch.setattr(aside, "_Forked", Spy)
    s = settings_of(built)
    forked = diff_markdown(s, "main", "pr")
    assert "`on-above` (threshold C=30) → `always-on`" in forked
    assert aside.cores() < 2 or "head_side" in started  # it did go aside
    with pytest.raises(FindingsError, match="unknown git revision 'no-such-ref'"):
        diff_markdown(s, "main", "no-such-ref")
    monkeypatch.setattr(aside, "cores", lambda: 1)  # no second core: everything here
    assert diff_markdown(s, "main", "pr") == forked
    with pytest.raises(FindingsError, match="unknown git revision 'no-such-ref'"):
        diff_markdown(s, "main", "no-such-ref")
