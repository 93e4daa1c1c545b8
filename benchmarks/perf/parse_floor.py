"""The least a render without the cache does to a store: every run file read
and parsed, nothing else (docs/decisions.md D160).

It reads each ``runs/*.json`` of a store and parses it with orjson, the
parser the store reads run files with (findings/core/jsonfast.py), and
drops the result: no check, no point, no derivation. From ``SPLIT`` files
on (``--split``, given by render_scaling.py: the render's own threshold,
findings/document/cache.py ``PARALLEL_FILES``), with two cores free, a
forked process takes the second half, as the render's two readers share the files
(D133; theirs meet wherever each has got to, D173). The render
reads no sidecar: each run file holds its points' series (D109).

render_scaling.py times it in a fresh process, like the commands it
measures: what it takes is what any cold render of that store must take,
start-up included, on this machine.

    python benchmarks/perf/parse_floor.py STORE/runs --split 256
"""

from __future__ import annotations

import argparse
import os
import sys

import orjson

def parse(folder: str, names: list[str]) -> int:
    """Read and parse each file; the number of points read."""
    points = 0
    for name in names:
        with open(os.path.join(folder, name), "rb") as fh:
            doc = orjson.loads(fh.read())
        points += len(doc.get("points", ()))
    return points


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("folder")
    p.add_argument("--split", type=int, required=True, help="from this many files on, two processes read")
    a = p.parse_args()
    folder = a.folder
    names = sorted(n for n in os.listdir(folder) if n.endswith(".json") and not n.startswith("."))
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    if len(names) < a.split or cores < 2 or not hasattr(os, "fork"):
        print(parse(folder, names))
        return 0
    half = len(names) // 2
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the second half
        os.close(r)
        code = 1
        try:
            os.write(w, str(parse(folder, names[half:])).encode())
            code = 0
        finally:
            os._exit(code)
    os.close(w)
    mine = parse(folder, names[:half])
    with os.fdopen(r, "rb") as pipe:
        theirs = pipe.read()
    _, status = os.waitpid(pid, 0)
    if os.waitstatus_to_exitcode(status) != 0 or not theirs:
        raise SystemExit("parse_floor: the forked reader failed")
    print(mine + int(theirs))
    return 0


if __name__ == "__main__":
    sys.exit(main())
