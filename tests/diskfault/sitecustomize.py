"""The fallback for the disk-failure tests where no filesystem can be mounted:
an errno injected at the ``os`` calls, in a child process only.

LABELLED AS INJECTED: the tests that use it say so in their ids. Where the
test can mount a small tmpfs (root with CAP_SYS_ADMIN, as in CI), the real
kernel refuses instead and this file is never loaded.

Loaded as ``sitecustomize`` when tests/diskfault is on PYTHONPATH, and active
only with ``FINDINGS_INJECT=ERRNO:PREFIX[:AFTER]``:

* ``ENOSPC``: files under PREFIX open, but every ``os.write`` to them fails
  (a full disk: the temp file exists, its bytes do not fit). With AFTER, the
  first AFTER hard links into place under PREFIX succeed first (a disk that
  fills up after AFTER run files).
* ``EROFS`` / ``EACCES``: opening a file under PREFIX for writing, creating a
  folder there, linking, renaming or removing there all fail at once.

findings.core.diskio writes with exactly these calls (os.open, os.write, os.link,
os.replace, os.mkdir), which is what makes the injection reach them.
"""

from __future__ import annotations

import errno
import os

_spec = os.environ.get("FINDINGS_INJECT")
if _spec:
    _name, _prefix, *_rest = _spec.split(":")
    _code = getattr(errno, _name)
    _after = int(_rest[0]) if _rest else 0
    _linked = [0]
    _fds: set[int] = set()
    _open, _write, _link, _replace, _mkdir, _unlink, _close = (
        os.open, os.write, os.link, os.replace, os.mkdir, os.unlink, os.close)

    def _under(path: object) -> bool:
        try:
            return os.path.abspath(os.fsdecode(path)).startswith(_prefix)  # type: ignore[arg-type]
        except TypeError:
            return False

    def _armed() -> bool:
        return _linked[0] >= _after

    def _fail(path: object) -> OSError:
        return OSError(_code, os.strerror(_code), os.fsdecode(path))  # type: ignore[arg-type]

    def _open_(path, flags, mode=0o777, *, dir_fd=None):  # type: ignore[no-untyped-def]
        writes = flags & (os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_APPEND | os.O_TRUNC)
        if writes and _under(path) and _armed() and _code != errno.ENOSPC:
            raise _fail(path)
        fd = _open(path, flags, mode, dir_fd=dir_fd)
        if writes and _under(path):
            _fds.add(fd)
        return fd

    def _write_(fd, data):  # type: ignore[no-untyped-def]
        if fd in _fds and _armed() and len(data):
            raise OSError(_code, os.strerror(_code))
        return _write(fd, data)

    def _close_(fd):  # type: ignore[no-untyped-def]
        _fds.discard(fd)
        return _close(fd)

    def _link_(src, dst, *a, **k):  # type: ignore[no-untyped-def]
        if _under(dst):
            if _armed() and _code != errno.ENOSPC:
                raise _fail(dst)
            result = _link(src, dst, *a, **k)
            _linked[0] += 1
            return result
        return _link(src, dst, *a, **k)

    def _replace_(src, dst, *a, **k):  # type: ignore[no-untyped-def]
        if _under(dst) and _armed() and _code != errno.ENOSPC:
            raise _fail(dst)
        return _replace(src, dst, *a, **k)

    def _mkdir_(path, mode=0o777, *a, **k):  # type: ignore[no-untyped-def]
        if _under(path) and _armed() and _code != errno.ENOSPC:
            if os.path.exists(path):
                raise FileExistsError(errno.EEXIST, os.strerror(errno.EEXIST), os.fsdecode(path))
            raise _fail(path)
        return _mkdir(path, mode, *a, **k)

    def _unlink_(path, *a, **k):  # type: ignore[no-untyped-def]
        if _under(path) and _armed() and _code != errno.ENOSPC:
            raise _fail(path)
        return _unlink(path, *a, **k)

    os.open, os.write, os.link, os.replace, os.mkdir, os.unlink, os.close = (  # type: ignore[assignment]
        _open_, _write_, _link_, _replace_, _mkdir_, _unlink_, _close_)
