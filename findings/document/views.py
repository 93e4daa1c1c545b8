"""Latency, SLO and chart views of a campaign or workload. Pure.

Per (config, C) the *cell* of valid points is summarised by the mean of each
metric over its repeats. Tokens/s per user is 1000 / median TPOT (ms).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Iterable, Mapping, Sequence

from findings.derive.analysis import Cell
from findings.core.model import Point

LATENCY_KEYS = ("median_ttft_ms", "p99_ttft_ms", "median_tpot_ms", "p99_tpot_ms")


@dataclass(frozen=True)
class Slo:
    ttft_p99_ms: float | None = None
    tpot_p99_ms: float | None = None

    @property
    def set(self) -> bool:
        return self.ttft_p99_ms is not None or self.tpot_p99_ms is not None

    def describe(self) -> str:
        parts = []
        if self.ttft_p99_ms is not None:
            parts.append(f"TTFT p99 ≤ {self.ttft_p99_ms:g} ms")
        if self.tpot_p99_ms is not None:
            parts.append(f"TPOT p99 ≤ {self.tpot_p99_ms:g} ms")
        return " and ".join(parts)


@dataclass(frozen=True)
class CellView:
    """One (config, C) of one campaign, with its latency metrics."""

    config: str
    concurrency: int
    campaign: str
    throughput: float
    metrics: dict[str, float]
    point_ids: tuple[str, ...]

    def get(self, key: str) -> float | None:
        return self.metrics.get(key)

    @property
    def per_user(self) -> float | None:
        tpot = self.get("median_tpot_ms")
        return 1000.0 / tpot if tpot else None

    def meets(self, slo: Slo) -> bool | None:
        """None when the metrics the SLO needs were not measured."""
        checks = []
        for limit, key in ((slo.ttft_p99_ms, "p99_ttft_ms"), (slo.tpot_p99_ms, "p99_tpot_ms")):
            if limit is None:
                continue
            value = self.get(key)
            if value is None:
                return None
            checks.append(value <= limit)
        return all(checks)


def cell_views(cells: Iterable[Cell], points: Mapping[str, Point]) -> list[CellView]:
    out = []
    for c in cells:
        pts = [points[i] for i in c.point_ids]
        keys = sorted({k for p in pts for k in p.metrics})
        metrics = {}
        for k in keys:
            vals = [p.metrics[k] for p in pts if k in p.metrics]
            if vals:
                metrics[k] = sum(vals) / len(vals)
        out.append(CellView(c.config, c.concurrency, c.campaign, c.mean, metrics, c.point_ids))
    return out


def has_latency(views: Sequence[CellView]) -> bool:
    return any(v.get("median_ttft_ms") is not None for v in views)


def pareto(views: Sequence[CellView]) -> set[tuple[str, int]]:
    """(config, C) on the frontier of tokens/s per user against total tokens/s."""
    pts = [(v.per_user, v.throughput, (v.config, v.concurrency)) for v in views if v.per_user is not None]
    front = set()
    for u, t, key in pts:
        dominated = any(u2 >= u and t2 >= t and (u2 > u or t2 > t) for u2, t2, _ in pts)
        if not dominated:
            front.add(key)
    return front


@dataclass(frozen=True)
class Goodput:
    config: str
    best: CellView | None  # highest throughput meeting the SLO
    largest_c: int | None  # largest C meeting the SLO
    unknown: bool  # latency metrics missing


def goodput(views: Sequence[CellView], slo: Slo) -> list[Goodput]:
    out = []
    for config in sorted({v.config for v in views}):
        mine = sorted((v for v in views if v.config == config), key=lambda v: v.concurrency)
        verdicts = [(v, v.meets(slo)) for v in mine]
        if all(ok is None for _, ok in verdicts):
            out.append(Goodput(config, None, None, unknown=True))
            continue
        ok = [v for v, m in verdicts if m]
        best = max(ok, key=lambda v: (v.throughput, -v.concurrency)) if ok else None
        out.append(Goodput(config, best, max((v.concurrency for v in ok), default=None), unknown=False))
    return out


_SAFE = re.compile(r"[^A-Za-z0-9 ._()+:/,=-]")


def mermaid_safe(text: str) -> str:
    """Data inside a mermaid string: no quotes, brackets or newlines."""
    return _SAFE.sub("_", text)[:80]


#: Line colours, in series order, with the names the legend gives them. mermaid's
#: default xychart palette starts with a near-white lavender that vanishes on
#: a white page (seen rendering with mermaid 11.17.2, GitHub's version); these
#: are matplotlib's tab10, readable on white and on GitHub's dark theme.
PALETTE = (("blue", "#1f77b4"), ("orange", "#ff7f0e"), ("green", "#2ca02c"), ("red", "#d62728"),
           ("purple", "#9467bd"), ("brown", "#8c564b"), ("pink", "#e377c2"), ("grey", "#7f7f7f"),
           ("olive", "#bcbd22"), ("cyan", "#17becf"))


def colour_names(n: int) -> list[str]:
    """The legend's colour name of each of ``n`` series (the palette repeats)."""
    return [PALETTE[i % len(PALETTE)][0] for i in range(n)]


def mermaid_xychart(title: str, xs: Sequence[int], series: Sequence[tuple[str, Sequence[float]]],
                    y_label: str = "output tokens/s") -> str:
    """A GitHub-renderable ``xychart-beta`` block: one line per series, in
    the colours of PALETTE (set in the block's front matter)."""
    top = max((y for _, ys in series for y in ys), default=1.0)
    ceiling = 10 ** math.floor(math.log10(top)) if top > 0 else 1
    y_max = math.ceil(top * 1.1 / ceiling) * ceiling
    palette = ", ".join(PALETTE[i % len(PALETTE)][1] for i in range(max(1, len(series))))
    lines = [
        "```mermaid",
        "---",
        # YAML front matter in flow style: one line, the same mapping.
        f'config: {{themeVariables: {{xyChart: {{plotColorPalette: "{palette}"}}}}}}',
        "---",
        "xychart-beta",
        f'    title "{mermaid_safe(title)}"',
        f"    x-axis \"concurrency C\" [{', '.join(str(x) for x in xs)}]",
        f'    y-axis "{mermaid_safe(y_label)}" 0 --> {y_max:g}',
    ]
    for _, ys in series:
        lines.append(f"    line [{', '.join(f'{y:.1f}' for y in ys)}]")
    lines.append("```")
    return "\n".join(lines)
