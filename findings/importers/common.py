"""What every importer shares: hashing, run ids, the environment file."""

from __future__ import annotations

import datetime as _dt
import hashlib
import math
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping

from findings.core.version import __version__
from findings.core.errors import InputError
from findings.core.model import Campaign, Input, Point, Run, Scalar
from findings.store.schema import SCHEMA_VERSION


@dataclass(frozen=True)
class Source:
    """A file being imported: its path as given, its bytes and its hash."""

    path: str
    data: bytes

    @property
    def sha256(self) -> str:
        return hashlib.sha256(self.data).hexdigest()

    def text(self) -> str:
        try:
            return self.data.decode("utf-8-sig")
        except UnicodeDecodeError as exc:
            raise InputError(self.path, None, None, f"not UTF-8 text ({exc.reason} at byte {exc.start})") from exc


def read_source(path: str) -> Source:
    try:
        return Source(path=path, data=Path(path).read_bytes())
    except OSError as exc:
        raise InputError(path, None, None, f"cannot read: {exc.strerror or exc}") from exc


def line_hash(text: str) -> str:
    """Identity of one record, to refuse the same record ingested twice."""
    return hashlib.sha256(text.strip().encode()).hexdigest()[:20]


def run_id(importer: str, sha256: str) -> str:
    return f"{importer}-{sha256[:12]}"


def now_utc() -> str:
    return _dt.datetime.now(_dt.timezone.utc).replace(microsecond=0).isoformat().replace("+00:00", "Z")


def tool_version() -> str:
    return __version__


def read_environment(path: str | None) -> Mapping[str, Scalar]:
    """Hardware and software facts from a flat TOML file (``key = value``)."""
    if path is None:
        return {}
    src = read_source(path)
    try:
        doc = tomllib.loads(src.text())
    except tomllib.TOMLDecodeError as exc:
        raise InputError(path, getattr(exc, "lineno", None), None, f"not valid TOML: {exc}") from exc
    except RecursionError:
        raise InputError(path, None, None, "not valid TOML: nested too deeply") from None
    table = doc.get("environment", doc)
    if not isinstance(table, dict):
        raise InputError(path, None, "environment", "expected a table of facts")
    out: dict[str, Scalar] = {}
    for k, v in table.items():
        if isinstance(v, float) and not math.isfinite(v):
            raise InputError(path, None, k, "expected a finite number")
        if not isinstance(v, (str, int, float, bool)):
            raise InputError(path, None, k, "expected a string, number or boolean")
        out[k] = v
    return out


def make_run(src: Source, importer: str, version: str, source: str, *,
             environment: Mapping[str, Scalar], campaigns: tuple[Campaign, ...],
             configs: Mapping[str, Mapping[str, Scalar]], points: list[Point],
             hashes: set[str], extra_inputs: tuple[Input, ...] = ()) -> Run:
    """The Run an importer returns: provenance filled in the same way for all."""
    return Run(
        schema_version=SCHEMA_VERSION,
        run_id=run_id(importer, src.sha256),
        source=source,
        importer=importer,
        importer_version=version,
        tool_version=tool_version(),
        created_at=now_utc(),
        source_file=src.path,
        source_sha256=src.sha256,
        environment=dict(environment),
        campaigns=campaigns,
        configs=configs,
        points=tuple(points),
        line_hashes=frozenset(hashes),
        extra_inputs=extra_inputs,
    )
