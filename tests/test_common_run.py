"""The store reader checks a run file of the common shape with no Python call
per field (schema._common_run, D167) and falls back to its field-by-field
checks for anything else. Whatever a run file holds, the outcome must be the
field-by-field reader's: an equal run, each field of the same type, or the
same refusal naming the same field."""

from __future__ import annotations

import copy
import json
import math
import random
import subprocess
from pathlib import Path
from typing import Any, Callable

import pytest

from findings.core.errors import StoreError
from findings.core.model import THROUGHPUT, Run
from findings.store import schema

ROOT = Path(__file__).resolve().parents[1]


def _bench_doc() -> dict[str, Any]:
    """A run file as `findings bench` writes one: a point, a second input,
    its per-request records in a sidecar, facts with a float."""
    return {
        "schema_version": schema.SCHEMA_VERSION, "kind": schema.KIND, "run_id": "bench-20260101-0a1b2c3d4e-0007",
        "source": "runner", "importer": {"name": "findings-bench", "version": "1"}, "tool_version": "0.1.0",
        "created_at": "2026-01-01T03:00:00Z",
        "inputs": [{"path": None, "sha256": "ab" * 32, "role": "data"},
                   {"path": "prompts/chat.jsonl", "sha256": "cd" * 32, "role": "prompts"}],
        "line_hashes": [],
        "provenance": {"url": "http://127.0.0.1:30000", "flush_cache": True, "wall_s": 12.5, "pid": 4242},
        "environment": {"gpu": "8x H200", "tp_size": 8, "driver": None},
        "campaigns": [{"name": "nightly-2026-01-01", "date": "2026-01-01", "order": None}],
        "configs": {"eagle3-topk1": {"speculative_algorithm": "EAGLE3", "speculative_eagle_topk": 1,
                                     "mem_fraction_static": 0.88}},
        "requests": {"file": "bench-20260101-0a1b2c3d4e-0007" + schema.SIDECAR_SUFFIX, "sha256": "ef" * 32,
                     "points": [0]},
        "points": [{
            "campaign": "nightly-2026-01-01", "config": "eagle3-topk1", "workload": "chat-1024-256",
            "concurrency": 16,
            "metrics": {THROUGHPUT: 1234.5, "completed": 160.0, "failed": 0.0, "planned": 160.0,
                        "p99_ttft_ms": 88.25},
            "workload_params": {"dataset_name": "random", "num_prompts": 160, "request_rate": "inf",
                                "temperature": 0.0},
            "series": {"key": schema.SERIES_KEY, "values": [1200.0, 1250.5]},
        }],
    }


def _read(doc: Any, fast: bool, monkeypatch: pytest.MonkeyPatch, big_floats: bool = False) -> Any:
    """The run, or the refusal; by the common-shape checks first (``fast``)
    or by the field-by-field checks alone."""
    with monkeypatch.context() as m:
        if not fast:
            m.setattr(schema, "_common_run", lambda doc, path: None)
        try:
            return schema.run_from_dict(copy.deepcopy(doc), "runs/x.json", big_floats=big_floats)
        except StoreError as exc:
            return ("refused", str(exc))


def _same(a: Any, b: Any) -> None:
    """Equal, and each field (each point's too) of the same type and value,
    -0.0 told from 0.0."""
    assert type(a) is type(b)
    if not isinstance(a, Run):
        assert a == b
        return
    assert a == b
    for name in Run.__slots__:
        x, y = getattr(a, name), getattr(b, name)
        assert type(x) is type(y), name
    for p, q in zip(a.points, b.points, strict=True):
        for x, y in zip(p, q, strict=True):
            assert type(x) is type(y) and x == y
        assert [math.copysign(1, v) for v in p.metrics.values()] == [math.copysign(1, v) for v in q.metrics.values()]
        assert [(k, type(v)) for k, v in p.workload_params.items()] == \
               [(k, type(v)) for k, v in q.workload_params.items()]


def _taken(doc: dict[str, Any], monkeypatch: pytest.MonkeyPatch) -> bool:
    """Whether the common-shape checks accepted ``doc`` (once its campaigns
    have been read)."""
    _read(doc, False, monkeypatch)  # its campaigns read once, as the first file of a store reads them
    calls: list[Any] = []
    real = schema._common_run
    with monkeypatch.context() as m:
        m.setattr(schema, "_common_run", lambda d, p: calls.append(real(d, p)) or calls[-1])
        schema.run_from_dict(copy.deepcopy(doc), "runs/x.json", big_floats=False)
    return calls[0] is not None


def _at(*path: Any) -> Callable[[Any], Callable[[dict[str, Any]], None]]:
    def setting(value: Any) -> Callable[[dict[str, Any]], None]:
        def change(doc: dict[str, Any]) -> None:
            obj = doc
            for key in path[:-1]:
                obj = obj[key]
            obj[path[-1]] = value
        return change
    return setting


def _without(*path: Any) -> Callable[[dict[str, Any]], None]:
    def change(doc: dict[str, Any]) -> None:
        obj = doc
        for key in path[:-1]:
            obj = obj[key]
        del obj[path[-1]]
    return change


CHANGES: dict[str, Callable[[dict[str, Any]], None]] = {
    "valid": lambda doc: None,
    "an older schema (migrated)": _at("schema_version")(4),
    "a schema version as a float": _at("schema_version")(5.0),
    "a newer schema": _at("schema_version")(99),
    "another kind": _at("kind")("findings-requests"),
    "a run id with a control character": _at("run_id")("bench\x01"),
    "a run id not a string": _at("run_id")(7),
    "an unknown source": _at("source")("hand"),
    "no importer name": _without("importer", "name"),
    "an importer version not a string": _at("importer", "version")(1),
    "no tool version": _without("tool_version"),
    "created at a number": _at("created_at")(20260101),
    "no inputs": _at("inputs")([]),
    "the main input's hash missing": _without("inputs", 0, "sha256"),
    "the main input's path a file": _at("inputs", 0, "path")("bench.jsonl"),
    "the main input's path a number": _at("inputs", 0, "path")(3),
    "a second input without a role": _without("inputs", 1, "role"),
    "a second input's path null": _at("inputs", 1, "path")(None),
    "line hashes": _at("line_hashes")(["a1", "b2"]),
    "a line hash a number": _at("line_hashes")([1]),
    "line hashes null": _at("line_hashes")(None),
    "no provenance": _without("provenance"),
    "provenance null": _at("provenance")(None),
    "provenance with a list": _at("provenance", "url")(["a"]),
    "provenance NaN": _at("provenance", "wall_s")(math.nan),
    "provenance beyond 2**63": _at("provenance", "wall_s")(2.0 ** 64),
    "provenance a big integer": _at("provenance", "pid")(2 ** 70),
    "no environment": _without("environment"),
    "environment null": _at("environment")(None),
    "environment with a float": _at("environment", "tp_size")(8.5),
    "environment with NaN": _at("environment", "tp_size")(math.nan),
    "a config fact infinite": _at("configs", "eagle3-topk1", "mem_fraction_static")(math.inf),
    "a config fact beyond 2**63": _at("configs", "eagle3-topk1", "mem_fraction_static")(1e19),
    "a config fact negative zero": _at("configs", "eagle3-topk1", "mem_fraction_static")(-0.0),
    "a config fact a list": _at("configs", "eagle3-topk1", "speculative_eagle_topk")([1]),
    "a config name with spaces around it": lambda doc: doc["configs"].__setitem__(
        " eagle3", doc["configs"].pop("eagle3-topk1")),
    "configs a list": _at("configs")([]),
    "per-campaign configs": _at("campaign_configs")({"nightly-2026-01-01": {"eagle3-topk1": {"x": 1}}}),
    "per-campaign configs empty": _at("campaign_configs")({}),
    "per-campaign configs a list": _at("campaign_configs")([]),
    "per-campaign configs null": _at("campaign_configs")(None),
    "no campaigns": _at("campaigns")([]),
    "a campaign listed twice": lambda doc: doc["campaigns"].append(dict(doc["campaigns"][0])),
    "a campaign of another date": _at("campaigns", 0, "date")("2026-02-30"),
    "a campaign order a boolean": _at("campaigns", 0, "order")(True),
    "a campaign name a list": _at("campaigns", 0, "name")(["x"]),
    "the sidecar of another run": _at("requests", "file")("other" + schema.SIDECAR_SUFFIX),
    "the sidecar's hash in capitals": _at("requests", "sha256")("EF" * 32),
    "the sidecar's points empty": _at("requests", "points")([]),
    "the sidecar's point beyond the points": _at("requests", "points")([1]),
    "the sidecar's point negative": _at("requests", "points")([-1]),
    "the sidecar's point a boolean": _at("requests", "points")([False]),
    "the sidecar's point twice": _at("requests", "points")([0, 0]),
    "records inline and in the sidecar": _at("points", 0, "requests")({"ttft_ms": [1.0]}),
    "no sidecar, records inline": lambda doc: (doc.pop("requests"),
                                               doc["points"][0].__setitem__("requests", {"ttft_ms": [1.0]})),
    "no points": _at("points")([]),
    "two points": lambda doc: doc["points"].append(dict(doc["points"][0], concurrency=32)),
    "a point not an object": _at("points")([[1]]),
    "a point of an unlisted campaign": _at("points", 0, "campaign")("nightly-2026-01-02"),
    "a point's metric an integer": _at("points", 0, "metrics", "completed")(160),
    "a point's metric NaN": _at("points", 0, "metrics", "p99_ttft_ms")(math.nan),
    "a point's throughput negative": _at("points", 0, "metrics", THROUGHPUT)(-1.0),
    "a point's concurrency a boolean": _at("points", 0, "concurrency")(True),
    "a point's parameter negative zero": _at("points", 0, "workload_params", "temperature")(-0.0),
    "a point's parameter beyond 2**63": _at("points", 0, "workload_params", "temperature")(1e19),
    "a point's parameters plain": _at("points", 0, "workload_params")(
        {"dataset_name": "random", "num_prompts": 160, "request_rate": "inf", "seed": None}),
    "a point's parameters plain but a boolean": _at("points", 0, "workload_params")(
        {"dataset_name": "random", "num_prompts": 1, "ignore_eos": True}),
    "a point's parameters plain but a 1 where a True was": _at("points", 0, "workload_params")(
        {"dataset_name": "random", "num_prompts": 1, "ignore_eos": 1}),
    "a point's series with a string": _at("points", 0, "series")({"key": schema.SERIES_KEY, "values": ["x"]}),
    "a point's series beyond 2**63": _at("points", 0, "series")({"key": schema.SERIES_KEY, "values": [1e19]}),
    "a point's series of other code": _at("points", 0, "series")({"key": "old", "values": [1.0]}),
    "a point's note": _at("points", 0, "note")("rerun"),
    "a point's source line a float": _at("points", 0, "source_line")(3.0),
}


@pytest.mark.parametrize("name", sorted(CHANGES))
def test_the_common_shape_reader_gives_what_the_field_reader_gives(name: str,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    doc = _bench_doc()
    CHANGES[name](doc)
    _read(doc, False, monkeypatch)  # the campaign read once before, as in a store
    for big_floats in (False, True):
        _same(_read(doc, True, monkeypatch, big_floats), _read(doc, False, monkeypatch, big_floats))


TAKEN = {"valid", "an older schema (migrated)", "line hashes", "no provenance", "no environment",
         "per-campaign configs empty", "a config fact negative zero",
         "provenance a big integer", "the main input's path a file", "two points", "no sidecar, records inline",
         "a point's note", "a point's series of other code", "a point's parameter negative zero",
         "a point's parameters plain", "a point's parameters plain but a boolean",
         "a point's parameters plain but a 1 where a True was"}


@pytest.mark.parametrize("name", sorted(TAKEN))
def test_the_common_shape_is_read_without_the_field_checks(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    doc = _bench_doc()
    CHANGES[name](doc)
    assert _taken(doc, monkeypatch)


def test_a_campaign_not_read_before_takes_the_field_checks(monkeypatch: pytest.MonkeyPatch) -> None:
    doc = _bench_doc()
    doc["campaigns"][0]["name"] = doc["points"][0]["campaign"] = "never-read-before-" + str(random.random())
    assert schema._common_run(schema.migrate(copy.deepcopy(doc), "x"), schema._Reader("runs/x.json", False)) is None
    assert _taken(doc, monkeypatch)  # once read, it is known


def _committed_run_files() -> list[Path]:
    out = subprocess.run(["git", "ls-files", "*/runs/*.json"], cwd=ROOT, capture_output=True, text=True, check=True)
    return [ROOT / line for line in out.stdout.split()]


def test_every_committed_run_file_reads_the_same_either_way(monkeypatch: pytest.MonkeyPatch) -> None:
    files = _committed_run_files()
    assert len(files) > 100
    taken = 0
    for path in files:
        doc = json.loads(path.read_text())
        _same(_read(doc, True, monkeypatch), _read(doc, False, monkeypatch))
        taken += _taken(doc, monkeypatch)
    assert taken == len(files)  # every committed store is of the common shape


VALUES = [None, 0, 1, -1, True, False, 1.5, -0.0, math.nan, math.inf, 2.0 ** 64, 10 ** 30, "", "x", " x",
          "nightly-2026-01-01", "eagle3-topk1", [], {}, [0], {"a": 1}]


def _mutate(rng: random.Random, obj: Any, depth: int = 0) -> None:
    if isinstance(obj, dict) and obj:
        key = rng.choice(sorted(obj, key=str))
        roll = rng.random()
        if roll < 0.25:
            del obj[key]
        elif roll < 0.6 or depth > 3 or not isinstance(obj[key], (dict, list)):
            obj[key] = copy.deepcopy(rng.choice(VALUES))
        else:
            _mutate(rng, obj[key], depth + 1)
    elif isinstance(obj, list) and obj:
        i = rng.randrange(len(obj))
        roll = rng.random()
        if roll < 0.2:
            del obj[i]
        elif roll < 0.4:
            obj.append(copy.deepcopy(obj[i]))
        elif roll < 0.65 or depth > 3 or not isinstance(obj[i], (dict, list)):
            obj[i] = copy.deepcopy(rng.choice(VALUES))
        else:
            _mutate(rng, obj[i], depth + 1)


def test_random_changes_read_the_same_either_way(monkeypatch: pytest.MonkeyPatch) -> None:
    """Seeded: the same 600 changed files every run."""
    rng = random.Random(167)
    several = [p for p in _committed_run_files() if len(json.loads(p.read_text())["points"]) > 1]
    bases = [_bench_doc(), json.loads(several[0].read_text())]
    for base in bases:
        _read(base, False, monkeypatch)
    accepted = 0
    for k in range(600):
        doc = copy.deepcopy(bases[k % 2])
        for _ in range(rng.randint(1, 3)):
            _mutate(rng, doc)
        fast = _read(doc, True, monkeypatch)
        _same(fast, _read(doc, False, monkeypatch))
        accepted += isinstance(fast, Run)
    assert accepted > 50  # the changes reach both outcomes


_SERIES_VALUES: list[Any] = [
    [], [1200.0, 1250.5], [0.0, -0.0], [1e-320, 5e-324], [-3.5, 2.0], [1, 2.0], [True], [None], ["x"],
    [math.nan], [math.inf], [-math.inf], [2.0 ** 63], [-(2.0 ** 63)], [2.0 ** 62, 2.0 ** 62], [1.7e308, 1.7e308],
    [2 ** 70], [1.0] * 1000, "1.0", None, {"a": 1.0},
]


@pytest.mark.parametrize("big_floats", [True, False])
def test_a_series_of_plain_floats_reads_as_each_value_checked_reads_it(big_floats: bool) -> None:
    """``_Reader.series`` takes a list of floats at C speed: whatever the
    series holds, it gives what checking each value gives, or the same
    refusal (NaN, infinities, a float past 2**63 where big floats are
    refused, a value not a number, a key not a string)."""
    rng = random.Random(7)
    cases: list[Any] = [{"key": key, "values": values} for key in (schema.SERIES_KEY, "other", None, 3)
                        for values in _SERIES_VALUES]
    cases += [{"values": [1.0]}, {"key": schema.SERIES_KEY}, [1.0], None, "series"]
    for _ in range(300):
        values = [rng.choice([rng.uniform(-1e6, 1e6), rng.choice([0.0, -0.0, 2.0 ** 63, math.inf, math.nan]),
                              rng.randint(-5, 5), True])
                  if rng.random() < 0.1 else rng.uniform(0, 5e3) for _ in range(rng.randint(0, 12))]
        cases.append({"key": schema.SERIES_KEY, "values": values})
    fast_taken = 0
    for case in cases:
        r = schema._Reader("runs/x.json", big_floats=big_floats)

        def outcome(read: Callable[[Any, str], Any]) -> Any:
            try:
                got = read(copy.deepcopy(case), "points[0].series")
            except StoreError as exc:
                return ("refused", str(exc))
            return ("read", got, None if got is None else tuple(map(type, got)))

        checked = outcome(r.series_checked)
        calls: list[Any] = []
        each = r.series_checked
        r.series_checked = lambda v, where: calls.append(v) or each(v, where)  # type: ignore[method-assign]
        fast = outcome(r.series)
        assert repr(fast) == repr(checked), case  # repr: NaN and -0.0 compared as written
        fast_taken += not calls
    assert fast_taken > 100  # the random series of floats alone


def test_plain_parameters_read_as_one_dict_and_keep_their_types(monkeypatch: pytest.MonkeyPatch) -> None:
    """A point's parameters of strings, integers and nulls are the process's
    one dict of their values, found by their names and values (D178), the
    same dict as a run of many points gets (``_plain_params``); a boolean
    where an integer 1 was, or the other way round, is another dict, of its
    own type."""
    doc = _bench_doc()
    doc["points"][0]["workload_params"] = {"dataset_name": "random", "num_prompts": 1, "flag": 1}
    _read(doc, False, monkeypatch)  # the campaign read once
    first, second = (schema.run_from_dict(copy.deepcopy(doc), "runs/x.json", big_floats=False) for _ in range(2))
    params = first.points[0].workload_params
    assert second.points[0].workload_params is params
    assert schema._plain_params([{"dataset_name": "random", "num_prompts": 1, "flag": 1}])[0] is params
    doc["points"][0]["workload_params"] = {"dataset_name": "random", "num_prompts": 1, "flag": True}
    other = schema.run_from_dict(copy.deepcopy(doc), "runs/x.json", big_floats=False).points[0].workload_params
    assert other == params and other is not params and type(other["flag"]) is bool and type(params["flag"]) is int


@pytest.mark.parametrize("label", ["a/b/c.json", "c.json", "/x/", "", "a//b", "/", "store.json/runs/x", "./x.json"])
def test_a_file_names_base_is_the_one_os_path_finds(label: str) -> None:
    import os

    from findings.store import files
    assert files._basename(label) == os.path.basename(label)


def test_a_run_file_named_for_another_run_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The run id is checked against the file's name without its .json,
    wherever the folders above it are named .json too (D178)."""
    from findings.store import files
    doc = _bench_doc()
    del doc["requests"]
    _read(doc, False, monkeypatch)  # the campaign read once
    folder = tmp_path / "store.json" / "runs"
    folder.mkdir(parents=True)
    raw = json.dumps(doc).encode()
    right, wrong = folder / f"{doc['run_id']}.json", folder / "bench-other.json"
    right.write_bytes(raw)
    wrong.write_bytes(raw)
    for path in (right, str(right)):
        assert files.read_run(path, requests=False).run_id == doc["run_id"]
    for path in (wrong, str(wrong)):
        with pytest.raises(StoreError, match="file name does not match run_id"):
            files.read_run(path, requests=False)
