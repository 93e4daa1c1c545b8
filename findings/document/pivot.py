"""Generic tables of stored measurements for templates. Pure.

A template that is not the deployment document (docs/performance.md, say)
needs plain tables of what the store holds: one metric, rows by config,
columns by concurrency, for the latest campaign that measured a workload.
``measurements`` flattens a Dataset for the template; ``pivot`` builds one
such table (render.py registers it as the ``pivot`` filter).
"""

from __future__ import annotations

import math
from typing import Any, Mapping, Sequence

from findings.core.model import Dataset
from findings.document.report import Table


def measurements(data: Dataset) -> list[dict[str, Any]]:
    """Every point as a plain mapping, in campaign replay order, then store order."""
    rank = {c.name: i for i, c in enumerate(data.campaigns)}
    pts = sorted(enumerate(data.points), key=lambda ip: (rank.get(ip[1].campaign, -1), ip[0]))
    return [{"campaign": p.campaign, "workload": p.workload, "config": p.config, "concurrency": p.concurrency,
             "metrics": dict(p.metrics), "params": dict(p.workload_params or {}), "simulated": p.simulated,
             "note": p.note} for _, p in pts]


def matches(name: str, workload: str) -> bool:
    """``workload`` names one workload, or (ending in ``*``) every workload
    that starts with the rest: ``chat-mix-*``, the categories of a split."""
    return name.startswith(workload[:-1]) if workload.endswith("*") else name == workload


def latest_campaign(rows: Sequence[Mapping[str, Any]], workload: str, config: str | None = None) -> str | None:
    """The latest campaign that measured ``workload`` (with ``config``, if given)."""
    names = [r["campaign"] for r in rows if matches(r["workload"], workload)
             and (config is None or r["config"] == config)]
    return names[-1] if names else None


def _key(row: Mapping[str, Any], by: str) -> Any:
    """A row's field, else its metric, else its workload parameter (an
    open-loop row's ``request_rate``: its load, D103)."""
    if by in row:
        return row[by]
    if by in row["metrics"]:
        return row["metrics"][by]
    return row.get("params", {}).get(by)


def _label(value: Any) -> str:
    if isinstance(value, float) and value.is_integer():
        return f"{int(value):,}"
    if isinstance(value, int):
        return f"{value:,}" if value >= 10000 else str(value)
    return str(value)


def _number(value: float, digits: int) -> str:
    if abs(value) >= 1000:
        return f"{value:,.0f}"
    return f"{value:.{digits}f}"


def pivot(rows: Sequence[Mapping[str, Any]], workload: str, metric: str, *, rows_by: str = "config",
          cols_by: str = "concurrency", campaign: str | None = None, relative_to: str | None = None,
          order: Sequence[str] = (), digits: int = 1, col_prefix: str = "C=", corner: str = "",
          over: str | None = None, config: str | None = None) -> Table:
    """One metric as a table of ``rows_by`` x ``cols_by``, for one campaign
    (default: the latest that measured ``workload``). Repeats are averaged.
    With ``relative_to`` (a value of ``rows_by``), each cell is the ratio
    to that row's value in the same column (and that row is left out).
    With ``over`` (another metric), each cell is the ratio of the two
    metrics' means in that cell (say, the client's throughput over the
    server's), printed with ``digits`` decimals. ``config``: that config's
    points only (with ``rows_by="workload"`` and a ``prefix-*`` workload,
    one row per category of a split)."""
    camp = campaign or latest_campaign(rows, workload, config)
    sel = [r for r in rows if matches(r["workload"], workload) and r["campaign"] == camp and metric in r["metrics"]
           and (over is None or over in r["metrics"]) and (config is None or r["config"] == config)]
    cells: dict[tuple[Any, Any], list[float]] = {}
    dens: dict[tuple[Any, Any], list[float]] = {}
    for r in sel:
        key = (_key(r, rows_by), _key(r, cols_by))
        cells.setdefault(key, []).append(float(r["metrics"][metric]))
        if over is not None:
            dens.setdefault(key, []).append(float(r["metrics"][over]))
    mean = {k: sum(v) / len(v) for k, v in cells.items()}
    if over is not None:
        mean = {k: (v / (sum(dens[k]) / len(dens[k])) if sum(dens[k]) else math.nan) for k, v in mean.items()}
    cols = sorted({c for _, c in mean}, key=lambda c: (not isinstance(c, (int, float)), c))
    seen = list(dict.fromkeys(rk for rk, _ in mean))
    ordered = [o for o in order if o in seen] + sorted(x for x in seen if x not in order)
    if relative_to is not None:
        ordered = [x for x in ordered if x != relative_to]
    headers = [corner or rows_by] + [f"{col_prefix}{_label(c)}" for c in cols]
    out: list[list[str]] = []
    for rk in ordered:
        line = [_label(rk)]
        for c in cols:
            v = mean.get((rk, c))
            if v is None or not math.isfinite(v):
                line.append("—")
            elif relative_to is not None:
                ref = mean.get((relative_to, c))
                line.append(f"{v / ref:.2f}x" if ref else "—")
            elif over is not None:
                line.append(f"{v:.{digits}f}")
            else:
                line.append(_number(v, digits))
        out.append(line)
    return Table(headers=tuple(headers), rows=tuple(tuple(x) for x in out),
                 align=("left",) + ("right",) * len(cols))


def lookup(rows: Sequence[Mapping[str, Any]], workload: str, config: str, metric: str,
           concurrency: int | None = None, campaign: str | None = None,
           where: Mapping[str, float] | None = None) -> float | None:
    """One value (the mean over repeats) from the latest campaign that measured
    ``workload``; ``where`` keeps only rows whose metrics (or workload
    parameters, as ``request_rate``) have those values."""
    camp = campaign or latest_campaign(rows, workload)
    vals = [float(r["metrics"][metric]) for r in rows
            if r["workload"] == workload and r["campaign"] == camp and r["config"] == config
            and (concurrency is None or r["concurrency"] == concurrency) and metric in r["metrics"]
            and all(_key(r, k) == v for k, v in (where or {}).items())]
    return sum(vals) / len(vals) if vals else None


#: The running-batch gauge's interval before runs recorded it (findings < the
#: ``running_sample_s`` sweep key).
UNRECORDED_SAMPLE_S = 0.2


def sampled_every(rows: Sequence[Mapping[str, Any]], workload: str, campaign: str | None = None) -> str:
    """How often one campaign's points read the running-batch gauge, from the
    points themselves: "every 1 s", or each interval the points record."""
    camp = campaign or latest_campaign(rows, workload)
    sampled = [r["metrics"] for r in rows if matches(r["workload"], workload) and r["campaign"] == camp
               and "server_running_samples" in r["metrics"]]
    if not sampled:
        return "never (no point read it)"
    seen = sorted({float(m["server_running_interval_s"]) for m in sampled if "server_running_interval_s" in m})
    parts = [f"{s:g} s" for s in seen]
    if any("server_running_interval_s" not in m for m in sampled):
        parts.append(f"{UNRECORDED_SAMPLE_S:g} s (stored before runs recorded the interval)")
    return "every " + " or ".join(parts)


def ratios(rows: Sequence[Mapping[str, Any]], workload: str, metric: str, over: str,
           campaign: str | None = None) -> list[float]:
    """``metric / over`` of every point of one campaign (default: the latest
    that measured ``workload``, which may be a ``prefix-*``) that has both, in
    store order: for goal lines such as "the worst deviation from 1"."""
    camp = campaign or latest_campaign(rows, workload)
    return [float(r["metrics"][metric]) / float(r["metrics"][over]) for r in rows
            if matches(r["workload"], workload) and r["campaign"] == camp and metric in r["metrics"]
            and float(r["metrics"].get(over) or 0) != 0]


def _means(rows: Sequence[Mapping[str, Any]], w: str, m: str) -> dict[tuple[str, int], float]:
    camp = latest_campaign(rows, w)
    got: dict[tuple[str, int], list[float]] = {}
    for r in rows:
        if r["workload"] == w and r["campaign"] == camp and m in r["metrics"]:
            got.setdefault((r["config"], r["concurrency"]), []).append(float(r["metrics"][m]))
    return {k: sum(v) / len(v) for k, v in got.items()}


def _side_by_side(rows: Sequence[Mapping[str, Any]], workload: str, metric: str, other: str,
                  other_metric: str | None) -> tuple[dict[tuple[str, int], float], dict[tuple[str, int], float]]:
    return _means(rows, workload, metric), _means(rows, other, other_metric or metric)


def across_ratios(rows: Sequence[Mapping[str, Any]], workload: str, metric: str, other: str,
                  other_metric: str | None = None) -> list[float]:
    """The cells of ``across`` as numbers, for goal lines."""
    a, b = _side_by_side(rows, workload, metric, other, other_metric)
    return [a[k] / b[k] for k in sorted(a) if k in b and b[k]]


def across(rows: Sequence[Mapping[str, Any]], workload: str, metric: str, other: str, other_metric: str | None = None,
           *, digits: int = 3, corner: str = "", order: Sequence[str] = ()) -> Table:
    """Two workloads measured side by side (two clients on the same server,
    say): per config and concurrency, the mean of ``metric`` in ``workload``
    over the mean of ``other_metric`` (default: the same) in ``other``, each
    from its own latest campaign."""
    a, b = _side_by_side(rows, workload, metric, other, other_metric)
    keys = [k for k in a if k in b and b[k]]
    cols = sorted({c for _, c in keys})
    seen = list(dict.fromkeys(cfg for cfg, _ in keys))
    configs = [o for o in order if o in seen] + sorted(x for x in seen if x not in order)
    out = []
    for cfg in configs:
        out.append(tuple([cfg] + [f"{a[(cfg, c)] / b[(cfg, c)]:.{digits}f}" if (cfg, c) in keys else "—"
                                  for c in cols]))
    return Table(headers=tuple([corner or "config"] + [f"C={c}" for c in cols]), rows=tuple(out),
                 align=("left",) + ("right",) * len(cols))


def template_functions(data: Dataset) -> dict[str, Any]:
    """``pivot``, ``lookup``, ``ratios`` and ``latest_campaign`` for templates, over this
    Dataset's points (flattened once, on first use)."""
    cache: list[list[dict[str, Any]]] = []

    def rows() -> list[dict[str, Any]]:
        if not cache:
            cache.append(measurements(data))
        return cache[0]

    def _pivot(workload: str, metric: str, **kw: Any) -> Table:
        return pivot(rows(), workload, metric, **kw)

    def _lookup(workload: str, config: str, metric: str, concurrency: int | None = None,
                campaign: str | None = None, where: Mapping[str, float] | None = None) -> float | None:
        return lookup(rows(), workload, config, metric, concurrency, campaign, where)

    def _latest(workload: str, config: str | None = None) -> str | None:
        return latest_campaign(rows(), workload, config)

    def _ratios(workload: str, metric: str, over: str, campaign: str | None = None) -> list[float]:
        return ratios(rows(), workload, metric, over, campaign)

    def _across(workload: str, metric: str, other: str, other_metric: str | None = None, **kw: Any) -> Table:
        return across(rows(), workload, metric, other, other_metric, **kw)

    def _across_ratios(workload: str, metric: str, other: str, other_metric: str | None = None) -> list[float]:
        return across_ratios(rows(), workload, metric, other, other_metric)

    def _sampled(workload: str, campaign: str | None = None) -> str:
        return sampled_every(rows(), workload, campaign)

    return {"pivot": _pivot, "lookup": _lookup, "ratios": _ratios, "latest_campaign": _latest, "across": _across,
            "across_ratios": _across_ratios, "sampled_every": _sampled}
