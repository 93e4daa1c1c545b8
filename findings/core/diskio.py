"""Writes the operating system may refuse: full disks, read-only mounts,
denied permissions.

Every file findings writes (store runs, documents, plots, deploy files, the
bench recovery file) goes through here, so that

* a refusal becomes one ``DiskError`` naming the path and the cause in words
  ("no space left on device", "read-only file system", "permission denied"),
  which the caller completes with what was and was not written;
* a temp file is removed and a half-written file never sits under its final
  name.

The writes use the ``os`` module's calls (``os.open``, ``os.write``,
``os.fsync``, ``os.link``, ``os.replace``) rather than buffered file objects,
so the test fallback that injects an errno where no filesystem can be
mounted (tests/diskfault/) sees exactly the calls the operating system
answers. The store's run files are read here too (``read_bytes``), with
the same calls, which that fallback lets through. Imports nothing internal
but errors.
"""

from __future__ import annotations

import contextlib
import errno as errno_mod
import fcntl
import os
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator

from findings.core.errors import FindingsError, InputError


def cause(exc: OSError) -> str:
    """The refusal in words: "no space left on device", "read-only file system"."""
    if exc.errno is not None:
        text = os.strerror(exc.errno)
        if text and not text.startswith("Unknown error"):
            return text[0].lower() + text[1:]
    return (exc.strerror or str(exc) or type(exc).__name__).rstrip(".")


class DiskError(FindingsError):
    """A write the operating system refused. ``path`` and ``cause`` let the
    caller say what was and was not written."""

    def __init__(self, path: Path | str, exc: OSError, doing: str = "cannot write") -> None:
        self.path = str(path)
        self.errno = exc.errno
        self.cause = cause(exc)
        self.doing = doing
        super().__init__(f"{self.path}: {doing}: {self.cause}")

    def with_outcome(self, outcome: str) -> "DiskError":
        """The same refusal, with what was and was not written appended."""
        out = DiskError.__new__(DiskError)
        out.path, out.errno, out.cause, out.doing = self.path, self.errno, self.cause, self.doing
        FindingsError.__init__(out, f"{self.path}: {self.doing}: {self.cause}; {outcome}")
        return out


def read_input(path: Path, what: str) -> bytes:
    """The bytes of an input file the user named (a prompt file, a trace);
    one ``InputError`` line, naming ``what`` was expected, for a folder or a
    file that cannot be read."""
    try:
        return path.read_bytes()
    except IsADirectoryError:
        raise InputError(str(path), None, None, f"is a folder, not a {what}") from None
    except OSError as exc:
        raise InputError(str(path), None, None, f"cannot read: {exc.strerror or exc}") from None


def read_bytes(path: str | Path) -> bytes:
    """A whole file's bytes, through ``os.open`` and ``os.read`` until the end
    (a store's run files, read by the thousand: about 4.5 µs a small file
    against 8 µs through a buffered file object, D142). Raises what
    ``open`` would (OSError)."""
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
    try:
        data = os.read(fd, 1 << 16)
        more = os.read(fd, 1 << 20) if data else b""
        if more:
            parts = [data, more]
            while chunk := os.read(fd, 1 << 20):
                parts.append(chunk)
            data = b"".join(parts)
        return data
    finally:
        os.close(fd)


def is_disk_refusal(exc: OSError) -> bool:
    """An error that is about the filesystem refusing, not about our input."""
    return exc.errno in {errno_mod.ENOSPC, errno_mod.EROFS, errno_mod.EACCES, errno_mod.EPERM,
                         errno_mod.EDQUOT, errno_mod.EIO, errno_mod.EFBIG}


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        n = os.write(fd, view)
        view = view[n:]


def _temp(folder: Path, name: str) -> tuple[int, Path]:
    """A new, exclusive temp file beside the final one (same filesystem)."""
    for attempt in range(100):
        tmp = folder / f".tmp-{os.getpid()}-{attempt}-{name}"
        try:
            return os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644), tmp
        except FileExistsError:
            continue
    raise FileExistsError(errno_mod.EEXIST, "no free temp name", str(folder))


def _fsync_dir(folder: Path) -> None:
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class _Out:
    """A file object that writes each piece it is given through, whole."""

    def __init__(self, fd: int) -> None:
        self._fd = fd

    def write(self, piece: bytes) -> int:
        _write_all(self._fd, piece)
        return len(piece)


#: What writes a file's content into a file object (``pickle.dump``, say):
#: the content written as it is made, never held whole.
Filler = Callable[[Any], None]


def _write_temp(path: Path, data: bytes | Iterable[bytes] | Filler, durable: bool = True) -> Path:
    """The data (bytes, pieces of bytes written as they come, or a filler
    that writes them into a file object) in a temp file beside ``path``
    (synced if ``durable``); removed again on any failure, a failure to make
    the next piece included."""
    fd, tmp = _temp(path.parent, path.name)
    try:
        try:
            os.fchmod(fd, 0o644)  # the umask may have narrowed it; documents and runs are shared
            if callable(data):
                data(_Out(fd))
            else:
                for piece in (data,) if isinstance(data, bytes) else data:
                    _write_all(fd, piece)
            if durable:
                os.fsync(fd)
        finally:
            os.close(fd)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    return tmp


def write_new(path: Path, data: bytes) -> Path:
    """Write a file that must not exist yet: temp file, fsync, hard link into
    place (which fails rather than overwrite), fsync of the folder.

    Raises FileExistsError when ``path`` exists, DiskError on any other refusal.
    """
    try:
        tmp = _write_temp(path, data)
    except OSError as exc:
        raise DiskError(path, exc) from None
    try:
        os.link(tmp, path)
    except FileExistsError:
        raise
    except OSError as exc:
        raise DiskError(path, exc) from None
    finally:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
    try:
        _fsync_dir(path.parent)
    except OSError as exc:  # the file is in place; only the folder's sync failed
        raise DiskError(path.parent, exc, "written, but the folder could not be synced") from None
    return path


def write_replace(path: Path, data: bytes | str | Iterable[bytes] | Filler, *, make_parent: bool = True,
                  durable: bool = True) -> Path:
    """Write or overwrite ``path`` atomically: the old content or the new, never half.
    ``data`` may come in pieces (an iterable of bytes, or a ``Filler``),
    written as they are made: if making one fails, ``path`` keeps its old
    content.
    Without ``durable``, no fsync: for derived files (the render cache) that
    may be lost in a crash but never read half-written."""
    raw = data.encode("utf-8") if isinstance(data, str) else data
    try:
        if make_parent:
            path.parent.mkdir(parents=True, exist_ok=True)
        tmp = _write_temp(path, raw, durable)
    except OSError as exc:
        raise DiskError(path, exc) from None
    try:
        os.replace(tmp, path)
    except OSError as exc:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise DiskError(path, exc) from None
    return path


def make_dirs(path: Path) -> None:
    """``mkdir -p``; a folder that exists is never an error, even on a read-only mount."""
    if path.is_dir():
        return
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise DiskError(path, exc, "cannot create the folder") from None


@contextlib.contextmanager
def exclusive_lock(path: Path) -> Iterator[None]:
    """An exclusive ``flock`` on ``path`` (created if missing) for the block."""
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    except OSError as exc:
        raise DiskError(path, exc, "cannot take the write lock") from None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)


def open_append(path: Path) -> int:
    """A file descriptor to append to (a log), or DiskError."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        return os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    except OSError as exc:
        raise DiskError(path, exc) from None


def remove(path: Path) -> None:
    """Delete a file, and sync its folder, or DiskError (a file already gone is no error)."""
    try:
        os.unlink(path)
    except FileNotFoundError:
        return
    except OSError as exc:
        raise DiskError(path, exc, "cannot remove") from None
    try:
        _fsync_dir(path.parent)
    except OSError as exc:
        raise DiskError(path.parent, exc, "removed, but the folder could not be synced") from None
