"""Server faults the runner must count without hanging, and secrets and
markup that must never reach the store or the document."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import ROOT, cli

HERE = Path(__file__).parent


@pytest.fixture
def bad_server():
    procs = []

    def start(mode: str) -> str:
        p = subprocess.Popen([sys.executable, str(HERE / "badserver.py"), mode], stdout=subprocess.PIPE, text=True)
        procs.append(p)
        assert p.stdout is not None
        line = p.stdout.readline()
        return line.split("listening on ", 1)[1].strip()

    yield start
    for p in procs:
        p.kill()
        p.wait()


def bench(store: Path, url: str, *extra: str):
    return cli("bench", "--url", url, "--config", "c", "--campaign", "k", "--workload", "w", "--concurrency", "2",
               "--num-prompts", "6", "--input-len", "4", "--output-len", "4", "--warmup", "0", "--no-progress",
               "--read-timeout", "5", "--vocab-size", "32000", *extra, store=store)


def metrics(store: Path) -> dict:
    [doc] = [json.loads(p.read_text()) for p in (store / "runs").glob("*.json")]
    return doc["points"][0]["metrics"]


def test_http_503_is_counted(bad_server, store):
    t = time.monotonic()
    r = bench(store, bad_server("503"))
    assert time.monotonic() - t < 30
    assert r.exit_code == 0, r.output
    m = metrics(store)
    assert m["errors_http_503"] == 6 and m["failed"] == 6 and m["completed"] == 0


def test_malformed_sse_is_counted(bad_server, store):
    r = bench(store, bad_server("malformed"))
    assert r.exit_code == 0, r.output
    m = metrics(store)
    assert m["errors_sse"] == 6 and m["completed"] == 0


def test_connection_refused_is_one_error(store):
    r = bench(store, "http://127.0.0.1:9")
    assert r.exit_code == 1 and "no server answers" in r.output


def test_hostile_server_facts_and_api_key_never_leak(bad_server, store, project, tmp_path):
    r = bench(store, bad_server("hostile"), "--api-key", "sk-client-secret-456")
    assert r.exit_code == 0, r.output
    stored = "".join(p.read_text() for p in (store / "runs").glob("*.json"))
    for secret in ("sk-hostile-secret-123", "sk-client-secret-456", "Bearer"):
        assert secret not in stored
    assert "--api-key <redacted>" in stored
    # The hostile model name is data: the document escapes it.
    out = tmp_path / "doc.md"
    r = cli("--settings", str(project / "findings.toml"), "--store", str(store), "render", "--output", str(out))
    assert r.exit_code == 0, r.output
    text = out.read_text()
    assert "<script>" not in text
    assert "\n| injected" not in text
    assert "sk-" not in text


def test_api_key_from_environment_is_not_stored(bad_server, store, monkeypatch):
    monkeypatch.setenv("FINDINGS_API_KEY", "sk-env-secret-789")
    r = bench(store, bad_server("hostile"))
    assert r.exit_code == 0, r.output
    assert "sk-env-secret-789" not in "".join(p.read_text() for p in (store / "runs").glob("*.json"))


def test_templates_escape_every_data_field(project, tmp_path):
    """Hostile names in every field the document shows (table import)."""
    csv = tmp_path / "m.csv"
    csv.write_text("campaign,order,workload,config,concurrency,output_throughput_tok_s,note\n"
                   "c|1,1,w](x),baseline,1,100,<img src=x onerror=alert(1)>\n"
                   "c|1,1,w](x),[click](http://evil),1,120,`code` | pipe\n")
    store = tmp_path / "s"
    assert cli("ingest", "table", str(csv), "--create", store=store).exit_code == 0
    out = tmp_path / "doc.md"
    assert cli("--settings", str(project / "findings.toml"), "--store", str(store), "render", "--output",
               str(out)).exit_code == 0
    text = out.read_text()
    assert "<img" not in text and "[click](http" not in text and "\\[click\\](http://evil)" in text
    body = text.split("-->", 1)[1]
    tables: list[list[str]] = [[]]
    for line in body.splitlines():
        if line.startswith("|"):
            tables[-1].append(line.replace("\\|", ""))
        elif tables[-1]:
            tables.append([])
    tables = [t for t in tables if t]
    assert len(tables) >= 4
    for t in tables:  # an escaped pipe never splits a cell: every row has the header's column count
        assert {row.count("|") for row in t} == {t[0].count("|")}, t


def test_a_kept_alive_connection_dropped_by_the_server_is_retried_once(bad_server, store):
    url = bad_server("oneshot")
    r = bench(store, url)
    assert r.exit_code == 0, r.output
    (doc,) = [json.loads(p.read_text()) for p in (store / "runs").glob("*.json")]
    m = doc["points"][0]["metrics"]
    assert m["completed"] == 6 and m["failed"] == 0, m
    assert m["reconnects"] >= 1  # counted, never hidden
    # ... and only until the client learns that this server closes them: each
    # of the C=2 workers may meet one closed connection, then none reuses.
    assert m["reconnects"] <= 2

