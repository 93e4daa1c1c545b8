"""`findings store check` on healthy and damaged stores."""

from __future__ import annotations

import json
import shutil

from conftest import FIXTURES, HISTORY, cli


def copy_store(tmp_path):
    dest = tmp_path / "s"
    shutil.copytree(FIXTURES / "store", dest)
    return dest


def test_healthy_store(tmp_path):
    s = copy_store(tmp_path)
    r = cli("store", "check", store=s)
    assert r.exit_code == 0, r.output
    assert "4 run files read, 0 errors" in r.output


def test_damage_is_found_with_a_repair(tmp_path):
    s = copy_store(tmp_path)
    runs = s / "runs"
    files = sorted(runs.glob("*.json"))
    files[0].write_text(files[0].read_text()[:50])  # truncated
    doc = json.loads(files[1].read_text())
    doc["schema_version"] = 99
    files[1].write_text(json.dumps(doc))
    shutil.copy(files[2], runs / "renamed.json")  # a duplicate under a wrong name
    dup = json.loads(files[3].read_text())
    dup["run_id"] = "table-copy"
    (runs / "table-copy.json").write_text(json.dumps(dup))  # same content, second run
    (runs / ".tmp-abc.json").write_text("{")
    r = cli("store", "check", store=s)
    assert r.exit_code == 1
    out = r.output
    assert f"error: {files[0]}: unreadable or not valid JSON" in out and "git checkout --" in out
    assert "newer than this findings" in out and "Repair: upgrade findings" in out
    assert "renamed.json: file name does not match run_id" in out
    assert "duplicate of run" in out
    assert "a temporary file left by a killed writer" in out
    assert "errors," in out.splitlines()[-1]


def test_not_a_store(tmp_path):
    r = cli("store", "check", store=tmp_path / "nothing")
    assert r.exit_code == 2 and "not a findings store (no such folder)" in r.output


def test_changed_source_is_a_note(tmp_path):
    src = tmp_path / "m.csv"
    src.write_text((HISTORY / "measurements.csv").read_text())
    s = tmp_path / "st"
    assert cli("ingest", "table", str(src), "--create", store=s).exit_code == 0
    with open(src, "a") as fh:
        fh.write("overlap-topk1,3,diverse-prompts,baseline,70,780.0,\n")
    r = cli("store", "check", store=s)
    assert r.exit_code == 0
    assert "note:" in r.output and "changed since it was ingested" in r.output
    assert "--skip-existing" in r.output


def test_equal_parameters_of_other_types_are_defined_apart():
    """Definitions are kept per distinct parameters (issue 38): 1, 1.0 and
    True are equal as dict keys, so the types are part of the key, and a
    run's definition says what each of its own points stored."""
    from findings.core.model import Metrics, Point, Run
    from findings.store import identity

    def run(params):
        p = Point("r/0", "r", "c", "cfg", "w", 1, Metrics.of({"output_throughput_tok_s": 1.0}), "import", None, None,
                  None, params, None, None)
        return Run(schema_version=5, run_id="r", source="import", importer="table", importer_version="1",
                   tool_version="", created_at="", source_file=None, source_sha256="", environment={},
                   campaigns=(), configs={}, points=(p,), line_hashes=frozenset())

    as_int = identity.workload_definitions(run({"input_len": 1, "ignore_eos": 1, "api": 1}))
    as_bool = identity.workload_definitions(run({"input_len": 1, "ignore_eos": True, "api": True}))
    as_text = identity.workload_definitions(run({"input_len": "1", "ignore_eos": "true", "api": "1"}))
    assert [type(v) for v in as_int["w"]["table:api"]] == [int]
    assert [type(v) for v in as_bool["w"]["table:api"]] == [bool]
    assert as_text["w"] == {"input_len": {1}, "ignore_eos": {True}, "table:api": {"1"}}
    assert identity.workload_definitions(run({"input_len": 1, "ignore_eos": 1, "api": 1})) == as_int
