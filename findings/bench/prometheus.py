"""The servers' ``/metrics`` pages (Prometheus text format), read with
prometheus_client's own parser. The only module that imports prometheus_client
(docs/decisions.md D121).

A sample line is ``name{labels} value [timestamp]``: the parser takes the
value as the value, where a split at the last space took a timestamp for it.
A page the parser refuses as a whole is read line by line, each sample line
on its own, so one malformed line costs only itself (as before).
"""

from __future__ import annotations

from typing import Iterator

from prometheus_client.parser import text_string_to_metric_families

#: Labels kept apart (``name{label=value}``) rather than summed.
KEPT_LABELS = ("position",)

#: Each engine's gauge of the requests in its running batch.
RUNNING_GAUGES = ("sglang:num_running_reqs", "vllm:num_requests_running", "llamacpp:requests_processing")


def samples(text: str) -> Iterator[tuple[str, dict[str, str], float]]:
    """(sample name as written, labels, value) of every sample of the page."""
    try:
        found = [(s.name, s.labels, float(s.value)) for fam in text_string_to_metric_families(text)
                 for s in fam.samples]
    except ValueError:
        found = []
        for line in text.splitlines():
            if not line.strip() or line.startswith("#"):
                continue
            try:
                found += [(s.name, s.labels, float(s.value)) for fam in text_string_to_metric_families(line + "\n")
                          for s in fam.samples]
            except ValueError:
                continue
    yield from found


def parse_prometheus(text: str | None) -> dict[str, float] | None:
    """Sum each metric's samples over labels (counters and gauges alike);
    a sample with a label of KEPT_LABELS (vLLM's per-position acceptance) is
    also kept under ``name{label=value}``."""
    if text is None:
        return None
    out: dict[str, float] = {}
    for name, labels, v in samples(text):
        out[name] = out.get(name, 0.0) + v
        for label in KEPT_LABELS:
            if label in labels:
                key = f"{name}{{{label}={labels[label]}}}"
                out[key] = out.get(key, 0.0) + v
    return out


def running_gauge(metrics: dict[str, float] | None) -> float | None:
    """The server's running batch size, from whichever engine's gauge it has."""
    if not metrics:
        return None
    return next((metrics[g] for g in RUNNING_GAUGES if g in metrics), None)


def running_gauge_text(text: str | None) -> float | None:
    """``running_gauge(parse_prometheus(text))`` without parsing every line:
    the gauge's own lines found with ``str.find`` and only those parsed
    (summed over labels), so a read during a point holds the event loop for
    microseconds, not for the parse of a large /metrics page (an open loop's
    sends wait on the loop)."""
    if not text:
        return None
    for g in RUNNING_GAUGES:
        lines = []
        i = text.find(g)
        while i != -1:
            after = i + len(g)
            if (i == 0 or text[i - 1] == "\n") and after < len(text) and text[after] in " {":
                end = text.find("\n", after)
                lines.append(text[i:] if end == -1 else text[i:end])
            i = text.find(g, after)
        values = [v for name, _, v in samples("\n".join(lines) + "\n") if name == g] if lines else []
        if values:
            return sum(values)
    return None
