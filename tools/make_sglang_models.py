"""Make the tiny models that SGLang serves on the CPU (issue 24). Nothing is downloaded.

Run with the SGLang venv's Python (torch, safetensors, tokenizers)::

    "$(bash tools/get_sglang_cpu.sh)" tools/make_sglang_models.py KIND [--hidden H] [--layers L] [...]

Prints the model directory (cached under FINDINGS_MODEL_CACHE, default
~/.cache/findings/models; a directory that already holds these arguments is
reused). KIND:

- ``random``: a random-weight Llama (the engine's plumbing; greedy output loops,
  so n-gram speculation finds real matches);
- ``perm``: a "permutation" Llama whose greedy next token is a fixed function
  f(current token), with a wide margin: every layer's o_proj and down_proj are
  zero, so the residual stream stays the token's embedding E[x], and lm_head row
  j is the sum of E[x] over the x with f(x) = j. f permutes the ordinary tokens
  and sends the special ones to ordinary ones, so the model never ends a reply
  by itself. Attention and MLP still run at full size: the compute is real, the
  answer is certain;
- ``eagle3``: an EAGLE3 draft head (``LlamaForCausalLMEagle3``) for a ``perm``
  target of the same hidden size and seed, whose guess is right on a fraction
  ``--agree`` of the tokens (1.0: every draft is right, and verification
  accepts every one; below 1, acceptance is real and partial, and greedy
  verification keeps the output exactly the target's). How: the target's
  residual stream at every layer is the token's embedding E[x], and ``fc`` (the
  identity) passes the captured one on; the one layer's MLP has one unit per
  token, which fires on E[x] and writes about 100 times E[f'(x)] into the
  residual, where f' = f on the agreeing tokens and another token elsewhere;
  lm_head is the target's, so the guess is f(f'(x)), two tokens ahead of x,
  as EAGLE pairs the hidden state at j with the token at j + 1. Attention
  writes nothing (o_proj is zero). ``norm_output`` with a final norm weight of
  0.01 carries the normed state, a hundredth of the next step's lookup, to the
  next draft step, which so guesses one token further each step. (A first
  version that read the token through attention was right on only about half
  of the first drafts after a verify: docs/sglang-cpu.md.)

The tokenizer is benchmarks/peer/make_tokenizer.py's offline byte-level BPE
(1,024 entries by default: the EAGLE3 head has one MLP unit per token), with a small chat template added for the OpenAI chat
API. bf16 (SGLang's CPU attention kernels need it).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import shutil
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
CACHE = Path(os.environ.get("FINDINGS_MODEL_CACHE", Path.home() / ".cache" / "findings" / "models"))
VERSION = 1  # bump when what a model directory holds changes
CHAT_TEMPLATE = ("{% for m in messages %}<|{{ m['role'] }}|>{{ m['content'] }}\n{% endfor %}"
                 "{% if add_generation_prompt %}<|assistant|>{% endif %}")


def _tokenizer(stage: Path, vocab: int) -> Any:
    spec = importlib.util.spec_from_file_location("make_tokenizer", ROOT / "benchmarks" / "peer" / "make_tokenizer.py")
    assert spec and spec.loader
    mk = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mk)
    mk.build(stage, vocab, 0)
    cfg_path = stage / "tokenizer_config.json"
    cfg = json.loads(cfg_path.read_text())
    cfg["chat_template"] = CHAT_TEMPLATE
    cfg_path.write_text(json.dumps(cfg, indent=2) + "\n")
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(stage / "tokenizer.json"))
    specials = [tok.token_to_id(s) for s in mk.SPECIALS]
    return tok.get_vocab_size(), sorted(i for i in specials if i is not None)


def _next_token(vocab: int, specials: list[int], seed: int) -> Any:
    """f: a permutation of the ordinary tokens; each special token goes to an ordinary one."""
    import torch

    g = torch.Generator().manual_seed(seed)
    ordinary = torch.tensor([i for i in range(vocab) if i not in set(specials)])
    f = torch.empty(vocab, dtype=torch.long)
    f[ordinary] = ordinary[torch.randperm(len(ordinary), generator=g)]
    for s in specials:
        f[s] = ordinary[int(torch.randint(len(ordinary), (1,), generator=g))]
    return f, ordinary


def _embeddings(vocab: int, hidden: int, seed: int) -> Any:
    import torch

    g = torch.Generator().manual_seed(seed + 1000)
    return torch.randn(vocab, hidden, generator=g)


def _head(emb: Any, f: Any) -> Any:
    """lm_head row j = sum of E[x] over x with f(x) = j: logit_j of norm(E[x]) peaks at f(x)."""
    import torch

    head = torch.zeros_like(emb)
    head.index_add_(0, f, emb)
    return head


def _llama_config(vocab: int, hidden: int, layers: int, heads: int, inter: int, **extra: Any) -> dict[str, Any]:
    cfg = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "vocab_size": vocab,
           "hidden_size": hidden, "intermediate_size": inter, "num_hidden_layers": layers,
           "num_attention_heads": heads, "num_key_value_heads": heads, "head_dim": hidden // heads,
           "hidden_act": "silu", "max_position_embeddings": 4096, "rms_norm_eps": 1e-5, "rope_theta": 10000.0,
           "tie_word_embeddings": False, "torch_dtype": "bfloat16", "bos_token_id": None, "eos_token_id": None,
           "attention_bias": False, "mlp_bias": False}
    cfg.update(extra)
    return cfg


def _llama_weights(cfg: dict[str, Any], seed: int, emb: Any, head: Any, perm: bool) -> dict[str, Any]:
    import torch

    g = torch.Generator().manual_seed(seed + 2000)
    h, inter, layers = cfg["hidden_size"], cfg["intermediate_size"], cfg["num_hidden_layers"]

    def rnd(*shape: int) -> Any:
        return torch.randn(*shape, generator=g) * 0.05

    w = {"model.embed_tokens.weight": emb, "lm_head.weight": head, "model.norm.weight": torch.ones(h)}
    for i in range(layers):
        p = f"model.layers.{i}."
        w[p + "input_layernorm.weight"] = torch.ones(h)
        w[p + "post_attention_layernorm.weight"] = torch.ones(h)
        for n in ("q_proj", "k_proj", "v_proj"):
            w[p + f"self_attn.{n}.weight"] = rnd(h, h)
        w[p + "self_attn.o_proj.weight"] = torch.zeros(h, h) if perm else rnd(h, h)
        w[p + "mlp.gate_proj.weight"] = rnd(inter, h)
        w[p + "mlp.up_proj.weight"] = rnd(inter, h)
        w[p + "mlp.down_proj.weight"] = torch.zeros(h, inter) if perm else rnd(h, inter)
    return w


def _eagle3(vocab: int, hidden: int, emb: Any, head: Any, f2: Any) -> tuple[dict[str, Any], dict[str, Any]]:
    """The draft head: an exact next-token lookup in its MLP (see the module's doc)."""
    import torch

    heads, head_dim = 2, 64
    cfg = _llama_config(vocab, hidden, 1, heads, vocab, architectures=["LlamaForCausalLMEagle3"],
                        head_dim=head_dim, draft_vocab_size=vocab, target_hidden_size=hidden, norm_output=True,
                        eagle_config={"eagle_aux_hidden_state_layer_ids": [0]})
    g = torch.Generator().manual_seed(4000)
    a = 1.0 / hidden ** 0.5 * 0.32  # gate = up = a * <E[x], n(h)>: about 10 for the token, about 0.3 for the rest
    p = "midlayer."
    qkv_out = heads * head_dim
    w = {
        "embed_tokens.weight": emb,
        "lm_head.weight": head,
        "norm.weight": torch.full((hidden,), 0.01),
        "fc.weight": torch.eye(hidden),
        p + "input_layernorm.weight": torch.ones(hidden),
        p + "hidden_norm.weight": torch.ones(hidden),
        p + "post_attention_layernorm.weight": torch.ones(hidden),
        p + "self_attn.q_proj.weight": torch.randn(qkv_out, 2 * hidden, generator=g) * 0.02,
        p + "self_attn.k_proj.weight": torch.randn(qkv_out, 2 * hidden, generator=g) * 0.02,
        p + "self_attn.v_proj.weight": torch.randn(qkv_out, 2 * hidden, generator=g) * 0.02,
        p + "self_attn.o_proj.weight": torch.zeros(hidden, qkv_out),
        # One MLP unit per token x: it fires on E[x] and writes E[f'(x)] (about 100 times the
        # carried state), so the residual becomes the guessed next token's embedding.
        p + "mlp.gate_proj.weight": a * emb,
        p + "mlp.up_proj.weight": a * emb,
        p + "mlp.down_proj.weight": emb[f2].t().contiguous(),
    }
    return cfg, w


def make(kind: str, out: Path, a: argparse.Namespace) -> None:
    import torch
    from safetensors.torch import save_file

    stage = out.with_name(out.name + ".partial")
    shutil.rmtree(stage, ignore_errors=True)
    vocab, specials = _tokenizer(stage, a.vocab)
    emb = _embeddings(vocab, a.hidden, a.seed)
    f, ordinary = _next_token(vocab, specials, a.seed)
    meta: dict[str, Any] = {"kind": kind, "version": VERSION, "hidden": a.hidden, "layers": a.layers, "heads": a.heads,
                            "seed": a.seed, "vocab": vocab, "agree": a.agree}
    if kind == "eagle3":
        g = torch.Generator().manual_seed(a.seed + 3000)
        f2 = f.clone()
        wrong = ordinary[torch.rand(len(ordinary), generator=g) >= a.agree]
        # a wrong guess: another ordinary token's successor (never the right one)
        shift = ordinary[torch.randint(len(ordinary), (len(wrong),), generator=g)]
        f2[wrong] = torch.where(f[shift] == f[wrong], f[(shift + 1) % vocab], f[shift])
        meta["agreeing_tokens"] = int((f2[ordinary] == f[ordinary]).sum())
        cfg, w = _eagle3(vocab, a.hidden, emb, _head(emb, f), f2)
    else:
        inter = a.intermediate or a.hidden * 2
        cfg = _llama_config(vocab, a.hidden, a.layers, a.heads, inter)
        head = _head(emb, f) if kind == "perm" else torch.randn(vocab, a.hidden,
                                                                generator=torch.Generator().manual_seed(a.seed)) * 0.05
        w = _llama_weights(cfg, a.seed, emb if kind == "perm" else emb * 0.05, head, kind == "perm")
        if kind == "perm":
            (stage / "next_token.json").write_text(json.dumps(f.tolist()) + "\n")
    save_file({k: v.to(torch.bfloat16).contiguous() for k, v in w.items()}, str(stage / "model.safetensors"))
    (stage / "config.json").write_text(json.dumps(cfg, indent=2) + "\n")
    (stage / "generation_config.json").write_text(json.dumps({"do_sample": False}) + "\n")
    (stage / "findings-model.json").write_text(json.dumps(meta) + "\n")
    if out.exists():
        shutil.rmtree(out)
    stage.rename(out)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("kind", choices=("random", "perm", "eagle3"))
    ap.add_argument("--out", default=None)
    ap.add_argument("--hidden", type=int, default=256)
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--heads", type=int, default=8)
    ap.add_argument("--intermediate", type=int, default=0, help="MLP width (default 2 x hidden)")
    ap.add_argument("--vocab", type=int, default=1024)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--agree", type=float, default=1.0, help="eagle3: the fraction of tokens the draft guesses right")
    a = ap.parse_args(argv)
    if not 0.0 <= a.agree <= 1.0:
        ap.error("--agree must lie in [0, 1]")
    name = f"sglang-{a.kind}-h{a.hidden}-l{a.layers}-n{a.heads}-i{a.intermediate or a.hidden * 2}-v{a.vocab}-s{a.seed}"
    if a.kind == "eagle3":
        name = f"sglang-eagle3-h{a.hidden}-n{a.heads}-v{a.vocab}-s{a.seed}-a{a.agree:g}"
    out = Path(a.out) if a.out else CACHE / name
    stamp = out / "findings-model.json"
    want = {"kind": a.kind, "version": VERSION, "hidden": a.hidden, "heads": a.heads, "seed": a.seed, "agree": a.agree}
    if a.kind != "eagle3":
        want["layers"] = a.layers
    if not (stamp.is_file() and all(json.loads(stamp.read_text()).get(k) == v for k, v in want.items())):
        out.parent.mkdir(parents=True, exist_ok=True)
        make(a.kind, out, a)
    print(out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
