"""What an SGLang-speaking server sends, reduced to field paths (issue 24).

``capture(url)`` sends the same requests to any server that speaks SGLang's
protocol (real SGLang, or the findings emulator) and returns, per surface, the
set of field paths it answered with (``meta_info.spec_verify_ct``,
``choices[].delta.content``), each with the JSON type seen (``int``, ``str``,
``null``...). For the streams, paths are collected over every event, split
into the first content event, the last content event and a final usage chunk.
For ``/metrics``, the metric family names. tests/engine/test_sglang_emulator_fields.py
compares the two; ``python tests/engine/sglang_fields.py URL`` prints one.
"""

from __future__ import annotations

import json
import sys
from typing import Any

import httpx

PROMPT = "alpha bravo charlie delta echo foxtrot golf hotel india juliet kilo lima"
MAX_TOKENS = 8


def _kind(v: Any) -> str:
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "bool"
    if isinstance(v, int):
        return "int"
    if isinstance(v, float):
        return "float"
    if isinstance(v, str):
        return "str"
    if isinstance(v, list):
        return "list"
    return "object"


def paths(obj: Any, prefix: str = "") -> dict[str, str]:
    """Field path -> JSON type; lists of objects as ``name[]``."""
    out: dict[str, str] = {}
    if isinstance(obj, dict):
        for k, v in obj.items():
            p = f"{prefix}.{k}" if prefix else str(k)
            out[p] = _kind(v)
            if isinstance(v, dict):
                out.update(paths(v, p))
            elif isinstance(v, list) and v and isinstance(v[0], dict):
                for item in v:
                    out.update(paths(item, p + "[]"))
    return out


def _sse(url: str, body: dict[str, Any]) -> list[dict[str, Any]]:
    events = []
    with httpx.stream("POST", url, json=body, timeout=120) as r:
        r.raise_for_status()
        for line in r.iter_lines():
            if not line.startswith("data:"):
                continue
            data = line[5:].strip()
            if data == "[DONE]":
                events.append({"[DONE]": True})
                continue
            events.append(json.loads(data))
    return events


def _stream_shape(events: list[dict[str, Any]], usage_key: str | None) -> dict[str, dict[str, str]]:
    done = [e for e in events if "[DONE]" in e]
    body = [e for e in events if "[DONE]" not in e]
    usage = [e for e in body if usage_key and e.get(usage_key) and not e.get("choices")]
    content = [e for e in body if e not in usage]
    out = {"first event": paths(content[0]) if content else {}, "last event": paths(content[-1]) if content else {},
           "every event": {}}
    for e in content:
        out["every event"].update(paths(e))
    if usage_key is not None:
        out["usage chunk"] = paths(usage[-1]) if usage else {}
    out["[DONE]"] = {"[DONE]": "sent"} if done else {}
    return out


def capture(url: str) -> dict[str, dict[str, str]]:
    url = url.rstrip("/")
    model = httpx.get(url + "/v1/models", timeout=30).json()["data"][0]["id"]
    out: dict[str, dict[str, str]] = {}
    native = _sse(url + "/generate", {"text": PROMPT, "stream": True, "sampling_params": {
        "max_new_tokens": MAX_TOKENS, "temperature": 0, "ignore_eos": True}})
    for k, v in _stream_shape(native, None).items():
        out[f"POST /generate stream: {k}"] = v
    comp = _sse(url + "/v1/completions", {"model": model, "prompt": PROMPT, "max_tokens": MAX_TOKENS,
                                          "temperature": 0, "stream": True, "ignore_eos": True,
                                          "stream_options": {"include_usage": True}})
    for k, v in _stream_shape(comp, "usage").items():
        out[f"POST /v1/completions stream: {k}"] = v
    chat = _sse(url + "/v1/chat/completions", {"model": model, "messages": [{"role": "user", "content": PROMPT}],
                                               "max_tokens": MAX_TOKENS, "temperature": 0, "stream": True,
                                               "ignore_eos": True, "stream_options": {"include_usage": True}})
    for k, v in _stream_shape(chat, "usage").items():
        out[f"POST /v1/chat/completions stream: {k}"] = v
    info = httpx.get(url + "/server_info", timeout=30).json()
    out["GET /server_info (top level)"] = {k: _kind(v) for k, v in info.items()}
    out["GET /model_info"] = paths(httpx.get(url + "/model_info", timeout=30).json())
    out["GET /v1/models"] = paths(httpx.get(url + "/v1/models", timeout=30).json())
    metrics = httpx.get(url + "/metrics", timeout=30).text
    fams = {}
    for line in metrics.splitlines():
        if line.startswith("# TYPE "):
            _, _, name, kind = line.split(maxsplit=3)
            fams[name] = kind
    out["GET /metrics (families)"] = fams
    return out


if __name__ == "__main__":
    json.dump(capture(sys.argv[1]), sys.stdout, indent=1, sort_keys=True)
    print()
