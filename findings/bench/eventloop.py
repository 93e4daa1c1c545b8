"""The event loop a measurement runs on (docs/decisions.md D135): uvloop
where it is installed (a core dependency on Linux and macOS), else asyncio's
own; ``FINDINGS_EVENT_LOOP=asyncio`` chooses asyncio's. Every point records
which (its provenance's ``event_loop``). The one place uvloop is imported."""

from __future__ import annotations

import asyncio
import os
from types import ModuleType
from typing import Any, Coroutine, TypeVar

from findings.core.errors import FindingsError

T = TypeVar("T")

#: The environment variable that chooses: auto (the default), uvloop or asyncio.
ENV = "FINDINGS_EVENT_LOOP"
CHOICES = ("auto", "uvloop", "asyncio")


class EventLoopError(FindingsError):
    """FINDINGS_EVENT_LOOP names a loop that cannot be had."""


def _installed() -> ModuleType | None:
    try:
        import uvloop
    except ImportError:
        return None
    return uvloop


def _chosen() -> ModuleType | None:
    """uvloop's module, or None for asyncio's loop."""
    want = os.environ.get(ENV, "auto").strip().lower() or "auto"
    if want not in CHOICES:
        raise EventLoopError(f"{ENV}={want!r}: choose one of {', '.join(CHOICES)}")
    if want == "asyncio":
        return None
    found = _installed()
    if found is None and want == "uvloop":
        raise EventLoopError(f"{ENV}=uvloop, but uvloop is not installed here (pip install uvloop, or unset {ENV})")
    return found


def name() -> str:
    """What ``run`` uses: ``uvloop <version>`` or ``asyncio``."""
    found = _chosen()
    return "asyncio" if found is None else f"uvloop {getattr(found, '__version__', '?')}"


def check() -> None:
    """Refuse a FINDINGS_EVENT_LOOP that cannot be had, before anything starts."""
    _chosen()


def run(main: Coroutine[Any, Any, T]) -> T:
    """``asyncio.run(main)`` on the chosen loop."""
    try:
        found = _chosen()
    except EventLoopError:
        main.close()  # never started
        raise
    if found is None:
        return asyncio.run(main)
    with asyncio.Runner(loop_factory=found.new_event_loop) as runner:
        return runner.run(main)
