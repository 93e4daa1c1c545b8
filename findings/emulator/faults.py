"""Injected failures: which requests fail, and how. Pure.

Two ways to choose the failing requests, both decided by the request's
arrival number among generation requests (so a run is reproducible):

- **rates** (``error_rate``, ``drop_rate``, ``stall_rate``): each request
  draws its fate from (seed, arrival number); the share that fails is
  close to the rate over many requests, not exact.
- **an exact share** (``fail_share``, ``fail_how``, ``fail_skip``): after
  the first ``fail_skip`` requests (a client's own test or warm-up request),
  request ``n`` fails exactly when ``floor((n + 1) * share) > floor(n *
  share)``, so every prefix of the run has failed ``share`` of its requests,
  to within one. The failing requests take the kinds of ``fail_how`` in turn:

  - ``http:<status>``: an error response with that status before any token
    (the engine's error body: SGLang's native shape on ``/generate``,
    OpenAI's on ``/v1/*``);
  - ``drop``: the TCP connection is closed abruptly halfway through the
    stream (no ``[DONE]``, a reset at the client);
  - ``error-event``: an ``{"error": ...}`` event halfway through the
    stream, then ``[DONE]`` (what SGLang sends on an abort).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from findings.emulator.engine import seed_for

#: The kinds of an exact-share failure (``http:<status>`` takes a status code).
FAIL_KINDS = ("http:<status>", "drop", "error-event")


@dataclass(frozen=True)
class Faults:
    """Injected failures. See the module's docstring."""

    error_rate: float = 0.0  # half HTTP 500 before streaming, half an {"error": ...} event mid-stream
    drop_rate: float = 0.0  # streams whose TCP connection is closed abruptly mid-stream (no [DONE])
    stall_rate: float = 0.0  # streams that send nothing for stall_s seconds mid-stream
    stall_s: float = 30.0  # wall seconds (not divided by speed)
    die_after: int | None = None  # os._exit(1) after this many completed requests
    fail_share: float = 0.0  # exactly this share of requests fails (after fail_skip), as fail_how says
    fail_how: tuple[str, ...] = ("http:500",)
    fail_skip: int = 0  # the first this many requests never fail by fail_share

    @property
    def any(self) -> bool:
        return bool(self.error_rate or self.drop_rate or self.stall_rate or self.fail_share)


@dataclass(frozen=True)
class Fate:
    error_before: bool = False
    status: int = 500  # of error_before
    error_mid: bool = False
    drop: bool = False
    stall: bool = False


def parse_how(text: str) -> tuple[str, ...]:
    """``"http:500,drop"`` -> ("http:500", "drop"); ValueError with the reason."""
    kinds = tuple(k.strip() for k in text.split(",") if k.strip())
    if not kinds:
        raise ValueError("expected at least one of " + ", ".join(FAIL_KINDS))
    for k in kinds:
        if k in ("drop", "error-event"):
            continue
        head, _, status = k.partition(":")
        if head != "http" or not status.isdigit() or not 400 <= int(status) <= 599:
            raise ValueError(f"{k!r} is not one of {', '.join(FAIL_KINDS)} (status 400-599)")
    return kinds


def validate(f: Faults) -> None:
    for name in ("error_rate", "drop_rate", "stall_rate", "fail_share"):
        v = getattr(f, name)
        if not 0.0 <= v <= 1.0:
            raise ValueError(f"{name} must be between 0 and 1, got {v}")
    if f.fail_skip < 0:
        raise ValueError(f"fail_skip must be >= 0, got {f.fail_skip}")
    parse_how(",".join(f.fail_how))


def _share_index(share: float, n: int) -> int | None:
    """Among the exact-share failures, the index of request ``n`` (counted
    after the skipped ones), or None when it does not fail."""
    if share <= 0.0 or n < 0:
        return None
    if math.floor((n + 1) * share + 1e-9) > math.floor(n * share + 1e-9):
        return math.floor(n * share + 1e-9)
    return None


def fate(f: Faults, seed: int, n: int) -> Fate:
    """The fate of the ``n``-th generation request (0-based) to arrive."""
    if not f.any:
        return Fate()
    k = _share_index(f.fail_share, n - f.fail_skip) if n >= f.fail_skip else None
    if k is not None:
        how = f.fail_how[k % len(f.fail_how)]
        if how == "drop":
            return Fate(drop=True)
        if how == "error-event":
            return Fate(error_mid=True)
        return Fate(error_before=True, status=int(how.split(":", 1)[1]))

    def u(kind: str) -> float:
        return (seed_for("fault", kind, seed, n) % 1_000_000) / 1_000_000

    e = u("error")
    return Fate(
        error_before=e < f.error_rate / 2,
        error_mid=f.error_rate / 2 <= e < f.error_rate,
        drop=u("drop") < f.drop_rate,
        stall=u("stall") < f.stall_rate,
    )
