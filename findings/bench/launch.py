"""Start and stop a server process for one config.

The server runs in its own process group (so that SIGTERM reaches its
workers), its output goes to a log file whose path is kept in provenance,
and start-up waits for ``/health`` with a timeout whose error quotes the
log's tail.
"""

from __future__ import annotations

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

from findings.errors import FindingsError
from findings.serverinfo import redact


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


def expand(command: str, port: int, host: str) -> list[str]:
    """The launch line with {port}/{host}/{python} filled in, split like a shell."""
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


def start(name: str, command: str, env: Mapping[str, str], log_dir: Path, host: str = "127.0.0.1") -> Server:
    port = free_port(host)
    args = expand(command, port, host)
    log_dir.mkdir(parents=True, exist_ok=True)
    log = log_dir / f"{name}-{time.strftime('%Y%m%d-%H%M%S')}-{port}.log"
    fh = open(log, "wb")
    try:
        proc = subprocess.Popen(args, stdout=fh, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                env={**os.environ, **env}, start_new_session=True)
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
