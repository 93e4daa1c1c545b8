"""The model's vocabulary size, for ``random-ids`` prompts.

Token ids drawn past the vocabulary crash real servers: SGLang 0.5.23's
embedding raised ``IndexError: index out of range`` on the first request
(shared/engines/sglang-cpu). The size is taken, in this order, from:

1. the workload (``vocab_size`` in the matrix, ``--vocab-size``);
2. what the server says: ``vocab_size`` in ``/model_info``, or llama.cpp's
   ``/v1/models`` ``meta.n_vocab``;
3. the model's own ``config.json`` (``vocab_size``, or ``text_config``'s),
   where the path the server reports (``/model_info`` ``model_path`` and
   ``tokenizer_path``, vLLM's ``/v1/models`` ``root``) is a folder on this
   machine, as for a server launched here.

Where none of these knows it, ``random-ids`` is refused in one line.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from findings.core.errors import FindingsError


def _size(v: Any) -> int | None:
    return v if type(v) is int and v > 1 else None


def from_config(folder: str) -> int | None:
    """``vocab_size`` from a model folder's config.json, if it is one here."""
    try:
        doc = json.loads((Path(folder) / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(doc, dict):
        return None
    text = doc.get("text_config")
    return _size(doc.get("vocab_size")) or (_size(text.get("vocab_size")) if isinstance(text, dict) else None)


def from_server(model_info: dict[str, Any], models_doc: dict[str, Any] | None) -> tuple[int | None, str]:
    """(size, where it came from) from the server's answers; (None, what was tried)."""
    n = _size(model_info.get("vocab_size"))
    if n is not None:
        return n, "/model_info vocab_size"
    data = models_doc.get("data") if isinstance(models_doc, dict) else None
    entries = [d for d in data if isinstance(d, dict)] if isinstance(data, list) else []
    for d in entries:
        meta = d.get("meta")
        if isinstance(meta, dict) and _size(meta.get("n_vocab")) is not None:
            return meta["n_vocab"], "/v1/models meta.n_vocab"
    folders = [model_info.get("model_path"), model_info.get("tokenizer_path")] + [d.get("root") for d in entries]
    tried = [f for f in dict.fromkeys(folders) if isinstance(f, str) and f]
    for folder in tried:
        n = from_config(folder)
        if n is not None:
            return n, f"{folder}/config.json"
    return None, ("its model paths " + ", ".join(tried) + " are not model folders on this machine" if tried
                  else "it names no model path")


def require(config: str, url: str, given: int | None, model_info: dict[str, Any],
            models_doc: dict[str, Any] | None) -> tuple[int, str]:
    if given is not None:
        return given, "the workload's vocab_size"
    n, where = from_server(model_info, models_doc)
    if n is None:
        raise FindingsError(
            f"config {config}: random-ids prompts need the model's vocabulary size (ids past it crash "
            f"the server), and the server at {url} does not say it ({where}); give vocab_size in the "
            f"workload (--vocab-size N) or use a text prompt set (--dataset FILE)")
    return n, where
