"""A small disk the tests can fill up, make read-only or deny: a real tmpfs.

Where no filesystem can be mounted (not root, no CAP_SYS_ADMIN), the same
tests run against a plain folder with the errno injected at the ``os`` calls
of the child process (tests/diskfault/sitecustomize.py). That mechanism is
labelled: it shows in every test id (``[injected]`` instead of ``[tmpfs]``).
``FINDINGS_DISKFAULT=inject`` forces it, to check the fallback itself.
"""

from __future__ import annotations

import contextlib
import errno
import functools
import os
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Iterator

ROOT = Path(__file__).resolve().parent.parent
INJECT_DIR = Path(__file__).resolve().parent / "diskfault"
NOBODY = 65534


def _mount(point: Path, size: str) -> bool:
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size},mode=0755", "tmpfs", str(point)],
                       capture_output=True)
    return r.returncode == 0


@functools.lru_cache(maxsize=1)
def mechanism() -> str:
    """``tmpfs`` where this process can mount one, else ``injected``."""
    if os.environ.get("FINDINGS_DISKFAULT") == "inject" or os.geteuid() != 0:
        return "injected"
    probe = Path(f"/tmp/findings-mount-probe-{os.getpid()}")
    probe.mkdir(exist_ok=True)
    try:
        if not _mount(probe, "64k"):
            return "injected"
        subprocess.run(["umount", str(probe)], check=True)
        return "tmpfs"
    finally:
        probe.rmdir()


class Disk:
    """A folder on a small filesystem of its own (or, injected, a plain folder)."""

    def __init__(self, root: Path, kind: str) -> None:
        self.root, self.kind = root, kind
        self.inject: str | None = None
        self._filler = root / ".filler"

    # -- what the kernel says (or the injection)
    @contextlib.contextmanager
    def full(self) -> Iterator[None]:
        """No byte left: every write of data fails with ENOSPC."""
        if self.kind == "tmpfs":
            self._fill()
            try:
                yield
            finally:
                self._filler.unlink()
        else:
            self.inject = f"ENOSPC:{self.root}"
            try:
                yield
            finally:
                self.inject = None

    @contextlib.contextmanager
    def read_only(self) -> Iterator[None]:
        if self.kind == "tmpfs":
            subprocess.run(["mount", "-o", "remount,ro", str(self.root)], check=True)
            try:
                yield
            finally:
                subprocess.run(["mount", "-o", "remount,rw", str(self.root)], check=True)
        else:
            self.inject = f"EROFS:{self.root}"
            try:
                yield
            finally:
                self.inject = None

    @contextlib.contextmanager
    def fills_after(self, files: int, folder: Path) -> Iterator[None]:
        """The disk fills up once ``folder`` holds ``files`` ``*.json`` files
        (a store after that many points); space comes back at the end."""
        if self.kind == "tmpfs":
            stop = threading.Event()

            def watch() -> None:
                full = False
                while not stop.is_set():
                    if not full and folder.is_dir() and \
                            len([p for p in folder.glob("*.json") if not p.name.startswith(".")]) >= files:
                        full = True
                    if full:  # and kept full: a file deleted later (a journal) frees pages again
                        self._fill()
                    time.sleep(0.002)
            t = threading.Thread(target=watch, daemon=True)
            t.start()
            try:
                yield
            finally:
                stop.set()
                t.join(5)
                with contextlib.suppress(FileNotFoundError):
                    self._filler.unlink()
        else:
            # Two links per point: its sidecar of per-request records, then its run file.
            self.inject = f"ENOSPC:{self.root}:{files * 2}"
            try:
                yield
            finally:
                self.inject = None

    def _fill(self) -> None:
        fd = os.open(self._filler, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        try:
            for chunk in (1 << 20, 1 << 16, 1 << 12, 1):
                block = b"\0" * chunk
                while True:
                    try:
                        os.write(fd, block)
                    except OSError as exc:
                        if exc.errno != errno.ENOSPC:
                            raise
                        break
        finally:
            os.close(fd)

    # -- running findings as the user would, in a child process
    def env(self, extra: dict[str, str] | None = None) -> dict[str, str]:
        env = {**os.environ, **(extra or {})}
        env.pop("FINDINGS_INJECT", None)
        if self.inject:
            env["FINDINGS_INJECT"] = self.inject
            env["PYTHONPATH"] = os.pathsep.join([str(INJECT_DIR), str(ROOT), env.get("PYTHONPATH", "")])
        return env


def findings(*args: str, env: dict[str, str] | None = None, user: int | None = None,
             prefix: list[str] | None = None, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """``python -m findings ARGS`` in a child process (real stdout/stderr)."""
    return subprocess.run([*(prefix or []), sys.executable, "-m", "findings", *args], capture_output=True, text=True,
                          env=env if env is not None else dict(os.environ), cwd=str(ROOT), timeout=timeout,
                          user=user, group=user)


@contextlib.contextmanager
def small_disk(base: Path, size: str = "8m") -> Iterator[Disk]:
    point = base / "disk"
    point.mkdir()
    kind = mechanism()
    if kind == "tmpfs" and not _mount(point, size):
        kind = "injected"
    try:
        yield Disk(point, kind)
    finally:
        if kind == "tmpfs":
            subprocess.run(["umount", "-l", str(point)], capture_output=True)


@functools.lru_cache(maxsize=1)
def unprivileged() -> tuple[str, list[str], int | None] | None:
    """How to run a child to which the kernel's permission checks apply:
    (label, command prefix, user). As ``nobody`` where the checkout and its
    Python are readable by all; else, as root, without the capabilities that
    skip those checks (``setpriv``, CAP_DAC_OVERRIDE and CAP_DAC_READ_SEARCH
    dropped); None where neither works (the tests then inject EACCES)."""
    if os.environ.get("FINDINGS_DISKFAULT") == "inject":
        return None
    probe = [sys.executable, "-c", "import findings.cli"]
    if os.geteuid() == 0:
        with contextlib.suppress(OSError):
            if subprocess.run(probe, capture_output=True, cwd=str(ROOT), user=NOBODY, group=NOBODY).returncode == 0:
                return "nobody", [], NOBODY
    setpriv = ["setpriv", "--bounding-set", "-dac_override,-dac_read_search"]
    if os.geteuid() == 0 and shutil.which("setpriv"):
        with contextlib.suppress(OSError):
            if subprocess.run(setpriv + probe, capture_output=True, cwd=str(ROOT)).returncode == 0:
                return "root-without-dac-override", setpriv, None
    return None
