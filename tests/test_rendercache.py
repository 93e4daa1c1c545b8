"""The render cache (findings/document/cache.py, D77): a cold cache, a warm one
and none give the same bytes, on the seed store and on a synthetic store
with per-request records; a render after adding a campaign reads only the
new run files; a damaged cache is a miss, never a wrong document."""

from __future__ import annotations

import json
import os
import shutil
import sys
from pathlib import Path

import pytest

from conftest import ROOT, cache_off, cli, counting_forks, dying_forks
from findings.document import cache as rendercache
from findings import store as store_mod

sys.path.insert(0, str(ROOT / "benchmarks" / "perf"))
import render_scaling  # noqa: E402


def render(tmp: Path, *args: str) -> bytes:
    out = tmp / "out.md"
    r = cli(*args, "render", "--output", str(out))
    assert r.exit_code == 0, r.output
    return out.read_bytes()


@pytest.fixture()
def cache(render_cache: Path) -> Path:
    return render_cache


def test_the_seed_document_is_the_same_with_no_cache_a_cold_one_and_a_warm_one(tmp_path: Path, cache: Path) -> None:
    committed = (ROOT / "eagle-fast-verify.md").read_bytes()
    with cache_off():
        assert render(tmp_path, "--settings", str(ROOT / "findings.toml")) == committed
    assert not cache.exists()
    assert render(tmp_path, "--settings", str(ROOT / "findings.toml")) == committed  # cold
    assert list((cache / "documents").iterdir()) and list((cache / "stores").iterdir())
    assert cache.stat().st_mode & 0o777 == 0o700  # made private, whatever the umask
    assert render(tmp_path, "--settings", str(ROOT / "findings.toml")) == committed  # warm
    r = cli("--settings", str(ROOT / "findings.toml"), "render", "--check")
    assert r.exit_code == 0, r.output


def _counting(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    read: list[str] = []
    real = store_mod.read_run

    def counted(path: Path, requests: bool = True, raw: bytes | None = None):  # type: ignore[no-untyped-def]
        read.append(Path(path).name)
        return real(path, requests, raw)

    monkeypatch.setattr(store_mod, "read_run", counted)
    return read


def test_a_synthetic_store_renders_the_same_and_a_new_campaign_reads_only_its_runs(
        tmp_path: Path, cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    full = tmp_path / "full"
    render_scaling.build_store(full, 900, seed=3, request_fraction=0.3)
    names = sorted(p.name for p in (full / "runs").glob("*.json"))
    sidecars = sorted((full / "runs").glob(f"*{store_mod.SIDECAR_SUFFIX}"))
    assert sidecars and len(names) > 20
    # The store without its last campaign, then with it.
    last = max({n.split("-")[1] for n in names})
    store = tmp_path / "store"
    (store / "runs").mkdir(parents=True)
    for p in (full / "runs").iterdir():
        if last not in p.name:
            shutil.copy2(p, store / "runs" / p.name)
    settings = tmp_path / "findings.toml"
    settings.write_text(f'[findings]\ntitle = "cache"\nbaseline = "baseline"\ntemplates = "{ROOT / "templates"}"\n'
                        f'template = "eagle-fast-verify.md.j2"\nstore = "{store}"\ndocument = "doc.md"\n')
    args = ("--settings", str(settings))
    with cache_off():
        old_doc = render(tmp_path, *args)
    read = _counting(monkeypatch)
    assert render(tmp_path, *args) == old_doc  # cold: every run read once
    assert sorted(read) == sorted(n for n in names if last not in n)
    read.clear()
    assert render(tmp_path, *args) == old_doc and read == []  # warm: the document itself
    r = cli(*args, "conclusions", "--json")
    assert r.exit_code == 0 and read == []  # every run from the cache

    new = [n for n in names if last in n]
    for p in (full / "runs").iterdir():
        if last in p.name:
            shutil.copy2(p, store / "runs" / p.name)
    doc = render(tmp_path, *args)
    assert sorted(read) == sorted(new)  # only the new campaign's run files
    with cache_off():
        assert render(tmp_path, *args) == doc != old_doc

    # A damaged cache is a miss: every entry overwritten with garbage.
    for p in cache.rglob("*.pickle"):
        p.write_bytes(b"not a pickle")
    read.clear()
    assert render(tmp_path, *args) == doc and sorted(read) == names
    # A new time stamp alone: hashed again, the same content, nothing read.
    target = store / "runs" / names[0]
    stat = target.stat()
    os.utime(target, ns=(stat.st_atime_ns, stat.st_mtime_ns - 5_000_000_000))
    read.clear()
    assert render(tmp_path, *args) == doc and read == []
    # Other content (what no findings writer does, but an editor might): read again.
    edited = json.loads(target.read_text())
    edited["points"][0]["metrics"]["output_throughput_tok_s"] *= 3
    target.write_text(json.dumps(edited, indent=1))
    read.clear()
    changed = render(tmp_path, *args)
    assert read == [names[0]] and changed != doc
    with cache_off():
        assert render(tmp_path, *args) == changed


def test_an_unsafe_cache_folder_is_not_used(tmp_path: Path, cache: Path) -> None:
    cache.mkdir(mode=0o777)
    cache.chmod(0o777)  # others could plant entries: not read, not written
    assert render(tmp_path, "--settings", str(ROOT / "findings.toml")) == \
        (ROOT / "eagle-fast-verify.md").read_bytes()
    assert list(cache.iterdir()) == []


def test_entries_of_other_code_are_never_read(tmp_path: Path, cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A run entry is keyed by the findings code too: one written by another
    version (whose classes may differ) is never unpickled."""
    settings = ("--settings", str(ROOT / "findings.toml"))
    committed = (ROOT / "eagle-fast-verify.md").read_bytes()
    monkeypatch.setattr(rendercache, "_CODE", "another findings")
    assert render(tmp_path, *settings) == committed
    monkeypatch.setattr(rendercache, "_CODE", None)  # this code again
    read = _counting(monkeypatch)
    r = cli(*settings, "conclusions", "--json")
    assert r.exit_code == 0 and read == [p.name for p in sorted((ROOT / "benchmarks/results/runs").glob("*.json"))]


def test_where_the_cache_lives(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Its own folder beside the engine builds that tools/ caches in ~/.cache/findings."""
    monkeypatch.delenv("FINDINGS_CACHE_DIR", raising=False)
    monkeypatch.delenv("FINDINGS_CACHE", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert rendercache.folder() == tmp_path / "findings" / "render"
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert rendercache.folder() == tmp_path / "home" / ".cache" / "findings" / "render"
    monkeypatch.setenv("FINDINGS_CACHE_DIR", str(tmp_path / "mine"))
    assert rendercache.folder() == tmp_path / "mine"
    monkeypatch.setenv("FINDINGS_CACHE", "off")
    assert rendercache.folder() is None


def test_compiled_templates_are_kept_and_an_edited_or_damaged_one_is_compiled_again(
        tmp_path: Path, cache: Path) -> None:
    """jinja2's compiled templates live in the cache, one folder per findings
    code (D140): a render with them gives the bytes of one without; an edited
    template is compiled again (jinja2 checks its source's checksum), a
    damaged entry too, and a folder of other code is removed."""
    templates = tmp_path / "templates"
    shutil.copytree(ROOT / "templates", templates)
    settings = tmp_path / "findings.toml"
    settings.write_text((ROOT / "findings.toml").read_text()
                        .replace('store = "benchmarks/results"', f'store = "{ROOT / "benchmarks" / "results"}"')
                        .replace('templates = "templates"', f'templates = "{templates}"'))
    stale = cache / "templates" / ("0" * 32)
    stale.mkdir(parents=True)
    with cache_off():
        committed = render(tmp_path, "--settings", str(settings))
    assert render(tmp_path, "--settings", str(settings)) == committed
    [folder] = (cache / "templates").iterdir()
    assert folder.name == rendercache.code_fingerprint()[:32] and not stale.exists()
    kept = sorted(folder.iterdir())
    assert len(kept) >= 2  # the repository's template and the packaged base it extends
    shutil.rmtree(cache / "documents")  # the document is derived again, its templates read from the folder
    assert render(tmp_path, "--settings", str(settings)) == committed
    for entry in kept:
        entry.write_bytes(b"not jinja2's")
    shutil.rmtree(cache / "documents")
    assert render(tmp_path, "--settings", str(settings)) == committed
    assert all(p.read_bytes() != b"not jinja2's" for p in folder.iterdir())  # compiled and written again
    source = templates / "eagle-fast-verify.md.j2"
    source.write_text(source.read_text().replace("## Team notes", "## Team notes, edited"))
    edited = render(tmp_path, "--settings", str(settings))
    assert b"## Team notes, edited\n" in edited and edited.replace(b", edited", b"") == committed


def test_files_not_seen_before_are_hashed_by_two_threads_as_by_one(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """A scan into an empty cache hashes every file; two threads share the
    work (D168). Each file's key and seal state, which files are left out
    as unreadable, and the manifest are what one thread gives."""
    store = tmp_path / "store"
    render_scaling.build_store(store, 900, seed=5, request_fraction=0.3)
    runs = store / "runs"
    names = sorted(p.name for p in runs.iterdir() if not p.name.startswith("."))
    assert len(names) > 40 and any(n.endswith(store_mod.SIDECAR_SUFFIX) for n in names)
    edited = runs / [n for n in names if n.endswith(".json")][3]
    edited.write_text(edited.read_text().replace('"output_throughput_tok_s": ', '"output_throughput_tok_s": 1', 1))
    gone = [n for n in names if n.endswith(".json")][7]
    for p in runs.iterdir():  # written long enough ago to be kept in the manifest (RACY_S)
        os.utime(p, ns=(p.stat().st_atime_ns, p.stat().st_mtime_ns - 10_000_000_000))
    real_read = rendercache.diskio.read_bytes

    def reading(path: str) -> bytes:
        if str(path).endswith("/" + gone):
            raise FileNotFoundError(path)  # removed between the listing and the read
        return real_read(path)

    monkeypatch.setattr(rendercache.diskio, "read_bytes", reading)
    scans = {}
    for threads_from in (10 ** 9, 2):
        monkeypatch.setattr(rendercache, "HASH_THREADS_FROM", threads_from)
        monkeypatch.setenv("FINDINGS_CACHE_DIR", str(tmp_path / f"cache-{threads_from}"))
        found = rendercache.scan(store)
        manifest = json.loads(next((tmp_path / f"cache-{threads_from}" / "stores").iterdir()).read_text())
        scans[threads_from] = (found.files, found.known_edited, manifest["files"])
    assert scans[2] == scans[10 ** 9] and len(scans[2][2]) == len(names) - 1
    files, known_edited, _ = scans[2]
    assert known_edited == (edited.name,)
    assert gone not in dict(files) and len(files) == len([n for n in names if n.endswith(".json")]) - 1


def test_an_error_while_hashing_in_the_second_thread_is_raised(tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    store = tmp_path / "store"
    render_scaling.build_store(store, 900, seed=5, request_fraction=0.3)
    names = sorted(p.name for p in (store / "runs").iterdir())
    real = rendercache._hash_file

    def hashing(top: str, name: str) -> tuple[str, str] | None:
        if name == names[5]:  # every other file: the second thread's
            raise RuntimeError("disk on fire")
        return real(top, name)

    monkeypatch.setattr(rendercache, "_hash_file", hashing)
    monkeypatch.setattr(rendercache, "HASH_THREADS_FROM", 2)
    monkeypatch.setenv("FINDINGS_CACHE_DIR", str(tmp_path / "cache"))
    with pytest.raises(RuntimeError, match="disk on fire"):
        rendercache.scan(store)


def _grown_store(tmp_path: Path) -> tuple[Path, tuple[str, ...], list[str]]:
    store = tmp_path / "store"
    render_scaling.build_store(store, 900, seed=11, request_fraction=0.3)
    settings = tmp_path / "findings.toml"
    settings.write_text(f'[findings]\ntitle = "cache"\nbaseline = "baseline"\ntemplates = "{ROOT / "templates"}"\n'
                        f'template = "eagle-fast-verify.md.j2"\nstore = "{store}"\ndocument = "doc.md"\n')
    return store, ("--settings", str(settings)), sorted(p.name for p in (store / "runs").glob("*.json"))


def test_the_points_table_written_aside_is_there_when_the_command_ends(
        tmp_path: Path, cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """From KEEP_ASIDE_POINTS new points on, a forked process writes the
    points table while the render derives (D168); the command waits for
    it, so the next command reads every run from the table."""
    store, args, names = _grown_store(tmp_path)
    monkeypatch.setattr(rendercache, "KEEP_ASIDE_POINTS", 1)
    forked = counting_forks(monkeypatch)
    with cache_off():
        doc = render(tmp_path, *args)
    read = _counting(monkeypatch)
    assert render(tmp_path, *args) == doc and sorted(read) == names
    assert len(forked) == 1 and rendercache._KEEPING == []  # written aside, and waited for
    read.clear()
    r = cli(*args, "conclusions", "--json")
    assert r.exit_code == 0 and read == []  # every run from the table


def test_a_writer_that_dies_aside_leaves_the_table_written_here(
        tmp_path: Path, cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    store, args, names = _grown_store(tmp_path)
    monkeypatch.setattr(rendercache, "KEEP_ASIDE_POINTS", 1)
    dying_forks(monkeypatch)  # killed aside before it wrote anything, say: result() then writes it here
    first = render(tmp_path, *args)
    read = _counting(monkeypatch)
    r = cli(*args, "conclusions", "--json")
    assert r.exit_code == 0 and read == []
    with cache_off():
        assert render(tmp_path, *args) == first


def test_a_load_waits_for_the_table_the_load_before_writes(
        tmp_path: Path, cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Two loads in one process, with no command around them (a library
    user): the second reads the table only once the first's writer is
    done, so two writers never overlap and the second reads no file."""
    store, _, names = _grown_store(tmp_path)
    monkeypatch.setattr(rendercache, "KEEP_ASIDE_POINTS", 1)
    first = rendercache.load(store)
    assert len(rendercache._KEEPING) == 1
    read = _counting(monkeypatch)
    again = rendercache.load(store)
    assert read == [] and again == first and rendercache._KEEPING == []


@pytest.mark.parametrize("files", [[], "x", {"bench.json": {"a": 1, "b": 2, "c": 3, "d": 4, "e": 5}}, None])
def test_a_manifest_of_another_shape_is_a_miss(tmp_path: Path, cache: Path, files: object) -> None:
    """The manifest of a store's stats (cache.scan) is JSON the cache wrote;
    one of another shape (damaged, or hand-made) is read as no manifest,
    every file hashed again, never an error."""
    store = tmp_path / "store"
    shutil.copytree(ROOT / "tests" / "fixtures" / "store", store)
    for p in (store / "runs").iterdir():  # old enough to be kept in the manifest
        os.utime(p, ns=(p.stat().st_atime_ns, p.stat().st_mtime_ns - 10_000_000_000))
    expected = rendercache.scan(store)
    manifest = next((cache / "stores").iterdir())
    doc = json.loads(manifest.read_text())
    if isinstance(files, dict):
        files = {name: files["bench.json"] for name in doc["files"]}
    manifest.write_text(json.dumps(dict(doc, files=files)))
    again = rendercache.scan(store)
    assert again.files == expected.files and again.known_edited == expected.known_edited
    assert json.loads(manifest.read_text()) == doc  # written again, whole
