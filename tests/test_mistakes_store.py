"""Everyday mistakes with the store, each caught in one line (issue 36, D94):
a writer given a mistyped store path, a run file edited by hand, an
amendment of an edited file. Real CLI, real tmp stores, real files."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest
from conftest import FIXTURES, HISTORY, SGL, cache_off, cli

from findings import store as store_lib
from findings.store import check as storecheck
from findings.store.schema import SEAL_KEY, seal_state


def _tree(root: Path) -> dict[str, bytes]:
    """Every file under ``root`` (the lock's and index's bytes left out)."""
    if not root.exists():
        return {}
    return {str(p.relative_to(root)): (b"" if p.name.startswith((".lock", ".findings-index")) else p.read_bytes())
            for p in sorted(root.rglob("*")) if p.is_file()}


def _table(store: Path, *extra: str):
    return cli("ingest", "table", str(HISTORY / "measurements.csv"), "--configs", str(HISTORY / "configs.csv"),
               *extra, store=store)


def _one_error(r) -> str:
    lines = r.output.strip().splitlines()
    assert len(lines) == 1, r.output
    return lines[0]


# ---------------------------------------------------------------- 1. writers refuse a path that is no store

WRITERS = [
    ("ingest", "table", str(HISTORY / "measurements.csv")),
    ("ingest", "auto", str(HISTORY / "measurements.csv")),
    ("ingest", "sglang-bench", str(SGL / "v0_5_23.jsonl"), "--config", "b", "--campaign", "c", "--workload", "w",
     "--date", "2026-11-01"),
]


@pytest.mark.parametrize("argv", WRITERS, ids=lambda a: " ".join(a[:2]))
def test_a_writer_refuses_a_mistyped_store(tmp_path, argv):
    typo = tmp_path / "benchmarks" / "resutls"
    r = cli(*argv, store=typo)
    assert r.exit_code == 2, r.output
    assert _one_error(r) == (f"Error: {typo}: no such store (create it with --create, or findings init); "
                             "nothing was written")
    assert not typo.exists() and not (tmp_path / "benchmarks").exists()


def test_bench_refuses_a_mistyped_store_before_measuring(tmp_path):
    typo = tmp_path / "resutls"
    r = cli("bench", "--url", "http://127.0.0.1:9", "--config", "b", "--campaign", "c", "--workload", "w",
            "--concurrency", "1", "--no-progress", store=typo)  # nothing listens on port 9: not reached
    assert r.exit_code == 2, r.output
    assert _one_error(r) == (f"Error: {typo}: no such store (create it with --create, or findings init); "
                             "nothing was measured")
    assert not typo.exists()


@pytest.mark.parametrize("argv", [("store", "retract", "table-0041a71bbc6e", "--why", "x"),
                                  ("store", "relabel", "table-0041a71bbc6e", "--config", "x"),
                                  ("store", "migrate")], ids=lambda a: a[1])
def test_amendments_never_create_a_store(tmp_path, argv):
    typo = tmp_path / "resutls"
    r = cli(*argv, store=typo)
    assert r.exit_code == 2, r.output
    assert _one_error(r) == (f"Error: {typo}: not a findings store (no such folder); "
                             "check --store, $FINDINGS_STORE or findings.toml")
    assert not typo.exists()


def test_create_makes_the_store_a_first_write_makes(tmp_path):
    new = tmp_path / "new" / "store"
    r = _table(new, "--create")
    assert r.exit_code == 0, r.output
    assert (new / "runs" / ".gitkeep").exists() and (new / ".gitignore").exists()
    assert (new / ".findings-index.sqlite3").exists() and len(list((new / "runs").glob("*.json"))) == 1
    r = cli("store", "check", store=new)
    assert r.exit_code == 0 and "1 run files read, 0 errors, 0 warnings; index current: 1 runs" in r.output, r.output
    # --create on a store that is one already changes nothing but adds the run.
    r = cli("ingest", "table", str(FIXTURES / "rigor.csv"), "--configs", str(FIXTURES / "rigor-configs.csv"),
            "--create", store=new)
    assert r.exit_code == 0, r.output
    assert len(list((new / "runs").glob("*.json"))) == 2


def test_an_empty_folder_needs_create_and_a_full_one_is_refused(tmp_path):
    empty = tmp_path / "empty"
    empty.mkdir()
    r = _table(empty)
    assert r.exit_code == 2
    assert _one_error(r) == (f"Error: {empty}: an empty folder, not a findings store (create the store there "
                             "with --create, or findings init); nothing was written")
    assert list(empty.iterdir()) == []
    assert _table(empty, "--create").exit_code == 0

    # A folder with other files (the repository root, say) never becomes a store.
    full = tmp_path / "repo"
    full.mkdir()
    (full / "README.md").write_text("hello\n")
    before = _tree(full)
    for extra in ((), ("--create",)):
        r = _table(full, *extra)
        assert r.exit_code == 2, r.output
        assert _one_error(r) == (f"Error: {full}: not a findings store (it holds files but no runs/ folder); "
                                 "check --store, $FINDINGS_STORE or findings.toml (--create makes a store only "
                                 "in a new or empty folder); nothing was written")
        assert _tree(full) == before


def test_create_is_the_library_call_findings_init_makes(tmp_path):
    made = store_lib.create(tmp_path / "s")
    assert made == tmp_path / "s" and store_lib.is_store(made)
    assert sorted(p.name for p in (made / "runs").iterdir()) == [".gitkeep"]
    r = cli("store", "check", store=made)
    assert r.exit_code == 0 and "0 run files read, 0 errors, 0 warnings; index current: 0 runs" in r.output, r.output
    r = cli("conclusions", store=made)
    assert r.exit_code == 0 and r.output.strip() == "no points in the store"
    before = _tree(made)
    assert store_lib.create(made) == made and _tree(made) == before  # a store there: left as it is
    (tmp_path / "f").write_text("x")
    with pytest.raises(store_lib.NotAStoreError, match="not a folder"):
        store_lib.create(tmp_path / "f")


# ---------------------------------------------------------------- 2. a run file edited by hand

def _sealed_store(tmp_path: Path) -> tuple[Path, Path]:
    st = tmp_path / "st"
    assert _table(st, "--create").exit_code == 0
    (run,) = sorted((st / "runs").glob("*.json"))
    return st, run


def _check_errors(st: Path) -> tuple[int, list[str]]:
    r = cli("store", "check", store=st)
    return r.exit_code, [line for line in r.output.splitlines() if line.startswith("error:")]


def test_every_written_run_file_is_sealed(tmp_path):
    st, run = _sealed_store(tmp_path)
    raw = run.read_bytes()
    doc = json.loads(raw)
    assert doc["schema_version"] == 5 and list(doc)[-1] == SEAL_KEY and seal_state(raw) == "sealed"
    assert _check_errors(st) == (0, [])
    assert storecheck.edited(st) == []


def test_store_check_names_an_edited_run_file(tmp_path):
    st, run = _sealed_store(tmp_path)
    original = run.read_bytes()
    run.write_bytes(original.replace(b'"output_throughput_tok_s": 784.2', b'"output_throughput_tok_s": 884.2', 1))
    assert run.read_bytes() != original
    code, errors = _check_errors(st)
    assert code == 1
    assert errors == [
        f"error: {run}: edited by hand since findings wrote it: its data no longer matches the {SEAL_KEY} "
        f"recorded in it. Repair: see the edit with `git diff -- {run}` and restore the file with `git checkout -- "
        f"{run}`; to change its labels, `findings store relabel {run.stem}`, to remove it, "
        f"`findings store retract {run.stem}`"]
    assert storecheck.edited(st) == [run]

    # Laid out again by an editor: the same data, still an edit, and said so.
    run.write_text(json.dumps(json.loads(original), indent=2))
    code, errors = _check_errors(st)
    assert code == 1 and len(errors) == 1 and "only its layout changed" in errors[0], errors
    # The seal removed.
    doc = json.loads(original)
    del doc[SEAL_KEY]
    run.write_text(json.dumps(doc, indent=1) + "\n")
    code, errors = _check_errors(st)
    assert code == 1 and len(errors) == 1 and f"its {SEAL_KEY} (the hash findings recorded of it) was removed" \
        in errors[0], errors
    run.write_bytes(original)
    assert _check_errors(st) == (0, []) and storecheck.edited(st) == []


def test_files_written_before_seals_are_said_to_be_unverifiable(tmp_path):
    st = tmp_path / "old"
    shutil.copytree(FIXTURES / "store", st)  # schema 4 and older: no seal
    r = cli("store", "check", store=st)
    assert r.exit_code == 0, r.output
    assert (f"note: {st / 'runs'}: 4 run files were written before findings sealed run files with their content "
            "hash (schema 4 or older): an edit of them cannot be seen") in r.output
    assert "error:" not in r.output and storecheck.edited(st) == []


def _render(project: Path, st: Path, out: Path) -> str:
    r = cli("--settings", str(project / "findings.toml"), "render", "--output", str(out), store=st)
    assert r.exit_code == 0, r.output
    return out.read_text()


FLAG = "> **Warning: the store was edited by hand.**"


def test_the_document_flags_an_edited_store_in_its_banner(project, tmp_path):
    st, run = _sealed_store(tmp_path)
    original = run.read_bytes()
    clean = _render(project, st, tmp_path / "a.md")
    assert "edited by hand" not in clean
    run.write_bytes(original.replace(b'"output_throughput_tok_s": 784.2', b'"output_throughput_tok_s": 884.2', 1))
    for out in ("b.md", "c.md"):  # a cold render and a warm one
        text = _render(project, st, tmp_path / out)
        flagged = [line for line in text.splitlines() if line.startswith(FLAG)]
        assert flagged == [f"{FLAG} 1 run file (`runs/{run.name}`) no longer matches what findings wrote; "
                           "`findings store check` says what changed and how to repair it."], flagged
        assert text.index(FLAG) < text.index("\n# ")  # in the banner, above the title
    with cache_off():
        assert FLAG in _render(project, st, tmp_path / "d.md")
    run.write_bytes(original)
    assert _render(project, st, tmp_path / "e.md") == clean  # restored: no flag, the same bytes


def _git(repo: Path, *args: str) -> None:
    env = {**os.environ, "GIT_CONFIG_GLOBAL": os.devnull, "GIT_CONFIG_NOSYSTEM": "1"}
    r = subprocess.run(["git", "-c", "user.name=T", "-c", "user.email=t@example.com", "-c", "commit.gpgsign=false",
                        *args], cwd=repo, capture_output=True, text=True, timeout=30, env=env)
    assert r.returncode == 0, r.stderr


def test_findings_diff_says_the_store_was_edited(tmp_path):
    repo = tmp_path / "repo"
    repo.mkdir()
    _git(repo, "init", "-q", "-b", "main")
    (repo / "findings.toml").write_text('[findings]\nstore = "results"\nbaseline = "baseline"\n')
    st = repo / "results"
    assert _table(st, "--create").exit_code == 0
    _git(repo, "add", "-A")
    _git(repo, "commit", "-qm", "seed")
    settings = ("--settings", str(repo / "findings.toml"))
    r = cli(*settings, "diff", "HEAD", store=st)
    assert r.exit_code == 0 and "edited by hand" not in r.output, r.output
    (run,) = sorted((st / "runs").glob("*.json"))
    run.write_bytes(run.read_bytes().replace(b'"output_throughput_tok_s": 784.2',
                                             b'"output_throughput_tok_s": 884.2', 1))
    r = cli(*settings, "diff", "HEAD", store=st)
    assert r.exit_code == 0, r.output
    flagged = [line for line in r.output.splitlines() if "edited by hand" in line]
    assert flagged == [f"> **Warning: the store was edited by hand** (working tree): 1 run file (`runs/{run.name}`) "
                       "no longer matches what findings wrote; `findings store check` says what changed and how "
                       "to repair it."], r.output
    _git(repo, "commit", "-qam", "edited")  # and between two revisions
    r = cli(*settings, "diff", "HEAD~1", "HEAD", store=st)
    assert r.exit_code == 0 and "edited by hand** (`HEAD`" in r.output, r.output


# ---------------------------------------------------------------- 3. an amendment never seals a hand edit

def test_relabel_refuses_an_edited_run_file(tmp_path):
    st, run = _sealed_store(tmp_path)
    run.write_bytes(run.read_bytes().replace(b'"output_throughput_tok_s": 784.2',
                                             b'"output_throughput_tok_s": 884.2', 1))
    before = _tree(st)
    r = cli("store", "relabel", "--select", "config=baseline", "--config", "baseline=base", store=st)
    assert r.exit_code == 1
    assert _one_error(r) == (f"Error: {run}: edited by hand since findings wrote it (it no longer matches its "
                             f"{SEAL_KEY}); restore it (git checkout -- {run}) before relabelling; nothing was "
                             "changed")
    assert _tree(st) == before and not (st / "amendments").exists()
