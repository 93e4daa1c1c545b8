"""The store reader checks a run's points in columns (schema._fast_points,
issue 38) and falls back to its point-by-point checks for anything else.
Whatever a run file holds, the outcome must be the point-by-point reader's:
the same points, bit for bit, or the same refusal naming the same field."""

from __future__ import annotations

import copy
import math
from typing import Any, Callable

import pytest

from findings.core.errors import StoreError
from findings.core.model import THROUGHPUT
from findings.store import schema


def _doc() -> dict[str, Any]:
    points = []
    for i, c in enumerate((1, 8, 64)):
        points.append({
            "campaign": "c1" if i < 2 else "c2", "config": "baseline" if i != 1 else "eagle3",
            "workload": "chat", "concurrency": c,
            "metrics": {THROUGHPUT: 100.0 * c, "completed": 64.0, "failed": 0.0, "mean_ttft_ms": 12.5},
            "workload_params": {"input_len": 1024, "dataset": "sharegpt", "temperature": 0.0},
            "source_line": i + 2, "note": None,
        })
    return {
        "kind": schema.KIND, "schema_version": schema.SCHEMA_VERSION, "run_id": "bench-cols-0000000001",
        "source": "runner", "importer": {"name": "findings-bench", "version": "1"}, "tool_version": "t",
        "created_at": "2026-01-01T00:00:00Z", "inputs": [{"path": None, "sha256": "0" * 64, "role": "main"}],
        "environment": {"gpu": "H200", "n": 8}, "campaigns": [{"name": "c1", "date": "2026-01-01"},
                                                              {"name": "c2", "date": "2026-01-02"}],
        "configs": {"baseline": {"speculative_algorithm": "none"}, "eagle3": {"speculative_algorithm": "EAGLE3"}},
        "points": points,
    }


def _read(doc: dict[str, Any], columns: bool, monkeypatch: pytest.MonkeyPatch) -> Any:
    with monkeypatch.context() as m:
        if not columns:
            m.setattr(schema, "_fast_points", lambda *a: None)
        try:
            run = schema.run_from_dict(copy.deepcopy(doc), "runs/x.json", big_floats=False)
        except StoreError as exc:
            return ("refused", str(exc))
    return [(p.id, p.campaign, p.config, p.workload, p.concurrency, [(k, math.copysign(1, v), v)
             for k, v in p.metrics.items()], p.source_file, p.source_line, p.note,
             [(k, type(v), v) for k, v in p.workload_params.items()], p.requests, p.series) for p in run.points]


def _set(i: int, key: str, value: Any) -> Callable[[dict[str, Any]], None]:
    def change(doc: dict[str, Any]) -> None:
        doc["points"][i][key] = value
    return change


def _metric(i: int, key: str, value: Any) -> Callable[[dict[str, Any]], None]:
    def change(doc: dict[str, Any]) -> None:
        doc["points"][i]["metrics"][key] = value
    return change


def _param(i: int, key: str, value: Any) -> Callable[[dict[str, Any]], None]:
    def change(doc: dict[str, Any]) -> None:
        doc["points"][i]["workload_params"][key] = value
    return change


def _drop(i: int, key: str) -> Callable[[dict[str, Any]], None]:
    def change(doc: dict[str, Any]) -> None:
        del doc["points"][i][key]
    return change


CHANGES = {
    "valid": lambda doc: None,
    "a point not an object": lambda doc: doc["points"].__setitem__(1, [1, 2]),
    "campaign not listed": _set(2, "campaign", "c9"),
    "campaign not a string": _set(0, "campaign", 3),
    "config with a control character": _set(1, "config", "eagle\x013"),
    "config with spaces around it": _set(1, "config", " eagle3"),
    "workload missing": _drop(2, "workload"),
    "concurrency zero": _set(1, "concurrency", 0),
    "concurrency a float": _set(1, "concurrency", 8.0),
    "concurrency a boolean": _set(0, "concurrency", True),
    "metrics empty": _set(2, "metrics", {}),
    "metrics a list": _set(2, "metrics", [1.0]),
    "a metric an integer": _metric(1, "completed", 64),
    "a metric NaN": _metric(1, "mean_ttft_ms", math.nan),
    "a metric infinite": _metric(0, "mean_ttft_ms", math.inf),
    "a metric beyond 2**63": _metric(2, "mean_ttft_ms", 2.0 ** 64),
    "a metric negative zero": _metric(2, "mean_ttft_ms", -0.0),
    "throughput negative": _metric(1, THROUGHPUT, -1.0),
    "no throughput (not a server's output)": lambda doc: doc["points"][0]["metrics"].pop(THROUGHPUT),
    "records inline": _set(1, "requests", {"ttft_ms": [1.0, 2.0]}),
    "records not an object": _set(1, "requests", [1.0]),
    "a note": _set(0, "note", "warm-up rerun"),
    "a note not a string": _set(0, "note", 7),
    "source line a float": _set(2, "source_line", 3.0),
    "source line a boolean": _set(2, "source_line", False),
    "parameters missing": _drop(1, "workload_params"),
    "parameters null": _set(1, "workload_params", None),
    "a parameter a list": _param(0, "dataset", ["a"]),
    "a parameter NaN": _param(0, "temperature", math.nan),
    "a parameter beyond 2**63": _param(0, "temperature", 1e19),
    "a parameter negative zero": _param(0, "temperature", -0.0),
    "a parameter true where another has 1": _param(2, "input_len", True),
    "a series of this code": _set(0, "series", {"key": schema.SERIES_KEY, "values": [1.0, 2.0]}),
    "a series of other code": _set(0, "series", {"key": "old", "values": [1.0, 2.0]}),
    "a series with a string": _set(0, "series", {"key": schema.SERIES_KEY, "values": [1.0, "x"]}),
    "the main input's path a number": lambda doc: doc["inputs"][0].__setitem__("path", 5),
    "the main input's path a file": lambda doc: doc["inputs"][0].__setitem__("path", "bench.jsonl"),
}


@pytest.mark.parametrize("name", sorted(CHANGES))
def test_the_column_reader_gives_what_the_point_reader_gives(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    doc = _doc()
    CHANGES[name](doc)
    by_columns = _read(doc, True, monkeypatch)
    by_points = _read(doc, False, monkeypatch)
    assert by_columns == by_points
    if name == "valid":
        assert len(by_columns) == 3 and by_columns[1][2] == "eagle3"


def test_the_column_reader_is_taken_for_a_valid_run(monkeypatch: pytest.MonkeyPatch) -> None:
    calls = []
    real = schema._fast_points
    monkeypatch.setattr(schema, "_fast_points", lambda *a: calls.append(real(*a)) or calls[-1])
    schema.run_from_dict(_doc(), "runs/x.json", big_floats=False)
    assert len(calls) == 1 and calls[0] is not None and len(calls[0]) == 3


REFUSED = {"a metric NaN", "a metric infinite", "a metric beyond 2**63", "throughput negative", "campaign not listed",
           "concurrency a boolean", "config with a control character", "parameters null", "a parameter NaN",
           "a point not an object", "a series with a string", "source line a float"}


@pytest.mark.parametrize("name", sorted(REFUSED))
def test_what_either_reader_refuses_it_names(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    doc = _doc()
    CHANGES[name](doc)
    outcome = _read(doc, True, monkeypatch)
    assert outcome[0] == "refused" and "field 'points[" in outcome[1]


def test_plain_parameters_are_the_one_dict_of_their_value(monkeypatch: pytest.MonkeyPatch) -> None:
    """Parameters of strings, integers and nulls only are looked up by their
    names and values (schema._plain_params, D167): the dict ``params_of``
    shares, whichever run and reader read them first."""
    doc = _doc()
    for p in doc["points"]:
        p["workload_params"] = {"input_len": 1024, "dataset": "sharegpt", "seed": None}
    doc["points"][2]["workload_params"]["input_len"] = 2048
    by_points = _read(doc, False, monkeypatch)
    by_columns = _read(doc, True, monkeypatch)
    assert by_columns == by_points
    first = schema.run_from_dict(copy.deepcopy(doc), "runs/x.json", big_floats=False)
    again = schema.run_from_dict(copy.deepcopy(doc), "runs/y.json", big_floats=False)
    assert first.points[0].workload_params is first.points[1].workload_params is again.points[0].workload_params
    assert first.points[0].workload_params is schema.params_of(("input_len", "dataset", "seed"), (1024, "sharegpt", None))
    assert first.points[2].workload_params == {"input_len": 2048, "dataset": "sharegpt", "seed": None}
    assert first.points[2].workload_params is not first.points[0].workload_params
