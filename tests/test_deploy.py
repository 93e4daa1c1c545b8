"""`findings deploy`: the engine settings of every derived policy (issue 13).

Golden files hold the emitted JSON and flags for every policy and every
refusal case (tests/golden/deploy-cases.json); `make test-deploy`
(tests/deploy/) checks the same outputs with SGLang's and vLLM's own code.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
from conftest import ROOT, cli

from findings.decide import deploy
from findings.derive.analysis import Rules
from findings.derive.regressions import conclude
from findings.core.model import THROUGHPUT, Campaign, Dataset, Point

GOLDEN = Path(__file__).parent / "golden" / "deploy-cases.json"
CS = (1, 10, 100)
#: Candidate throughputs against a baseline of 100 at C=1, 10, 100 -> the policy.
SHAPES = {
    "on-above": (80, 120, 130),
    "on-below": (120, 130, 80),
    "always-on": (120, 120, 120),
    "off": (80, 80, 80),
    "no-difference": (101, 99, 100),
    "inconclusive": (120, 80, 120),
}
EAGLE_TOPK1 = {"speculative_algorithm": "EAGLE3", "speculative_eagle_topk": 1, "speculative_num_steps": 3,
               "speculative_num_draft_tokens": 4, "speculative_draft_model_path": "org/draft-eagle3",
               "sglang_version": "0.5.23"}
#: case name -> (policy shape, facts)
CASES: dict[str, tuple[str, dict[str, Any]]] = {
    **{f"policy-{shape}": (shape, EAGLE_TOPK1) for shape in SHAPES},
    "derived-steps": ("on-above", {"speculative_algorithm": "EAGLE3", "eagle_topk": 1, "draft_tokens": 3}),
    "unknown-steps": ("on-above", {"speculative_algorithm": "EAGLE3"}),
    "topk4-threshold": ("on-above", {**EAGLE_TOPK1, "speculative_eagle_topk": 4, "speculative_num_draft_tokens": 16}),
    "attention-dp": ("on-above", {**EAGLE_TOPK1, "enable_dp_attention": True, "dp_size": 2}),
    "multi-layer-eagle": ("on-below", {**EAGLE_TOPK1, "enable_multi_layer_eagle": True}),
    "two-batch-overlap": ("on-above", {**EAGLE_TOPK1, "enable_two_batch_overlap": True}),
    "pdmux": ("on-above", {**EAGLE_TOPK1, "enable_pdmux": True}),
    "sglang-0.5.12": ("on-above", {**EAGLE_TOPK1, "sglang_version": "0.5.12"}),
    "ngram": ("on-below", {"speculative_algorithm": "NGRAM", "num_speculative_tokens": 4, "engine": "vllm"}),
    "vllm-dp2": ("on-above", {"speculative_algorithm": "EAGLE3", "speculative_eagle_topk": 1,
                              "num_speculative_tokens": 2, "data_parallel_size": 2, "engine": "vllm"}),
    "llamacpp-draft": ("on-below", {"speculative_algorithm": "draft-model", "engine": "llama.cpp"}),
    # vLLM's own method names, as serverinfo.vllm_facts records them (issue 27)
    "vllm-mtp": ("on-below", {"speculative_algorithm": "mtp", "num_speculative_tokens": 1, "engine": "vllm",
                              "speculative_config": '{"method":"mtp","num_speculative_tokens":1}'}),
    "vllm-deepseek-mtp": ("on-above", {"speculative_algorithm": "deepseek_mtp", "num_speculative_tokens": 2,
                                       "engine": "vllm"}),
    "vllm-draft-model": ("on-above", {"speculative_algorithm": "draft_model", "num_speculative_tokens": 3,
                                      "speculative_draft_model_path": "org/draft-small", "engine": "vllm",
                                      "speculative_config": '{"method":"draft_model","model":"org/draft-small",'
                                                            '"num_speculative_tokens":3}'}),
    "vllm-suffix": ("on-below", {"speculative_algorithm": "suffix", "num_speculative_tokens": 4, "engine": "vllm"}),
    "sglang-standalone": ("on-above", {"speculative_algorithm": "STANDALONE", "speculative_num_steps": 3,
                                       "speculative_eagle_topk": 1, "speculative_draft_model_path": "org/draft-small",
                                       "sglang_version": "0.5.23"}),
    "sglang-nextn": ("on-below", {"speculative_algorithm": "NEXTN", "speculative_num_steps": 2,
                                  "speculative_eagle_topk": 1, "sglang_version": "0.5.23"}),
    "unknown-method": ("on-above", {"speculative_algorithm": "lookahead9", "num_speculative_tokens": 2}),
    "static-overlap-off": ("always-on", {**EAGLE_TOPK1, "disable_overlap_schedule": True,
                                         "max_running_requests": 512}),
    # SGLang 0.5.23 on the CPU (its own /server_info says device "cpu"): no step 0, graphs off, 48 running.
    "cpu-on-below": ("on-below", {**EAGLE_TOPK1, "device": "cpu", "max_running_requests": 48}),
    "cpu-on-above": ("on-above", {**EAGLE_TOPK1, "device": "cpu"}),
    "cpu-one-step": ("on-below", {**EAGLE_TOPK1, "device": "cpu", "speculative_num_steps": 1,
                                  "speculative_num_draft_tokens": 2}),
    "cpu-always-on": ("always-on", {**EAGLE_TOPK1, "device": "cpu"}),
}


def cases_dataset() -> Dataset:
    points = []
    for name, (shape, _) in CASES.items():
        for i, c in enumerate(CS):
            for config, value in (("baseline", 100.0), (name, float(SHAPES[shape][i]))):
                points.append(Point(id=f"t/{len(points)}", run_id="t", campaign="c", config=config, workload=name,
                                    concurrency=c, metrics={THROUGHPUT: value}, source="import", source_file=None,
                                    source_line=None))
    configs = {name: facts for name, (_, facts) in CASES.items()}
    configs["baseline"] = {"speculative_algorithm": "none"}
    return Dataset(campaigns=(Campaign("c", order=1),), points=tuple(points), configs=configs)


def plans() -> list[deploy.Deployment]:
    data = cases_dataset()
    return deploy.plan(data, conclude(data, Rules()))


def test_every_policy_and_refusal_case_matches_the_golden_json() -> None:
    got = deploy.to_json(plans())
    text = json.dumps(got, indent=2, ensure_ascii=False) + "\n"
    if os.environ.get("FINDINGS_UPDATE_GOLDEN"):
        GOLDEN.write_text(text)
    assert text == GOLDEN.read_text(), "golden differs: FINDINGS_UPDATE_GOLDEN=1 pytest tests/test_deploy.py"
    w = got["workloads"]
    for shape in SHAPES:  # the cases produce the policies they are named for
        assert w[f"policy-{shape}"][f"policy-{shape}"]["policy"] == shape


def outcome(case: str, engine: str) -> dict[str, Any]:
    return deploy.to_json(plans())["workloads"][case][case][engine]


def test_threshold_policies_become_hard_schedules() -> None:
    up = outcome("policy-on-above", "sglang")
    assert up["status"] == "deploy" and up["adaptive_config"] == {"1": {"candidate_steps": [0]},
                                                                  "10": {"candidate_steps": [3]}}
    assert "--speculative-adaptive" in up["flags"] and "--speculative-num-steps 3" in up["flags"]
    assert "--speculative-eagle-topk 1" in up["flags"] and "--max-running-requests 100" in up["flags"]
    assert up["flags"][up["flags"].index("--speculative-adaptive") + 1].startswith("--speculative-adaptive-config ")
    down = outcome("policy-on-below", "sglang")
    assert down["adaptive_config"] == {"1": {"candidate_steps": [3]}, "11": {"candidate_steps": [0]}}
    v = outcome("policy-on-above", "vllm")
    assert v["status"] == "deploy"
    assert v["speculative_config"] == {"method": "eagle3", "model": "org/draft-eagle3", "num_speculative_tokens": 3,
                                       "num_speculative_tokens_per_batch_size": [[1, 9, 0], [10, 10, 3]]}
    assert outcome("policy-on-below", "vllm")["speculative_config"]["num_speculative_tokens_per_batch_size"] == [
        [1, 10, 3], [11, 11, 0]]
    # What the schedules mean, batch by batch (make test-deploy asks the engines the same question).
    assert [deploy.steps_for("on-above", 10, 3, b) for b in (1, 9, 10, 11, 100)] == [0, 0, 3, 3, 3]
    assert [deploy.steps_for("on-below", 10, 3, b) for b in (1, 10, 11, 100)] == [3, 3, 0, 0]


def test_static_and_unchanged_outcomes() -> None:
    on = outcome("policy-always-on", "sglang")
    assert on["status"] == "always-on" and "--speculative-adaptive" not in on["flags"]
    assert "--speculative-num-steps 3" in on["flags"] and on["adaptive_config"] is None
    assert "--disable-overlap-schedule" in outcome("static-overlap-off", "sglang")["flags"]
    assert "--max-running-requests 512" in outcome("static-overlap-off", "sglang")["flags"]  # the recorded, larger
    assert outcome("policy-off", "sglang")["status"] == outcome("policy-off", "vllm")["status"] == "off"
    assert outcome("policy-off", "sglang")["flags"] == []
    for case in ("policy-no-difference", "policy-inconclusive"):
        assert outcome(case, "sglang")["status"] == outcome(case, "vllm")["status"] == "unchanged"


@pytest.mark.parametrize(("case", "engine", "why"), [
    ("topk4-threshold", "sglang", "adaptive speculation needs topk 1, and this config drafts a tree with topk 4"),
    ("topk4-threshold", "vllm", "drafts a tree (topk 4)"),
    ("attention-dp", "sglang", "attention DP is not supported"),
    ("multi-layer-eagle", "sglang", "multi-layer EAGLE"),
    ("two-batch-overlap", "sglang", "two-batch overlap"),
    ("pdmux", "sglang", "pdmux"),
    ("sglang-0.5.12", "sglang", "SGLang 0.5.12 accepts no step 0"),
    ("ngram", "sglang", "EAGLE and EAGLE3 only"),
    ("vllm-dp2", "vllm", "data parallel 2 > 1"),
    ("cpu-one-step", "sglang", "on the CPU a slot cannot hold step 0"),
])
def test_refusals_name_their_reason_in_one_line(case: str, engine: str, why: str) -> None:
    got = outcome(case, engine)
    assert got["status"] == "refused" and why in got["reason"] and "\n" not in got["reason"]
    assert got["flags"] == []


def test_facts_are_derived_only_where_certain() -> None:
    d = outcome("derived-steps", "sglang")
    assert d["status"] == "deploy" and "--speculative-num-steps 2" in d["flags"]
    assert any("derived from the recorded 3 draft tokens" in n for n in d["notes"])
    for engine in ("sglang", "vllm"):
        u = outcome("unknown-steps", engine)
        assert u["status"] == "needs-input" and "--steps k" in u["reason"]
    data = cases_dataset()
    given = deploy.plan(data, conclude(data, Rules()), workload="unknown-steps", steps=5)
    assert given[0].engine("sglang").config == {"1": {"candidate_steps": [0]}, "10": {"candidate_steps": [5]}}


def test_sglang_on_the_cpu_gets_the_nearest_safe_schedule() -> None:
    """What SGLang 0.5.23 showed on the CPU: a 0 in candidate_steps crashes it,
    --speculative-adaptive needs --disable-cuda-graph, speculation runs at most
    48 requests. The slot where the policy says "do not draft" runs 1 step, and
    the outcome says so; the GPU outcome of the same policy is unchanged."""
    down = outcome("cpu-on-below", "sglang")
    assert down["status"] == "deploy"
    assert down["adaptive_config"] == {"1": {"candidate_steps": [3]}, "11": {"candidate_steps": [1]}}
    assert "--disable-cuda-graph" in down["flags"] and "--max-running-requests 48" in down["flags"]
    assert "1 step from 11 on" in down["reason"]
    assert any("nearest safe schedule" in n and "Int vs Long" in n for n in down["notes"])
    assert not any("CUDA graphs" in n for n in down["notes"])
    up = outcome("cpu-on-above", "sglang")
    assert up["adaptive_config"] == {"1": {"candidate_steps": [1]}, "10": {"candidate_steps": [3]}}
    # C=100 was measured; on the CPU speculation runs 48: said, and the flag is 48, not 100.
    assert "--max-running-requests 48" in up["flags"]
    assert any("forces max_running_requests to 48" in n and "the 100 measured" in n for n in up["notes"])
    static = outcome("cpu-always-on", "sglang")
    assert static["status"] == "always-on" and "--max-running-requests 48" in static["flags"]
    assert "--disable-cuda-graph" not in static["flags"]  # static EAGLE3 starts with graphs on the CPU
    # The same facts on a GPU keep step 0; --device overrides what is recorded.
    gpu = outcome("policy-on-below", "sglang")
    assert gpu["adaptive_config"]["11"] == {"candidate_steps": [0]} and "--disable-cuda-graph" not in gpu["flags"]
    data = cases_dataset()
    forced = deploy.plan(data, conclude(data, Rules()), workload="policy-on-below", device="cpu")
    assert forced[0].engine("sglang").config == {"1": {"candidate_steps": [3]}, "11": {"candidate_steps": [1]}}
    back = deploy.plan(data, conclude(data, Rules()), workload="cpu-on-below", device="cuda")
    assert back[0].engine("sglang").config["11"] == {"candidate_steps": [0]}


def test_ngram_on_vllm_and_the_source_engine() -> None:
    v = outcome("ngram", "vllm")
    assert v["status"] == "deploy" and v["speculative_config"]["method"] == "ngram"
    assert "model" not in v["speculative_config"]
    assert not any("measured on" in n for n in v["notes"])  # measured on vLLM itself
    s = outcome("policy-on-above", "vllm")
    assert any("measured on SGLang, not vLLM" in n for n in s["notes"])


# ------------------------------------------------------------------ the seed store, through the CLI

def test_seed_store_deploys_the_on_above_policy(seed_store: Path, tmp_path: Path) -> None:
    out = tmp_path / "deploy"
    r = cli("deploy", "--json", "--out", str(out), store=seed_store)
    assert r.exit_code == 0, r.output
    got = json.loads(r.output)["workloads"]["diverse-prompts"]
    v2 = got["eagle3-topk1-v2"]
    assert (v2["policy"], v2["threshold"]) == ("on-above", 30)
    sg = v2["sglang"]
    assert sg["status"] == "deploy"
    assert sg["adaptive_config"]["1"] == {"candidate_steps": [0]}
    (k,) = sg["adaptive_config"]["30"]["candidate_steps"]
    assert k > 0 and f"--speculative-num-steps {k}" in sg["flags"]
    running = int(next(f for f in sg["flags"] if f.startswith("--max-running-requests")).split()[1])
    assert running >= 250
    written = Path(sg["adaptive_config_file"])
    assert written.parent == out and json.loads(written.read_text()) == sg["adaptive_config"]
    assert v2["vllm"]["status"] == "deploy"
    assert v2["vllm"]["speculative_config"]["num_speculative_tokens_per_batch_size"] == [[1, 29, 0], [30, 30, k]]
    assert any("The switch is at C=30" in n and "near C≈3.7 (between 1.6 and 8.5" in n and "on the safe side" in n
               for n in v2["notes"])
    assert v2["crossover"] == {"estimate": 3.7, "low": 1.6, "high": 8.5, "method": "log-linear"}
    t4 = got["eagle3-topk4-v1"]
    assert t4["sglang"]["status"] == t4["vllm"]["status"] == "off"


def test_deploy_options_and_errors(seed_store: Path, tmp_path: Path) -> None:
    r = cli("deploy", "--engine", "vllm", "--workload", "diverse-prompts", "--config", "eagle3-topk1-v2",
            "--draft-model", "org/draft", "--out", str(tmp_path / "d"), store=seed_store)
    assert r.exit_code == 0, r.output
    assert "sglang:" not in r.output and '"model":"org/draft"' in r.output
    assert not (tmp_path / "d").exists()  # no SGLang file asked for
    r = cli("deploy", "--workload", "nope", store=seed_store)
    assert r.exit_code == 1 and r.output.count("\n") == 1 and "no such workload" in r.output
    r = cli("deploy", "--config", "baseline", store=seed_store)
    assert r.exit_code == 1 and "not a candidate" in r.output


def test_the_document_has_a_deploy_block_and_no_wrong_flag() -> None:
    text = (ROOT / "eagle-fast-verify.md").read_text()
    assert "--speculative-disable-by-batch-size" not in text
    assert "**Deploy `eagle3-topk1-v2`** (on-above, threshold C=30" in text
    assert '{"1": {"candidate_steps": [0]}, "30": {"candidate_steps": [2]}}' in text
    assert '"num_speculative_tokens_per_batch_size":[[1,29,0],[30,30,2]]' in text
    assert "include 29 in it" in text  # the CUDA-graph rounding trap, named


def test_a_simulated_policy_says_so() -> None:
    data = cases_dataset()
    sim = Dataset(campaigns=data.campaigns, configs=data.configs,
                  points=tuple(p._replace(source="simulated") for p in data.points))
    (d,) = deploy.plan(sim, conclude(sim, Rules()), workload="policy-on-above (simulated)")
    assert d.notes[0].startswith("SIMULATED: derived from the findings emulator's model")
    assert d.engine("sglang").file == "policy-on-above.policy-on-above_simulated.sglang-adaptive.json"


def test_every_engines_method_names_map_both_ways() -> None:
    """vLLM's `mtp` and `draft_model` (refused once: "no vLLM method for
    speculative_algorithm=DRAFT_MODEL") deploy on both engines under each
    engine's own name; a name with no counterpart is refused as such."""
    mtp = outcome("vllm-mtp", "vllm")
    assert mtp["status"] == "deploy" and mtp["speculative_config"]["method"] == "mtp"
    assert "model" not in mtp["speculative_config"]  # MTP drafts from the target's own layers
    assert not any("draft model" in n for n in mtp["notes"])
    s = outcome("vllm-mtp", "sglang")
    assert s["status"] == "deploy" and "--speculative-algorithm NEXTN" in s["flags"]
    assert any("SGLang's name for it is NEXTN" in n for n in s["notes"])
    ds = outcome("vllm-deepseek-mtp", "vllm")
    assert ds["status"] == "deploy" and ds["speculative_config"]["method"] == "mtp"
    dm = outcome("vllm-draft-model", "vllm")
    assert dm["status"] == "deploy" and dm["speculative_config"]["method"] == "draft_model"
    assert dm["speculative_config"]["model"] == "org/draft-small"
    assert dm["speculative_config"]["num_speculative_tokens_per_batch_size"] == [[1, 9, 0], [10, 10, 3]]
    sd = outcome("vllm-draft-model", "sglang")  # STANDALONE: SGLang runs no adaptive schedule for it
    assert sd["status"] == "refused" and "SGLang's STANDALONE" in sd["reason"]
    st = outcome("sglang-standalone", "vllm")
    assert st["status"] == "deploy" and st["speculative_config"]["method"] == "draft_model"
    nx = outcome("sglang-nextn", "sglang")
    assert nx["status"] == "deploy" and "--speculative-algorithm NEXTN" in nx["flags"]
    assert outcome("sglang-nextn", "vllm")["speculative_config"]["method"] == "mtp"
    assert outcome("vllm-suffix", "sglang")["reason"] == "SGLang has no counterpart of vLLM's method suffix"
    assert "does not drive method suffix" in outcome("vllm-suffix", "vllm")["reason"]
    assert "a name neither SGLang nor vLLM knows" in outcome("unknown-method", "vllm")["reason"]
    assert deploy.vllm_method("EAGLE3") == "eagle3" and deploy.sglang_algorithm("eagle3") == "EAGLE3"
    assert deploy.vllm_method("qwen3_next_mtp") == "mtp" and deploy.sglang_algorithm("deepseek_mtp") == "NEXTN"
    assert deploy.vllm_method("UNO") is None and deploy.sglang_algorithm("medusa") is None


def _gauged(p50: float | None, p90: float | None, mean: float | None = None) -> list[deploy.Deployment]:
    """An on-below candidate (wins at C=1 and 10, loses at 100) whose gauge at
    its threshold C=10 read ``mean``/``p50``/``p90`` (None: not recorded)."""
    gauge = {k: v for k, v in (("server_running_mean", mean if mean is not None else p50),
                               ("server_running_p50", p50), ("server_running_p90", p90)) if v is not None}
    points = []
    for i, c in enumerate(CS):
        for config, value in (("baseline", 100.0), ("cand", float(SHAPES["on-below"][i]))):
            m = {THROUGHPUT: value, **(gauge if (config, c) == ("cand", 10) else {})}
            points.append(Point(id=f"t/{len(points)}", run_id="t", campaign="c", config=config, workload="w",
                                concurrency=c, metrics=m, source="import", source_file=None, source_line=None))
    data = Dataset(campaigns=(Campaign("c", order=1),), points=tuple(points),
                   configs={"baseline": {"speculative_algorithm": "none"}, "cand": EAGLE_TOPK1})
    return deploy.plan(data, conclude(data, Rules()))


def test_a_closed_loop_switch_is_the_batch_the_server_reached_at_the_threshold() -> None:
    """Issue 37, item 6 (D107): the note and the switch agree. At a client's
    C=10 the server reached a running batch of 7 (p90): the schedule
    switches at 7, and the note says why, not 'averaged 5.0' beside 10."""
    (d,) = _gauged(p50=6, p90=7, mean=5.0)
    assert (d.policy, d.threshold, d.threshold_concurrency) == ("on-below", 7, 10)
    note = next(n for n in d.notes if n.startswith("The threshold is a client concurrency"))
    assert "averaged 5.0 (p50 6, p90 7)" in note and "the switch is at a running batch of 7" in note
    assert "not at the client's 10" in note
    sglang = d.engine("sglang")
    assert sglang is not None and dict(sglang.config or {}) == {"1": {"candidate_steps": [3]},
                                                               "8": {"candidate_steps": [0]}}
    j = deploy.to_json([d])["workloads"]["w"]["cand"]
    assert (j["threshold"], j["threshold_concurrency"], j["load_axis"]) == (7, 10, "concurrency")
    # The server ran everything the client held: the switch is C, and the note says it is the p90.
    (d,) = _gauged(p50=10, p90=10, mean=8.4)
    assert d.threshold == 10 and any("so the switch is at a running batch of 10, the batch it reached there (p90)"
                                     in n for n in d.notes)
    # No p90, or no gauge: the switch stays at C and the note says why.
    (d,) = _gauged(p50=None, p90=None, mean=4.0)
    assert d.threshold == 10 and any("with no p90 recorded, the switch is at a running batch of 10" in n
                                     for n in d.notes)
    (d,) = _gauged(p50=None, p90=None, mean=None)
    assert d.threshold == 10 and any("gauge was not recorded at C=10" in n for n in d.notes)
