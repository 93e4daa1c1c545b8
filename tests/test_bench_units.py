"""Runner pieces without a server: parsing, metrics, matrices, workloads."""

from __future__ import annotations

import pytest

from findings.bench.matrix import parse
from findings.bench.metrics import derive, itls, percentile
from findings.bench.protocol import Parser, build
from findings.bench.records import PointOutcome, RequestRecord
from findings.bench.runner import parse_prometheus
from findings.bench.transport import _data
from findings.bench.workload import Workload, make_prompts
from findings.core.errors import InputError


def native_event(ct: int, finish: bool = False, **extra):
    meta = {"id": "r", "finish_reason": {"type": "length"} if finish else None, "prompt_tokens": 5,
            "completion_tokens": ct, "cached_tokens": 0, **extra}
    return {"text": "x" * ct, "output_ids": list(range(ct)), "meta_info": meta}


def test_native_tokens_come_from_completion_tokens_not_event_count():
    rec = RequestRecord(index=0, input_len=5, sent=0.0)
    p = Parser("native", rec)
    p.feed(native_event(1), 0.10)
    p.feed(native_event(4), 0.20)  # one speculative step added 3 tokens
    p.feed(native_event(4), 0.25)  # no new tokens: not an event
    p.feed(native_event(6, finish=True, spec_verify_ct=3, spec_accept_length=2.0, e2e_latency=0.3), 0.30)
    p.finish(0.31)
    assert rec.ok
    assert rec.first_token == 0.10
    assert rec.events == [(0.10, 1), (0.20, 4), (0.30, 6)]
    assert rec.output_tokens == 6
    assert rec.spec_verify_ct == 3
    assert itls(rec) == pytest.approx([0.1 / 3] * 3 + [0.05] * 2)


def test_native_error_event_and_truncated_stream():
    rec = RequestRecord(index=0, input_len=5)
    p = Parser("native", rec)
    p.feed(native_event(2), 0.1)
    p.feed({"error": {"message": "boom", "type": "x", "code": 500}}, 0.2)
    assert rec.error_type == "server_error" and "boom" in rec.error
    rec2 = RequestRecord(index=1, input_len=5)
    p2 = Parser("native", rec2)
    p2.feed(native_event(2), 0.1)
    p2.finish(0.2)
    assert rec2.error_type == "incomplete" and not rec2.ok


def test_openai_with_continuous_usage():
    rec = RequestRecord(index=0, input_len=5)
    p = Parser("openai-chat", rec)
    p.feed({"choices": [{"delta": {"role": "assistant"}}]}, 0.05)
    p.feed({"choices": [{"delta": {"content": "ab"}}], "usage": {"prompt_tokens": 5, "completion_tokens": 2}}, 0.1)
    p.feed({"choices": [{"delta": {"content": "cde"}, "finish_reason": "length"}],
            "usage": {"prompt_tokens": 5, "completion_tokens": 5}}, 0.2)
    p.feed({"choices": [], "usage": {"prompt_tokens": 5, "completion_tokens": 5}}, 0.21)
    p.finish(0.22)
    assert rec.ok and rec.events == [(0.1, 2), (0.2, 5)] and rec.prompt_tokens == 5


def test_openai_usage_only_at_the_end_is_spread_by_characters():
    rec = RequestRecord(index=0, input_len=5)
    p = Parser("openai-completions", rec)
    p.feed({"choices": [{"text": "aaaa"}]}, 0.1)
    p.feed({"choices": [{"text": "aaaa", "finish_reason": "length"}]}, 0.2)
    p.feed({"choices": [], "usage": {"prompt_tokens": 5, "completion_tokens": 8},
            "sglext": {"spec_tokens_details": {"spec_verify_ct": 4, "spec_accept_length": 2.0}}}, 0.3)
    p.finish(0.3)
    assert rec.ok and rec.events == [(0.1, 4), (0.2, 8)] and rec.output_tokens == 8
    assert rec.spec_verify_ct == 4
    rec2 = RequestRecord(index=1, input_len=5)
    p2 = Parser("openai-completions", rec2)
    p2.feed({"choices": [{"text": "aaaa"}]}, 0.1)
    p2.finish(0.2)
    assert rec2.error_type == "incomplete"


def test_sse_lines():
    rec = RequestRecord(index=0, input_len=1)
    p = Parser("native", rec)
    assert not _data(b": keep-alive", p, 0.0)
    assert not _data(b"", p, 0.0)
    assert _data(b"data: [DONE]", p, 0.0)
    assert _data(b"data: {not json", p, 0.0) and rec.error_type == "sse"
    rec2 = RequestRecord(index=0, input_len=1)
    assert _data(b"garbage line", Parser("native", rec2), 0.0) and rec2.error_type == "sse"


def test_request_bodies():
    w = Workload("w", "random-ids", 8, 16, 4)
    pr = make_prompts(w, 1)[0]
    native = build("native", pr, 16, "m", "rid-1")
    assert native.path == "/generate" and len(native.body["input_ids"]) == 8
    assert native.body["sampling_params"] == {"max_new_tokens": 16, "ignore_eos": True, "temperature": 0.0}
    tw = Workload("t", "diverse", 20, 16, 4)
    chat = build("openai-chat", make_prompts(tw, 1)[0], 16, "m", "r")
    assert chat.body["stream_options"]["include_usage"] is True
    assert chat.body["messages"][0]["role"] == "user" and chat.body["max_tokens"] == 16
    with pytest.raises(ValueError):
        build("grpc", pr, 1, "m", "r")


def test_prompts_are_deterministic_and_kinds_differ():
    w = Workload("w", "diverse", 30, 8, 4, seed=3)
    a, b = make_prompts(w, 4), make_prompts(w, 4)
    assert a == b
    assert len({p.text for p in a}) == 4
    assert all(len((p.text or "").split()) >= 30 for p in a)
    fixed = make_prompts(Workload("f", "fixed", 30, 8, 4), 4)
    assert len({p.text for p in fixed}) == 1
    assert make_prompts(w, 2, salt=1) != make_prompts(w, 2, salt=2)


def test_metrics_from_records():
    recs = []
    for i in range(4):
        r = RequestRecord(index=i, input_len=10, sent=float(i), first_token=float(i) + 0.1, end=float(i) + 1.0,
                          events=[(i + 0.1, 1), (i + 0.55, 5), (i + 1.0, 10)], output_tokens=10,
                          spec_verify_ct=4)
        recs.append(r)
    bad = RequestRecord(index=4, input_len=10, sent=1.0, end=1.5, error="HTTP 500", error_type="http_500")
    out = PointOutcome(records=tuple(recs + [bad]), started=0.0, finished=4.0, planned=5,
                       lag_samples_ms=(0.1, 0.2, 5.0))
    m = derive(out)
    assert m["output_throughput_tok_s"] == pytest.approx(40 / 4.0)
    assert m["completed"] == 4 and m["failed"] == 1 and m["errors_http_500"] == 1
    assert m["median_ttft_ms"] == pytest.approx(100.0)
    assert m["mean_tpot_ms"] == pytest.approx(900.0 / 9)
    assert m["accept_length"] == pytest.approx(40 / 16)
    assert m["client_loop_lag_max_ms"] == 5.0
    assert percentile([1, 2, 3, 4], 50) == 2.5


def test_prometheus_parsing_sums_labels():
    text = ('# HELP x\nsglang:generation_tokens_total{model_name="a"} 100.0\n'
            'sglang:generation_tokens_total{model_name="b"} 5\nsglang:gen_throughput 3.5\nbad line x\n')
    m = parse_prometheus(text)
    assert m == {"sglang:generation_tokens_total": 105.0, "sglang:gen_throughput": 3.5}


MATRIX = """
[vars]
model = "/m"
[defaults]
concurrency = [10, 1]
[workloads.w]
prompts = "diverse"
num_prompts = 4
[configs.a]
launch = "{python} serve --model {model} --port {port}"
[configs.b]
url = "http://127.0.0.1:1"
[[campaigns]]
name = "c1"
configs = ["a", "b"]
repeats = 2
"""


def test_matrix_parse():
    m = parse("m.toml", MATRIX)
    assert m.configs["a"].launch == "{python} serve --model /m --port {port}"
    assert m.campaigns[0].sweep.concurrency == (1, 10)
    assert m.campaigns[0].sweep.repeats == 2
    assert m.campaigns[0].sweep.running_sample_s == 1.0  # the default (D84)
    assert m.workloads["w"].requests_at(10) == 10 and m.workloads["w"].requests_at(1) == 4
    off = parse("m.toml", MATRIX.replace("concurrency = [10, 1]", "concurrency = [10, 1]\nrunning_sample_s = 0"))
    assert off.campaigns[0].sweep.running_sample_s == 0.0


@pytest.mark.parametrize(("text", "field"), [
    (MATRIX.replace('url = "http://127.0.0.1:1"', ""), "configs.b"),
    (MATRIX.replace('configs = ["a", "b"]', 'configs = ["a", "zzz"]'), "campaigns[0].configs"),
    (MATRIX.replace("concurrency = [10, 1]", "concurrency = [0]"), "defaults.concurrency"),
    (MATRIX.replace('prompts = "diverse"', 'prompts = "sharegpt"'), "workloads.w.prompts"),
    (MATRIX.replace("[[campaigns]]", "[[nothing]]"), "nothing"),  # an unknown table, refused (docs/matrix.md)
    (MATRIX.replace("concurrency = [10, 1]", "concurrency = [1]\nrunning_sample_s = -1"), "defaults.running_sample_s"),
    (MATRIX.replace("concurrency = [10, 1]", "concurrency = [1]\nrunning_sample_s = true"), "defaults.running_sample_s"),
    ("this is = not toml =", None),
])
def test_matrix_errors(text, field):
    with pytest.raises(InputError) as exc:
        parse("m.toml", text)
    assert exc.value.field == field


def test_redaction_of_secrets_but_not_of_token_counts():
    from findings.core.serverinfo import redact, secret_name
    line = ("python -m sglang.launch_server --enable-metrics --api-key sk-live-1 --speculative-num-draft-tokens 3 "
            "--hf-token=hf_abc OPENAI_API_KEY=sk-2 MAX_TOKENS=5 -H 'Authorization: Bearer tok.en'")
    out = redact(line)
    for secret in ("sk-live-1", "hf_abc", "sk-2", "tok.en"):
        assert secret not in out
    assert "--speculative-num-draft-tokens 3" in out and "MAX_TOKENS=5" in out
    assert secret_name("HF_TOKEN") and secret_name("--admin-api-key") and not secret_name("max_total_tokens")


def test_progress_bar_on_a_terminal_and_one_summary_line_always() -> None:
    import io

    from findings.bench.progress import Progress
    from findings.bench.records import RequestRecord

    def rec(ok: bool) -> RequestRecord:
        r = RequestRecord(index=0, input_len=8, end=1.0)
        if not ok:
            r.error, r.error_type = "boom", "http"
        return r

    tty = io.StringIO()
    p = Progress(True, stream=tty, force=True)
    p.start("baseline w C=4 rep 1/1", 3)
    for ok in (True, False, True):
        p.tick(rec(ok))
    p.end("baseline w C=4 rep 1/1: 2/3 ok")
    out = tty.getvalue()
    assert "\rbaseline w C=4 rep 1/1 " in out and "0/3 req, 0 failed [00:00" in out  # the bar, drawn by tqdm
    assert out.endswith("baseline w C=4 rep 1/1: 2/3 ok\n")
    plain = io.StringIO()  # not a terminal: no bar, the summary line only
    q = Progress(True, stream=plain)
    q.start("x", 2)
    q.tick(rec(True))
    q.end("x: done")
    assert plain.getvalue() == "x: done\n"
    off = io.StringIO()
    r = Progress(False, stream=off, force=True)  # --no-progress
    r.start("x", 1)
    r.tick(rec(True))
    r.end("x: done")
    assert off.getvalue() == "x: done\n"


def test_a_client_bound_point_gets_a_warning_that_names_what_would_help():
    """The bench's warning for a point the gates flag as client-bound: more
    workers where cores are free, the raw transport where another read the
    streams, else a bigger client machine; nothing for a point that is not."""
    from findings.bench.runner import BenchReport, client_bound_note
    from findings.core.model import Point
    from findings.derive.validity import Gates

    def point(**metrics: float) -> Point:
        return Point("r/0", "r", "c", "baseline", "w", 250,
                     {"output_throughput_tok_s": 1000.0, "completed": 10.0, "failed": 0.0, **metrics},
                     "runner", None, None)

    gates = Gates()
    busy = point(client_cpu_fraction=0.97)
    note = client_bound_note("baseline w C=250 rep 1/1", busy, gates, workers=1, cpus=4, transport="aiohttp")
    assert note is not None and note.startswith("baseline w C=250 rep 1/1 is client-bound (client process busy 97%")
    assert "--workers, up to 3 on this machine's 4 cores; this point ran 1" in note and "--transport raw" in note
    only_raw = client_bound_note("x", busy, gates, workers=3, cpus=4, transport="aiohttp")
    assert only_raw is not None and "--workers" not in only_raw and "--transport raw" in only_raw
    neither = client_bound_note("x", busy, gates, workers=1, cpus=2, transport="raw")
    assert neither is not None and "a client machine with more cores than this one's 2" in neither
    lagging = point(client_loop_lag_p99_ms=gates.max_client_lag_ms + 5)
    assert "event-loop lag" in (client_bound_note("x", lagging, gates, 1, 2, "aiohttp") or "")
    # Not client-bound (a failed request is another gate's business): no warning.
    assert client_bound_note("x", point(client_cpu_fraction=0.5, failed=9.0), gates, 1, 4, "aiohttp") is None
    report = BenchReport(warnings=[note])
    assert f"warning: {note}" in report.summary().splitlines()
