"""The document for points measured on prompt sets (golden): no ⚑ on
verdicts from a file dataset or HumanEval, one on made-up `diverse` text,
the per-category table of a mixed set, and the sentence where a candidate's
verdict differs by category."""

from __future__ import annotations

from pathlib import Path

from conftest import ROOT, render_golden

from findings import store as store_mod
from findings.core.model import Campaign, Point, Run
from findings.store.schema import SCHEMA_VERSION, point_id

GOLDEN = ROOT / "tests" / "golden" / "datasets.md"
FACTS = {"baseline": {"speculative_algorithm": "none"},
         "eagle3": {"speculative_algorithm": "EAGLE3", "speculative_num_steps": 3}}


def _params(workload: str) -> dict:
    if workload == "made-up":
        return {"prompts": "diverse", "input_len": 128, "output_len": 64, "seed": 1, "ignore_eos": True}
    base = {"output_len": 128, "seed": 1, "ignore_eos": False, "multi_turn": False, "dataset_size": 28}
    if workload == "code":
        return {**base, "prompts": "humaneval", "dataset_file": "HumanEval.jsonl.gz", "dataset_sha256": "ab" * 32,
                "dataset_size": 164}
    if workload == "mix":
        return {**base, "prompts": "chat-jsonl", "dataset_file": "chat-mix.jsonl", "dataset_sha256": "cd" * 32}
    cat = workload.split("-", 1)[1]
    return {**base, "prompts": "chat-jsonl", "dataset_file": "chat-mix.jsonl", "dataset_sha256": "cd" * 32,
            "dataset_category": cat}


#: (workload, config, C, tok/s): speculation wins at C=1 everywhere, and at
#: C=16 wins on coding but loses on chat (split by category).
ROWS = [
    ("made-up", "baseline", 1, 80.0), ("made-up", "eagle3", 1, 120.0),
    ("made-up", "baseline", 16, 600.0), ("made-up", "eagle3", 16, 500.0),
    ("code", "baseline", 1, 80.0), ("code", "eagle3", 1, 150.0),
    ("mix", "baseline", 1, 80.0), ("mix", "eagle3", 1, 110.0),
    ("split-coding", "baseline", 1, 80.0), ("split-coding", "eagle3", 1, 140.0),
    ("split-coding", "baseline", 16, 600.0), ("split-coding", "eagle3", 16, 700.0),
    ("split-chat", "baseline", 1, 80.0), ("split-chat", "eagle3", 1, 100.0),
    ("split-chat", "baseline", 16, 600.0), ("split-chat", "eagle3", 16, 520.0),
]


def _metrics(workload: str, config: str, tput: float) -> dict[str, float]:
    m = {"output_throughput_tok_s": tput, "completed": 16.0, "failed": 0.0, "planned": 16.0}
    if config == "eagle3":
        m["accept_length"] = 2.5
    if workload == "mix":
        spec = config == "eagle3"
        for cat, n, accept, tpot in (("chat", 6, 1.6, 14.0), ("coding", 6, 3.1, 9.5), ("math", 4, 2.2, 12.0)):
            m.update({f"cat.{cat}.requests": float(n), f"cat.{cat}.completed": float(n),
                      f"cat.{cat}.output_tokens": float(n * 128), f"cat.{cat}.median_tpot_ms": tpot * (1 if spec else 1.3),
                      f"cat.{cat}.decode_tok_s": 1000 / (tpot * (1 if spec else 1.3))})
            if spec:
                m[f"cat.{cat}.accept_length"] = accept
    return m


def build_store(path: Path) -> None:
    for i, (w, config, c, tput) in enumerate(ROWS):
        rid = f"run-{i:02d}"
        point = Point(id=point_id(rid, 0), run_id=rid, campaign="prompts", config=config, workload=w,
                      concurrency=c, metrics=_metrics(w, config, tput), source="runner", source_file=None,
                      source_line=None, workload_params=_params(w))
        run = Run(schema_version=SCHEMA_VERSION, run_id=rid, source="runner", importer="findings-bench",
                  importer_version="1", tool_version="test", created_at="2026-12-01T00:00:00Z", source_file=None,
                  source_sha256=f"{i:064x}", environment={}, campaigns=(Campaign("prompts", "2026-12-01", 1),),
                  configs={config: FACTS[config]}, points=(point,))
        store_mod.add_run(path, run, create=True)


def test_golden_document_for_prompt_sets(project, tmp_path):
    build_store(project / "benchmarks" / "results")
    text = render_golden(project, tmp_path / "doc.md", GOLDEN, "tests/test_datasets_render.py")
    policies = {line.split("`")[1]: line for line in text.splitlines() if line.startswith("  - `eagle3`")}
    assert policies  # one policy line per workload
    conclusion = text.split("## Current deployment conclusion", 1)[1].split("\n## ", 1)[0]
    sections = {s.split("`")[1]: s for s in conclusion.split("### Workload ")[1:]}
    assert "⚑" in sections["made-up"] and "made-up text (diverse)" in sections["made-up"]
    for w in ("code", "mix", "split-coding", "split-chat"):
        assert "⚑" not in sections[w], w
    assert "- `eagle3` at C=16 on chat-mix.jsonl (chat-jsonl): wins on coding (+16.7%), loses on chat (-13.3%)" in text
    assert "| eagle3   |   1 | coding     |          6 |" in text
