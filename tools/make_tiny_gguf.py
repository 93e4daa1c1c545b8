"""Write a tiny random-weight llama model as GGUF, for the llama.cpp engine tier (issue 7).

Nothing comes from a hub: the weights are seeded random numbers and the
vocabulary is made here (SentencePiece-style "llama" tokens: the specials,
the 256 byte tokens <0x00>..<0xFF>, and a few hundred unique word pieces).
The same vocabulary is written whatever the seed, so that a model with
another seed can serve as a draft model (speculative decoding needs the
draft's vocabulary to match the target's).

    python tools/make_tiny_gguf.py OUT.gguf [--seed N] [--layers 2] [--hidden 64] [--heads 4]

Needs the `gguf` and `numpy` packages (not dependencies of findings).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import gguf
import numpy as np

#: SentencePiece token types (llama.cpp's LLAMA_TOKEN_TYPE_*).
NORMAL, UNKNOWN, CONTROL, BYTE = 1, 2, 3, 6

_ONSETS = ("b", "c", "d", "f", "g", "h", "k", "l", "m", "n", "p", "r", "s", "t", "v", "w", "st", "tr")
_VOWELS = ("a", "e", "i", "o", "u", "ai", "ou")


def vocabulary(words: int = 300) -> tuple[list[str], list[float], list[int]]:
    """Tokens, scores and types: unique, deterministic, seed-independent."""
    tokens = ["<unk>", "<s>", "</s>"]
    types = [UNKNOWN, CONTROL, CONTROL]
    tokens += [f"<0x{b:02X}>" for b in range(256)]
    types += [BYTE] * 256
    pieces: list[str] = []
    for o in _ONSETS:
        for v in _VOWELS:
            pieces.append("\u2581" + o + v)
            if len(pieces) >= words:
                break
        if len(pieces) >= words:
            break
    for o in _ONSETS:
        for v in _VOWELS:
            if len(pieces) >= words:
                break
            pieces.append(o + v)
    tokens += pieces
    types += [NORMAL] * len(pieces)
    assert len(set(tokens)) == len(tokens), "duplicate tokens make llama.cpp abort"
    scores = [0.0] * 259 + [-float(i) for i in range(len(pieces))]
    return tokens, scores, types


def write(path: Path, seed: int, layers: int, hidden: int, heads: int, context: int = 2048) -> None:
    rng = np.random.default_rng(seed)
    tokens, scores, types = vocabulary()
    n_vocab, ff, head_dim = len(tokens), hidden * 2, hidden // heads

    def w(*shape: int) -> np.ndarray:
        return (rng.standard_normal(shape) * 0.05).astype(np.float32)

    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_name(f"findings-tiny-llama-seed{seed}")
    writer.add_context_length(context)
    writer.add_embedding_length(hidden)
    writer.add_block_count(layers)
    writer.add_feed_forward_length(ff)
    writer.add_head_count(heads)
    writer.add_head_count_kv(heads)
    writer.add_layer_norm_rms_eps(1e-5)
    writer.add_rope_dimension_count(head_dim)
    writer.add_file_type(gguf.LlamaFileType.ALL_F32)
    writer.add_tokenizer_model("llama")
    writer.add_token_list(tokens)
    writer.add_token_scores(scores)
    writer.add_token_types(types)
    writer.add_unk_token_id(0)
    writer.add_bos_token_id(1)
    writer.add_eos_token_id(2)
    writer.add_add_bos_token(True)
    writer.add_add_eos_token(False)
    writer.add_tensor("token_embd.weight", w(n_vocab, hidden))
    for i in range(layers):
        writer.add_tensor(f"blk.{i}.attn_norm.weight", np.ones(hidden, dtype=np.float32))
        writer.add_tensor(f"blk.{i}.attn_q.weight", w(hidden, hidden))
        writer.add_tensor(f"blk.{i}.attn_k.weight", w(heads * head_dim, hidden))
        writer.add_tensor(f"blk.{i}.attn_v.weight", w(heads * head_dim, hidden))
        writer.add_tensor(f"blk.{i}.attn_output.weight", w(hidden, hidden))
        writer.add_tensor(f"blk.{i}.ffn_norm.weight", np.ones(hidden, dtype=np.float32))
        writer.add_tensor(f"blk.{i}.ffn_gate.weight", w(ff, hidden))
        writer.add_tensor(f"blk.{i}.ffn_up.weight", w(ff, hidden))
        writer.add_tensor(f"blk.{i}.ffn_down.weight", w(hidden, ff))
    writer.add_tensor("output_norm.weight", np.ones(hidden, dtype=np.float32))
    writer.add_tensor("output.weight", w(n_vocab, hidden))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("out", type=Path)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--hidden", type=int, default=64)
    p.add_argument("--heads", type=int, default=4)
    a = p.parse_args(argv)
    if a.hidden % a.heads:
        p.error("--hidden must be a multiple of --heads")
    a.out.parent.mkdir(parents=True, exist_ok=True)
    tmp = a.out.with_name(a.out.name + ".tmp")
    write(tmp, a.seed, a.layers, a.hidden, a.heads)
    tmp.replace(a.out)
    print(a.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
