"""Open-loop arrival schedules and Mooncake traces (findings/load, issue 25):
the schedules are the processes they claim to be, by SciPy's own tests, and
a trace file is validated line by line."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
from scipy import stats

from findings.core.errors import InputError
from findings.load import arrivals, trace
from findings.load.arrivals import Phase


def _gaps(offsets: tuple[float, ...]) -> np.ndarray:
    return np.diff(np.concatenate([[0.0], np.asarray(offsets)]))


SEEDS = range(20)


def _rejections(pvalues: list[float]) -> int:
    """How many of the seeds' tests reject at the 1% level. For a generator that
    is what it claims, the count is Binomial(20, 0.01): 3 or more has a chance
    of about 0.1%, so a fixed set of seeds tests the generator, not the seeds."""
    return sum(p < 0.01 for p in pvalues)


def test_poisson_gaps_are_exponential_at_the_rate() -> None:
    p = []
    for seed in SEEDS:
        off = arrivals.at_rate(2000, 20.0, seed=seed)
        assert len(off) == 2000 and all(b > a for a, b in zip(off, off[1:]))
        # SciPy's Kolmogorov-Smirnov test against the exponential of mean 1/20 s.
        p.append(stats.kstest(_gaps(off), "expon", args=(0, 1 / 20)).pvalue)
        # The achieved rate of 2,000 arrivals: within 4 standard errors (sqrt(N)/N = 2.2%).
        assert abs(2000 / off[-1] / 20 - 1) < 4 / math.sqrt(2000)
    assert _rejections(p) <= 2, p


@pytest.mark.parametrize("b", [0.5, 2.0])
def test_burstiness_is_vllms_gamma(b: float) -> None:
    p, p_expon = [], []
    for seed in SEEDS:
        gaps = _gaps(arrivals.at_rate(2000, 20.0, burstiness=b, seed=seed))
        # vLLM: np.random.gamma(shape=burstiness, scale=1 / (rate * burstiness)).
        p.append(stats.kstest(gaps, "gamma", args=(b, 0, 1 / (20 * b))).pvalue)
        # ... and not the exponential: a burstiness that changed nothing would pass above only by chance.
        p_expon.append(stats.kstest(gaps, "expon", args=(0, 1 / 20)).pvalue)
        cv = gaps.std() / gaps.mean()  # the gamma's coefficient of variation is 1 / sqrt(B)
        assert cv == pytest.approx(1 / math.sqrt(b), rel=0.15)
    assert _rejections(p) <= 2, p
    assert _rejections(p_expon) == len(SEEDS), p_expon


def test_constant_spacing_and_seeds() -> None:
    assert arrivals.at_rate(4, 2.0, burstiness=math.inf) == (0.5, 1.0, 1.5, 2.0)
    assert arrivals.at_rate(50, 5.0, seed=3) == arrivals.at_rate(50, 5.0, seed=3)
    assert arrivals.at_rate(50, 5.0, seed=3) != arrivals.at_rate(50, 5.0, seed=4)


@pytest.mark.parametrize(("args", "message"), [
    ((0, 1.0), "at least one request"),
    ((5, 0.0), "rate must be"),
    ((5, math.inf), "rate must be"),
    ((5, 1.0, 0.0), "burstiness must be > 0"),
    ((5, 1.0, -1.0), "burstiness must be > 0"),
])
def test_at_rate_refuses_nonsense(args: tuple[float, ...], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        arrivals.at_rate(*args)  # type: ignore[arg-type]


def test_a_profile_is_a_piecewise_poisson_process() -> None:
    """Quiet, busy, off, quiet: each phase's count is Poisson with mean rate × duration,
    and within a phase the arrivals are uniform (KS against the uniform)."""
    phases = [Phase(60.0, 2.0), Phase(30.0, 40.0), Phase(20.0, 0.0), Phase(60.0, 2.0)]
    assert arrivals.expected_requests(phases) == 120 + 1200 + 0 + 120
    counts = np.zeros(4)
    runs = 40
    for seed in range(runs):
        off = arrivals.over_profile(phases, seed=seed)
        assert all(b >= a for a, b in zip(off, off[1:])) and 0 < off[0] and off[-1] <= 170
        which = np.asarray(arrivals.phase_of(off, phases))
        counts += np.bincount(which, minlength=4)
        busy = np.asarray(off)[which == 1]
        if seed == 0:
            assert stats.kstest(busy, "uniform", args=(60.0, 30.0)).pvalue > 0.01
    assert counts[2] == 0  # rate 0: nothing sent
    for k, expect in ((0, 120), (1, 1200), (3, 120)):
        mean = counts[k] / runs  # the mean of 40 Poisson counts: standard error sqrt(expect / 40)
        assert abs(mean - expect) < 4 * math.sqrt(expect / runs), (k, mean)


def test_a_bursty_profile_keeps_the_phase_rates() -> None:
    phases = [Phase(100.0, 5.0), Phase(100.0, 20.0)]
    which = np.asarray(arrivals.phase_of(arrivals.over_profile(phases, burstiness=0.5, seed=1), phases))
    a, b = np.bincount(which, minlength=2)
    assert 400 < a < 600 and 1700 < b < 2300  # means 500 and 2,000 (gamma 0.5: variance about twice Poisson's)


@pytest.mark.parametrize(("phases", "message"), [
    ([], "at least one phase"),
    ([Phase(0.0, 1.0)], "phase 1: duration"),
    ([Phase(10.0, 1.0), Phase(5.0, -1.0)], "phase 2: rate"),
    ([Phase(10.0, 0.0)], "sends nothing"),
])
def test_profiles_refuse_nonsense(phases: list[Phase], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        arrivals.over_profile(phases)


# A trace in the Mooncake shape (timestamp ms, input_length, output_length, hash_ids of
# 512-token blocks), written for these tests: two families of requests share prefixes.
TRACE = [
    {"timestamp": 0, "input_length": 655, "output_length": 52, "hash_ids": [0, 1]},
    {"timestamp": 0, "input_length": 1100, "output_length": 20, "hash_ids": [0, 1, 2]},
    {"timestamp": 1500, "input_length": 300, "output_length": 8, "hash_ids": [3]},
    {"timestamp": 2500, "input_length": 1500, "output_length": 16, "hash_ids": [0, 1, 4], "session_id": "s"},
    {"timestamp": 4000, "input_length": 400, "output_length": 30, "hash_ids": [3]},
]


def _write(tmp_path: Path, rows: list[dict], extra: str = "") -> Path:
    p = tmp_path / "trace.jsonl"
    p.write_text("\n".join(json.dumps(r) for r in rows) + "\n" + extra, encoding="utf-8")
    return p


def test_a_mooncake_trace_replays_its_gaps_and_shares_prefixes(tmp_path: Path) -> None:
    t = trace.load(_write(tmp_path, TRACE))
    assert [r.input_length for r in t.requests] == [655, 1100, 300, 1500, 400]
    assert trace.offsets(t.requests) == (0.0, 0.0, 1.5, 2.5, 4.0)
    assert trace.offsets(t.requests, time_scale=0.5) == (0.0, 0.0, 0.75, 1.25, 2.0)
    # [0,1] then [0,1,2] reuses 2, [3] none, [0,1,4] reuses 2, [3] again 1.
    assert trace.shared_blocks(t.requests) == 5
    # out of order on disk: replayed in arrival order
    t2 = trace.load(_write(tmp_path, list(reversed(TRACE))))
    assert [r.timestamp_ms for r in t2.requests] == [0, 0, 1500, 2500, 4000]


@pytest.mark.parametrize(("row", "line_field", "message"), [
    ({"input_length": 5, "output_length": 1}, "timestamp", "missing"),
    ({"timestamp": -1, "input_length": 5, "output_length": 1}, "timestamp", "milliseconds >= 0"),
    ({"timestamp": 0, "output_length": 1}, "input_length", "missing"),
    ({"timestamp": 0, "input_length": "5", "output_length": 1}, "input_length", "integer >= 1"),
    ({"timestamp": 0, "input_length": 5, "output_length": 0}, "output_length", "integer >= 1"),
    ({"timestamp": 0, "input_length": 5, "output_length": 1, "hash_ids": [1, -2]}, "hash_ids", "integers >= 0"),
    ({"timestamp": 0, "input_length": 1025, "output_length": 1, "hash_ids": [1, 2]}, "hash_ids",
     "2 blocks of 512 tokens cannot hold input_length 1025"),
    ({"timestamp": 0, "input_length": 100, "output_length": 1, "hash_ids": [1, 2]}, "hash_ids", "cannot hold"),
])
def test_a_bad_trace_line_is_one_error_naming_the_line_and_field(tmp_path: Path, row: dict, line_field: str,
                                                                 message: str) -> None:
    with pytest.raises(InputError) as exc:
        trace.load(_write(tmp_path, [TRACE[0], row]))
    assert exc.value.line == 2 and exc.value.field == line_field and message in str(exc.value)
    assert "\n" not in str(exc.value)


def test_trace_files_that_are_not_traces(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="not JSON"):
        trace.load(_write(tmp_path, TRACE[:1], "{oops\n"))
    with pytest.raises(InputError, match="a JSON object"):
        trace.load(_write(tmp_path, TRACE[:1], "[1, 2]\n"))
    with pytest.raises(InputError, match="an empty trace"):
        trace.load(_write(tmp_path, [], "\n"))
    with pytest.raises(InputError, match="is a folder"):
        trace.load(tmp_path)
    with pytest.raises(InputError, match="cannot read"):
        trace.load(tmp_path / "missing.jsonl")
    with pytest.raises(ValueError, match="time_scale"):
        trace.offsets(trace.load(_write(tmp_path, TRACE)).requests, time_scale=0)
