"""The request-rate (open-loop) fixtures of tests/fixtures/real_tools/ hold
what each tool was asked (issue 37, item 7).

The files were written by the released clients (tools/make_real_fixtures.py
--tool sglang-rate / vllm-rate / aiperf-rate) and the exact command lines
are in COMMANDS-<tool>.md beside them. Here every file is read as plain JSON,
never through findings' importers, and checked two ways:

- against the values the fixtures' README promises (rates, burstiness,
  concurrency caps, input/output lengths, 16 requests, none failed);
- against the logged command lines themselves: each ``--request-rate``,
  ``--burstiness``, ``--max-concurrency`` / ``--concurrency`` and length
  option a command was given is the value its file records, run by run.

So a fixture regenerated with other options, or a COMMANDS log that no longer
matches its files, fails here before an importer test reads a wrong axis.
"""

from __future__ import annotations

import json
import shlex
from pathlib import Path
from typing import Any

import pytest

REAL = Path(__file__).parent / "fixtures" / "real_tools"
RATES = [2.0, 4.0, 8.0]
N = 16  # requests per run


def jsonl(name: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (REAL / name).read_text(encoding="utf-8").splitlines() if line.strip()]


def doc(name: str) -> dict[str, Any]:
    d: dict[str, Any] = json.loads((REAL / name).read_text(encoding="utf-8"))
    return d


def logged(tool: str) -> list[list[str]]:
    """The benchmark command lines of COMMANDS-<tool>.md, in order, as argv lists."""
    out = []
    for line in (REAL / f"COMMANDS-{tool}.md").read_text(encoding="utf-8").splitlines():
        if line.startswith("    ") and "findings emulate" not in line:
            out.append(shlex.split(line.strip()))
    return out


def opt(argv: list[str], name: str) -> str | None:
    return argv[argv.index(name) + 1] if name in argv else None


def opts(argv: list[str], name: str) -> list[str]:
    return [argv[i + 1] for i, a in enumerate(argv) if a == name]


# ------------------------------------------------------------------ sglang.bench_serving 0.5.23


def _sglang_common(line: dict[str, Any]) -> None:
    assert line["backend"] == "sglang"
    assert line["dataset_name"] == "random-ids"
    assert line["completed"] == N
    assert len(line["ttfts"]) == N and len(line["errors"]) == N  # --output-details
    assert all(e == "" for e in line["errors"])
    assert line["total_input_tokens"] == N * line["random_input_len"]
    assert line["total_output_tokens"] == N * line["random_output_len"]


def test_sglang_rate_sweep_is_three_rates_in_one_file_uncapped() -> None:
    lines = jsonl("sglang_0_5_23_rate_sweep.jsonl")
    assert [ln["request_rate"] for ln in lines] == RATES
    assert [ln["max_concurrency"] for ln in lines] == [None] * 3
    assert {(ln["random_input_len"], ln["random_output_len"]) for ln in lines} == {(64, 32)}
    for ln in lines:
        _sglang_common(ln)
        assert "burstiness" not in ln  # bench_serving 0.5.23 has no burstiness: Poisson only


def test_sglang_rate_sweep_capped_by_max_concurrency() -> None:
    lines = jsonl("sglang_0_5_23_rate_sweep_mc2.jsonl")
    assert [ln["request_rate"] for ln in lines] == RATES
    assert [ln["max_concurrency"] for ln in lines] == [2] * 3
    for ln in lines:
        _sglang_common(ln)


def test_sglang_one_file_two_input_output_lengths_at_one_rate() -> None:
    lines = jsonl("sglang_0_5_23_rate_lens.jsonl")
    assert [(ln["random_input_len"], ln["random_output_len"]) for ln in lines] == [(64, 32), (128, 64)]
    assert [ln["request_rate"] for ln in lines] == [4.0, 4.0]
    assert [ln["max_concurrency"] for ln in lines] == [None, None]
    for ln in lines:
        _sglang_common(ln)
    # The lengths really changed what was sent, not only the recorded options.
    assert [ln["input_lens"][0] for ln in lines] == [64, 128]


def test_sglang_files_match_their_logged_commands_run_by_run() -> None:
    runs: dict[str, list[list[str]]] = {}
    for argv in logged("sglang-rate"):
        assert argv[1:3] == ["-m", "sglang.bench_serving"]
        runs.setdefault(Path(opt(argv, "--output-file") or "").name, []).append(argv)
    assert set(runs) == {"sglang_0_5_23_rate_sweep.jsonl", "sglang_0_5_23_rate_sweep_mc2.jsonl",
                         "sglang_0_5_23_rate_lens.jsonl"}
    for name, argvs in runs.items():
        lines = jsonl(name)
        assert len(lines) == len(argvs), name  # one appended line per run
        for argv, ln in zip(argvs, lines):
            assert ln["request_rate"] == float(opt(argv, "--request-rate") or "nan")
            cap = opt(argv, "--max-concurrency")
            assert ln["max_concurrency"] == (int(cap) if cap is not None else None)
            assert ln["random_input_len"] == int(opt(argv, "--random-input-len") or 0)
            assert ln["random_output_len"] == int(opt(argv, "--random-output-len") or 0)
            assert ln["completed"] == int(opt(argv, "--num-prompts") or 0)


# ------------------------------------------------------------------ vllm bench serve 0.32.0

VLLM = {
    # file: (profile, request_rate, burstiness, max_concurrency)
    "vllm_0_32_0_rate2.json": ("baseline", 2.0, 1.0, None),
    "vllm_0_32_0_rate4.json": ("baseline", 4.0, 1.0, None),
    "vllm_0_32_0_rate8.json": ("baseline", 8.0, 1.0, None),
    "vllm_0_32_0_eagle3_rate2.json": ("eagle3-topk1-v2", 2.0, 1.0, None),
    "vllm_0_32_0_eagle3_rate4.json": ("eagle3-topk1-v2", 4.0, 1.0, None),
    "vllm_0_32_0_eagle3_rate8.json": ("eagle3-topk1-v2", 8.0, 1.0, None),
    "vllm_0_32_0_rate8_mc2.json": ("baseline", 8.0, 1.0, 2),
    "vllm_0_32_0_rate4_burst0_5.json": ("baseline", 4.0, 0.5, None),
}


@pytest.mark.parametrize("name", sorted(VLLM))
def test_vllm_rate_file_records_its_load(name: str) -> None:
    profile, rate, burst, cap = VLLM[name]
    d = doc(name)
    assert d["request_rate"] == rate
    assert d["burstiness"] == burst
    assert d["max_concurrency"] == cap
    assert d["model_id"] == f"findings-emulator/{profile}"
    assert d["backend"] == "openai"
    assert (d["num_prompts"], d["completed"], d["failed"]) == (N, N, 0)
    # --save-detailed: per-request arrays, for goodput against an SLO.
    for key in ("ttfts", "itls", "input_lens", "output_lens", "start_times", "errors"):
        assert len(d[key]) == N, key
    # --ignore-eos: every output is the asked 32 tokens. The inputs are not:
    # vLLM's random prompts, decoded and re-encoded by the tiny offline
    # tokenizer, come out at 1 to 32 tokens (as in the closed-loop fixtures).
    assert d["output_lens"] == [32] * N and d["total_output_tokens"] == N * 32
    assert sum(d["input_lens"]) == d["total_input_tokens"] and max(d["input_lens"]) <= 32


def test_vllm_sweep_is_one_file_per_rate_for_each_config() -> None:
    for stem in ("vllm_0_32_0_rate", "vllm_0_32_0_eagle3_rate"):
        assert [doc(f"{stem}{r:g}.json")["request_rate"] for r in RATES] == RATES


def test_vllm_files_match_their_logged_commands() -> None:
    seen = set()
    for argv in logged("vllm-rate"):
        assert argv[2:4] == ["bench", "serve"]
        name = opt(argv, "--result-filename") or ""
        seen.add(name)
        d = doc(name)
        assert d["request_rate"] == float(opt(argv, "--request-rate") or "inf")
        assert d["burstiness"] == float(opt(argv, "--burstiness") or "1.0")
        cap = opt(argv, "--max-concurrency")
        assert d["max_concurrency"] == (int(cap) if cap is not None else None)
        assert d["model_id"] == opt(argv, "--model")
        assert d["num_prompts"] == int(opt(argv, "--num-prompts") or 0)
    assert seen == set(VLLM)


# ------------------------------------------------------------------ aiperf profile 0.13.0

AIPERF = {"aiperf_0_13_0_rate4.json": None, "aiperf_0_13_0_rate4_c2.json": 2}


@pytest.mark.parametrize("name", sorted(AIPERF))
def test_aiperf_rate_file_records_its_load(name: str) -> None:
    d = doc(name)
    (phase,) = d["input_config"]["phases"]
    assert phase["type"] == "poisson"
    assert phase["rate"] == 4.0
    assert phase["requests"] == N
    assert phase.get("concurrency") == AIPERF[name]
    assert d["request_count"]["avg"] == N
    assert d["error_summary"] == []
    assert d["input_config"]["endpoint"]["extra"] == {"ignore_eos": True}
    # AIPerf's own name for itself, not genai-perf's.
    cli = shlex.split(d["run_info"]["cli_command"])
    assert cli[:2] == ["aiperf", "profile"]
    assert opt(cli, "--request-rate") == "4"
    assert opt(cli, "--concurrency") == (str(AIPERF[name]) if AIPERF[name] else None)


def test_aiperf_files_match_their_logged_commands() -> None:
    argvs = logged("aiperf-rate")
    assert len(argvs) == len(AIPERF)
    for argv, name in zip(argvs, sorted(AIPERF)):
        assert argv[1:2] == ["profile"]
        (phase,) = doc(name)["input_config"]["phases"]
        assert phase["rate"] == float(opt(argv, "--request-rate") or "nan")
        assert phase["type"] == opt(argv, "--arrival-pattern")
        cap = opt(argv, "--concurrency")
        assert phase.get("concurrency") == (int(cap) if cap is not None else None)
        assert phase["requests"] == int(opt(argv, "--request-count") or 0)


def test_readme_names_every_rate_fixture() -> None:
    readme = (REAL / "README.md").read_text(encoding="utf-8")
    names = set(VLLM) | set(AIPERF) | {"sglang_0_5_23_rate_sweep.jsonl", "sglang_0_5_23_rate_sweep_mc2.jsonl",
                                       "sglang_0_5_23_rate_lens.jsonl"}
    on_disk = {p.name for p in REAL.iterdir() if "rate" in p.name and not p.name.startswith("COMMANDS")}
    assert on_disk == names
    for name in names:
        assert f"`{name}`" in readme, name
