"""The store as pandas DataFrames, and exports (``findings.frame``,
``findings export``). The only module that imports pandas (and, through
it, pyarrow for parquet); never on the render path (docs/decisions.md D37,
D74). Columns: docs/frame.md.
"""

from __future__ import annotations

import io
import json
import math
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterator

from findings.core import diskio
from findings import store
from findings.core.errors import FindingsError
from findings.core.model import Dataset, Point, packed_tables
from findings.derive.validity import flagged

if TYPE_CHECKING:
    import pandas as pd

#: The fixed columns, in order, and their dtypes.
FIXED = (
    ("point_id", "string"), ("run_id", "string"), ("campaign", "string"), ("campaign_date", "string"),
    ("campaign_order", "Int64"), ("replay_order", "Int64"), ("workload", "string"), ("config", "string"),
    ("concurrency", "Int64"), ("repeat", "Int64"), ("source", "string"), ("simulated", "boolean"),
    ("flagged", "boolean"), ("flag_reasons", "string"),
)
FORMATS = ("csv", "jsonl", "parquet")


def _pandas() -> Any:
    try:
        import pandas
    except ImportError:
        raise FindingsError("DataFrames and exports need pandas: pip install 'findings[pandas]'") from None
    return pandas


def _repeats(data: Dataset) -> dict[str, int]:
    """A point's repeat: the runner's recorded one, else its place among the
    points of the same (campaign, workload, config, C, source) in store order."""
    recorded = {}
    for run in data.runs:
        rep = run.provenance.get("repeat")
        if isinstance(rep, int) and not isinstance(rep, bool):
            for p in run.points:
                recorded[p.id] = rep
    seen: dict[tuple[str, str, str, int, str], int] = {}
    out = {}
    for p in data.points:
        key = (p.campaign, p.workload, p.config, p.concurrency, p.source)
        seen[key] = seen.get(key, 0) + 1
        out[p.id] = recorded.get(p.id, seen[key])
    return out


def frame(data: Dataset, gates: Any, requests: bool = False) -> Any:
    """One row per stored point (and, with ``requests``, a second frame of
    per-request records): see docs/frame.md.

    Built in columns (issue 38, D163): the metrics straight from their
    packed doubles into float64 arrays, each config's facts and each
    distinct set of workload parameters typed once and spread over their
    rows by index, so that no column holds a Python object per row on its
    way in."""
    pd = _pandas()
    import numpy as np  # pandas' own dependency, imported with it
    flags = flagged(data, gates)
    rank = {c.name: i for i, c in enumerate(data.campaigns)}
    campaigns = {c.name: c for c in data.campaigns}
    repeats = _repeats(data)
    pts = data.points
    order = sorted(range(len(pts)), key=lambda i: (rank[pts[i].campaign], pts[i].workload, pts[i].config,
                                                   pts[i].concurrency, pts[i].id))
    ordered = [pts[i] for i in order]
    metrics = _metric_columns([p.metrics for p in ordered])
    fixed = {name for name, _ in FIXED}
    fact_names = sorted({k for facts in data.facts.values() for k in facts} | {k for f in data.configs.values() for k in f})
    param_names = sorted({k for p in pts for k in p.workload_params})
    cs = [campaigns[p.campaign] for p in ordered]
    why = [flags.get(p.id, ()) for p in ordered]
    fixed_values: dict[str, list[Any]] = {
        "point_id": [p.id for p in ordered], "run_id": [p.run_id for p in ordered],
        "campaign": [p.campaign for p in ordered], "campaign_date": [c.date for c in cs],
        "campaign_order": [c.order for c in cs], "replay_order": [rank[p.campaign] for p in ordered],
        "workload": [p.workload for p in ordered], "config": [p.config for p in ordered],
        "concurrency": [p.concurrency for p in ordered], "repeat": [repeats[p.id] for p in ordered],
        "source": [p.source for p in ordered], "simulated": [p.simulated for p in ordered],
        "flagged": [bool(w) for w in why], "flag_reasons": ["; ".join(w) or None for w in why],
    }
    columns: dict[str, Any] = {name: pd.Series(fixed_values[name], dtype=object).astype(dtype)
                               for name, dtype in FIXED}
    for m in sorted(metrics):
        columns[f"metric_{m}" if m in fixed else m] = pd.Series(metrics[m], dtype="float64")
    # Facts: one dict per (config, campaign); parameters: one dict per
    # distinct set (shared by the reader, D136). Each column is typed from
    # the values of those dicts and taken row by row through their index.
    fact_groups: dict[tuple[str, str], int] = {}
    fact_dicts: list[Any] = []
    fact_codes = [fact_groups.setdefault((p.config, p.campaign), len(fact_groups)) for p in ordered]
    for config, campaign in fact_groups:
        fact_dicts.append(data.facts_of(config, campaign))
    param_groups: dict[int, int] = {}
    param_dicts: list[Any] = []
    param_codes = []
    for p in ordered:
        k = param_groups.get(id(p.workload_params))
        if k is None:
            k = param_groups[id(p.workload_params)] = len(param_dicts)
            param_dicts.append(p.workload_params)
        param_codes.append(k)
    for prefix, names, dicts, codes in (("fact_", fact_names, fact_dicts, fact_codes),
                                        ("param_", param_names, param_dicts, param_codes)):
        taken = np.asarray(codes, dtype=np.intp)
        for name in names:
            columns[f"{prefix}{name}"] = _typed_by_index(pd, [d.get(name) for d in dicts], taken)
    points = pd.DataFrame(columns)
    if not requests:
        return points
    return points, _requests(pd, ordered)


def _metric_columns(rows: list[Any]) -> dict[str, Any]:
    """metric name -> a float64 array over ``rows`` (NaN where a row does not
    record it): the packed rows (findings.core.model.Metrics) of each layout
    read as one matrix, any other mapping value by value."""
    import numpy as np
    n = len(rows)
    names = sorted({k for m in rows for k in m})
    out = {name: np.full(n, np.nan) for name in names}
    tables, loose = packed_tables(rows)
    for index, where, chunks in tables:
        matrix = np.frombuffer(b"".join(chunks), dtype=np.float64).reshape(len(where), len(index))
        at = np.asarray(where, dtype=np.intp)
        for name, j in index.items():
            out[name][at] = matrix[:, j]
    for i in loose:
        for name, value in rows[i].items():
            out[name][i] = value
    return out


def _typed_by_index(pd: Any, values: list[Any], codes: Any) -> Any:
    """``_typed`` of the column whose row i holds ``values[codes[i]]``:
    typed from the distinct values, then taken through ``codes``."""
    return _typed(pd, pd.Series(values, dtype=object)).array.take(codes)


def _typed(pd: Any, col: Any) -> Any:
    """A facts or params column: numbers as float64 (or Int64 when all whole),
    booleans as boolean, anything else as string."""
    values = [v for v in col if v is not None and not (isinstance(v, float) and math.isnan(v))]
    if values and all(isinstance(v, bool) for v in values):
        return col.astype("boolean")
    if values and all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values):
        if all(isinstance(v, int) or float(v).is_integer() for v in values):
            return col.astype("Int64")
        return col.astype("float64")
    return col.map(lambda v: None if v is None else str(v)).astype("string")


def _requests(pd: Any, points: list[Point]) -> Any:
    """One row per request of every point that kept its per-request records."""
    columns: list[str] = sorted({k for p in points if p.requests for k, v in p.requests.items() if isinstance(v, list)})
    rows: dict[str, list[Any]] = {"point_id": [], "request": []}
    rows.update({c: [] for c in columns})
    for p in points:
        if not p.requests:
            continue
        lists = {k: v for k, v in p.requests.items() if isinstance(v, list)}
        n = max((len(v) for v in lists.values()), default=0)
        for i in range(n):
            rows["point_id"].append(p.id)
            rows["request"].append(i)
            for c in columns:
                v = lists.get(c)
                cell = v[i] if v is not None and i < len(v) else None
                rows[c].append(json.dumps(cell) if isinstance(cell, (list, dict)) else cell)
    out = pd.DataFrame({name: pd.Series(values, dtype=object) for name, values in rows.items()})
    out["point_id"] = out["point_id"].astype("string")
    out["request"] = out["request"].astype("Int64")
    for c in columns:
        out[c] = _typed(pd, out[c])
    return out


def load_frame(store_dir: Path, gates: Any, requests: bool = False) -> Any:
    """The store's frame. The points alone are read as a render reads them
    (findings/document/cache.py: from the render cache's points table, or by
    two processes); the per-request records only from the run files."""
    if requests:
        return frame(store.load(store_dir), gates, requests)
    from findings.document import cache as rendercache
    return frame(rendercache.load(store_dir, rendercache.scan(store_dir)), gates)


#: Rows written at a time by ``export`` to a file: the text of the whole
#: table is never held at once (at 100k points it is about 50 MB).
EXPORT_ROWS = 20000


def _pieces(table: Any, fmt: str) -> Iterator[bytes]:
    """The table as CSV (one header) or JSON lines, ``EXPORT_ROWS`` rows at
    a time: the same bytes as the whole table's ``to_csv`` or ``to_json``."""
    for start in range(0, max(len(table), 1), EXPORT_ROWS):
        part = table.iloc[start:start + EXPORT_ROWS]
        if fmt == "csv":
            yield part.to_csv(index=False, header=start == 0).encode("utf-8")
        elif len(part):
            text = part.to_json(orient="records", lines=True, force_ascii=False)
            yield (text if text.endswith("\n") else text + "\n").encode("utf-8")


def export(store_dir: Path, gates: Any, fmt: str, requests: bool, output: str | None, force: bool) -> str:
    """``findings export``: the points (or, with ``requests``, the requests)
    as CSV, JSON lines or parquet; to ``output`` atomically (refusing to
    overwrite without ``force``), or returned as text for standard output."""
    if fmt not in FORMATS:
        raise FindingsError(f"--format {fmt!r}: one of {', '.join(FORMATS)}")
    if fmt == "parquet" and output is None:
        raise FindingsError("--format parquet writes a binary file: give --output PATH")
    path = Path(output) if output is not None else None
    if path is not None and path.exists() and not force:
        raise FindingsError(f"{path} exists: pass --force to replace it; nothing was written")
    table = load_frame(store_dir, gates, requests)
    if requests:
        table = table[1]
    data: bytes | Iterator[bytes]
    if fmt == "parquet":
        buf = io.BytesIO()
        try:
            table.to_parquet(buf, index=False)
        except ImportError:
            raise FindingsError("parquet needs pyarrow: pip install 'findings[pandas]'") from None
        data = buf.getvalue()
    else:
        data = _pieces(table, fmt)
    if path is None:
        return (data if isinstance(data, bytes) else b"".join(data)).decode("utf-8")
    diskio.write_replace(path, data)
    return f"wrote {len(table)} rows to {path} ({fmt})"
