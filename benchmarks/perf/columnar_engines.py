"""Which columnar engine for the points (issue 38, item 1): measured, not assumed.

On a synthetic perf store (benchmarks/perf/render_scaling.py), each engine
does the two jobs a columnar cache of the points has:

1. **to columns:** from the store's run files (JSON, the source of truth)
   to one row per point: campaign, config, workload, concurrency and the
   throughput (the other scalar metrics the same way);
2. **a cell pass:** group by (workload, campaign, config, concurrency) and
   take the mean, min, max and count of the throughput, the shape of
   findings.derive.analysis.cells, over the store's points repeated to
   ``--rows`` rows;
3. **reload:** write the table to the engine's own file and read it back.

Engines: numpy with orjson (both already core), DuckDB, Polars and pyarrow,
each as its released wheel, imported only here. Run it in a venv that has
them (they are not findings' dependencies)::

    python -m venv /tmp/engvenv && /tmp/engvenv/bin/pip install duckdb polars pyarrow numpy orjson
    /tmp/engvenv/bin/python benchmarks/perf/columnar_engines.py build/perf/render/store-100000

Prints one JSON line per (engine, job): {engine, job, seconds, rows}; the
fastest of ``--repeats`` runs. Every engine's cell pass is checked against
numpy's (same groups, same means to 1e-9).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable

import numpy as np
import orjson

THROUGHPUT = "output_throughput_tok_s"


def best(fn: Callable[[], Any], repeats: int) -> tuple[float, Any]:
    out, t_best = None, float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        out = fn()
        t_best = min(t_best, time.perf_counter() - t0)
    return t_best, out


def numpy_columns(files: list[Path]) -> dict[str, np.ndarray]:
    camp, conf, work, conc, tput = [], [], [], [], []
    for f in files:
        doc = orjson.loads(f.read_bytes())
        for p in doc["points"]:
            camp.append(p["campaign"])
            conf.append(p["config"])
            work.append(p["workload"])
            conc.append(p["concurrency"])
            tput.append(p["metrics"].get(THROUGHPUT, np.nan))
    return {"campaign": np.asarray(camp), "config": np.asarray(conf), "workload": np.asarray(work),
            "concurrency": np.asarray(conc, dtype=np.int64), "tput": np.asarray(tput, dtype=np.float64)}


def numpy_cells(t: dict[str, np.ndarray]) -> dict[tuple[str, str, str, int], tuple[float, float, float, int]]:
    keys = np.stack([np.unique(t[k], return_inverse=True)[1] for k in ("workload", "campaign", "config")]
                    + [t["concurrency"]])
    uniq, inv = np.unique(keys, axis=1, return_inverse=True)
    inv = inv.ravel()
    n = np.bincount(inv)
    mean = np.bincount(inv, weights=t["tput"]) / n
    lo = np.full(len(n), np.inf)
    hi = np.full(len(n), -np.inf)
    np.minimum.at(lo, inv, t["tput"])
    np.maximum.at(hi, inv, t["tput"])
    names = {k: np.unique(t[k]) for k in ("workload", "campaign", "config")}
    return {(str(names["workload"][u[0]]), str(names["campaign"][u[1]]), str(names["config"][u[2]]), int(u[3])):
            (float(m), float(a), float(b), int(c)) for u, m, a, b, c in zip(uniq.T, mean, lo, hi, n)}


def repeat(t: dict[str, np.ndarray], rows: int) -> dict[str, np.ndarray]:
    k = max(1, rows // len(t["tput"]))
    out = {name: np.tile(col, k) for name, col in t.items()}
    # Each copy its own campaigns, so the groups grow with the rows.
    out["campaign"] = np.char.add(out["campaign"].astype(str),
                                  np.repeat(np.arange(k), len(t["tput"])).astype(str))
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("store")
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--repeats", type=int, default=3)
    a = ap.parse_args()
    files = sorted((Path(a.store) / "runs").glob("*.json"))
    rows: list[dict[str, Any]] = []

    def emit(engine: str, job: str, seconds: float, n: int) -> None:
        row = {"engine": engine, "job": job, "seconds": round(seconds, 3), "rows": n}
        rows.append(row)
        print(json.dumps(row), flush=True)

    secs, table = best(lambda: numpy_columns(files), 1)
    emit("numpy+orjson", "to-columns", secs, len(table["tput"]))
    big = repeat(table, a.rows)
    n_big = len(big["tput"])
    secs, ref = best(lambda: numpy_cells(big), a.repeats)
    emit("numpy", "cells", secs, n_big)
    # What a cache would hold: the names dictionary-encoded once, at write.
    names = {k: np.unique(big[k], return_inverse=True) for k in ("workload", "campaign", "config")}
    codes = {k: inv.ravel().astype(np.int32) for k, (_, inv) in names.items()}

    def coded_cells() -> Any:
        key = ((codes["workload"].astype(np.int64) * len(names["campaign"][0]) + codes["campaign"])
               * len(names["config"][0]) + codes["config"]) * 1024 + big["concurrency"]
        uniq, inv = np.unique(key, return_inverse=True)
        n = np.bincount(inv)
        mean = np.bincount(inv, weights=big["tput"]) / n
        order = np.lexsort((big["tput"], inv))
        starts = np.concatenate([[0], np.cumsum(n)[:-1]])
        lo, hi = big["tput"][order][starts], big["tput"][order][starts + n - 1]
        return uniq, mean, lo, hi, n
    secs, (uniq, mean, lo, hi, n) = best(coded_cells, a.repeats)
    c = uniq // 1024
    got = {(str(names["workload"][0][c // len(names["config"][0]) // len(names["campaign"][0])]),
            str(names["campaign"][0][c // len(names["config"][0]) % len(names["campaign"][0])]),
            str(names["config"][0][c % len(names["config"][0])]), int(x)): (float(m), float(a_), float(b), int(k))
           for c, x, m, a_, b, k in zip(c, uniq % 1024, mean, lo, hi, n)}
    assert got.keys() == ref.keys() and all(abs(got[k][0] - ref[k][0]) <= 1e-9 * max(1, ref[k][0])
                                            and got[k][1:] == ref[k][1:] for k in ref)
    emit("numpy (names coded at write)", "cells", secs, n_big)
    tmp = Path(tempfile.mkdtemp(prefix="engines-"))

    def np_reload() -> Any:
        np.savez(tmp / "t.npz", **big)
        with np.load(tmp / "t.npz") as z:
            return {k: z[k] for k in z.files}
    emit("numpy", "reload", best(np_reload, a.repeats)[0], n_big)

    def check(engine: str, got: dict[tuple[str, str, str, int], tuple[float, float, float, int]]) -> None:
        assert got.keys() == ref.keys(), engine
        for k, v in got.items():
            assert abs(v[0] - ref[k][0]) <= 1e-9 * max(1.0, abs(ref[k][0])) and v[1:] == ref[k][1:], (engine, k)

    glob = str(Path(a.store).resolve() / "runs" / "*.json")
    try:
        import duckdb
    except ImportError:
        print("duckdb: not installed", file=sys.stderr)
    else:
        con = duckdb.connect()
        q = (f"SELECT p.campaign, p.config, p.workload, p.concurrency, "
             f"CAST(json_extract(p.metrics, '$.{THROUGHPUT}') AS DOUBLE) AS tput FROM "
             f"(SELECT unnest(points) AS p FROM read_json('{glob}', maximum_object_size=1000000000, "
             f"columns={{'points': 'STRUCT(campaign VARCHAR, config VARCHAR, workload VARCHAR, "
             f"concurrency BIGINT, metrics JSON)[]'}}))")
        secs, n = best(lambda: con.execute(f"SELECT count(*) FROM ({q})").fetchall()[0][0], 1)
        emit("duckdb", "to-columns", secs, n)
        con.register("big", {k: v for k, v in big.items()})

        def duck_cells() -> Any:
            res = con.execute("SELECT workload, campaign, config, concurrency, avg(tput), min(tput), max(tput), "
                              "count(*) FROM big GROUP BY ALL").fetchall()
            return {(w, c, g, int(x)): (m, a, b, int(n)) for w, c, g, x, m, a, b, n in res}
        secs, got = best(duck_cells, a.repeats)
        check("duckdb", got)
        emit("duckdb", "cells", secs, n_big)
        con.execute(f"COPY big TO '{tmp / 't.parquet'}' (FORMAT parquet)")
        emit("duckdb", "reload", best(lambda: con.execute(
            f"SELECT * FROM read_parquet('{tmp / 't.parquet'}')").fetchnumpy(), a.repeats)[0], n_big)
    try:
        import polars as pl
    except ImportError:
        print("polars: not installed", file=sys.stderr)
    else:
        def pl_columns() -> Any:
            frames = []
            for f in files:
                doc = orjson.loads(f.read_bytes())
                frames.append(pl.DataFrame([{**{k: p[k] for k in ("campaign", "config", "workload", "concurrency")},
                                             "tput": p["metrics"].get(THROUGHPUT)} for p in doc["points"]]))
            return pl.concat(frames)
        secs, df = best(pl_columns, 1)
        emit("polars", "to-columns", secs, df.height)
        bigdf = pl.DataFrame(big)

        def pl_cells() -> Any:
            g = bigdf.group_by(["workload", "campaign", "config", "concurrency"]).agg(
                pl.col("tput").mean().alias("m"), pl.col("tput").min().alias("a"), pl.col("tput").max().alias("b"),
                pl.len().alias("n"))
            return {(w, c, cf, int(x)): (m, lo, hi, int(n)) for w, c, cf, x, m, lo, hi, n in g.iter_rows()}
        secs, got = best(pl_cells, a.repeats)
        check("polars", got)
        emit("polars", "cells", secs, n_big)

        def pl_reload() -> Any:
            bigdf.write_ipc(tmp / "t.arrow")
            return pl.read_ipc(tmp / "t.arrow")
        emit("polars", "reload", best(pl_reload, a.repeats)[0], n_big)
    try:
        import pyarrow as pa
        import pyarrow.compute as pc  # noqa: F401
        import pyarrow.parquet as pq
    except ImportError:
        print("pyarrow: not installed", file=sys.stderr)
    else:
        tbl = pa.table(big)

        def pa_cells() -> Any:
            g = tbl.group_by(["workload", "campaign", "config", "concurrency"]).aggregate(
                [("tput", "mean"), ("tput", "min"), ("tput", "max"), ("tput", "count")])
            d = g.to_pydict()
            return {(w, c, cf, int(x)): (m, lo, hi, int(n)) for w, c, cf, x, m, lo, hi, n in zip(
                d["workload"], d["campaign"], d["config"], d["concurrency"], d["tput_mean"], d["tput_min"],
                d["tput_max"], d["tput_count"])}
        secs, got = best(pa_cells, a.repeats)
        check("pyarrow", got)
        emit("pyarrow", "cells", secs, n_big)

        def pa_reload() -> Any:
            pq.write_table(tbl, tmp / "t2.parquet")
            return pq.read_table(tmp / "t2.parquet")
        emit("pyarrow", "reload", best(pa_reload, a.repeats)[0], n_big)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
