"""Open-loop pieces that need no server: the matrix keys (one clear error
each), the rate search's next rate, requests in flight weighted by time,
the SLO per request, and the running gauge read without a full parse (the
same number as the parse, on the real engines' /metrics pages)."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from conftest import FIXTURES

from findings.bench.matrix import parse
from findings.bench.metrics import _in_flight, meets_slo, open_loop
from findings.bench.records import PointOutcome, RequestRecord
from findings.bench.runner import parse_prometheus, running_gauge, running_gauge_text
from findings.core.errors import InputError
from findings.load.spec import describe_phases, next_search_rate, parse_phases

BASE = """
[workloads.w]
prompts = "diverse"
input_len = 16
output_len = 8
{extra}
[configs.baseline]
url = "http://127.0.0.1:1"
[[campaigns]]
name = "c"
configs = ["baseline"]
"""


def _matrix(extra: str, tmp_path: Path | None = None):
    path = str(tmp_path / "m.toml") if tmp_path else "m.toml"
    return parse(path, BASE.format(extra=extra))


def test_open_loop_keys_make_a_load_spec():
    w = _matrix("request_rate = [4, 1, 2]\nburstiness = 0.5\nmax_concurrency = 8\nslo_tpot_ms = 50\n"
                "duration_s = 30").workloads["w"]
    assert w.load is not None and w.load.mode == "rate"
    assert w.load.rates == (1.0, 2.0, 4.0) and w.load.cap == 8 and w.load.slo.tpot_ms == 50
    assert w.load.requests(4.0, 32) == 120 and w.load.requests(1.0, 32) == 32
    inf = _matrix("request_rate = 2\nburstiness = inf").workloads["w"].load
    assert inf is not None and math.isinf(inf.burstiness) and inf.params(2.0)["burstiness"] == "inf"
    prof = _matrix("profile = [[10, 1], [20, 0], [10, 3]]").workloads["w"].load
    assert prof is not None and prof.phase_ends() == (10.0, 30.0, 40.0)
    assert parse_phases(describe_phases(prof.phases)) == prof.phases


@pytest.mark.parametrize("extra, where, words", [
    ("request_rate = 2\nprofile = [[1, 1]]", "workloads.w", "exactly one of request_rate, profile or trace"),
    ("request_rate = [0]", "workloads.w.request_rate", "a number > 0"),
    ("request_rate = 2\nburstiness = 0", "workloads.w.burstiness", "a number > 0"),
    ("request_rate = 2\nmax_concurrency = 0", "workloads.w.max_concurrency", "an integer >= 1"),
    ("profile = [[10, 0]]", "workloads.w.profile", "every phase has rate 0"),
    ("profile = [[10]]", "workloads.w.profile[0]", "[seconds, requests/s]"),
    ("profile = [[10, 1]]\nduration_s = 5", "workloads.w.duration_s", "only with request_rate"),
    ("request_rate = 2\ntime_scale = 2", "workloads.w.time_scale", "only with trace"),
    ("request_rate = 2\nrate_search = 2", "workloads.w.rate_search", "needs request_rate and an SLO"),
    ("request_rate = 2\nslo_tpot_ms = 10\nslo_attainment = 2", "workloads.w.slo_attainment", "(0, 1]"),
    ("trace = \"missing.jsonl\"", None, "cannot read"),
])
def test_bad_open_loop_keys_are_one_clear_error(extra, where, words, tmp_path):
    with pytest.raises(InputError) as e:
        _matrix(extra, tmp_path)
    assert words in str(e.value)
    if where is not None:
        assert where in str(e.value)


def test_a_trace_workload_takes_its_lengths_from_the_trace(tmp_path):
    (tmp_path / "t.jsonl").write_text('{"timestamp": 0, "input_length": 10, "output_length": 3, "hash_ids": [1]}\n')
    with pytest.raises(InputError, match="a trace gives each request's lengths"):
        _matrix('trace = "t.jsonl"\nblock_size = 16', tmp_path)
    text = BASE.replace('input_len = 16\noutput_len = 8\n', '').format(extra='trace = "t.jsonl"\nblock_size = 16')
    w = parse(str(tmp_path / "m.toml"), text).workloads["w"]
    assert w.load is not None and w.load.trace is not None and len(w.load.trace.requests) == 1
    assert w.load.params(None)["trace_sha256"] == w.load.trace_sha256 and len(w.load.trace_sha256 or "") == 64


def test_the_rate_search_bisects_the_bracket():
    assert next_search_rate({1.0: 1.0, 2.0: 0.95, 4.0: 0.5, 8.0: 0.1}, 0.9) == 3.0
    assert next_search_rate({1.0: 1.0, 2.0: 0.95, 3.0: 0.92, 4.0: 0.5}, 0.9) == 3.5
    assert next_search_rate({1.0: 1.0, 2.0: 1.0}, 0.9) is None  # sustained everywhere: nothing to bisect
    assert next_search_rate({1.0: 0.5, 2.0: 0.4}, 0.9) is None  # sustained nowhere
    assert next_search_rate({1.0: 1.0, 1.01: 0.5}, 0.9) is None  # narrower than 2%
    # A sustained rate above an unsustained one does not extend the bracket.
    assert next_search_rate({1.0: 1.0, 2.0: 0.5, 4.0: 0.95}, 0.9) == 1.5


def test_in_flight_is_weighted_by_time():
    # Two requests over [0, 10]: one over [0, 10], one over [2, 4].
    m = _in_flight([(0.0, 10.0), (2.0, 4.0)], 0.0, 10.0)
    assert m["inflight_mean"] == pytest.approx(1.2) and m["inflight_max"] == 2.0
    assert m["inflight_p50"] == 1.0 and m["inflight_p99"] == 2.0
    # Clipped to the window.
    assert _in_flight([(0.0, 10.0)], 5.0, 6.0)["inflight_mean"] == pytest.approx(1.0)


def _rec(sched: float, sent: float, ttft: float, tpot: float, n: int = 11, ok: bool = True) -> RequestRecord:
    r = RequestRecord(index=0, input_len=8, sent=sent, scheduled=sched, admitted=sched)
    if ok:
        r.first_token = sent + ttft
        r.end = r.first_token + tpot * (n - 1)
        r.output_tokens = n
        r.events = [(r.first_token, 1), (r.end, n)]
    else:
        r.error, r.end = "HTTP 500", sent + 0.01
    return r


def test_slo_goodput_and_lateness_from_records():
    assert meets_slo(_rec(0, 0, 0.1, 0.02), 200, 30) and not meets_slo(_rec(0, 0, 0.3, 0.02), 200, 30)
    assert not meets_slo(_rec(0, 0, 0.1, 0.04), 200, 30) and not meets_slo(_rec(0, 0, 0, 0, ok=False), None, None)
    recs = (_rec(1.0, 1.0005, 0.1, 0.02), _rec(2.0, 2.002, 0.3, 0.02), _rec(3.0, 3.0001, 0.1, 0.02),
            _rec(4.0, 4.0, 0.1, 0.02, ok=False))
    out = PointOutcome(records=recs, started=1.0, finished=5.0, planned=4, lag_samples_ms=(), schedule_start=0.0,
                       phase_ends=(2.5, 5.0), slo=(200.0, 30.0))
    m = open_loop(out, out.phase_ends, out.slo)
    assert m["offered_rate_req_s"] == pytest.approx(1.0)  # 4 requests due by 4 s
    assert m["send_lateness_max_ms"] == pytest.approx(2.0)
    assert m["slo_met"] == 2 and m["slo_attainment"] == 0.5 and m["goodput_req_s"] == pytest.approx(0.4)
    assert m["phase.1.requests"] == 2 and m["phase.2.requests"] == 2
    assert m["phase.1.slo_attainment"] == 0.5 and m["phase.2.slo_attainment"] == 0.5


@pytest.mark.parametrize("name", ["vllm/metrics-spec.txt", "llamacpp/metrics-self-draft.txt"])
def test_running_gauge_without_a_parse_is_the_parsed_one(name):
    text = (FIXTURES / name).read_text(encoding="utf-8")
    assert running_gauge_text(text) == running_gauge(parse_prometheus(text))
    assert running_gauge_text(text) is not None


def test_running_gauge_of_an_sglang_page_with_labels():
    text = ('# HELP sglang:num_running_reqs The number of running requests.\n# TYPE sglang:num_running_reqs gauge\n'
            'sglang:num_running_reqs{model_name="m",engine_type="unified"} 3.0\n'
            'sglang:num_running_reqs_offline_batch{model_name="m"} 7.0\n'
            'sglang:num_running_reqs{model_name="m",engine_type="other"} 2.0\n')
    assert running_gauge_text(text) == 5.0 == running_gauge(parse_prometheus(text))
    assert running_gauge_text("") is None and running_gauge_text("other_metric 1\n") is None
