"""Work done aside: a pure function computed in a forked process while this
one goes on (D137).

``forked(fn)`` starts ``fn()`` in a process forked from this one, which sees
this process's memory as it stands (nothing is pickled on the way in), and
returns a handle. Its ``result()`` is what ``fn()`` returned, pickled back
through a pipe. Whenever the work could not be done aside, ``result()``
calls ``fn()`` here instead: fewer than two cores free, no ``fork`` on this
platform, the forked process died or was killed, ``fn`` raised there, or
its result does not pickle. ``fn`` must therefore be pure, and then the
answer, or the error it raises, is the same either way, only later.
``close()`` kills the forked process if it still runs (a caller that fails
or is interrupted before asking for the result); ``result()`` closes too,
and on Linux the forked process dies with this one, however it ends.

``inline(fn)`` is the same handle without a process: ``result()`` calls ``fn()``.
``cores()`` and ``die_with(parent)`` serve every process findings starts
(the render cache's forked reader, the bench's worker processes) as well.
multiprocessing (the standard library's ``fork`` context) does the forking,
the pipe and the clean-up of a process that ends.
"""

from __future__ import annotations

import os
import pickle
import signal
from typing import Any, Callable, Protocol


class Pending(Protocol):
    #: Whether ``fn()`` runs aside now (False: it runs here, when asked for).
    running: bool

    def result(self) -> Any: ...

    def close(self) -> None: ...


#: What a caller is given to run work aside: ``forked`` or ``inline``.
Aside = Callable[[Callable[[], Any]], Pending]


class _Inline:
    running = False

    def __init__(self, fn: Callable[[], Any]) -> None:
        self._fn = fn

    def result(self) -> Any:
        return self._fn()

    def close(self) -> None:
        pass


def inline(fn: Callable[[], Any]) -> Pending:
    """``fn()``, computed here when the result is asked for."""
    return _Inline(fn)


def cores() -> int:
    """The cores this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def die_with(parent: int) -> None:
    """On Linux, this process is killed when its parent ends, however it
    ends (SIGTERM or SIGKILL leave no time to kill it): prctl's
    PR_SET_PDEATHSIG, through ctypes."""
    try:
        import ctypes
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # 1: PR_SET_PDEATHSIG
    except (OSError, AttributeError):  # not Linux: it ends when it finds the pipe closed
        pass
    if os.getppid() != parent:  # the parent ended before the prctl
        os._exit(1)


def _child(fn: Callable[[], Any], send: Any, parent: int) -> None:
    """In the forked process: ``fn()``'s result, pickled, sent; (False,) when
    it raised or does not pickle (the parent then computes it)."""
    die_with(parent)
    try:
        blob = pickle.dumps((True, fn()), protocol=pickle.HIGHEST_PROTOCOL)
    except BaseException:  # noqa: BLE001 - the parent computes it again and raises there
        blob = pickle.dumps((False,))
    try:
        send.send_bytes(blob)
    finally:
        send.close()


class _Forked:
    running = True

    def __init__(self, fn: Callable[[], Any]) -> None:
        import multiprocessing  # only when work goes aside: not on a small render's path
        self._fn = fn
        context = multiprocessing.get_context("fork")
        self._recv, send = context.Pipe(duplex=False)
        self._proc: Any = context.Process(target=_child, args=(fn, send, os.getpid()),
                                            daemon=True)
        try:
            self._proc.start()
        finally:
            send.close()

    def result(self) -> Any:
        got: tuple[Any, ...] = (False,)
        if self._proc is not None:
            try:
                got = pickle.loads(self._recv.recv_bytes())
            except (EOFError, OSError, pickle.UnpicklingError, ValueError, TypeError, AttributeError, ImportError):
                got = (False,)  # it died, or sent what cannot be read: compute it here
            finally:
                self.close()
        return got[1] if got[0] else self._fn()

    def close(self) -> None:
        proc, self._proc = self._proc, None
        if proc is None:
            return
        if proc.is_alive():
            proc.kill()
        proc.join()
        self._recv.close()


def forked(fn: Callable[[], Any]) -> Pending:
    """``fn()`` computed in a forked process when two cores are free, else
    here when its result is asked for."""
    if cores() < 2 or not hasattr(os, "fork"):
        return _Inline(fn)
    try:
        return _Forked(fn)
    except OSError:  # no process could be started (limits): here, then
        return _Inline(fn)


class Limit:
    """How many steps of a loop run aside may take, which this process can
    lower while it runs: work split between the two where this process
    joins in (the history's replay, D155). Made before the fork, in shared
    memory (multiprocessing's fork context: a lock and two integers), so the
    forked process sees it change.

    The loop calls ``claim(step)`` before each step, in order: True, and
    the step is counted as taken; False once ``step`` reaches the limit.
    This process calls ``cut(want)`` once: with the steps taken so far, it
    sets the limit to ``want(taken)`` (never below what was taken, never
    above the limit) and returns it. A step is claimed or refused under the
    lock, so the loop stops at exactly the returned limit."""

    def __init__(self, steps: int) -> None:
        import multiprocessing  # only when work goes aside
        context = multiprocessing.get_context("fork")
        self._lock = context.Lock()
        self._limit = context.RawValue("q", steps)
        self._taken = context.RawValue("q", 0)

    def claim(self, step: int) -> bool:
        with self._lock:
            if step >= self._limit.value:
                return False
            self._taken.value = max(self._taken.value, step + 1)
            return True

    def cut(self, want: Callable[[int], int]) -> int:
        with self._lock:
            taken = self._taken.value
            limit = self._limit.value = max(taken, min(self._limit.value, want(taken)))
            return int(limit)
