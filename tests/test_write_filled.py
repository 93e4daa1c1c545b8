"""A file written as a filler makes it (diskio.write_replace with a
``Filler``: the moves kept pickled into their file as they go, D177): the
content whole, or, where the filler fails partway, the old content and no
temp file left; and the render cache's moves kept that way read back the
same, or, where they do not pickle, the old file kept."""

from __future__ import annotations

import functools
import pickle
from pathlib import Path

import pytest

from findings.core import diskio
from findings.derive import regressions
from findings.document import cache as rendercache


def test_a_filler_writes_the_file_whole_or_leaves_the_old_one(tmp_path: Path) -> None:
    path = tmp_path / "f.bin"
    value = {"x": list(range(100_000))}
    diskio.write_replace(path, functools.partial(pickle.dump, value, protocol=pickle.HIGHEST_PROTOCOL))
    assert pickle.loads(path.read_bytes()) == value

    def half(out: object) -> None:
        out.write(b"half of it")  # type: ignore[attr-defined]
        raise RuntimeError("the filler failed")

    with pytest.raises(RuntimeError):
        diskio.write_replace(path, half)
    assert pickle.loads(path.read_bytes()) == value
    assert [p.name for p in tmp_path.iterdir()] == ["f.bin"]  # no temp file left


def _kept(reason: object) -> regressions.MovesKept:
    move = regressions.Move(workload="w", config="c", previous_campaign="a", campaign="b", rank=1,
                            ratios=((1, 0.5, 0.02), (30, 0.75, 0.03)), facts_changed=(), kind=regressions.DRIFT,
                            reason=reason, known_at=1)  # type: ignore[arg-type]
    return regressions.MovesKept(chain=("k",), moves=(move,), groups={("w", "c"): (0, 1)})


def test_the_moves_kept_read_back_packed_or_the_old_file_kept(tmp_path: Path) -> None:
    path = tmp_path / "moves" / "store.pickle"
    kept = _kept("r")
    rendercache._write_moves(path, kept)
    fingerprint, got = pickle.loads(path.read_bytes())
    assert fingerprint == rendercache.code_fingerprint()
    assert got == kept and type(got.moves[0].ratios) is regressions.Ratios
    rendercache._write_moves(path, _kept(lambda: None))  # a reason that does not pickle: nothing written
    assert pickle.loads(path.read_bytes())[1] == kept
    assert sorted(p.name for p in path.parent.iterdir()) == ["store.pickle"]
