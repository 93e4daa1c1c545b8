"""findings.tune.cluster without Ray: the serial stand-in, and the one-line
error when the cluster extra is missing (the Ray cluster itself: tests/cluster,
make test-cluster)."""

from __future__ import annotations

import sys

import pytest

from findings.core.errors import FindingsError
from findings.tune.cluster import NEEDS_EXTRA, LocalTrials, RayTrials


def trial(payload: dict) -> dict:
    if payload.get("fail"):
        raise ValueError("the server did not start\nlog tail: ...")
    return {"x": payload["x"] * 2}


def test_local_trials_run_one_at_a_time_in_submit_order() -> None:
    with LocalTrials(trial) as t:
        assert t.capacity() == 1 and t.wait() is None
        t.submit("a", {"x": 1})
        t.submit("b", {"fail": True})
        t.submit("c", {"x": 3})
        assert t.in_flight() == 3
        a, b, c = t.wait(), t.wait(), t.wait()
        assert t.in_flight() == 0 and t.wait(timeout=0) is None
    assert (a.key, a.result, a.error, a.ok) == ("a", {"x": 2}, None, True)
    # The trial's own exception: its one-line message, no result.
    assert (b.key, b.result, b.error, b.ok) == ("b", None, "the server did not start", False)
    assert c.result == {"x": 6} and c.node == "local" and c.seconds >= 0


def test_ray_trials_without_the_extra_is_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "ray", None)  # import ray raises ImportError
    with pytest.raises(FindingsError) as err:
        RayTrials("auto", trial)
    assert str(err.value) == NEEDS_EXTRA == "findings tune --ray needs the cluster extra: pip install 'findings[cluster]'"


def test_no_other_module_imports_ray() -> None:
    from pathlib import Path

    root = Path(__file__).resolve().parents[1] / "findings"
    users = sorted(str(p.relative_to(root)) for p in root.rglob("*.py")
                   if any(line.strip().startswith(("import ray", "from ray")) for line in p.read_text().splitlines()))
    assert users == ["tune/cluster.py"]
