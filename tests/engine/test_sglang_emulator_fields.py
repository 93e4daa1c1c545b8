"""The findings emulator against real SGLang 0.5.23, field by field (issue 24).
`make test-engine` only (FINDINGS_ENGINE=1).

The same requests (tests/engine/sglang_fields.py) go to a real SGLang EAGLE3
server on the CPU and to the emulator with its EAGLE3 profile: the native
`/generate` stream, the OpenAI completions and chat streams (with
`stream_options.include_usage`), `/server_info`, `/model_info`,
`/v1/models`, and `/metrics`. For each surface the field paths (with their
JSON types) are compared. Every difference must be one docs/emulator.md names
("Against real SGLang"): the lists below are that section's, and a new field on
either side, or a type that disagrees, fails the test. The comparison is
written to build/engine/sglang-emulator-fields.md.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from sglang_fields import capture
from test_sglang_conformance import Server, _sglang_python

pytestmark = pytest.mark.skipif(os.environ.get("FINDINGS_ENGINE") != "1",
                                reason="the real SGLang engine tier: run `make test-engine`")

ROOT = Path(__file__).resolve().parents[2]
REPORT = ROOT / "build" / "engine" / "sglang-emulator-fields.md"

#: Fields real SGLang sends that the emulator does not: (surface prefix, path prefix).
#: Each is named in docs/emulator.md, "Against real SGLang".
#: A path ending in "_" or "*" matches by prefix.
_META = ("api_server_dispatch_finish_ts", "cached_tokens_details", "decode_throughput", "dp_rank",
         "first_token_latency", "forward_entry_time", "num_retractions", "prefill_finished_time", "queue_time",
         "reasoning_tokens", "request_finished_ts", "request_received_ts", "response_sent_to_client_ts",
         "spec_correct_drafts_histogram", "storage_prefetch_wait", "storage_staging_wait", "weight_version",
         "weight_versions")
NOT_EMULATED: tuple[tuple[str, str], ...] = (
    ("GET /server_info (top level)", "*"),  # ~550 resolved arguments; the emulator sends a listed subset
    ("GET /metrics (families)", "*"),  # the emulator exports the families docs/emulator.md lists
    *(("GET /model_info", k) for k in ("disaggregation_mode", "embedding", "has_audio_understanding",
                                       "has_image_understanding", "load_format", "model_type",
                                       "preferred_sampling_params", "reasoning_parser", "tool_call_parser")),
    ("GET /v1/models", "data[].parent"),
    *(("POST /generate stream", f"meta_info.{k}") for k in _META),
    ("POST /v1/chat/completions stream", "choices[].delta.reasoning_content"),
    ("POST /v1/chat/completions stream: first event", "choices[].matched_stop"),
    ("POST /v1/chat/completions stream: usage chunk", "usage.completion_tokens_details"),
    ("POST /v1/chat/completions stream: usage chunk", "usage.prompt_tokens_details"),
    ("POST /v1/", "usage.reasoning_tokens"),
    ("POST /v1/completions stream", "usage"),  # `usage: null` on every content chunk
)
#: Fields the emulator sends that real SGLang does not (its labels, and two it needs or kept).
EMULATOR_ONLY: tuple[tuple[str, str], ...] = (
    ("GET /model_info", "emulated"), ("GET /model_info", "vocab_size"),
    ("GET /server_info (top level)", "emulated"), ("GET /server_info (top level)", "emulator_"),
    ("GET /server_info (top level)", "cuda_graph_max_bs"),
)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _named(surface: str, path: str, names: tuple[tuple[str, str], ...]) -> bool:
    def match(p: str) -> bool:
        if p.endswith(("_", "*")):
            return path.startswith(p.rstrip("*"))
        return path == p or path.startswith(p + ".") or path.startswith(p + "[")

    return any(surface.startswith(s) and match(p) for s, p in names)


@pytest.fixture(scope="module")
def both(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict, dict]:
    _sglang_python()
    tmp = tmp_path_factory.mktemp("fields")
    real = Server("eagle3", tmp)
    try:
        real_fields = capture(real.url)
    finally:
        real.kill()
    port = _free_port()
    emu = subprocess.Popen([sys.executable, "-m", "findings.emulator", "--port", str(port), "--profile",
                            "eagle3-topk1-v2", "--speed", "50"], cwd=ROOT, stdout=subprocess.DEVNULL,
                           stderr=subprocess.DEVNULL)
    try:
        url = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                if httpx.get(url + "/health", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                time.sleep(0.2)
        emu_fields = capture(url)
    finally:
        emu.terminate()
        emu.wait(timeout=10)
    _report(real_fields, emu_fields)
    return real_fields, emu_fields


def _report(real: dict, emu: dict) -> None:
    lines = ["# The emulator against real SGLang 0.5.23, field by field (make test-engine)", "",
             "| surface | field | real SGLang | emulator | named in docs/emulator.md |", "|---|---|---|---|---|"]
    for surface in sorted(set(real) | set(emu)):
        r, e = real.get(surface, {}), emu.get(surface, {})
        for path in sorted(set(r) | set(e)):
            if r.get(path) == e.get(path):
                continue
            named = _named(surface, path, NOT_EMULATED if path in r else EMULATOR_ONLY)
            lines.append(f"| {surface} | `{path}` | {r.get(path, '—')} | {e.get(path, '—')} | "
                         f"{'yes' if named else '**no**'} |")
    REPORT.parent.mkdir(parents=True, exist_ok=True)
    REPORT.write_text("\n".join(lines) + "\n", encoding="utf-8")


def test_every_surface_was_captured_on_both(both: tuple[dict, dict]) -> None:
    real, emu = both
    assert set(real) == set(emu)
    for surface, fields in real.items():
        if surface.endswith("[DONE]") or surface.endswith("usage chunk"):
            continue
        assert fields, surface


def test_what_the_runner_reads_agrees_in_name_and_type(both: tuple[dict, dict]) -> None:
    """The fields findings' client reads: the same name and JSON type on both."""
    real, emu = both
    needed = {
        "POST /generate stream: last event": ["text", "output_ids", "meta_info.completion_tokens",
                                              "meta_info.prompt_tokens", "meta_info.finish_reason",
                                              "meta_info.spec_verify_ct", "meta_info.spec_accept_length"],
        "POST /v1/completions stream: every event": ["choices[].text", "choices[].finish_reason"],
        "POST /v1/chat/completions stream: every event": ["choices[].delta.content"],
        "POST /v1/completions stream: usage chunk": ["usage.completion_tokens", "usage.prompt_tokens"],
        "GET /server_info (top level)": ["version", "speculative_algorithm", "max_running_requests",
                                         "speculative_num_steps", "speculative_eagle_topk"],
        "GET /metrics (families)": ["sglang:generation_tokens_total", "sglang:prompt_tokens_total",
                                    "sglang:spec_verify_calls_total", "sglang:num_running_reqs"],
        "GET /model_info": ["model_path"],
    }
    for surface, paths in needed.items():
        for p in paths:
            assert p in real[surface], (surface, p, "not sent by real SGLang")
            assert emu[surface].get(p) == real[surface][p], (surface, p, real[surface][p], emu[surface].get(p))


def test_every_other_difference_is_named_in_the_docs(both: tuple[dict, dict]) -> None:
    real, emu = both
    unnamed = []
    for surface in real:
        r, e = real[surface], emu[surface]
        for path in set(r) - set(e):
            if not _named(surface, path, NOT_EMULATED):
                unnamed.append(("only real", surface, path, r[path]))
        for path in set(e) - set(r):
            if not _named(surface, path, EMULATOR_ONLY):
                unnamed.append(("only emulator", surface, path, e[path]))
        for path in set(r) & set(e):
            if r[path] != e[path] and not _named(surface, path, NOT_EMULATED):
                unnamed.append(("type", surface, path, f"{r[path]} vs {e[path]}"))
    assert not unnamed, "\n".join(map(str, sorted(unnamed)))
    docs = (ROOT / "docs" / "emulator.md").read_text(encoding="utf-8")
    assert "## Against real SGLang" in docs
