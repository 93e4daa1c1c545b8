"""Request parsing for the emulator: SGLang's request shapes and validation. Pure.

Unknown keys inside ``sampling_params`` are refused (HTTP 400), as SGLang's
``SamplingParams`` does; unknown top-level keys are ignored.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

__all__ = [
    "DEFAULT_MAX_NEW_TOKENS",
    "DEFAULT_MAX_TOKENS_CHAT",
    "DEFAULT_MAX_TOKENS_COMPLETIONS",
    "SAMPLING_KEYS",
    "BadRequest",
    "SeqSpec",
    "parse_generate",
    "parse_openai",
    "parse_sampling",
]


#: Keys SGLang's SamplingParams accepts; any other key is a 400, as in SGLang.
SAMPLING_KEYS = frozenset({
    "max_new_tokens", "min_new_tokens", "stop", "stop_token_ids", "stop_regex", "temperature",
    "top_p", "top_k", "min_p", "frequency_penalty", "presence_penalty", "repetition_penalty",
    "ignore_eos", "skip_special_tokens", "spaces_between_special_tokens", "no_stop_trim",
    "n", "json_schema", "regex", "ebnf", "structural_tag", "custom_params", "stream_interval",
    "logit_bias", "sampling_seed",
})  # fmt: skip

DEFAULT_MAX_NEW_TOKENS = 128
DEFAULT_MAX_TOKENS_COMPLETIONS = 16  # OpenAI's default for /v1/completions
DEFAULT_MAX_TOKENS_CHAT = 128  # SGLang runs to EOS; the emulator never emits one


class BadRequest(Exception):
    """A request SGLang would answer with HTTP 400."""


@dataclass(frozen=True)
class SeqSpec:
    prompt: str | list[int]
    rid: str | None
    max_new_tokens: int
    min_new_tokens: int
    stop: tuple[str, ...]
    stop_token_ids: frozenset[int]
    messages: tuple[str, ...] = ()  # chat: each message's content, in order


def _int(params: dict[str, Any], key: str, default: int, minimum: int = 0) -> int:
    value = params.get(key)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise BadRequest(f"{key} must be an integer >= {minimum}, got {value!r}")
    return value


def _number(params: dict[str, Any], key: str, lo: float, hi: float) -> None:
    value = params.get(key)
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not lo <= value <= hi:
        raise BadRequest(f"{key} must be a number in [{lo}, {hi}], got {value!r}")


def parse_sampling(params: Any, default_max: int = DEFAULT_MAX_NEW_TOKENS) -> dict[str, Any]:
    """Validate ``sampling_params``; return the fields the engine uses."""
    if params is None:
        params = {}
    if not isinstance(params, dict):
        raise BadRequest("sampling_params must be an object")
    unknown = sorted(set(params) - SAMPLING_KEYS)
    if unknown:
        raise BadRequest(f"SamplingParams.__init__() got an unexpected keyword argument '{unknown[0]}'")
    _number(params, "temperature", 0.0, 1e6)
    _number(params, "top_p", 1e-9, 1.0)
    _number(params, "min_p", 0.0, 1.0)
    top_k = params.get("top_k")
    if top_k is not None and (isinstance(top_k, bool) or not isinstance(top_k, int) or (top_k < 1 and top_k != -1)):
        raise BadRequest(f"top_k must be -1 or a positive integer, got {top_k!r}")
    if params.get("n", 1) not in (1, None):
        raise BadRequest("the emulator supports n=1 only")
    stop = params.get("stop")
    if stop is None:
        stops: tuple[str, ...] = ()
    elif isinstance(stop, str):
        stops = (stop,)
    elif isinstance(stop, list) and all(isinstance(s, str) for s in stop):
        stops = tuple(stop)
    else:
        raise BadRequest("stop must be a string or a list of strings")
    ids = params.get("stop_token_ids") or []
    if not isinstance(ids, list) or not all(isinstance(i, int) and not isinstance(i, bool) for i in ids):
        raise BadRequest("stop_token_ids must be a list of integers")
    ignore_eos = params.get("ignore_eos")
    if ignore_eos is not None and not isinstance(ignore_eos, bool):
        raise BadRequest("ignore_eos must be a boolean")
    return {
        "max_new_tokens": _int(params, "max_new_tokens", default_max),
        "min_new_tokens": _int(params, "min_new_tokens", 0),
        "stop": stops,
        "stop_token_ids": frozenset(ids),
    }


def _prompts(value: Any, what: str) -> tuple[list[str | list[int]], bool]:
    """A prompt field (str, list of str, ids, list of ids) → (prompts, is_batch)."""
    if isinstance(value, str):
        return [value], False
    if isinstance(value, list) and value:
        if all(isinstance(v, int) and not isinstance(v, bool) for v in value):
            return [list(value)], False
        if all(isinstance(v, str) for v in value):
            return list(value), True
        if all(isinstance(v, list) and v and all(isinstance(i, int) for i in v) for v in value):
            return [list(v) for v in value], True
    raise BadRequest(f"{what} must be a string, a list of strings, a list of token ids or a list of those")


def _rids(rid: Any, n: int) -> list[str | None]:
    if rid is None:
        return [None] * n
    if isinstance(rid, str) and n == 1:
        return [rid]
    if isinstance(rid, list) and len(rid) == n and all(isinstance(r, str) for r in rid):
        return list(rid)
    raise BadRequest("rid must be a string (or a list of strings, one per prompt)")


def parse_generate(body: Any) -> tuple[list[SeqSpec], bool, bool]:
    """/generate body → (specs, stream, is_batch). Unknown top-level keys are ignored."""
    if not isinstance(body, dict):
        raise BadRequest("the request body must be a JSON object")
    if body.get("text") is not None:
        prompts, batch = _prompts(body["text"], "text")
        if any(not isinstance(p, str) for p in prompts):
            raise BadRequest("text must be a string or a list of strings")
    elif body.get("input_ids") is not None:
        prompts, batch = _prompts(body["input_ids"], "input_ids")
        if any(isinstance(p, str) for p in prompts):
            raise BadRequest("input_ids must be a list of integers (or a list of those)")
    else:
        raise BadRequest("Either text or input_ids should be provided.")
    sp = body.get("sampling_params")
    if batch and isinstance(sp, list):
        if len(sp) != len(prompts):
            raise BadRequest("sampling_params list must match the number of prompts")
        parsed = [parse_sampling(p) for p in sp]
    else:
        parsed = [parse_sampling(sp)] * len(prompts)
    rids = _rids(body.get("rid"), len(prompts))
    specs = [SeqSpec(p, r, **s) for p, r, s in zip(prompts, rids, parsed)]
    return specs, bool(body.get("stream", False)), batch


def parse_openai(body: Any, chat: bool) -> tuple[list[SeqSpec], dict[str, Any]]:
    """/v1/chat/completions or /v1/completions body → (specs, options)."""
    if not isinstance(body, dict):
        raise BadRequest("the request body must be a JSON object")
    if chat:
        messages = body.get("messages")
        if not isinstance(messages, list) or not messages:
            raise BadRequest("messages must be a non-empty list")
        words: list[str] = []
        for m in messages:
            content = m.get("content") if isinstance(m, dict) else None
            if isinstance(content, str):
                words.append(content)
            elif isinstance(content, list):
                words.extend(str(p.get("text", "")) for p in content if isinstance(p, dict))
        prompts: list[str | list[int]] = [" ".join(words)]
    else:
        words = []
        prompts, _ = _prompts(body.get("prompt"), "prompt")
    default = DEFAULT_MAX_TOKENS_CHAT if chat else DEFAULT_MAX_TOKENS_COMPLETIONS
    max_tokens = body.get("max_completion_tokens", body.get("max_tokens"))
    sampling = {
        "max_new_tokens": max_tokens,
        "min_new_tokens": body.get("min_tokens"),
        "stop": body.get("stop"),
        "stop_token_ids": body.get("stop_token_ids"),
        "temperature": body.get("temperature"),
        "top_p": body.get("top_p"),
        "top_k": body.get("top_k"),
        "ignore_eos": body.get("ignore_eos"),
        "n": body.get("n"),
    }
    parsed = parse_sampling({k: v for k, v in sampling.items() if v is not None}, default)
    rids = _rids(body.get("rid"), len(prompts))
    stream_options = body.get("stream_options") or {}
    if not isinstance(stream_options, dict):
        raise BadRequest("stream_options must be an object")
    options = {
        "stream": bool(body.get("stream", False)),
        "include_usage": bool(stream_options.get("include_usage", False)),
        "continuous_usage_stats": bool(stream_options.get("continuous_usage_stats", False)),
        "spec_details": bool(body.get("return_spec_tokens_details", False)),
        "model": body.get("model"),
    }
    return [SeqSpec(p, r, **parsed, messages=tuple(words)) for p, r in zip(prompts, rids)], options
