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
from typing import TYPE_CHECKING, Any

from findings.core import diskio
from findings import store
from findings.core.errors import FindingsError
from findings.core.model import Dataset, Point, Scalar
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


def _cell(v: Scalar) -> Any:
    return None if v is None else v


def frame(data: Dataset, gates: Any, requests: bool = False) -> Any:
    """One row per stored point (and, with ``requests``, a second frame of
    per-request records): see docs/frame.md."""
    pd = _pandas()
    flags = flagged(data, gates)
    rank = {c.name: i for i, c in enumerate(data.campaigns)}
    campaigns = {c.name: c for c in data.campaigns}
    repeats = _repeats(data)
    metric_names = sorted({k for p in data.points for k in p.metrics})
    fixed = {name for name, _ in FIXED}
    metric_cols = {m: f"metric_{m}" if m in fixed else m for m in metric_names}
    fact_names = sorted({k for facts in data.facts.values() for k in facts} | {k for f in data.configs.values() for k in f})
    param_names = sorted({k for p in data.points for k in p.workload_params})
    rows: dict[str, list[Any]] = {name: [] for name, _ in FIXED}
    rows.update({metric_cols[m]: [] for m in metric_names})
    rows.update({f"fact_{f}": [] for f in fact_names})
    rows.update({f"param_{k}": [] for k in param_names})
    ordered = sorted(data.points, key=lambda p: (rank[p.campaign], p.workload, p.config, p.concurrency, p.id))
    for p in ordered:
        c = campaigns[p.campaign]
        why = flags.get(p.id, ())
        for name, value in (("point_id", p.id), ("run_id", p.run_id), ("campaign", p.campaign),
                            ("campaign_date", c.date), ("campaign_order", c.order), ("replay_order", rank[p.campaign]),
                            ("workload", p.workload), ("config", p.config), ("concurrency", p.concurrency),
                            ("repeat", repeats[p.id]), ("source", p.source), ("simulated", p.simulated),
                            ("flagged", bool(why)), ("flag_reasons", "; ".join(why) or None)):
            rows[name].append(value)
        for m in metric_names:
            rows[metric_cols[m]].append(p.metrics.get(m, math.nan))
        facts = data.facts_of(p.config, p.campaign)
        for f in fact_names:
            rows[f"fact_{f}"].append(_cell(facts.get(f)))
        for k in param_names:
            rows[f"param_{k}"].append(_cell(p.workload_params.get(k)))
    points = pd.DataFrame({name: pd.Series(values, dtype=object) for name, values in rows.items()})
    for name, dtype in FIXED:
        points[name] = points[name].astype(dtype)
    for m in metric_names:
        points[metric_cols[m]] = points[metric_cols[m]].astype("float64")
    for col in [c for c in points.columns if c.startswith(("fact_", "param_"))]:
        points[col] = _typed(pd, points[col])
    if not requests:
        return points
    return points, _requests(pd, ordered)


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
    return frame(store.load(store_dir), gates, requests)


def export(store_dir: Path, gates: Any, fmt: str, requests: bool, output: str | None, force: bool) -> str:
    """``findings export``: the points (or, with ``requests``, the requests)
    as CSV, JSON lines or parquet; to ``output`` atomically (refusing to
    overwrite without ``force``), or returned as text for standard output."""
    if fmt not in FORMATS:
        raise FindingsError(f"--format {fmt!r}: one of {', '.join(FORMATS)}")
    table = load_frame(store_dir, gates, requests)
    if requests:
        table = table[1]
    if fmt == "parquet" and output is None:
        raise FindingsError("--format parquet writes a binary file: give --output PATH")
    if fmt == "csv":
        data: bytes = table.to_csv(index=False).encode("utf-8")
    elif fmt == "jsonl":
        data = table.to_json(orient="records", lines=True, force_ascii=False).encode("utf-8")
        if data and not data.endswith(b"\n"):
            data += b"\n"
    else:
        buf = io.BytesIO()
        try:
            table.to_parquet(buf, index=False)
        except ImportError:
            raise FindingsError("parquet needs pyarrow: pip install 'findings[pandas]'") from None
        data = buf.getvalue()
    if output is None:
        return data.decode("utf-8")
    path = Path(output)
    if path.exists() and not force:
        raise FindingsError(f"{path} exists: pass --force to replace it; nothing was written")
    diskio.write_replace(path, data)
    return f"wrote {len(table)} rows to {path} ({fmt})"
