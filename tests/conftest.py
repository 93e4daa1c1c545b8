from __future__ import annotations

import contextlib
import gzip
import hashlib
import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any, Iterator

import pytest
from click.testing import CliRunner, Result

from findings.derive.analysis import Rules
from findings.cli import main
from findings.core.model import THROUGHPUT, Campaign, Dataset, Point

# The render cache (findings/document/cache.py) of every test and of the
# commands they run goes to a folder of this session, never the user's. Under
# pytest-xdist (make test) each worker process has a folder of its own, as a
# whole session had before: the workers run side by side (D157).
_WORKER = os.environ.get("PYTEST_XDIST_WORKER")
if _WORKER or "FINDINGS_CACHE_DIR" not in os.environ:
    os.environ["FINDINGS_CACHE_DIR"] = tempfile.mkdtemp(prefix=f"findings-test-cache-{_WORKER or 'main'}-")

# Property tests (hypothesis) draw the same cases on every `make test` run, so
# that a clean-clone CI run cannot fail by chance; `make soak` draws new ones.
try:
    from hypothesis import settings as _hypothesis_settings
except ImportError:  # pragma: no cover - hypothesis is in the dev extra
    pass
else:
    _hypothesis_settings.register_profile("findings-default", derandomize=True, database=None)
    if os.environ.get("FINDINGS_SOAK") != "1":
        _hypothesis_settings.load_profile("findings-default")

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = Path(__file__).resolve().parent / "fixtures"
SGL = FIXTURES / "sglang_bench"
HISTORY = ROOT / "benchmarks" / "history"
#: The transport the real-engine conformance tests (tests/engine, `make
#: test-engine`) measure with: `make test-engine ENGINE_TRANSPORT=raw` checks the
#: raw transport (D125) against the real engines, as the default checks aiohttp's.
ENGINE_TRANSPORT = os.environ.get("FINDINGS_ENGINE_TRANSPORT", "aiohttp")


def cli(*args: str, store: Path | None = None, cwd: Path | None = None) -> Result:
    """Run the CLI in-process; ``--store`` first when given."""
    argv = (["--store", str(store)] if store is not None else []) + list(args)
    return CliRunner().invoke(main, argv, catch_exceptions=False)


def dataset(rows: list[tuple[Any, ...]], campaigns: list[str] | None = None, source: str = "import") -> Dataset:
    """Rows of (campaign, config, workload, C, throughput); campaigns in order."""
    names = campaigns or list(dict.fromkeys(r[0] for r in rows))
    points = tuple(
        Point(
            id=f"t/{i}", run_id="t", campaign=r[0], config=r[1], workload=r[2], concurrency=r[3],
            metrics={THROUGHPUT: float(r[4])}, source=source, source_file=None, source_line=i,
        )
        for i, r in enumerate(rows)
    )
    return Dataset(
        campaigns=tuple(Campaign(n, order=i + 1) for i, n in enumerate(names)),
        points=points,
        configs={},
    )


def render_golden(project: Path, out: Path, golden: Path, test_file: str) -> str:
    """Render the project's document to ``out`` and hold it to ``golden``
    (rewritten instead with FINDINGS_UPDATE_GOLDEN=1); returns the text."""
    r = cli("--settings", str(project / "findings.toml"), "render", "--output", str(out))
    assert r.exit_code == 0, r.output
    text = out.read_text()
    if os.environ.get("FINDINGS_UPDATE_GOLDEN"):
        golden.write_text(text)
    assert text == golden.read_text(), f"golden differs: FINDINGS_UPDATE_GOLDEN=1 pytest {test_file}"
    return text


@pytest.fixture
def rules() -> Rules:
    return Rules(baseline="baseline", noise_floor=0.04)


@pytest.fixture
def store(tmp_path: Path) -> Path:
    """An empty store (findings.store.create, as findings init makes it):
    writers refuse a path that is not a store unless --create asks (D94)."""
    from findings import store as store_lib
    return store_lib.create(tmp_path / "store")


@pytest.fixture
def seed_store(store: Path) -> Path:
    r = cli("ingest", "table", str(HISTORY / "measurements.csv"), "--configs", str(HISTORY / "configs.csv"),
            "--environment", str(HISTORY / "environment.toml"), store=store)
    assert r.exit_code == 0, r.output
    return store


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """A copy of this project's settings and templates in a temporary folder."""
    dest = tmp_path / "project"
    dest.mkdir()
    shutil.copy(ROOT / "findings.toml", dest / "findings.toml")
    shutil.copytree(ROOT / "templates", dest / "templates")
    return dest


def run_docs(store: Path) -> list[dict[str, Any]]:
    """The store's run files as JSON, in file-name order, with each
    sidecar's per-request records (schema 4) put back into the points after
    checking the sha256 the run file recorded: what the runner measured,
    wherever the store keeps it."""
    docs = []
    for path in sorted((store / "runs").glob("*.json")):
        doc = json.loads(path.read_text(encoding="utf-8"))
        ref = doc.get("requests")
        if ref is not None:
            raw = (path.parent / ref["file"]).read_bytes()
            assert hashlib.sha256(raw).hexdigest() == ref["sha256"], path
            side = json.loads(gzip.decompress(raw))
            assert side["run_id"] == doc["run_id"] and sorted(map(int, side["points"])) == sorted(ref["points"])
            for k, records in side["points"].items():
                doc["points"][int(k)]["requests"] = records
        docs.append(doc)
    return docs


@contextlib.contextmanager
def cache_off() -> Iterator[None]:
    """The render cache off for a while (FINDINGS_CACHE=off)."""
    old = os.environ.get("FINDINGS_CACHE")
    os.environ["FINDINGS_CACHE"] = "off"
    try:
        yield
    finally:
        if old is None:
            del os.environ["FINDINGS_CACHE"]
        else:
            os.environ["FINDINGS_CACHE"] = old


def counting_forks(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """Each function the render cache runs aside (core/aside.py), in turn,
    run as it would be."""
    from findings.document import cache as rendercache
    forked: list[Any] = []
    real = rendercache.aside.forked

    def counting(fn: Any) -> Any:
        forked.append(fn)
        return real(fn)

    monkeypatch.setattr(rendercache.aside, "forked", counting)
    return forked


def dying_forks(monkeypatch: pytest.MonkeyPatch) -> None:
    """What the render cache runs aside dies there before it does anything
    (killed, say): waiting for it then runs it here."""
    from findings.document import cache as rendercache
    here = os.getpid()
    real = rendercache.aside.forked

    def dying(fn: Any) -> Any:
        return real(lambda: os._exit(3) if os.getpid() != here else fn())

    monkeypatch.setattr(rendercache.aside, "forked", dying)


@pytest.fixture()
def render_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The render cache on, in a folder of the test's own (not yet made)."""
    folder = tmp_path / "cache"
    monkeypatch.setenv("FINDINGS_CACHE_DIR", str(folder))
    monkeypatch.delenv("FINDINGS_CACHE", raising=False)
    return folder
