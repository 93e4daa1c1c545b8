"""When the disk says no: full disks, read-only mounts and denied writes.

Real filesystem failures: a small tmpfs mounted for the test (CI runs as
root), filled up or remounted read-only, and a real unprivileged user for
"permission denied". Where mounting is impossible the errno is injected at
the child's ``os`` calls instead, and the test id says ``injected``
(tests/disks.py). Every command runs as the user runs it, in a child
process, so stderr is what the user sees: one line, no traceback.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import HISTORY, ROOT
from disks import Disk, findings, mechanism, small_disk, unprivileged

from findings import store as store_lib

pytestmark = pytest.mark.parametrize("kind", [mechanism()])

def toml() -> str:
    return f'[findings]\nstore = "st"\ndocument = "doc.md"\ntemplates = "{ROOT / "templates"}"\n'


CSV = """campaign,date,workload,config,concurrency,output_throughput_tok_s
later,2026-12-01,w,baseline,1,100.0
later,2026-12-01,w,spec,1,150.0
"""

CROSSOVER = """campaign,date,workload,config,concurrency,output_throughput_tok_s
x,2026-12-01,w,baseline,1,100.0
x,2026-12-01,w,spec,1,150.0
x,2026-12-01,w,baseline,8,400.0
x,2026-12-01,w,spec,8,440.0
x,2026-12-01,w,baseline,64,1000.0
x,2026-12-01,w,spec,64,700.0
"""


@pytest.fixture
def disk(tmp_path: Path, kind: str):
    with small_disk(tmp_path) as d:
        assert d.kind == kind
        yield d


def seeded(d: Disk) -> Path:
    """A project on the disk: findings.toml and the seed store."""
    proj = d.root / "proj"
    proj.mkdir()
    (proj / "findings.toml").write_text(toml())
    r = findings("--store", str(proj / "st"), "ingest", "table", str(HISTORY / "measurements.csv"),
                 "--configs", str(HISTORY / "configs.csv"), "--create")
    assert r.returncode == 0, r.stderr
    return proj


def snapshot(store: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(store.rglob("*")) if p.is_file() and p.name != ".filler"}


def one_line_error(r: subprocess.CompletedProcess[str]) -> str:
    assert r.returncode == 1, (r.returncode, r.stdout, r.stderr)
    assert "Traceback" not in r.stderr + r.stdout, r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: "), r.stderr
    return lines[0]


def no_temp_files(folder: Path) -> None:
    assert not [p for p in folder.rglob("*") if p.name.startswith(".tmp-")], list(folder.rglob(".tmp-*"))


def healthy(store: Path, env: dict[str, str] | None = None) -> str:
    r = findings("--store", str(store), "store", "check", env=env)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "Traceback" not in r.stderr
    return r.stdout


def test_ingest_on_a_full_disk(disk: Disk, tmp_path: Path, kind: str) -> None:
    proj = seeded(disk)
    st = proj / "st"
    csv = tmp_path / "later.csv"
    csv.write_text(CSV)
    before = snapshot(st)
    with disk.full():
        line = one_line_error(findings("--store", str(st), "ingest", "table", str(csv), env=disk.env()))
        assert re.fullmatch(rf"Error: {re.escape(str(st))}/runs/\S+\.json: cannot write: no space left on device; "
                            r"nothing was written; the store is unchanged", line), line
        assert snapshot(st) == before
        no_temp_files(st)
        assert "0 errors" in healthy(st, disk.env()) or "clean" in healthy(st, disk.env())
        # reading a full store is fine
        r = findings("--store", str(st), "conclusions", env=disk.env())
        assert r.returncode == 0 and "workload" in r.stdout, r.stderr
    r = findings("--store", str(st), "ingest", "table", str(csv))  # space is back: the same file goes in
    assert r.returncode == 0, r.stderr


def test_ingest_on_a_read_only_store_and_every_read_path(disk: Disk, tmp_path: Path, kind: str) -> None:
    proj = seeded(disk)
    st = proj / "st"
    (st / ".lock").unlink()  # readers must never need (or create) it
    csv = tmp_path / "later.csv"
    csv.write_text(CSV)
    before = snapshot(st)
    with disk.read_only():
        env = disk.env()
        line = one_line_error(findings("--store", str(st), "ingest", "table", str(csv), env=env))
        assert line == (f"Error: {st}/.lock: cannot take the write lock: read-only file system; "
                        f"nothing was written; the store is unchanged"), line
        settings = ["--settings", str(proj / "findings.toml")]
        for args in (["conclusions"], ["conclusions", "--json"], ["render", "--output", "-"],
                     ["deploy", "--out", str(tmp_path / "deploy")], ["store", "check"]):
            r = findings(*settings, *args, env=env)
            assert r.returncode == 0, (args, r.stderr)
            assert "Traceback" not in r.stderr and r.stdout, args
        assert "# " in findings(*settings, "render", "--output", "-", env=env).stdout
        # a document on the read-only mount: render says so in one line, --check still reads
        line = one_line_error(findings(*settings, "render", env=env))
        assert line == f"Error: {proj}/doc.md: cannot write: read-only file system; the document was not changed"
        r = findings(*settings, "render", "--check", env=env)
        assert r.returncode == 1 and "is stale" in r.stderr and "Traceback" not in r.stderr
        # the bench refuses before it measures anything (no server is even started)
        matrix = tmp_path / "m.toml"
        matrix.write_text(MATRIX.format(python=sys.executable, concurrency="[1]"))
        line = one_line_error(findings("--store", str(st), "bench", str(matrix), "--log-dir", str(tmp_path / "logs"),
                                       "--no-progress", env=env))
        assert line.endswith("read-only file system; nothing was measured; the store is unchanged"), line
        if kind == "tmpfs":  # a store not made yet on the read-only mount: refused, and nothing created
            line = one_line_error(findings("--store", str(disk.root / "new"), "bench", str(matrix), "--log-dir",
                                           str(tmp_path / "logs"), "--no-progress", "--create", env=env))
            assert line == (f"Error: {disk.root}: cannot create the store there: read-only file system; "
                            f"nothing was measured; the store is unchanged"), line
        assert not (tmp_path / "logs").exists()
    assert snapshot(st) == before and not (st / ".lock").exists()


def test_render_and_deploy_on_a_full_disk(disk: Disk, tmp_path: Path, kind: str) -> None:
    proj = seeded(disk)
    settings = ["--settings", str(proj / "findings.toml")]
    r = findings(*settings, "render")
    assert r.returncode == 0, r.stderr
    doc = (proj / "doc.md").read_text()
    csv = tmp_path / "later.csv"
    csv.write_text(CSV.replace("w,", "diverse-prompts,"))
    ingest = findings(*settings, "ingest", "table", str(csv))
    assert ingest.returncode == 0, ingest.stderr  # the document is now stale
    crossover = tmp_path / "crossover.csv"  # a policy with a threshold: deploy writes an adaptive file
    crossover.write_text(CROSSOVER)
    assert findings("--store", str(disk.root / "st2"), "ingest", "table", str(crossover), "--create").returncode == 0
    with disk.full():
        line = one_line_error(findings(*settings, "render", env=disk.env()))
        assert line == f"Error: {proj}/doc.md: cannot write: no space left on device; the document was not changed"
        assert (proj / "doc.md").read_text() == doc
        no_temp_files(proj)
        out = disk.root / "deploy"
        line = one_line_error(findings("--store", str(disk.root / "st2"), "deploy", "--out", str(out), "--steps", "3",
                                       env=disk.env()))
        assert line.startswith(f"Error: {out}/") and ": cannot write: no space left on device; 0 of " in line, line
        assert line.endswith("adaptive files written (none); no settings printed"), line
        assert not [p for p in out.rglob("*") if p.is_file()]
    assert findings(*settings, "render").returncode == 0


@pytest.mark.skipif(unprivileged() is None, reason="no unprivileged way to run this checkout here")
def test_permission_denied(tmp_path: Path, kind: str) -> None:
    """The kernel's own EACCES: a store and a document folder without write
    permission, and a process to which permissions apply (nobody, or root
    without CAP_DAC_OVERRIDE)."""
    label, prefix, user = unprivileged()  # type: ignore[misc]
    tmp_path.chmod(0o755)
    proj = tmp_path / "proj"
    proj.mkdir(mode=0o755)
    (proj / "findings.toml").write_text(toml())
    st = proj / "st"
    r = findings("--store", str(st), "ingest", "table", str(HISTORY / "measurements.csv"),
                 "--configs", str(HISTORY / "configs.csv"), "--create")
    assert r.returncode == 0, r.stderr
    csv = tmp_path / "later.csv"
    csv.write_text(CSV)
    csv.chmod(0o644)
    for path, mode in ((st / ".lock", 0o444), (st / "runs", 0o555), (st, 0o555), (proj, 0o555)):
        path.chmod(mode)
    before = snapshot(st)
    try:
        line = one_line_error(findings("--store", str(st), "ingest", "table", str(csv), user=user, prefix=prefix))
        assert line == (f"Error: {st}/.lock: cannot take the write lock: permission denied; "
                        f"nothing was written; the store is unchanged"), (label, line)
        settings = ["--settings", str(proj / "findings.toml")]
        line = one_line_error(findings(*settings, "render", user=user, prefix=prefix))
        assert line == f"Error: {proj}/doc.md: cannot write: permission denied; the document was not changed"
        r = findings(*settings, "conclusions", user=user, prefix=prefix)
        assert r.returncode == 0, r.stderr
        assert snapshot(st) == before
    finally:
        for path in (proj, st, st / "runs"):
            path.chmod(0o755)


@pytest.mark.skipif(unprivileged() is not None, reason="the kernel's own refusal is tested above")
def test_permission_denied_injected(disk: Disk, tmp_path: Path, kind: str) -> None:
    """The same refusal where no unprivileged user can run the checkout: EACCES injected (labelled)."""
    proj = seeded(disk)
    st = proj / "st"
    csv = tmp_path / "later.csv"
    csv.write_text(CSV)
    before = snapshot(st)
    disk.inject = f"EACCES:{st}/runs"
    line = one_line_error(findings("--store", str(st), "ingest", "table", str(csv), env=disk.env()))
    assert re.fullmatch(rf"Error: {re.escape(str(st))}/runs/\S+\.json: cannot write: permission denied; "
                        r"nothing was written; the store is unchanged", line), line
    assert snapshot(st) == before
    no_temp_files(st)


# ------------------------------------------------------------------ the bench

MATRIX = """
[defaults]
api = "native"
concurrency = {concurrency}
repeats = 1
warmup = 0
health_timeout_s = 60

[workloads.w]
prompts = "diverse"
input_len = 32
output_len = 64
num_prompts = 8

[configs.baseline]
launch = "{python} -m findings emulate --port {{port}} --profile baseline --speed 2 --seed 4242"

[[campaigns]]
name = "fill"
configs = ["baseline"]
workloads = ["w"]
"""


def emulators_running() -> list[str]:
    found = []
    for p in Path("/proc").glob("[0-9]*"):
        try:
            cmd = (p / "cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        if "findings emulate" in cmd and "--seed 4242" in cmd:
            found.append(cmd)
    return found


def test_bench_store_fills_up_after_the_second_point(disk: Disk, tmp_path: Path, kind: str) -> None:
    st = disk.root / "st"
    logs = tmp_path / "logs"
    matrix = tmp_path / "m.toml"
    matrix.write_text(MATRIX.format(python=sys.executable, concurrency="[1, 2, 4]"))
    store_lib.create(st)  # before the disk is made to fill: only the points count
    with disk.fills_after(2, st / "runs"):
        r = findings("--store", str(st), "bench", str(matrix), "--log-dir", str(logs), "--no-progress",
                     "--date", "2026-12-01", env=disk.env())
        stored = sorted((st / "runs").glob("*.json"))
        no_temp_files(st)
    assert r.returncode == 1, r.stdout + r.stderr
    assert "Traceback" not in r.stdout + r.stderr, r.stderr
    out = r.stdout.strip().splitlines()
    assert out[-2] == (f"stopped at the first refused write: stored 2 points in {st} "
                       f"(baseline w C=1 rep 1/1; baseline w C=2 rep 1/1)"), out
    problem = out[-1]
    # The third point's first file is refused: its sidecar (written before its run file).
    m = re.fullmatch(rf"problem: {re.escape(str(st))}/runs/(bench-\S+)\.(?:requests\.json\.gz|json): "
                     r"cannot write: no space left on device; "
                     r"the point baseline w C=4 rep 1/1 was not stored; "
                     r"its measurements are in (\S+) \(store them later: findings ingest recovery (\S+)\)", problem)
    assert m, problem
    assert m.group(2) == m.group(3) and Path(m.group(2)).parent == logs
    assert len(stored) == 2
    assert not emulators_running(), "the launched server was not torn down"
    assert "0 errors" in healthy(st) or "clean" in healthy(st)
    # space is back: the recovery file completes the campaign
    r = findings("--store", str(st), "ingest", "recovery", m.group(2))
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "ingested 1 recovered runs (1 points; campaigns: fill)"
    r = findings("--store", str(st), "ingest", "recovery", m.group(2))  # again: nothing new, said so
    assert r.returncode == 0 and "ingested 0 recovered runs" in r.stdout and "1 already stored" in r.stdout
    points = [json.loads(p.read_text())["points"][0] for p in sorted((st / "runs").glob("*.json"))]
    assert sorted(p["concurrency"] for p in points) == [1, 2, 4]
    assert {p["campaign"] for p in points} == {"fill"}
    healthy(st)


def test_bench_recovery_refused_everywhere_injected(disk: Disk, tmp_path: Path, kind: str) -> None:
    """INJECTED on every kind: the recovery file refused in every folder tried
    (logs, the temp folder, home). Python's temp folder falls back to /tmp,
    which a test must not fill, so here ENOSPC is injected for every path
    once the first point is stored (two links: its sidecar, its run file); the message must say the point is lost."""
    st = disk.root / "st"
    matrix = tmp_path / "m.toml"
    matrix.write_text(MATRIX.format(python=sys.executable, concurrency="[1, 2]"))
    store_lib.create(st)  # before the injection: only the points' links count
    disk.inject = "ENOSPC:/:2"  # the first point's sidecar and run file, then nothing
    r = findings("--store", str(st), "bench", str(matrix), "--log-dir", str(tmp_path / "logs"), "--no-progress",
                 env=disk.env())
    disk.inject = None
    assert r.returncode == 1 and "Traceback" not in r.stdout + r.stderr, r.stdout + r.stderr
    problem = r.stdout.strip().splitlines()[-1]
    assert "the point baseline w C=2 rep 1/1 was not stored; its measurements are lost: the recovery file could " \
           "not be written either (" in problem, problem
    assert "no space left on device" in problem.split("lost:")[1]
    assert len(list((st / "runs").glob("*.json"))) == 1
    assert not emulators_running()
    healthy(st)


def test_diff_writes_nothing(tmp_path: Path, kind: str) -> None:
    """``findings diff`` reads the base store from git into memory: no temp folder needed."""
    repo = tmp_path / "repo"
    repo.mkdir()
    env = {**os.environ, "GIT_CONFIG_GLOBAL": os.devnull, "GIT_CONFIG_NOSYSTEM": "1"}

    def git(*args: str) -> None:
        subprocess.run(["git", "-c", "user.name=T", "-c", "user.email=t@e", "-c", "commit.gpgsign=false", *args],
                       cwd=repo, check=True, capture_output=True, env=env)
    git("init", "-q", "-b", "main")
    (repo / "findings.toml").write_text('[findings]\nstore = "st"\n')
    shutil.copytree(HISTORY, repo / "in")
    assert findings("--store", str(repo / "st"), "ingest", "table", str(repo / "in" / "measurements.csv"),
                    "--configs", str(repo / "in" / "configs.csv"), "--create").returncode == 0
    git("add", "-A")
    git("commit", "-q", "-m", "seed")
    (repo / "later.csv").write_text(CSV)
    assert findings("--store", str(repo / "st"), "ingest", "table", str(repo / "later.csv")).returncode == 0
    nowhere = tmp_path / "no-such-tmp"
    r = findings("--settings", str(repo / "findings.toml"), "diff", "HEAD", env={**env, "TMPDIR": str(nowhere)})
    assert r.returncode == 0, r.stderr
    assert "New campaigns" in r.stdout and "later" in r.stdout
