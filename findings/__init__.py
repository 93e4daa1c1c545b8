"""findings: a living findings-document generator for LLM-serving performance work.

Importing the package has no side effects and imports nothing heavy. The
public surface is listed in ``__all__``; everything else is internal.

    >>> import findings
    >>> df = findings.frame()             # one row per stored point (pandas, the [pandas] extra)
    >>> doc = findings.conclusions()      # what `findings conclusions --json` prints
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from findings.core.version import __version__

__all__ = ["__version__", "conclusions", "frame"]


def _settings(store: str | Path | None) -> Any:
    from findings.document.settings import load
    return load(None).with_overrides(store=str(store) if store is not None else None, baseline=None,
                                     noise_floor=None)


def frame(store: str | Path | None = None, *, requests: bool = False) -> Any:
    """The store as a pandas DataFrame, one row per point (docs/frame.md);
    with ``requests``, also a second frame of per-request records, as a
    pair. ``store``: default as the CLI's (``$FINDINGS_STORE``, else the
    nearest findings.toml's store)."""
    from findings import dataframe
    s = _settings(store)
    return dataframe.load_frame(s.store, s.rules.gates, requests)


def conclusions(store: str | Path | None = None) -> dict[str, Any]:
    """The conclusions as ``findings conclusions --json`` prints them (docs/conclusions.md)."""
    from findings import api as document
    return document.conclusions(_settings(store))
