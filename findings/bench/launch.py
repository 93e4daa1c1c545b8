"""Start and stop a server process for one config.

The server runs in its own process group (so that SIGTERM reaches its
workers), its output goes to a log file whose path is kept in provenance,
and start-up waits for ``/health`` with a timeout whose error quotes the
log's tail.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import shlex
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Mapping

from findings.core import diskio
from findings.core.errors import FindingsError
from findings.core.serverinfo import redact


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def tail(path: Path, lines: int = 15) -> str:
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return "(no log)"
    return "\n".join("    " + redact(line) for line in text.splitlines()[-lines:]) or "    (log is empty)"


def expand(command: str, port: int, host: str, store: str | None = None) -> list[str]:
    """The launch line with {port}/{host}/{python}/{store} filled in, split like a shell.
    ``{store}``: the results store the run writes to (a launch line that derives
    its flags from the points already measured, tools/vllm_serve.py adaptive)."""
    if store is not None:
        command = command.replace("{store}", shlex.quote(store))
    args = shlex.split(command.replace("{port}", str(port)).replace("{host}", host))
    return [sys.executable if a == "{python}" else a for a in args]


@dataclass
class Server:
    name: str
    command: list[str]
    url: str
    log: Path
    proc: subprocess.Popen[bytes]

    def alive(self) -> bool:
        return self.proc.poll() is None

    def running_command(self) -> list[str] | None:
        """The launched process's command line now, from /proc (Linux): a
        wrapper that execs the engine (tools/vllm_serve.py) shows the engine's
        own flags there. None where /proc cannot tell."""
        try:
            raw = Path(f"/proc/{self.proc.pid}/cmdline").read_bytes()
        except OSError:
            return None
        args = [a.decode("utf-8", "replace") for a in raw.split(b"\0") if a]
        return args or None

    def stop(self, grace_s: float = 15.0) -> int | None:
        """SIGTERM to the process group, then SIGKILL after ``grace_s``."""
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
            try:
                self.proc.wait(grace_s)
            except subprocess.TimeoutExpired:
                try:
                    os.killpg(self.proc.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                self.proc.wait(5)
        return self.proc.returncode


def _die_with_launcher() -> None:
    """In the server's process, before exec (Linux): the kernel kills it when
    the process that launched it dies, even by SIGKILL (a lost Ray node's
    worker: findings tune --ray), so no server is left behind serving nobody."""
    if sys.platform.startswith("linux"):
        with contextlib.suppress(OSError, AttributeError):
            ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


def start(name: str, command: str, env: Mapping[str, str], log_dir: Path, host: str = "127.0.0.1",
          store: str | None = None, die_with_launcher: bool = False) -> Server:
    port = free_port(host)
    args = expand(command, port, host, store)
    log = log_dir / f"{name}-{time.strftime('%Y%m%d-%H%M%S')}-{port}.log"
    try:
        fh = os.fdopen(diskio.open_append(log), "wb")
    except diskio.DiskError as exc:
        raise exc.with_outcome(f"config {name}: its server was not started (it needs its log)") from None
    try:
        proc = subprocess.Popen(args, stdout=fh, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                env={**os.environ, **env}, start_new_session=True,
                                preexec_fn=_die_with_launcher if die_with_launcher else None)
    except OSError as exc:
        raise FindingsError(f"config {name}: cannot start {args[0]!r}: {exc.strerror or exc}") from None
    finally:
        fh.close()
    return Server(name=name, command=args, url=f"http://{host}:{port}", log=log, proc=proc)


def wait_healthy(server: Server, healthy: Callable[[], bool], timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if not server.alive():
            raise FindingsError(
                f"config {server.name}: the server exited with code {server.proc.returncode} before it was "
                f"healthy; last lines of {server.log}:\n{tail(server.log)}")
        if healthy():
            return
        time.sleep(0.2)
    server.stop()
    raise FindingsError(
        f"config {server.name}: /health did not answer 200 within {timeout_s:g} s; "
        f"last lines of {server.log}:\n{tail(server.log)}")
