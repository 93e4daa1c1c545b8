"""A large store is read by two processes (findings/document/cache.py
``_read_all``, D133, D173): this one reads chunks of run files from the
first on, a forked one from the last back, until they meet. Real files, a
real fork: the dataset, the files found edited and the first error in file
order are those of one process reading them all."""

from __future__ import annotations

import os
import shutil
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from conftest import ROOT, cache_off
from findings.core import aside
from findings.core.errors import StoreError
from findings.document import cache as rendercache

sys.path.insert(0, str(ROOT / "benchmarks" / "perf"))
import render_scaling  # noqa: E402

pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="reads in two processes by fork only")


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("parallel") / "store"
    folder.mkdir()
    render_scaling.build_store(folder, 600, seed=3)
    return folder


def _load(store: Path, parallel: bool, monkeypatch: pytest.MonkeyPatch) -> tuple[object, tuple[str, ...]]:
    with monkeypatch.context() as m:
        m.setattr(rendercache, "PARALLEL_FILES", 2 if parallel else 10 ** 9)
        m.setattr(rendercache, "CHUNK_FILES", 3)  # several chunks, sent back one by one
        m.setattr(aside, "cores", lambda: 2)  # the one count of cores (core/aside.py)
        with cache_off():
            found = rendercache.scan(store)
            try:
                data = rendercache.load(store, found)
            except StoreError as exc:
                return ("refused", str(exc)), ()
        return data, found.edited


def _comparable(data: object) -> object:
    assert not isinstance(data, tuple)
    return (data.campaigns, data.configs, data.facts,  # type: ignore[attr-defined]
            [(p, dict(p.metrics)) for p in data.points],  # type: ignore[attr-defined]
            [(r.run_id, r.path, r.environment, r.configs) for r in data.runs])  # type: ignore[attr-defined]


def test_two_processes_read_what_one_reads(store: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    files = sorted((store / "runs").glob("*.json"))
    assert len(files) >= 12  # several chunks of 3 for each reader
    one, _ = _load(store, False, monkeypatch)
    readers = tmp_path / "readers"
    real = rendercache._read_files
    parent = os.getpid()

    def noted(top: str, names: list[str], *rest: bool) -> list[object]:
        with readers.open("a") as f:
            f.write(f"{os.getpid()} {names[0]} {len(names)}\n")
        # Each reader slowed as much, this one in the first of its chunks
        # too: whoever starts first, both get some.
        time.sleep(0.3)
        return real(top, names, *rest)  # type: ignore[return-value]

    monkeypatch.setattr(rendercache, "_read_files", noted)
    two, _ = _load(store, True, monkeypatch)
    assert _comparable(one) == _comparable(two)
    assert len(two.points) == 600  # type: ignore[attr-defined]
    calls = [line.split() for line in readers.read_text().splitlines()]
    order = [f.name for f in files]
    mine = [order.index(first) for pid, first, _ in calls if int(pid) == parent]
    forked = [order.index(first) for pid, first, _ in calls if int(pid) != parent]
    # This process from the first file on, the forked one from the last
    # chunk back; each a run of chunks, meeting once (a chunk both claimed
    # at once is read by both, and this process's reading kept).
    assert mine and forked and mine == sorted(mine) and forked == sorted(forked, reverse=True)
    assert mine[0] == 0 and max(mine) <= min(forked) and forked[0] == 3 * ((len(files) - 1) // 3)
    read = sum(int(n) for _, _, n in calls)
    assert len(files) <= read <= len(files) + 3
    assert len({first for _, first, _ in calls}) == -(-len(files) // 3)  # every chunk read


def test_an_error_in_the_forked_half_is_the_one_reported(store: Path, tmp_path: Path,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    copy = tmp_path / "store"
    shutil.copytree(store, copy)
    files = sorted((copy / "runs").glob("*.json"))
    late, later = files[-3], files[-1]  # both in the second half: the first of them is reported
    late.write_text(late.read_text().replace('"concurrency": ', '"concurrency": -', 1))
    later.write_text("{not json")
    one = _load(copy, False, monkeypatch)[0]
    two = _load(copy, True, monkeypatch)[0]
    assert one == two
    assert isinstance(two, tuple) and two[0] == "refused" and late.name in two[1] and "concurrency" in two[1]


def test_an_error_in_the_first_half_comes_before_the_forked_halfs(store: Path, tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    copy = tmp_path / "store"
    shutil.copytree(store, copy)
    files = sorted((copy / "runs").glob("*.json"))
    files[1].write_text("[]")
    files[-1].write_text("{not json")
    one = _load(copy, False, monkeypatch)[0]
    two = _load(copy, True, monkeypatch)[0]
    assert one == two and isinstance(two, tuple) and files[1].name in two[1]


def test_a_file_edited_by_hand_is_found_in_either_half(store: Path, tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    copy = tmp_path / "store"
    shutil.copytree(store, copy)
    files = sorted((copy / "runs").glob("*.json"))
    for f in (files[0], files[-2]):
        text = f.read_text()
        f.write_text(text.replace('"tool_version": "', '"tool_version": "x', 1))
    _, one = _load(copy, False, monkeypatch)
    _, two = _load(copy, True, monkeypatch)
    assert one == two == tuple(sorted((files[0].name, files[-2].name)))


def test_no_shared_map_means_one_reader(store: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Where the two readers' shared map cannot be made (no memory), this
    process reads every file itself, with the same outcome and no fork."""
    import errno
    import mmap
    one, _ = _load(store, False, monkeypatch)

    def refused(*args: object, **kwargs: object) -> object:
        raise OSError(errno.ENOMEM, "Cannot allocate memory")

    def no_fork() -> int:
        raise AssertionError("forked without a shared map")

    monkeypatch.setattr(mmap, "mmap", refused)
    monkeypatch.setattr(os, "fork", no_fork)
    two, _ = _load(store, True, monkeypatch)
    assert _comparable(one) == _comparable(two)


def test_a_forked_reader_that_dies_is_read_again_here(store: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    one, _ = _load(store, False, monkeypatch)

    def die(top: str, chunks: list[list[str]], out: int, *rest: bool) -> None:
        os._exit(3)  # the forked process ends without a word

    monkeypatch.setattr(rendercache, "_read_in_child", die)
    two, _ = _load(store, True, monkeypatch)
    assert _comparable(one) == _comparable(two)


def test_a_forked_reader_that_dies_half_way_is_read_again_from_there(store: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    one, _ = _load(store, False, monkeypatch)
    real = rendercache._read_in_child

    class OneClaim:
        """The forked reader's claims, but it dies as it claims its second
        chunk: the last chunk sent whole, the one before it claimed by
        nobody, the rest read here."""

        def __init__(self, claims: Any) -> None:
            self.claims, self.made = claims, 0

        def __getitem__(self, k: int) -> int:
            return self.claims[k]  # type: ignore[no-any-return]

        def __setitem__(self, k: int, value: int) -> None:
            self.made += 1
            if self.made > 1:
                os._exit(3)
            self.claims[k] = value

    def one_chunk_then_die(top: str, chunks: list[list[str]], out: int, seals: bool, claims: Any) -> None:
        real(top, chunks, out, seals, OneClaim(claims))

    monkeypatch.setattr(rendercache, "_read_in_child", one_chunk_then_die)
    two, _ = _load(store, True, monkeypatch)
    assert _comparable(one) == _comparable(two)


def test_a_chunk_sent_back_for_the_wrong_files_is_read_here(store: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A frame names its chunk's index; one whose runs are not that chunk's
    files is left out, and the chunk read here."""
    one, _ = _load(store, False, monkeypatch)
    real = rendercache._read_in_child

    def shifted(top: str, chunks: list[list[str]], out: int, seals: bool, claims: Any) -> None:
        real(top, chunks[1:] + chunks[:1], out, seals, claims)  # each chunk sent under its neighbour's index

    monkeypatch.setattr(rendercache, "_read_in_child", shifted)
    two, _ = _load(store, True, monkeypatch)
    assert _comparable(one) == _comparable(two)


SCRIPT = """
import os, sys, time
from findings.core import aside
from findings.document import cache
cache.PARALLEL_FILES, cache.CHUNK_FILES, aside.cores = 2, 1, lambda: 2
real = cache._read_files
parent = os.getpid()
def slow(top, names, *rest):
    if os.getpid() != parent:
        with open(sys.argv[2], "a") as f:
            f.write(f"{os.getpid()}\\n")
    time.sleep(0.5)
    return real(top, names, *rest)
cache._read_files = slow
cache._read_all(sys.argv[1], [p for p in sorted(os.listdir(sys.argv[1])) if p.endswith(".json")])
"""


@pytest.mark.parametrize("how", ["SIGTERM to this process", "Ctrl-C to the group"])
def test_the_forked_reader_ends_when_this_process_is_stopped(store: Path, tmp_path: Path, how: str) -> None:
    import signal
    import subprocess
    import time

    pids = tmp_path / "pids"
    proc = subprocess.Popen([sys.executable, "-c", SCRIPT, str(store / "runs"), str(pids)], cwd=ROOT,
                            start_new_session=True, preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    deadline = time.monotonic() + 30
    while not (pids.exists() and pids.read_text().strip()) and time.monotonic() < deadline:
        time.sleep(0.05)
    child = int(pids.read_text().split()[0])
    assert proc.poll() is None
    if how.startswith("SIGTERM"):
        proc.send_signal(signal.SIGTERM)
    else:
        os.killpg(proc.pid, signal.SIGINT)
    proc.wait(timeout=30)
    assert proc.returncode != 0
    deadline = time.monotonic() + 10  # the forked reader finds the pipe closed at its next chunk
    while time.monotonic() < deadline:
        try:
            os.kill(child, 0)
        except ProcessLookupError:
            break
        with open(f"/proc/{child}/stat") as f:
            if f.read().split(") ")[1].startswith("Z"):
                break  # a zombie: ended, waiting for init to reap it
        time.sleep(0.05)
    else:
        os.kill(child, signal.SIGKILL)
        raise AssertionError(f"the forked reader {child} outlived the process that forked it ({how})")


def _distinct_params(data: object) -> tuple[int, int]:
    """How many objects the points' parameters, the names, the runs' facts
    and campaigns are, and how many distinct contents: each the same in any
    way of reading (a run's are its own when it reads alone)."""
    points, runs = data.points, data.runs  # type: ignore[attr-defined]
    objects = [p.workload_params for p in points]
    objects += [x for p in points for x in (p.campaign, p.config, p.workload)]
    objects += [r.environment for r in runs] + [f for r in runs for f in r.configs.values()]
    objects += [c for r in runs for c in r.campaigns]

    def content(x: object) -> object:
        return tuple((k, type(v), v) for k, v in x.items()) if isinstance(x, dict) else (type(x), x)

    return len({id(x) for x in objects}), len({content(x) for x in objects})


def test_runs_from_the_cache_share_what_runs_from_their_files_share(store: Path, tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """D136: runs read from the render cache share equal parameters, names,
    facts and campaigns as runs parsed here do (a dict a point held 340 MiB
    more at a million points, read from the cache)."""
    one, _ = _load(store, False, monkeypatch)
    objects, contents = _distinct_params(one)
    assert objects == contents < len(one.points)  # type: ignore[attr-defined]
    # The forked reader's chunks come back in columns (D145), what they share
    # marked: one object of each value in the whole store, as here.
    two, _ = _load(store, True, monkeypatch)
    assert _distinct_params(two) == (objects, contents)
    monkeypatch.setenv("FINDINGS_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("FINDINGS_CACHE", raising=False)
    for _ in range(2):  # cold (read, then cached), then warm (every run unpickled from the cache)
        data = rendercache.load(store, rendercache.scan(store))
        assert _comparable(data) == _comparable(one)
        assert _distinct_params(data) == (objects, contents)


def test_a_shared_dict_keeps_its_types_and_floats_are_never_shared() -> None:
    """Shared by value and type: 1, 1.0 and True stay apart; a dict with a
    float (0.0 == -0.0) is kept as itself, as the reader leaves it: in the
    points table's columns (findings/document/columns.py)."""

    from findings.core.model import Point, Run
    base = Point(id="r/0", run_id="r", campaign="c", config="baseline", workload="w", concurrency=1,
                 metrics={"output_throughput_tok_s": 1.0}, source="runner", source_file=None, source_line=None)
    params = [{"n": 1}, {"n": 1.0}, {"n": True}, {"n": 1}, {"x": -0.0}, {"x": 0.0}]
    run = Run(schema_version=5, run_id="r", source="runner", importer="findings-bench", importer_version="1",
              tool_version="0", created_at="2026-01-01T00:00:00Z", source_file=None, source_sha256="0" * 64,
              environment={}, campaigns=(), configs={},
              points=tuple(base._replace(id=f"r/{i}", workload_params=p) for i, p in enumerate(params)))
    from findings.document import columns

    def round_trip(run: Run) -> Run:
        decoded = columns.decode(columns.encode(["k"], [run]))
        assert decoded is not None
        keys, [header], [n], points = decoded
        assert keys == ["k"] and n == len(run.points)
        return columns.run(header, tuple(points), "p")

    back = [round_trip(run) for _ in range(2)]
    for got in back:
        assert [(dict(p.workload_params), [type(v) for v in p.workload_params.values()]) for p in got.points] == \
            [(p, [type(v) for v in p.values()]) for p in params]
        assert str(got.points[5].workload_params["x"]) == "0.0" and str(got.points[4].workload_params["x"]) == "-0.0"
    a, b = back
    assert a.points[0].workload_params is b.points[0].workload_params is a.points[3].workload_params
    assert len({id(p.workload_params) for p in a.points[:3]}) == 3
    assert a.points[4].workload_params is not b.points[4].workload_params


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="F_SETPIPE_SZ is Linux's")
def test_the_forked_readers_pipe_holds_what_it_sends_between_two_reads_here() -> None:
    """The pipe the forked reader writes to is widened to PIPE_BYTES where
    the system allows (D169): this process empties it only when its own
    reading lets go of the GIL, and at Linux's default 64 KiB the forked
    reader waited on it a third of its time. Where the limit is lower the
    pipe stays as it was, and nothing fails."""
    import fcntl
    limit = int(Path("/proc/sys/fs/pipe-max-size").read_text())
    r, w = os.pipe()
    try:
        before = fcntl.fcntl(w, fcntl.F_GETPIPE_SZ)
        rendercache._widen(w)
        after = fcntl.fcntl(w, fcntl.F_GETPIPE_SZ)
        if os.geteuid() == 0 or limit >= rendercache.PIPE_BYTES:  # root may go past the limit
            assert after == rendercache.PIPE_BYTES > before
        else:
            assert after == before
    finally:
        os.close(r)
        os.close(w)
    with open(__file__, "rb") as fh:
        rendercache._widen(fh.fileno())  # not a pipe: the system refuses, and nothing fails


def test_the_drain_keeps_each_whole_frame_and_leaves_out_one_cut_short() -> None:
    """``_drain`` reads what the forked reader writes, a length and a pickle
    at a time (D169: each frame read straight into its own bytes): frames
    of every size, one larger than the pipe, come back whole and in order,
    and a last frame cut short (the reader died mid-write) is left out."""
    import threading
    sizes = [0, 1, 7, 8, 4096, rendercache.PIPE_BYTES + 12345, 3]
    frames_sent = [bytes([k % 251]) * n for k, n in enumerate(sizes)]
    r, w = os.pipe()

    def write() -> None:
        with os.fdopen(w, "wb") as pipe:
            for frame in frames_sent:
                pipe.write(len(frame).to_bytes(8, "little") + frame)
            pipe.write((1000).to_bytes(8, "little") + b"x" * 999)  # cut short

    writer = threading.Thread(target=write)
    writer.start()
    got: list[bytes | None] = []
    rendercache._drain(r, got)
    writer.join()
    assert got == frames_sent
