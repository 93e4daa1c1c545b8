"""Comparisons that are not like for like. Pure.

A candidate is judged against the baseline on the same workload, but two
imported result files can still have measured different things: another
target model (a published campaign compared two model versions without
saying so), or another API (SGLang's native ``/generate`` against an
OpenAI chat endpoint, whose chat template adds tokens to every prompt). Such
a verdict is still a comparison of the two numbers, not of the two configs:
it is marked, with what differs, like the prompt caveats (caveats.py), and
the conclusions and the document say so.

Only what the store records is compared, never a guess from a name:

- the target model: the configs' recorded ``model_path`` (else
  ``served_model_name``), by its last path component, so that a Hugging Face
  id and a local copy of the same model agree. Configs of the findings
  emulator are not compared: it names its model after the profile it
  plays (``findings-emulator/<profile>``), a label rather than a model
  (docs/emulator.md);
- the API: the points' recorded ``api`` (findings' runner),
  ``endpoint_type`` (vLLM, AIPerf) or ``backend`` (sglang.bench_serving,
  older vLLM), mapped onto what the server is asked: native ``/generate``,
  completions or chat completions. A value not in the map is compared only
  with the same tool's value.
"""

from __future__ import annotations

from typing import Iterable, Mapping

from findings.core.model import Point, Scalar

#: Facts that name the target model, first found wins.
TARGET_KEYS = ("model_path", "served_model_name")
#: Point keys that name the API, first found wins.
API_KEYS = ("api", "endpoint_type", "backend")
#: What each tool's name for an API asks the server.
API = {
    "native": "native /generate", "sglang": "native /generate", "sglang-native": "native /generate",
    "openai-completions": "completions", "openai": "completions", "completions": "completions",
    "vllm": "completions", "sglang-oai": "completions", "lmdeploy": "completions",
    "openai-chat": "chat completions", "chat": "chat completions", "sglang-oai-chat": "chat completions",
    "vllm-chat": "chat completions", "openai-chat-completions": "chat completions",
}
TRUE = frozenset({"true", "1", "yes", "on"})


#: How the findings emulator names the model it plays: after its profile.
EMULATOR_MODEL = "findings-emulator/"


def emulated(facts: Mapping[str, Scalar]) -> bool:
    """A config of the findings emulator: its facts say so, or (imported
    from another tool's file, which records only the served name) its model
    is named the emulator's way."""
    v = facts.get("emulated")
    if v is True or (isinstance(v, str) and v.strip().lower() in TRUE):
        return True
    return any(isinstance(facts.get(k), str) and str(facts[k]).startswith(EMULATOR_MODEL) for k in TARGET_KEYS)


def target(facts: Mapping[str, Scalar]) -> str | None:
    """The target model a config's facts name (its last path component), or None."""
    for key in TARGET_KEYS:
        v = facts.get(key)
        if isinstance(v, str) and v.strip().strip("/"):
            return v.strip().rstrip("/").rsplit("/", 1)[-1]
    return None


def api(p: Point) -> tuple[str, str] | None:
    """(what the server is asked, or the tool's own name, and the tool) of a point, or None."""
    for key in API_KEYS:
        v = p.workload_params.get(key)
        if isinstance(v, str) and v.strip():
            name = v.strip().lower()
            return (API[name], "") if name in API else (name, p.source)
    return None


def _apis(points: Iterable[Point]) -> set[tuple[str, str]]:
    return {a for p in points if (a := api(p)) is not None}


def reasons(a_config: str, a_facts: Mapping[str, Scalar], a_points: Iterable[Point],
            b_config: str, b_facts: Mapping[str, Scalar], b_points: Iterable[Point]) -> tuple[str, ...]:
    """What differs between the two sides of a comparison (``a``: the
    candidate, ``b``: the reference), each as a phrase that follows
    "measured" (caveats.describe); empty when nothing recorded differs."""
    out = []
    ta, tb = target(a_facts), target(b_facts)
    if ta is not None and tb is not None and ta != tb and not (emulated(a_facts) or emulated(b_facts)):
        out.append(f"between different target models ({b_config}: {tb}; {a_config}: {ta})")
    xa, xb = _apis(a_points), _apis(b_points)
    # Names the map knows are compared across tools; a tool's own name only
    # with the same tool's.
    pairs = [({n for n, t in xa if not t}, {n for n, t in xb if not t})]
    pairs += [({n for n, t in xa if t == tool}, {n for n, t in xb if t == tool})
              for tool in sorted({t for _, t in xa if t} & {t for _, t in xb if t})]
    for sa, sb in pairs:
        if sa and sb and sa != sb:
            out.append(f"between different APIs ({b_config}: {', '.join(sorted(sb))}; "
                       f"{a_config}: {', '.join(sorted(sa))})")
            break
    return tuple(out)
