"""The event loop a measurement runs on (docs/decisions.md D135): uvloop
where it is installed (a core dependency on Linux and macOS), else asyncio's
own; ``FINDINGS_EVENT_LOOP=asyncio`` chooses asyncio's. Every point records
which (its provenance's ``event_loop``). The one place uvloop is imported."""

from __future__ import annotations

import asyncio
import os
from dataclasses import dataclass
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


@dataclass
class _Flight:
    """A loop that ``run`` has under way: its main task, once started, and
    the exception a stop asked ``run`` to raise."""

    task: asyncio.Task[Any] | None = None
    stop: BaseException | None = None


#: The loops ``run`` has under way in this process, innermost last.
_flights: list[_Flight] = []


def stop_running(exc: BaseException) -> bool:
    """From a signal handler (the main thread): cancel the main task of the
    loop ``run`` has under way, as asyncio.Runner does on Ctrl-C, and have
    ``run`` raise ``exc`` once it has unwound. False where no loop's task is
    running: the caller raises ``exc`` itself.

    Raising from the handler instead is not safe inside a loop: the handler
    runs in whatever callback the loop is in, and uvloop reports an
    exception raised in a transport's ``data_received`` to the loop's
    exception handler and goes on, so the stop was lost (D138)."""
    if not _flights or _flights[-1].task is None:
        return False
    flight = _flights[-1]
    task = flight.task
    assert task is not None
    try:
        task.get_loop().call_soon_threadsafe(task.cancel)
    except RuntimeError:  # the loop closed meanwhile
        return False
    if flight.stop is None:
        flight.stop = exc
    return True


async def _tracked(main: Coroutine[Any, Any, T], flight: _Flight) -> T:
    """``main``, with its task known to ``stop_running`` while it runs (once
    it has ended, a stop is raised by the handler itself: the loop is only
    shutting down)."""
    flight.task = asyncio.current_task()
    try:
        return await main
    finally:
        flight.task = None


def run(main: Coroutine[Any, Any, T]) -> T:
    """``asyncio.run(main)`` on the chosen loop; raises what ``stop_running``
    was given, if it was called meanwhile."""
    try:
        found = _chosen()
    except EventLoopError:
        main.close()  # never started
        raise
    flight = _Flight()
    _flights.append(flight)
    try:
        try:
            if found is None:
                result = asyncio.run(_tracked(main, flight))
            else:
                with asyncio.Runner(loop_factory=found.new_event_loop) as runner:
                    result = runner.run(_tracked(main, flight))
        except asyncio.CancelledError:
            if flight.stop is not None:
                raise flight.stop from None
            raise
        if flight.stop is not None:
            raise flight.stop  # it came as the task finished, or the task swallowed the cancel
        return result
    finally:
        _flights.remove(flight)
