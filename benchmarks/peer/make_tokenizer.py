"""Train a tiny byte-level BPE tokenizer offline, for the peer client.

``python -m sglang.bench_serving`` needs a tokenizer (``--tokenizer DIR``)
even when it sends token ids: it draws random ids below ``vocab_size`` and
re-tokenizes the generated text for its ``*_retokenized`` figures. Nothing
may come from a hub, so this trains one with the ``tokenizers`` library on
text generated here, and saves it as a directory that
``transformers.AutoTokenizer.from_pretrained(DIR)`` loads (tokenizer.json,
tokenizer_config.json, special_tokens_map.json).

Run it with the peer venv's python (it has ``tokenizers``)::

    benchmarks/peer/peer-python benchmarks/peer/make_tokenizer.py [OUT_DIR] [--vocab-size N]

Deterministic: the same arguments give the same files. Skips the work when
OUT_DIR already holds a tokenizer of that vocabulary size (use --force).
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DEFAULT_OUT = ROOT / "build" / "peer" / "tokenizer"

_ONSETS = ("b", "c", "d", "f", "g", "h", "k", "l", "m", "n", "p", "r", "s", "t", "v", "w", "st", "tr", "pl", "gr")
_VOWELS = ("a", "e", "i", "o", "u", "ai", "ou", "ea")
_CODAS = ("", "", "n", "r", "s", "t", "l", "nd", "st")
# The words the findings emulator streams back, so that re-tokenized output
# lengths stay sensible.
_EMULATOR_WORDS = (
    "alpha bravo charlie delta echo foxtrot golf hotel india juliet kilo lima mike november oscar papa "
    "quebec romeo sierra tango uniform victor whiskey xray yankee zulu amber basil cedar dune ember fern "
    "granite harbor iris jade kelp lumen maple nectar onyx pearl quartz river slate thistle umber velvet "
    "willow yarrow zephyr aspen birch clover drift ember2 flint grove heath ivy juniper knoll lark moss"
).split()
_COMMON = ("the of and to a in is that for it as with was on be by this are from or at an which not but "
           "have has had were will can would should could may might do does did done make made see "
           "Summarise Translate Answer Continue Explain Write List Rewrite the following text notes story "
           "question passage paragraph message log reply key points formally").split()

SPECIALS = ("<|endoftext|>", "<|pad|>")


def corpus(n_lines: int, seed: int) -> list[str]:
    rng = random.Random(seed)

    def word() -> str:
        return "".join(rng.choice(_ONSETS) + rng.choice(_VOWELS) + rng.choice(_CODAS)
                       for _ in range(rng.choice((1, 1, 2, 2, 3))))

    lines = []
    for _ in range(n_lines):
        parts = []
        for _ in range(rng.randint(8, 40)):
            r = rng.random()
            parts.append(rng.choice(_EMULATOR_WORDS) if r < 0.3 else rng.choice(_COMMON) if r < 0.55 else word())
        line = " ".join(parts)
        if rng.random() < 0.3:
            line += rng.choice((".", ",", "?", "!", ":")) + " " + str(rng.randint(0, 99999))
        lines.append(line)
    return lines


def build(out: Path, vocab_size: int, seed: int) -> None:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

    tok = Tokenizer(models.BPE(unk_token=None))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, min_frequency=2, special_tokens=list(SPECIALS),
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(corpus(20000, seed), trainer=trainer)
    out.mkdir(parents=True, exist_ok=True)
    tok.save(str(out / "tokenizer.json"))
    eos, pad = SPECIALS
    config = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "model_max_length": 1 << 20,
        "bos_token": eos,
        "eos_token": eos,
        "unk_token": eos,
        "pad_token": pad,
        "add_bos_token": False,
        "add_eos_token": False,
        "clean_up_tokenization_spaces": False,
        "added_tokens_decoder": {
            str(tok.token_to_id(s)): {"content": s, "lstrip": False, "normalized": False, "rstrip": False,
                                      "single_word": False, "special": True}
            for s in SPECIALS
        },
    }
    (out / "tokenizer_config.json").write_text(json.dumps(config, indent=2) + "\n", encoding="utf-8")
    specials = {"bos_token": eos, "eos_token": eos, "unk_token": eos, "pad_token": pad}
    (out / "special_tokens_map.json").write_text(json.dumps(specials, indent=2) + "\n", encoding="utf-8")
    (out / "README.txt").write_text(
        f"Tiny byte-level BPE (vocab {tok.get_vocab_size()}) trained offline by "
        f"benchmarks/peer/make_tokenizer.py (seed {seed}) on locally generated text. "
        "For benchmark plumbing only.\n", encoding="utf-8")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out", nargs="?", default=str(DEFAULT_OUT), help=f"output directory (default {DEFAULT_OUT})")
    ap.add_argument("--vocab-size", type=int, default=2048)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--force", action="store_true", help="retrain even if OUT already holds a tokenizer")
    a = ap.parse_args(argv)
    out = Path(a.out)
    stamp = out / "README.txt"
    if not a.force and (out / "tokenizer.json").is_file() and stamp.is_file() \
            and f"vocab {a.vocab_size})" in stamp.read_text(encoding="utf-8"):
        print(f"tokenizer present: {out}")
    else:
        build(out, a.vocab_size, a.seed)
        print(f"tokenizer written: {out}")
    # Check it the way the peer loads it.
    try:
        from transformers import AutoTokenizer
    except ImportError:
        return 0
    t = AutoTokenizer.from_pretrained(str(out))
    ids = t.encode("alpha bravo the following notes", add_special_tokens=False)
    print(f"check: {type(t).__name__} vocab_size={t.vocab_size} "
          f"special_tokens_to_add={t.num_special_tokens_to_add()} "
          f"'alpha bravo the following notes' -> {len(ids)} tokens -> {t.decode(ids)!r}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
