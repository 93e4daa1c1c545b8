"""Imports keep what each file measured (issue 37): the load axis comes from
the file (D97), several workloads in one file are split by definition (D98),
and every refusal's suggestion, when run, stores the file's own numbers.

Fixtures: tools/make_rate_fixtures.py made the rate sweeps and the
four-lengths file by editing copies of the format-exact fixtures (their
READMEs say which).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from conftest import FIXTURES, SGL, cli
from findings import store
from findings.core.errors import InputError
from findings.importers import aiperf, common, sglang_bench, vllm_bench
from findings.load.spec import DEFAULT_CAP

VLLM = FIXTURES / "vllm_bench"
AIPERF = FIXTURES / "aiperf"
ARGS: dict[str, Any] = dict(config="baseline", campaign="sweep", workload="chat", date="2026-01-01")


def lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(x) for x in path.read_text().splitlines() if x.strip()]


def ingest(st: Path, fmt: str, file: Path, *extra: str, config: str = "baseline", workload: str = "chat",
           campaign: str = "sweep"):
    return cli("ingest", fmt, str(file), "--config", config, "--campaign", campaign, "--workload", workload,
               "--date", "2026-01-01", "--create", *extra, store=st)


def one_line(output: str) -> str:
    text = output.strip()
    assert "\n" not in text, text
    return text


def nothing_written(st: Path) -> bool:
    return not (st / "runs").exists() or not list((st / "runs").glob("*.json"))


def check_open_point(p, doc: dict[str, Any], *, cap: int | None) -> None:
    """An open-loop point as findings bench --request-rate stores one (findings/load/spec.py)."""
    assert p.workload_params["load"] == "rate"
    assert p.workload_params["request_rate"] == float(doc["request_rate"])
    assert p.workload_params.get("max_concurrency") == cap
    assert p.concurrency == (cap or DEFAULT_CAP)
    assert p.throughput == doc["output_throughput"]
    for key in ("median_tpot_ms", "p99_ttft_ms", "median_ttft_ms", "p99_tpot_ms"):
        assert p.metrics[key] == doc[key], key


# ------------------------------------------------------------------ the load axis (D97)

def test_sglang_rate_sweep_is_stored_on_the_rate_axis(tmp_path: Path) -> None:
    """Once refused with "pass --concurrency N", which then stored five rates as five repeats at C=64."""
    f = SGL / "v0_5_23_rate_sweep.jsonl"
    st = tmp_path / "st"
    r = ingest(st, "sglang-bench", f)
    assert r.exit_code == 0, r.output
    pts = sorted(store.load(st).points, key=lambda p: p.workload_params["request_rate"])
    docs = lines(f)
    assert [p.workload_params["request_rate"] for p in pts] == [1.0, 2.0, 4.0, 8.0, 16.0]
    for p, doc in zip(pts, docs):
        check_open_point(p, doc, cap=None)
        assert p.workload_params["burstiness"] == 1.0  # sglang's arrivals are Poisson; it writes no burstiness
    text = cli("conclusions", store=st).output
    assert "5 open-loop points" in text and "rates 1, 2, 4, 8, 16 req/s" in text


def test_concurrency_given_for_a_rate_sweep_is_refused_in_one_line(tmp_path: Path) -> None:
    st = tmp_path / "st"
    r = ingest(st, "sglang-bench", SGL / "v0_5_23_rate_sweep.jsonl", "--concurrency", "64")
    assert r.exit_code == 1 and nothing_written(st)
    assert one_line(r.output).endswith("--concurrency 64 does not apply: the file records request rates 1 to 16 "
                                       "req/s with no concurrency cap (open-loop points on the rate axis); "
                                       "drop --concurrency")
    # its suggestion (drop --concurrency) stores the file's rates
    assert ingest(st, "sglang-bench", SGL / "v0_5_23_rate_sweep.jsonl").exit_code == 0
    assert sorted(p.workload_params["request_rate"] for p in store.load(st).points) == [1.0, 2.0, 4.0, 8.0, 16.0]


def test_sglang_rate_with_a_cap_records_the_cap(tmp_path: Path) -> None:
    f = SGL / "v0_5_23_rate_cap.jsonl"
    run = sglang_bench.read(common.read_source(str(f)), **ARGS)
    for p, doc in zip(run.points, lines(f)):
        check_open_point(p, doc, cap=16)
    # --concurrency that agrees with the file is accepted; one that contradicts it is refused
    assert [p.concurrency for p in sglang_bench.read(common.read_source(str(f)), **ARGS, concurrency=16).points] \
        == [16, 16]
    st = tmp_path / "st"
    r = ingest(st, "sglang-bench", f, "--concurrency", "8")
    assert r.exit_code == 1 and nothing_written(st)
    assert one_line(r.output).endswith("field 'max_concurrency': the file says 16, --concurrency says 8; drop "
                                       "--concurrency (it only fills in what a file leaves out)")
    assert ingest(st, "sglang-bench", f).exit_code == 0  # the suggestion
    assert {p.concurrency for p in store.load(st).points} == {16}


def test_closed_loop_concurrency_that_contradicts_the_file_is_refused(tmp_path: Path) -> None:
    """--concurrency was silently ignored where the file said otherwise; now it is one line."""
    st = tmp_path / "st"
    r = ingest(st, "sglang-bench", SGL / "v0_5_23_baseline.jsonl", "--concurrency", "30")
    assert r.exit_code == 1 and nothing_written(st)
    assert ":1: field 'max_concurrency': the file says 1, --concurrency says 30" in one_line(r.output)
    assert ingest(st, "sglang-bench", SGL / "v0_5_23_baseline.jsonl").exit_code == 0
    assert sorted(p.concurrency for p in store.load(st).points) == [1, 30]


def test_infinite_rate_without_a_cap_asks_for_the_requests_in_flight(tmp_path: Path) -> None:
    doc = lines(SGL / "v0_5_23_baseline.jsonl")[1]
    doc["max_concurrency"] = None  # --request-rate inf, no --max-concurrency: every request at once
    f = tmp_path / "burst.jsonl"
    f.write_text(json.dumps(doc) + "\n")
    st = tmp_path / "st"
    r = ingest(st, "sglang-bench", f)
    assert r.exit_code == 1 and nothing_written(st)
    assert one_line(r.output).endswith("field 'max_concurrency': missing or null (request_rate inf: every request "
                                       "sent at once); pass --concurrency N, the requests that were in flight "
                                       "(num_prompts when all were sent at once)")
    assert ingest(st, "sglang-bench", f, "--concurrency", str(doc["completed"])).exit_code == 0
    (p,) = store.load(st).points
    assert p.concurrency == 300 and "load" not in p.workload_params and p.throughput == doc["output_throughput"]


def test_vllm_rate_sweeps_derive_open_loop_verdicts(tmp_path: Path) -> None:
    """The issue's published campaign: 5 Poisson rates per config, baseline against EAGLE-3. Imported with
    --concurrency 1 it was a tie at C=1; now each rate is judged on its own."""
    st = tmp_path / "st"
    for config in ("baseline", "eagle3"):
        f = VLLM / f"v0_33_0_rate_sweep_{config}.json"
        assert ingest(st, "vllm-bench", f, config=config).exit_code == 0
        pts = sorted((p for p in store.load(st).points if p.config == config),
                     key=lambda p: p.workload_params["request_rate"])
        for p, doc in zip(pts, lines(f)):
            check_open_point(p, doc, cap=None)
            assert p.workload_params["burstiness"] == doc["burstiness"] == 1.0
    got = json.loads(cli("--baseline", "baseline", "conclusions", "--json", store=st).output)
    chat = got["workloads"]["chat"]
    assert chat["mode"] == "rate" and chat["rates"] == ["1", "2", "4", "8", "16"]
    eagle = chat["candidates"]["eagle3"]
    assert eagle["verdicts"] == {"1": "win", "2": "win", "4": "win", "8": "win", "16": "loss"}
    assert (eagle["policy"], eagle["threshold"]) == ("on-below", 8.0)
    base = {d["request_rate"]: d["median_tpot_ms"] for d in lines(VLLM / "v0_33_0_rate_sweep_baseline.json")}
    spec = {d["request_rate"]: d["median_tpot_ms"] for d in lines(VLLM / "v0_33_0_rate_sweep_eagle3.json")}
    assert eagle["metrics"]["16"]["median_tpot_ms"]["ratio"] == pytest.approx(base[16.0] / spec[16.0], abs=1e-4)


def test_vllm_rate_with_a_cap(tmp_path: Path) -> None:
    (doc,) = lines(VLLM / "v0_33_0_rate_cap.json")
    (p,) = vllm_bench.read(common.read_source(str(VLLM / "v0_33_0_rate_cap.json")), **ARGS).points
    check_open_point(p, doc, cap=32)


def test_vllm_ramp_up_run_is_refused(tmp_path: Path) -> None:
    (doc,) = lines(VLLM / "v0_33_0_rate_cap.json")
    doc.update(ramp_up_strategy="linear", ramp_up_start_rps=1, ramp_up_end_rps=10)
    f = tmp_path / "ramp.json"
    f.write_text(json.dumps(doc))
    with pytest.raises(InputError, match="'linear': the rate changed during the run .from 1 to 10 req/s.*"
                                         "findings does not import ramp-up runs"):
        vllm_bench.read(common.read_source(str(f)), **ARGS)


def test_aiperf_gamma_rate_with_a_cap() -> None:
    f = AIPERF / "aiperf_0_13_0_rate_gamma_cap.json"
    (p,) = aiperf.read(common.read_source(str(f)), **ARGS).points
    phase = json.loads(f.read_text())["input_config"]["phases"][0]
    assert p.workload_params["load"] == "rate" and p.workload_params["request_rate"] == phase["rate"] == 4.0
    assert p.workload_params["burstiness"] == phase["smoothness"] == 0.5
    assert p.workload_params["max_concurrency"] == p.concurrency == phase["concurrency"] == 16
    with pytest.raises(InputError, match="the file says 16, --concurrency says 4"):
        aiperf.read(common.read_source(str(f)), **ARGS, concurrency=4)


def test_aiperf_constant_phase_is_constant_spacing() -> None:
    doc = json.loads((AIPERF / "aiperf_0_13_0_rate_errors.json").read_text())
    doc["input_config"]["phases"][0]["type"] = "constant"
    (p,) = aiperf.read(common.Source("c.json", json.dumps(doc).encode()), **ARGS).points
    assert (p.workload_params["load"], p.workload_params["burstiness"]) == ("rate", "inf")


def test_genai_perf_request_rate_is_an_open_loop_point() -> None:
    doc = json.loads((AIPERF / "genai_perf_0_0_16_c16.json").read_text())
    stimulus = doc["input_config"]["perf_analyzer"]["stimulus"]
    stimulus.pop("concurrency", None)
    stimulus["request_rate"] = 2.0  # genai-perf --request-rate 2
    (p,) = aiperf.read(common.Source("g.json", json.dumps(doc).encode()), **ARGS).points
    assert (p.workload_params["load"], p.workload_params["request_rate"]) == ("rate", 2.0)
    assert "burstiness" not in p.workload_params  # genai-perf does not record perf_analyzer's distribution
    assert p.workload_params["tool"] == "genai-perf"


# ------------------------------------------------------------------ several workloads in one file (D98)

FOUR = ["w-in1000-out1000", "w-in1000-out200", "w-in4000-out200", "w-in200-out1000"]


def test_four_lengths_in_one_sglang_file_are_four_workloads(tmp_path: Path) -> None:
    """Once refused (one name, several definitions), with advice that could not help
    (--workload NEW) or that averaged the four together (--allow-workload-change)."""
    f = SGL / "v0_5_23_four_lengths.jsonl"
    st = tmp_path / "st"
    r = ingest(st, "sglang-bench", f, workload="w")
    assert r.exit_code == 0, r.output
    assert f"(campaigns: sweep; split by definition into workloads: {', '.join(FOUR)})" in one_line(r.output)
    pts = {p.workload: p for p in store.load(st).points}
    assert sorted(pts) == sorted(FOUR)
    for name, doc in zip(FOUR, lines(f)):
        p = pts[name]
        assert p.throughput == doc["output_throughput"] and p.concurrency == doc["max_concurrency"] == 30
        assert (p.workload_params["random_input_len"], p.workload_params["random_output_len"]) == \
            (doc["random_input_len"], doc["random_output_len"])


def test_a_long_differing_value_makes_a_short_valid_workload_name(tmp_path: Path) -> None:
    """Found by the importers' fuzzer: a value that differs between two records
    (here a huge integer) became a workload name longer than the store
    accepts. Long values are shortened with a hash of the whole value; a name
    that still cannot be stored is refused in one line."""
    docs = lines(SGL / "v0_5_23_four_lengths.jsonl")[:2]
    docs[1] = {**docs[0], "backend": "x" * 400}
    f = tmp_path / "two.jsonl"
    f.write_text("".join(json.dumps(d) + "\n" for d in docs))
    st = tmp_path / "st"
    r = ingest(st, "sglang-bench", f, workload="w")
    assert r.exit_code == 0, r.output
    names = sorted(p.workload for p in store.load(st).points)
    assert len(names) == 2 and all(len(n) <= 40 for n in names) and len(set(names)) == 2
    r = ingest(tmp_path / "st2", "sglang-bench", f, workload="w" * 190)
    assert r.exit_code == 1 and nothing_written(tmp_path / "st2")
    assert one_line(r.output).endswith("is longer than a store name may be (200 characters); pass a shorter "
                                       "--workload")


def test_the_guard_rail_across_files_stays_and_its_suggestion_stores_the_file(tmp_path: Path) -> None:
    st = tmp_path / "st"
    assert ingest(st, "sglang-bench", SGL / "v0_5_23_four_lengths.jsonl", workload="w").exit_code == 0
    # another file, other lengths, under a name already defined: refused, once
    f = SGL / "v0_5_23_baseline.jsonl"
    r = ingest(st, "sglang-bench", f, workload="w-in1000-out1000", campaign="next")
    assert r.exit_code == 1
    msg = one_line(r.output)
    assert "workload 'w-in1000-out1000': input_len=1024 and output_len=512 here, input_len=1000 and " \
           "output_len=1000 in run sglang-bench-" in msg
    assert "store it under a new name (--workload NEW)" in msg and msg.count("workload 'w-in1000-out1000'") == 1
    # its suggestion: a new name stores the file's own numbers
    assert ingest(st, "sglang-bench", f, workload="random-1024-512", campaign="next").exit_code == 0
    got = sorted((p.concurrency, p.throughput) for p in store.load(st).points if p.workload == "random-1024-512")
    assert got == sorted((d["max_concurrency"], d["output_throughput"]) for d in lines(f))


def test_a_table_giving_one_name_several_definitions_says_so_once(tmp_path: Path) -> None:
    """The table names its workloads itself: the refusal names each differing key once and
    suggests neither --workload (not a table option) nor --allow-workload-change (it pooled them)."""
    rows = ["campaign,order,workload,config,concurrency,output_throughput_tok_s,dataset,ignore_eos",
            "c,1,w,baseline,1,10.0,sharegpt,false", "c,1,w,baseline,1,20.0,sharegpt,true",
            "c,1,w,baseline,1,30.0,random,true"]
    f = tmp_path / "t.csv"
    f.write_text("\n".join(rows) + "\n")
    st = tmp_path / "st"
    for extra in ((), ("--allow-workload-change",)):
        r = cli("ingest", "table", str(f), "--create", *extra, store=st)
        assert r.exit_code == 1 and nothing_written(st)
        msg = one_line(r.output)
        assert msg.endswith("one workload name, several definitions in this file: workload 'w' (dataset "
                            "'random', 'sharegpt'; ignore_eos False, True); give each definition its own workload "
                            "name; nothing was written"), msg
        assert "--workload" not in msg and "--allow-workload-change" not in msg
    # the suggestion: each definition its own name
    f.write_text("\n".join([rows[0], rows[1], rows[2].replace(",w,", ",w-ignore-eos,"),
                            rows[3].replace(",w,", ",w-random,")]) + "\n")
    assert cli("ingest", "table", str(f), "--create", store=st).exit_code == 0
    assert sorted((p.workload, p.throughput) for p in store.load(st).points) == \
        [("w", 10.0), ("w-ignore-eos", 20.0), ("w-random", 30.0)]


# ------------------------------------------------------------------ each refusal's suggestion, run (item 3)

@pytest.mark.parametrize(("wrong", "file", "right"), [
    ("vllm-bench", SGL / "v0_5_23_rate_sweep.jsonl", "sglang-bench"),
    ("sglang-bench", VLLM / "v0_33_0_rate_sweep_eagle3.json", "vllm-bench"),
    ("aiperf", VLLM / "v0_33_0_rate_cap.json", "vllm-bench"),
])
def test_the_wrong_importer_names_the_right_one_which_stores_the_file(tmp_path: Path, wrong: str, file: Path,
                                                                      right: str) -> None:
    st = tmp_path / "st"
    r = ingest(st, wrong, file)
    assert r.exit_code == 1 and nothing_written(st)
    msg = one_line(r.output)
    assert f"this is {right} output, not {wrong}" in msg and f"use 'findings ingest {right}'" in msg
    assert ingest(st, right, file).exit_code == 0
    got = sorted((p.workload_params["request_rate"], p.throughput) for p in store.load(st).points)
    assert got == sorted((float(d["request_rate"]), d["output_throughput"]) for d in lines(file))


def test_a_file_without_its_load_asks_for_the_concurrency_and_says_what_it_cannot_place(tmp_path: Path) -> None:
    """genai-perf's CSV records no load at all: --concurrency N is the only way, and the message says that a
    request-rate run cannot be placed from it (rather than inviting any N)."""
    f = AIPERF / "genai_perf_0_0_12_export_c16.csv"
    st = tmp_path / "st"
    r = ingest(st, "aiperf", f)
    assert r.exit_code == 1 and nothing_written(st)
    assert one_line(r.output).endswith("missing or null, and no request rate: the file does not record its load; "
                                       "pass --concurrency N, the concurrency the run used (a request-rate run "
                                       "cannot be placed from this file)")
    assert ingest(st, "aiperf", f, "--concurrency", "16").exit_code == 0
    (p,) = store.load(st).points
    assert p.concurrency == 16 and "load" not in p.workload_params


# ------------------------------------------------------------------ duplicates on the parsed records (item 4, D99)

def _reformatted(path: Path, tmp_path: Path) -> Path:
    """The same records in other bytes: keys in reverse order, indented or one per line, 1.0 written as 1."""
    def redo(doc: dict[str, Any]) -> dict[str, Any]:
        return {k: (int(v) if isinstance(v, float) and v.is_integer() else v) for k, v in reversed(doc.items())}
    text = path.read_text()
    out = tmp_path / f"copy-{path.name}"
    try:
        out.write_text(json.dumps(redo(json.loads(text)), indent=4))
    except json.JSONDecodeError:
        out.write_text("".join(json.dumps(redo(json.loads(x))) + "\n" for x in text.splitlines() if x.strip()))
    return out


@pytest.mark.parametrize(("fmt", "path"), [
    ("sglang-bench", SGL / "v0_5_23_rate_sweep.jsonl"),
    ("vllm-bench", VLLM / "v0_33_0_rate_cap.json"),
    ("vllm-bench", VLLM / "v0_33_0_rate_sweep_eagle3.json"),
    ("aiperf", AIPERF / "aiperf_0_13_0_rate_gamma_cap.json"),
])
def test_a_reformatted_copy_is_a_duplicate(tmp_path: Path, fmt: str, path: Path) -> None:
    """Once accepted as a new campaign: the byte hashes differed."""
    st = tmp_path / "st"
    assert ingest(st, fmt, path).exit_code == 0
    copy = _reformatted(path, tmp_path)
    assert copy.read_bytes() != path.read_bytes()
    r = ingest(st, fmt, copy, campaign="again")
    assert r.exit_code == 1
    n = len(lines(path)) if fmt != "aiperf" else 1
    assert f"{n} of its records were already ingested as run" in one_line(r.output)
    assert len(store.load(st).points) == n


def test_a_reformatted_table_is_a_duplicate(tmp_path: Path) -> None:
    """The table too (D99): columns in another order, numbers written otherwise, an empty column added."""
    src = tmp_path / "t.csv"
    src.write_text("campaign,date,workload,config,concurrency,output_throughput_tok_s\n"
                   "pub,2025-06-01,chat,baseline,1,120.5\npub,2025-06-01,chat,baseline,8,930\n")
    copy = tmp_path / "copy.csv"
    copy.write_text("config,concurrency,workload,output_throughput_tok_s,campaign,date,note\n"
                    "baseline,1,chat,120.50,pub,2025-06-01,\nbaseline,8,chat,930.0,pub,2025-06-01,\n"
                    "baseline,16,chat,1500,pub,2025-06-01,\n")
    st = tmp_path / "st"
    assert cli("ingest", "table", str(src), "--create", store=st).exit_code == 0
    r = cli("ingest", "table", str(copy), store=st)
    assert r.exit_code == 1 and "2 of its records were already ingested as run" in one_line(r.output)
    r = cli("ingest", "table", str(copy), "--skip-existing", store=st)
    assert r.exit_code == 0 and "ingested 1 points" in r.output
    assert sorted(p.concurrency for p in store.load(st).points) == [1, 8, 16]


def test_skip_existing_skips_reformatted_records_and_keeps_the_new(tmp_path: Path) -> None:
    src = SGL / "v0_5_23_rate_sweep.jsonl"
    first = tmp_path / "first.jsonl"
    first.write_text("".join(x + "\n" for x in src.read_text().splitlines()[:3]))
    st = tmp_path / "st"
    assert ingest(st, "sglang-bench", first).exit_code == 0
    again = _reformatted(src, tmp_path)  # all five, re-formatted: three already stored
    r = ingest(st, "sglang-bench", again, "--skip-existing")
    assert r.exit_code == 0 and "ingested 2 points" in r.output
    assert sorted(p.workload_params["request_rate"] for p in store.load(st).points) == [1.0, 2.0, 4.0, 8.0, 16.0]


# ------------------------------------------------------------------ AIPerf fidelity (item 4)

def _aiperf(doc: dict[str, Any]):
    (p,) = aiperf.read(common.Source("a.json", json.dumps(doc).encode()), **ARGS).points
    return p


def test_aiperf_before_0_13_keeps_extra_inputs_and_the_public_dataset() -> None:
    """AIPerf 0.1 - 0.8 export their UserConfig with exclude_unset: --extra-inputs ignore_eos:true and
    --public-dataset appear under input_config.input only when given. They decide the ⚑ caveat."""
    from findings.derive.caveats import point_reasons
    doc = json.loads((AIPERF / "aiperf_0_6_0_c8.json").read_text())
    assert point_reasons(_aiperf(doc)) == ()
    for inp in ({"extra_inputs_parsed": {"ignore_eos": True}, "public_dataset": "sharegpt"},
                {"extra": [["ignore_eos", True]], "public_dataset": "sharegpt"},
                {"extra": ["ignore_eos:true"], "public_dataset": "sharegpt"}):
        doc["input_config"]["input"] = inp
        p = _aiperf(doc)
        assert (p.workload_params["dataset"], p.workload_params["ignore_eos"]) == ("public:sharegpt", True)
        assert point_reasons(p) == ("ignore_eos",)
    doc["input_config"]["input"] = {"file": "prompts.jsonl"}
    assert _aiperf(doc).workload_params["dataset"] == "file"


def test_aiperf_is_told_from_genai_perf_by_its_command_line() -> None:
    """A file whose cli_command is `aiperf profile` is AIPerf even without the keys only AIPerf writes."""
    doc = json.loads((AIPERF / "aiperf_0_6_0_c8.json").read_text())
    for key in ("aiperf_version", "schema_version"):
        doc.pop(key, None)
    assert doc["input_config"]["cli_command"].startswith("aiperf profile")
    p = _aiperf(doc)
    assert p.workload_params["tool"] == "aiperf"
    assert p.metrics["failed"] == 0  # AIPerf writes error_request_count only when a request failed
    doc["input_config"]["cli_command"] = "genai-perf profile -m m --concurrency 8"
    p = _aiperf(doc)
    assert p.workload_params["tool"] == "genai-perf" and "failed" not in p.metrics  # genai-perf: unknown


# ------------------------------------------------------------------ ingest auto: the nearest importer's reason (D101)

def test_ingest_auto_gives_the_nearest_importers_reason(tmp_path: Path) -> None:
    """An AIPerf export without metric objects (no token-producing endpoint): `ingest auto` said only
    "cannot tell the format", where `ingest aiperf` names the cause."""
    doc = json.loads((AIPERF / "aiperf_0_13_0_rate_errors.json").read_text())
    f = tmp_path / "profile_export_aiperf.json"
    f.write_text(json.dumps({k: v for k, v in doc.items() if not (isinstance(v, dict) and "unit" in v)}))
    st = tmp_path / "st"
    auto = cli("ingest", "auto", str(f), "--config", "c", "--campaign", "k", "--workload", "w",
               "--date", "2026-01-01", "--create", store=st)
    assert auto.exit_code == 1 and nothing_written(st)
    msg = one_line(auto.output)
    assert "cannot tell the format" not in msg
    assert "nearest format aiperf (AIPerf's keys schema_version, aiperf_version, benchmark_id, input_config and " \
           "4 more), whose importer refuses it: field 'output_token_throughput': missing" in msg
    named = one_line(ingest(st, "aiperf", f).output)
    assert named.endswith(msg.split("whose importer refuses it: ")[1])


def test_ingest_auto_names_the_nearest_importer_that_reads_the_file(tmp_path: Path) -> None:
    """vLLM writes output_throughput 0 when every request failed; without it the file has no key auto
    decides by, but vllm-bench reads it: the suggestion stores the failed point as the file says."""
    doc = json.loads((FIXTURES / "real_tools" / "vllm_0_32_0_all_failed.json").read_text())
    doc = {k: v for k, v in doc.items() if k != "output_throughput" and not k.endswith(("_ttft_ms", "_tpot_ms",
                                                                                          "_itl_ms"))}
    f = tmp_path / "all_failed.json"
    f.write_text(json.dumps(doc))
    st = tmp_path / "st"
    auto = cli("ingest", "auto", str(f), "--config", "c", "--campaign", "k", "--workload", "w",
               "--date", "2026-01-01", "--create", store=st)
    assert auto.exit_code == 1 and nothing_written(st)
    msg = one_line(auto.output)
    assert "cannot tell the format (a JSON object with neither AIPerf metric objects nor 'output_throughput'); " \
           "its nearest format, vllm-bench (keys only vLLM writes: " in msg
    assert msg.endswith("reads it: use 'findings ingest vllm-bench'")
    assert ingest(st, "vllm-bench", f, config="c", workload="w").exit_code == 0
    (p,) = store.load(st).points
    assert p.metrics["completed"] == doc["completed"] == 0 and p.metrics["failed"] == doc["failed"]


def test_ingest_auto_on_a_table_missing_a_column_names_it(tmp_path: Path) -> None:
    f = tmp_path / "t.csv"
    f.write_text("campaign,workload,concurrency,output_throughput_tok_s\nc,w,1,10.0\n")
    r = cli("ingest", "auto", str(f), "--create", store=tmp_path / "st")
    assert r.exit_code == 1
    assert one_line(r.output).endswith("nearest format table (a CSV with the table's columns campaign, workload, "
                                       "concurrency, output_throughput_tok_s), whose importer refuses it: line 1: "
                                       "field 'config': required column is missing")


# ------------------------------------------------------------------ an SLO on ingest: goodput from per-request times (D102)

def _met(doc: dict[str, Any], ttft_ms: float, tpot_ms: float) -> int:
    return sum(1 for f, lat, o, e in zip(doc["ttfts"], doc["latencies"], doc["output_lens"], doc["errors"])
               if not e and f * 1000 <= ttft_ms and (o <= 1 or (lat - f) / (o - 1) * 1000 <= tpot_ms))


def test_an_slo_on_ingest_gives_goodput_and_the_sustainable_rate(tmp_path: Path) -> None:
    st = tmp_path / "st"
    for config in ("baseline", "eagle3"):
        f = VLLM / f"v0_33_0_rate_detailed_{config}.json"
        r = ingest(st, "vllm-bench", f, "--slo-ttft-ms", "1000", "--slo-tpot-ms", "25", config=config)
        assert r.exit_code == 0, r.output
        pts = sorted((p for p in store.load(st).points if p.config == config),
                     key=lambda p: p.workload_params["request_rate"])
        for p, doc in zip(pts, lines(f)):
            met = _met(doc, 1000, 25)
            assert p.metrics["slo_met"] == met and p.metrics["slo_attainment"] == met / len(doc["ttfts"])
            assert p.metrics["goodput_req_s"] == pytest.approx(met / doc["duration"])
            assert (p.workload_params["slo_ttft_ms"], p.workload_params["slo_tpot_ms"],
                    p.workload_params["slo_attainment"]) == (1000.0, 25.0, 0.9)
    got = json.loads(cli("--baseline", "baseline", "conclusions", "--json", store=st).output)["workloads"]["chat"]
    assert got["slo"] == {"slo_ttft_ms": 1000.0, "slo_tpot_ms": 25.0, "slo_attainment": 0.9}
    sustained = {c: (s["rate"], s["failed_at"]) for c, s in got["sustained"].items()}
    assert sustained == {"baseline": (4.0, 8.0), "eagle3": (8.0, None)}
    assert got["candidates"]["eagle3"]["verdicts"]["8"] == "win"  # goodput wins where the baseline fails the SLO


def test_an_slo_needs_per_request_times_and_open_loop_points(tmp_path: Path) -> None:
    st = tmp_path / "st"
    r = ingest(st, "vllm-bench", VLLM / "v0_33_0_rate_sweep_eagle3.json", "--slo-tpot-ms", "25")
    assert r.exit_code == 1 and nothing_written(st)
    assert one_line(r.output).endswith(":1: an SLO needs per-request times and a duration, and this record has "
                                       "none (sglang.bench_serving writes them with --output-details, vllm bench "
                                       "serve with --save-detailed; an AIPerf or genai-perf summary never does)")
    r = ingest(st, "sglang-bench", SGL / "v0_5_23_baseline.jsonl", "--slo-tpot-ms", "25")
    assert r.exit_code == 1 and "the file has none (no finite request_rate): drop --slo-ttft-ms/--slo-tpot-ms" \
        in one_line(r.output)
    assert ingest(st, "sglang-bench", SGL / "v0_5_23_baseline.jsonl").exit_code == 0  # its suggestion
    r = ingest(st, "vllm-bench", VLLM / "v0_33_0_rate_detailed_baseline.json", "--slo-attainment", "0.8")
    assert r.exit_code == 1 and "--slo-attainment needs an SLO" in one_line(r.output)


# ------------------------------------------------------------------ the table's rate axis (D103)

RATE_TABLE = """campaign,date,workload,config,concurrency,request_rate,burstiness,max_concurrency,output_throughput_tok_s,median_tpot_ms,p99_ttft_ms,median_ttft_ms,p99_tpot_ms,slo_tpot_ms,slo_attainment,slo_attainment_measured,goodput_req_s
pub,2025-06-01,chat,baseline,,1,1,,120.5,20.1,110,80,22,25,0.9,1.0,0.98
pub,2025-06-01,chat,baseline,,4,1,,480.2,23.0,150,95,25.1,25,0.9,0.95,3.8
pub,2025-06-01,chat,baseline,,8,1,,930.0,27.5,210,130,31,25,0.9,0.2,1.6
pub,2025-06-01,chat,eagle3,,1,1,,121.0,13.2,112,78,14,25,0.9,1.0,0.99
pub,2025-06-01,chat,eagle3,,4,1,,481.0,17.9,149,96,19,25,0.9,1.0,3.97
pub,2025-06-01,chat,eagle3,,8,1,,955.0,23.8,208,128,26,25,0.9,0.93,7.4
"""


def test_a_published_rate_table_is_entered_and_judged(tmp_path: Path) -> None:
    f = tmp_path / "published.csv"
    f.write_text(RATE_TABLE)
    st = tmp_path / "st"
    r = cli("ingest", "table", str(f), "--create", store=st)
    assert r.exit_code == 0, r.output
    p = next(p for p in store.load(st).points if p.config == "eagle3" and p.workload_params["request_rate"] == 8.0)
    assert p.workload_params["load"] == "rate" and p.concurrency == DEFAULT_CAP
    assert (p.workload_params["slo_tpot_ms"], p.workload_params["slo_attainment"]) == (25.0, 0.9)
    assert (p.metrics["slo_attainment"], p.metrics["goodput_req_s"], p.metrics["median_tpot_ms"]) == (0.93, 7.4, 23.8)
    got = json.loads(cli("--baseline", "baseline", "conclusions", "--json", store=st).output)["workloads"]["chat"]
    assert got["candidates"]["eagle3"]["verdicts"] == {"1": "win", "4": "win", "8": "win"}
    assert {c: s["rate"] for c, s in got["sustained"].items()} == {"baseline": 4.0, "eagle3": 8.0}


def test_a_rate_row_with_a_concurrency_is_refused(tmp_path: Path) -> None:
    f = tmp_path / "t.csv"
    f.write_text("campaign,workload,config,concurrency,request_rate,output_throughput_tok_s\nc,w,b,64,4,10\n")
    r = cli("ingest", "table", str(f), "--create", store=tmp_path / "st")
    assert r.exit_code == 1
    assert one_line(r.output).endswith(":2: field 'concurrency': '64' in a row with request_rate 4: a rate row's "
                                       "load is its rate; leave concurrency empty (a cap on requests in flight goes "
                                       "in max_concurrency)")
    f.write_text("campaign,workload,config,concurrency,request_rate,output_throughput_tok_s\nc,w,b,,4,10\n")
    assert cli("ingest", "table", str(f), "--create", store=tmp_path / "st").exit_code == 0  # the suggestion
    (p,) = store.load(tmp_path / "st").points
    assert p.workload_params["request_rate"] == 4.0 and p.throughput == 10.0


# ------------------------------------------------------------------ one threshold rule for both axes (D104)

def test_an_open_loop_switch_is_never_at_a_rate_that_measured_against_it(tmp_path: Path) -> None:
    """The issue's case: on-above, its note said "at 4 req/s, the first win after the losses" where 4 req/s
    was a tie with TPOT -2.2%. The closed loop skipped such a tie (D90); now the open loop does too."""
    rows = ["campaign,date,workload,config,concurrency,request_rate,output_throughput_tok_s,median_tpot_ms,"
            "p99_ttft_ms,server_running_mean"]
    for rate, base, cand in ((1, 10.0, 12.0), (2, 12.0, 13.5), (4, 15.0, 15.33), (8, 20.0, 17.0),
                             (16, 30.0, 24.0)):
        rows.append(f"pub,2025-06-01,chat,baseline,,{rate},100,{base},100,{rate}")
        rows.append(f"pub,2025-06-01,chat,eagle3,,{rate},100,{cand},100,{rate * 1.5}")
    f = tmp_path / "t.csv"
    f.write_text("\n".join(rows) + "\n")
    st = tmp_path / "st"
    assert cli("ingest", "table", str(f), "--create", store=st).exit_code == 0
    got = json.loads(cli("--baseline", "baseline", "conclusions", "--json", store=st).output)["workloads"]["chat"]
    eagle = got["candidates"]["eagle3"]
    assert eagle["verdicts"] == {"1": "loss", "2": "loss", "4": "tie", "8": "win", "16": "win"}
    assert eagle["metrics"]["4"]["median_tpot_ms"]["ratio"] < 1  # the tie measured against speculation
    assert (eagle["policy"], eagle["threshold"]) == ("on-above", 8.0)
    deploy = json.loads(cli("--baseline", "baseline", "deploy", "--json", store=st).output)
    entry = deploy["workloads"]["chat"]["eagle3"]
    assert (entry["threshold_rate"], entry["threshold"]) == (8.0, 12)  # its running batch there, 8 x 1.5
    assert entry["notes"] == ["The threshold is a measured running batch: at 8 req/s, the first rate after them "
                              "(TPOT p50 +17.6%, a win), eagle3's server ran 12.00 requests on average (its gauge), "
                              "so the switch is at a running batch of 12."]


def test_an_open_loop_off_policy_speaks_of_rates(tmp_path: Path) -> None:
    rows = ["campaign,date,workload,config,concurrency,request_rate,output_throughput_tok_s,median_tpot_ms,p99_ttft_ms"]
    for rate in (2, 4, 8):
        rows += [f"pub,2025-06-01,chat,baseline,,{rate},100,10,100", f"pub,2025-06-01,chat,eagle3,,{rate},100,11,100"]
    f = tmp_path / "t.csv"
    f.write_text("\n".join(rows) + "\n")
    st = tmp_path / "st"
    assert cli("ingest", "table", str(f), "--create", store=st).exit_code == 0
    entry = json.loads(cli("--baseline", "baseline", "deploy", "--json", store=st).output)["workloads"]["chat"]["eagle3"]
    assert entry["policy"] == "off"
    assert entry["vllm"]["reason"] == "speculation never won at any measured rate: launch vLLM without " \
                                      "--speculative-config"
