"""The runner's progress: a bar per point on a terminal (tqdm), and one
summary line per point always. The only module that imports tqdm
(docs/decisions.md D74)."""

from __future__ import annotations

import sys
from typing import Any, TextIO

from tqdm import tqdm

from findings.bench.records import RequestRecord


class Progress:
    """A one-line progress bar per point on a terminal, and a summary line always.

    ``stream``: where both go (standard error by default); the bar is drawn
    only when it is a terminal, unless ``force`` (tests)."""

    def __init__(self, enabled: bool, stream: TextIO | None = None, force: bool = False) -> None:
        self.stream = stream or sys.stderr
        self.enabled = enabled and (force or self.stream.isatty())
        self.bar: tqdm[Any] | None = None
        self.failed = 0

    def start(self, label: str, total: int) -> None:
        self.failed = 0
        if self.enabled:
            self.bar = tqdm(total=total, desc=label, unit="req", file=self.stream, leave=False,
                            dynamic_ncols=True, mininterval=0.2, smoothing=0.1,
                            bar_format="{desc} {bar} {n_fmt}/{total_fmt} req{postfix} [{elapsed}, {rate_fmt}]",
                            postfix="0 failed")

    def tick(self, rec: RequestRecord) -> None:
        if not rec.ok:
            self.failed += 1
        if self.bar is not None:
            if not rec.ok:
                self.bar.set_postfix_str(f"{self.failed} failed", refresh=False)
            self.bar.update(1)

    def advance(self, finished: int, failed: int) -> None:
        """``finished`` more requests, ``failed`` of them failed (worker processes' counts)."""
        self.failed += failed
        if self.bar is not None:
            if failed:
                self.bar.set_postfix_str(f"{self.failed} failed", refresh=False)
            self.bar.update(finished)

    def end(self, line: str) -> None:
        if self.bar is not None:
            self.bar.close()
            self.bar = None
        self.stream.write(line + "\n")
        self.stream.flush()
