"""The one error family the CLI turns into a one-line message.

Imports nothing internal: every other module may raise these.
"""

from __future__ import annotations


def one_line(text: str) -> str:
    """Control characters from data (a key holding a line break) shown escaped."""
    return text.replace("\\", "\\\\").replace("\n", "\\n").replace("\r", "\\r").replace("\t", "\\t") \
        if any(c in text for c in "\n\r\t") else text


class FindingsError(Exception):
    """An expected failure, reported to the user as one line (exit code 1, or the
    subclass's ``exit_code``)."""

    exit_code = 1


class InputError(FindingsError):
    """A file we were asked to read is malformed.

    The message always names the file, the line (when there is one) and the
    field, so that the user can go straight to the fault.
    """

    def __init__(self, path: str, line: int | None, field: str | None, message: str) -> None:
        self.path = path
        self.line = line
        self.field = field
        self.message = message
        where = path if line is None else f"{path}:{line}"
        what = f"field '{field}': " if field else ""
        super().__init__(one_line(f"{where}: {what}{message}"))


class StoreError(FindingsError):
    """The results store is unreadable, or a write to it was refused."""

    def __init__(self, message: str) -> None:
        super().__init__(one_line(message))


class NotAStoreError(StoreError):
    """A reader was pointed at a path that is not a findings store: a typo in
    --store must not read as an empty store and pass a CI gate (exit 2)."""

    exit_code = 2


class LabelError(StoreError):
    """A run's labels contradict the store: a workload redefined, a config
    with other facts in the same campaign, a baseline that speculates."""


class DuplicateError(StoreError):
    """The content being ingested is already in the store."""


class SettingsError(FindingsError):
    """findings.toml or a command-line setting is invalid."""
