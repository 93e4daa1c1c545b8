"""core/heap.py (D177): with glibc's threshold fixed, large blocks freed are
given back to the system, where otherwise, once a large block has raised
the threshold, they stay in the heap, held by the small blocks among them.
Each in a fresh process: the threshold is a process's."""

from __future__ import annotations

import subprocess
import sys

import pytest

from conftest import ROOT

_SCRIPT = """
import gc, sys
sys.path.insert(0, {root!r})
def rss():
    return int(open("/proc/self/statm").read().split()[1]) * 4096 / 2**20
if {fix}:
    from findings.core import heap
    assert heap.large_blocks_apart() and heap.large_blocks_apart()  # (once per process: the second a no-op)
big = bytes(8 << 20)
del big  # glibc raises its threshold to 8 MiB (unless fixed)
keep, blocks = [], []
for _ in range(200):
    blocks.append(bytearray(1 << 19))  # 512 KiB each: from the heap, once the threshold is raised
    keep.append(bytearray(1024))  # a small live block after each: the heap cannot shrink from its top
before = rss()
del blocks
gc.collect()
print(before, rss())
"""


def _held(fix: bool) -> tuple[float, float]:
    out = subprocess.run([sys.executable, "-c", _SCRIPT.format(root=str(ROOT), fix=fix)], capture_output=True,
                         text=True, check=True).stdout.split()
    return float(out[0]), float(out[1])


def test_large_blocks_freed_are_given_back_once_the_threshold_is_fixed() -> None:
    from findings.core import heap
    if not sys.platform.startswith("linux") or not heap.large_blocks_apart():
        pytest.skip("glibc only")
    before, after = _held(fix=False)
    assert before - after < 20  # 100 MiB freed, kept in the heap
    before, after = _held(fix=True)
    assert before - after > 80  # given back
