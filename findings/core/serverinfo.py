"""What a server says about itself, reduced to the config facts we keep.

Shared by the sglang-bench importer (``server_info`` inside each JSONL line)
and the runner (``GET /server_info``). Secrets are redacted here, at the
edge, before anything can reach the store.
"""

from __future__ import annotations

import json
import math
import re
from typing import Any, Mapping

from findings.core.model import Scalar

#: Resolved server arguments kept as config facts (the rest of SGLang's ~550
#: are noise for a findings document).
SERVER_FACTS = (
    "version", "model_path", "served_model_name", "tp_size", "dp_size", "pp_size", "ep_size",
    "dtype", "kv_cache_dtype", "quantization", "load_format", "attention_backend",
    "max_running_requests", "chunked_prefill_size", "cuda_graph_max_bs", "mem_fraction_static",
    "disable_overlap_schedule", "speculative_algorithm", "speculative_draft_model_path",
    "speculative_num_steps", "speculative_eagle_topk", "speculative_num_draft_tokens",
    "speculative_adaptive", "enable_metrics", "launch_command", "emulated", "emulator_profile", "emulator_speed",
    # What decides whether SGLang runs an adaptive speculation schedule (findings/decide/deploy.py).
    "enable_dp_attention", "enable_multi_layer_eagle", "enable_two_batch_overlap", "enable_pdmux",
    # Where it runs, and what the CPU path needs (SGLang 0.5.23 on the CPU, docs/deploy.md).
    "device", "disable_cuda_graph", "speculative_adaptive_config",
)

#: A flag or variable name holds a secret when one of its words (split on
#: "-" and "_") is one of these; "--speculative-num-draft-tokens" is not.
SECRET_WORDS = frozenset({"key", "apikey", "token", "secret", "password", "passwd", "auth",
                          "credential", "credentials", "bearer"})
_FLAG_VALUE = re.compile(r"(--?[A-Za-z][\w-]*)([= ])(?!-)(\S+)")
_ENV_VALUE = re.compile(r"\b([A-Za-z_][A-Za-z0-9_]*)=(\S+)")
_BEARER = re.compile(r"(Bearer\s+)\S+", re.IGNORECASE)
REDACTED = "<redacted>"


def secret_name(name: str) -> bool:
    """Does a flag or environment variable name look like it holds a secret?"""
    words = re.split(r"[-_]+", name.strip("-").lower())
    return any(w in SECRET_WORDS for w in words)


def redact(text: str) -> str:
    """Mask values of secret-looking flags, NAME=value pairs and bearer tokens."""
    text = _FLAG_VALUE.sub(
        lambda m: f"{m.group(1)}{m.group(2)}{REDACTED}" if secret_name(m.group(1)) else m.group(0), text)
    text = _ENV_VALUE.sub(lambda m: f"{m.group(1)}={REDACTED}" if secret_name(m.group(1)) else m.group(0), text)
    return _BEARER.sub(lambda m: f"{m.group(1)}{REDACTED}", text)


class FactError(ValueError):
    """A kept fact has a value we cannot store; ``key`` names it."""

    def __init__(self, key: str, message: str) -> None:
        super().__init__(message)
        self.key = key


def facts(info: Mapping[str, Any]) -> dict[str, Scalar]:
    """Config facts from a /server_info object (flat resolved args)."""
    out: dict[str, Scalar] = {}
    for key in SERVER_FACTS:
        if key not in info or info[key] is None:
            continue
        value = info[key]
        if isinstance(value, list):
            value = " ".join(str(v) for v in value)
        if not isinstance(value, (str, int, float, bool)):
            raise FactError(key, "expected a scalar")
        if isinstance(value, float) and not math.isfinite(value):
            raise FactError(key, "expected a finite number")
        out[key] = redact(value) if isinstance(value, str) else value
    if "version" in out:
        out["sglang_version"] = out.pop("version")
    return out


def props_facts(props: Mapping[str, Any], slots: Any = None) -> dict[str, Scalar]:
    """Config facts from llama.cpp's ``GET /props`` (its server has no
    /server_info): the build, the model, the slots and the context; and from
    ``GET /slots``, whether the slots speculate (a draft model was loaded)."""
    out: dict[str, Scalar] = {"engine": "llama.cpp"}
    if isinstance(slots, list) and slots and all(isinstance(s, dict) for s in slots):
        spec = [s.get("speculative") for s in slots]
        if all(type(x) is bool for x in spec):
            out["speculative_algorithm"] = "draft-model" if any(spec) else "none"
    build = props.get("build_info")
    if isinstance(build, str) and build:
        out["llamacpp_build"] = redact(build[:100])
    for src, dst in (("model_path", "model_path"), ("model_ftype", "dtype")):
        v = props.get(src)
        if isinstance(v, str) and v:
            out[dst] = redact(v[:500])
    slots = props.get("total_slots")
    if type(slots) is int and slots > 0:
        out["max_running_requests"] = slots
    dgs = props.get("default_generation_settings")
    n_ctx = dgs.get("n_ctx") if isinstance(dgs, dict) else None
    if type(n_ctx) is int and n_ctx > 0:
        out["context_per_slot"] = n_ctx
    return out


#: vLLM flags kept as config facts (the value after the flag) -> fact name.
VLLM_FLAGS = {"--max-num-seqs": "max_running_requests", "--dtype": "dtype", "--max-model-len": "max_model_len",
              "--tensor-parallel-size": "tp_size", "--data-parallel-size": "data_parallel_size",
              "--served-model-name": "served_model_name", "--seed": "seed"}


def vllm_facts(version_doc: Any, models_doc: Any, command: list[str] | None,
               spec_counters: bool) -> dict[str, Scalar]:
    """Config facts of a vLLM server, which has no /server_info: its version
    (``GET /version``), its model (``GET /v1/models``: the served name's
    ``root`` is the model path) and, when findings launched it, the flags it
    runs with (its command line): the speculative config as launched,
    ``--max-num-seqs`` and the like. Without a command line (attach mode),
    whether it speculates is read from ``spec_counters``: vLLM exports the
    ``vllm:spec_decode_*`` counters only when it speculates."""
    out: dict[str, Scalar] = {"engine": "vLLM"}
    v = version_doc.get("version") if isinstance(version_doc, dict) else None
    if isinstance(v, str) and v:
        out["vllm_version"] = v[:50]
    data = models_doc.get("data") if isinstance(models_doc, dict) else None
    if isinstance(data, list) and data and isinstance(data[0], dict):
        root = data[0].get("root")
        if isinstance(root, str) and root:
            out["model_path"] = redact(root[:500])
        mml = data[0].get("max_model_len")
        if type(mml) is int:
            out["max_model_len"] = mml
    spec: Any = None
    if command:
        for flag, value in _flag_values(command):
            if flag in VLLM_FLAGS:
                out[VLLM_FLAGS[flag]] = int(value) if value.isdigit() else redact(value[:200])
            elif flag == "--speculative-config":
                try:
                    spec = json.loads(value)
                except ValueError:
                    spec = None
        out["launch_command"] = redact(" ".join(command))[:2000]
    if isinstance(spec, dict):
        out["speculative_algorithm"] = str(spec.get("method") or spec.get("model") or "unknown")
        for key in ("num_speculative_tokens", "prompt_lookup_max", "prompt_lookup_min"):
            if type(spec.get(key)) is int:
                out[key] = spec[key]
        if spec.get("model"):
            out["speculative_draft_model_path"] = redact(str(spec["model"])[:500])
        sched = spec.get("num_speculative_tokens_per_batch_size")
        if sched is not None:
            out["num_speculative_tokens_per_batch_size"] = json.dumps(sched, separators=(",", ":"))
        out["speculative_config"] = redact(json.dumps(spec, separators=(",", ":"), sort_keys=True))[:1000]
    elif command:
        out["speculative_algorithm"] = "none"
    else:
        out["speculative_algorithm"] = "unknown" if spec_counters else "none"
    return out


def _flag_values(command: list[str]) -> list[tuple[str, str]]:
    """(--flag, value) pairs of a command line, ``--flag value`` or ``--flag=value``."""
    pairs = []
    for i, arg in enumerate(command):
        if not arg.startswith("--"):
            continue
        if "=" in arg:
            flag, value = arg.split("=", 1)
            pairs.append((flag, value))
        elif i + 1 < len(command) and not command[i + 1].startswith("--"):
            pairs.append((arg, command[i + 1]))
    return pairs


def is_emulated(info: Mapping[str, Any]) -> bool:
    return info.get("emulated") is True
