"""Comparisons that are not like for like (issue 37, item 4): a candidate and
a baseline whose recorded target model or API differ are marked, with what
differs, in the verdicts (`conclusions --json`), the conclusions' text and
the document."""

from __future__ import annotations

import json
from pathlib import Path

from conftest import cli

from findings.core.model import Point
from findings.derive import caveats, likeness


def _p(config: str, source: str = "runner", **params: object) -> Point:
    return Point(id=f"{config}/0", run_id=config, campaign="c", config=config, workload="w", concurrency=1,
                 metrics={}, source=source, source_file=None, source_line=None,
                 workload_params=params)  # type: ignore[arg-type]


def test_the_target_model_is_compared_by_its_last_path_component():
    same = likeness.reasons("cand", {"model_path": "/models/Llama-3.3-70B-Instruct/"}, [],
                            "base", {"model_path": "meta-llama/Llama-3.3-70B-Instruct"}, [])
    assert same == ()
    other = likeness.reasons("cand", {"model_path": "meta-llama/Llama-3.1-70B-Instruct"}, [],
                             "base", {"served_model_name": "meta-llama/Llama-3.3-70B-Instruct"}, [])
    assert other == ("between different target models (base: Llama-3.3-70B-Instruct; "
                     "cand: Llama-3.1-70B-Instruct)",)
    # Not recorded on one side: nothing to compare, nothing said.
    assert likeness.reasons("cand", {}, [], "base", {"model_path": "x"}, []) == ()
    # The emulator names its model after the profile it plays: not a model.
    assert likeness.reasons("cand", {"model_path": "findings-emulator/eagle3"}, [],
                            "base", {"model_path": "findings-emulator/baseline"}, []) == ()
    assert likeness.reasons("cand", {"model_path": "a", "emulated": True}, [],
                            "base", {"model_path": "b", "emulated": True}, []) == ()


def test_the_api_is_compared_by_what_the_server_is_asked():
    native = _p("base", "sglang-bench", backend="sglang")
    chat = _p("cand", "vllm-bench", endpoint_type="openai-chat")
    completions = _p("cand", "runner", api="openai-completions")
    vllm_openai = _p("base", "vllm-bench", endpoint_type="openai")
    assert likeness.reasons("cand", {}, [chat], "base", {}, [native]) == (
        "between different APIs (base: native /generate; cand: chat completions)",)
    # Two tools' names for the same endpoint agree.
    assert likeness.reasons("cand", {}, [completions], "base", {}, [vllm_openai]) == ()
    # A name the map does not know is compared with the same tool's only.
    odd_a, odd_b = _p("cand", "aiperf", endpoint_type="embeddings"), _p("base", "runner", api="mystery")
    assert likeness.reasons("cand", {}, [odd_a], "base", {}, [odd_b]) == ()
    assert likeness.reasons("cand", {}, [odd_a], "base", {}, [_p("base", "aiperf", endpoint_type="rankings")])


def test_describe_reads_after_measured():
    text = caveats.describe(["ignore_eos", "between different APIs (b: x; a: y)"])
    assert text == "between different APIs (b: x; a: y) and with ignore_eos"


def _table_store(tmp_path: Path) -> Path:
    (tmp_path / "m.csv").write_text(
        "campaign,order,workload,config,concurrency,output_throughput_tok_s\n"
        "pub,1,chat,baseline,1,100\npub,1,chat,baseline,8,600\n"
        "pub,1,chat,eagle3,1,130\npub,1,chat,eagle3,8,560\n")
    (tmp_path / "c.csv").write_text(
        "config,speculative_algorithm,model_path\n"
        "baseline,none,meta-llama/Llama-3.1-8B-Instruct\n"
        "eagle3,EAGLE3,meta-llama/Llama-3.3-70B-Instruct\n")
    store = tmp_path / "st"
    r = cli("ingest", "table", str(tmp_path / "m.csv"), "--configs", str(tmp_path / "c.csv"), "--create",
            store=store)
    assert r.exit_code == 0, r.output
    return store


def test_a_published_comparison_of_two_models_is_marked_everywhere(tmp_path, project):
    store = _table_store(tmp_path)
    why = "between different target models (baseline: Llama-3.1-8B-Instruct; eagle3: Llama-3.3-70B-Instruct)"
    data = json.loads(cli("conclusions", "--json", store=store).output)
    assert data["workloads"]["chat"]["candidates"]["eagle3"]["caveats"] == {"1": [why], "8": [why]}
    text = cli("conclusions", store=store).output
    assert f"[⚑ measured {why}: not a deployment fact]" in text
    out = tmp_path / "doc.md"
    r = cli("--settings", str(project / "findings.toml"), "render", "--output", str(out), store=store)
    assert r.exit_code == 0, r.output
    doc = out.read_text()
    summary = doc.split("## Summary", 1)[1].split("\n## ")[0]
    assert "on-below ⚑" in summary
    assert "or between configs whose recorded target model or API differ" in doc
    assert caveats.UNLIKE_EXPLANATION in doc
    assert f"⚑ Measured {why}: not a deployment fact." in doc


def test_open_loop_verdicts_carry_the_marks_too():
    """A rate sweep of two configs whose recorded target models differ (the
    published campaign of issue 37): every rate verdict says so, and so do
    the policy sentence and the JSON."""
    from test_load_render import RATES, SLO, _rate_metrics

    from findings.core.model import Campaign, Dataset
    from findings.derive import openloop
    from findings.derive.analysis import Rules
    from findings.derive.jsonform import _open_loop
    from findings.document.openloop import policy_sentence

    points = []
    for i, (config, rate) in enumerate(RATES):
        p = _p(config, "vllm-bench", endpoint_type="openai", load="rate", request_rate=rate, **SLO)
        points.append(Point(id=f"{config}-{rate}/0", run_id=f"{config}-{rate}", campaign="open", config=config,
                            workload="w", concurrency=512, metrics=_rate_metrics(config, rate, 1),
                            source="vllm-bench", source_file=None, source_line=None,
                            workload_params=p.workload_params))
    facts = {"baseline": {"model_path": "org/Model-v1"}, "spec": {"model_path": "org/Model-v2",
                                                                  "speculative_algorithm": "EAGLE3"}}
    data = Dataset(campaigns=(Campaign("open", "2026-12-01", 1),), points=tuple(points), configs=facts)
    oc, = openloop.conclude(data, Rules(), {})
    cand, = oc.candidates
    why = "between different target models (baseline: Model-v1; spec: Model-v2)"
    assert all(v.caveats == (why,) for v in cand.verdicts)
    assert policy_sentence(cand).endswith(f"⚑ Measured {why}: not a deployment fact.")
    assert _open_loop(oc)["candidates"]["spec"]["caveats"] == {"1": [why], "2": [why], "4": [why], "8": [why]}
