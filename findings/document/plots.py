"""Optional SVG plots with matplotlib (the ``[plots]`` extra).

The only module that imports matplotlib, and only when plots are asked for
(findings.toml ``plots = true``). Output is deterministic: a fixed SVG hash
salt, no date in the metadata, fixed sizes and styles, sorted series.
"""

from __future__ import annotations

import io
import re
from pathlib import Path
from typing import Sequence

from findings.core import diskio
from findings.core.errors import FindingsError

_FILE = re.compile(r"[^A-Za-z0-9._-]+")


def file_name(campaign: str, workload: str) -> str:
    return _FILE.sub("_", f"{campaign}--{workload}").strip("_")[:120] + ".svg"


def throughput_svg(path: Path, title: str, xs: Sequence[int],
                   series: Sequence[tuple[str, Sequence[float | None]]]) -> None:
    """Output tokens/s against concurrency (log x), one line per config."""
    try:
        import matplotlib
    except ImportError:
        raise FindingsError("plots = true needs matplotlib: pip install 'findings[plots]'") from None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    matplotlib.rcParams["svg.hashsalt"] = "findings"
    matplotlib.rcParams["svg.fonttype"] = "none"
    fig, ax = plt.subplots(figsize=(7.0, 4.0), dpi=100)
    try:
        for name, ys in series:
            pts = [(x, y) for x, y in zip(xs, ys) if y is not None]
            ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=name)
        ax.set_xscale("log")
        ax.set_xticks(list(xs))
        ax.set_xticklabels([str(x) for x in xs])
        ax.set_xlabel("concurrency C")
        ax.set_ylabel("output tokens/s")
        ax.set_title(title)
        ax.grid(True, alpha=0.3)
        ax.legend(loc="best")
        fig.tight_layout()
        buf = io.BytesIO()
        fig.savefig(buf, format="svg", metadata={"Date": None})
        diskio.write_replace(path, buf.getvalue())
    finally:
        plt.close(fig)
