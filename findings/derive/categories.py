"""Per-category views of measured points. Pure: points and conclusions in,
rows and sentences out (the report turns them into tables).

Two shapes of data carry categories:

- a point measured on a mixed prompt set keeps, per category, its requests,
  output tokens, TPOT, each request's decode rate and acceptance
  (``cat.{category}.{stat}`` metrics, bench/metrics.per_category);
- ``split_by = "category"`` makes one workload per category (its points
  record ``dataset_category``), so each category gets verdicts of its own;
  ``differences`` says where one candidate's verdicts at a C disagree
  across the categories of one prompt set.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Mapping

from findings.core import fmt
from findings.derive.analysis import LOSS, TIE, WIN, Conclusions
from findings.datasets.model import category_key, split_category_key
from findings.core.model import Point


@dataclass(frozen=True)
class CategoryRow:
    config: str
    concurrency: int
    category: str
    requests: int
    completed: int
    output_tokens: int
    #: Tokens per verify step: the server's per-request count (SGLang), else
    #: what the stream showed (tokens per event); None for a config that
    #: does not speculate, or a server that says neither.
    accept: float | None
    accept_source: str | None  # "server" | "stream"
    draft_acceptance: float | None  # llama.cpp: accepted / drafted tokens
    decode_tok_s: float | None  # mean per-request decode rate (1 / TPOT)
    tpot_ms: float | None  # median TPOT, the points' mean


def rows(points: Iterable[Point], speculative: frozenset[str]) -> list[CategoryRow]:
    """One row per config, C and category, over the points' repeats
    (requests and tokens summed; rates weighted by completed requests).
    Only points measured on a prompt set (they record ``dataset_size``) can
    have per-category metrics: the others' metrics are not scanned."""
    acc: dict[tuple[str, int, str], dict[str, list[tuple[float, float]]]] = {}
    for p in points:
        if "dataset_size" not in p.workload_params:
            continue
        for key, v in p.metrics.items():
            parsed = split_category_key(key)
            if parsed is None:
                continue
            cat, stat = parsed
            weight = p.metrics.get(category_key(cat, "completed"), 0.0)
            acc.setdefault((p.config, p.concurrency, cat), {}).setdefault(stat, []).append((v, weight))
    out = []
    for (config, c, cat), stats in sorted(acc.items()):
        def total(stat: str) -> int:
            return int(sum(v for v, _ in stats.get(stat, [])))

        def mean(stat: str) -> float | None:
            vals = stats.get(stat)
            if not vals:
                return None
            w = sum(wt for _, wt in vals)
            return sum(v * wt for v, wt in vals) / w if w > 0 else sum(v for v, _ in vals) / len(vals)

        spec = config in speculative
        server, stream = mean("accept_length"), mean("tokens_per_event")
        accept, source = (server, "server") if server is not None else (stream, "stream")
        out.append(CategoryRow(
            config=config, concurrency=c, category=cat, requests=total("requests"), completed=total("completed"),
            output_tokens=total("output_tokens"), accept=accept if spec else None,
            accept_source=source if spec and accept is not None else None,
            draft_acceptance=mean("draft_acceptance") if spec else None,
            decode_tok_s=mean("decode_tok_s"), tpot_ms=mean("median_tpot_ms")))
    return out


HEADERS = ("config", "C", "category", "requests", "output tokens", "accept length", "decode tok/s per request",
           "TPOT p50 (ms)")
ALIGN = ("left", "right", "left", "right", "right", "right", "right", "right")


def table_rows(rs: list[CategoryRow]) -> tuple[tuple[str, ...], ...]:
    """The rows as text. The accept length says where it came from:
    ``(stream)`` is tokens per streamed event, the client's own view."""
    out = []
    for r in rs:
        if r.accept is not None:
            accept = f"{r.accept:.2f}" + (" (stream)" if r.accept_source == "stream" else "")
            if r.draft_acceptance is not None:
                accept += f", drafts {r.draft_acceptance:.0%} accepted"
        else:
            accept = "—"
        req = f"{r.completed}" if r.completed == r.requests else f"{r.completed} of {r.requests}"
        out.append((r.config, str(r.concurrency), r.category, req, f"{r.output_tokens:,}", accept,
                    f"{r.decode_tok_s:.1f}" if r.decode_tok_s is not None else "—",
                    f"{r.tpot_ms:.1f}" if r.tpot_ms is not None else "—"))
    return tuple(out)


def families(points: Iterable[Point]) -> dict[str, dict[str, str]]:
    """Workloads made by ``split_by = "category"``, grouped by the prompt set
    they split: {set label: {workload: category}}."""
    out: dict[str, dict[str, str]] = {}
    for p in points:
        cat = p.workload_params.get("dataset_category")
        if not isinstance(cat, str):
            continue
        label = f"{p.workload_params.get('dataset_file', '?')} ({p.workload_params.get('prompts', '?')})"
        out.setdefault(label, {})[p.workload] = cat
    return out


FAMILY_HEADERS = ("category", "config", "C", "tok/s", "accept length", "decode tok/s per request")
FAMILY_ALIGN = ("left", "left", "right", "right", "right", "right")


def latest_campaigns(points: Iterable[Point], fams: Mapping[str, Mapping[str, str]],
                     rank: Mapping[str, int]) -> dict[str, str]:
    """Each split prompt set's latest campaign (by ``rank``, replay order), in one pass."""
    if not fams:
        return {}
    of = {w: label for label, members in fams.items() for w in members}
    best: dict[str, str] = {}
    for p in points:
        label = of.get(p.workload)
        if label is not None and rank.get(p.campaign, -1) >= rank.get(best.get(label, ""), -1):
            best[label] = p.campaign
    return best


def family_rows(points: Iterable[Point], members: Mapping[str, str], campaign: str,
                speculative: frozenset[str]) -> tuple[tuple[str, ...], ...]:
    """One split prompt set's categories side by side, in one campaign: per
    category, config and C, the output throughput and the accept length
    (the point's own, from the server's per-request figures), averaged over
    repeats. The document shows it under "By prompt category"."""
    acc: dict[tuple[str, str, int], list[Point]] = {}
    for p in points:
        if p.campaign == campaign and p.workload in members and "output_throughput_tok_s" in p.metrics:
            acc.setdefault((members[p.workload], p.config, p.concurrency), []).append(p)

    def mean(pts: list[Point], key: str) -> float | None:
        vals = [p.metrics[key] for p in pts if key in p.metrics]
        return sum(vals) / len(vals) if vals else None

    out = []
    for (cat, config, c), pts in sorted(acc.items()):
        tput = mean(pts, "output_throughput_tok_s")
        accept = mean(pts, "accept_length") if config in speculative else None
        decode = mean(pts, category_key(cat, "decode_tok_s"))
        out.append((cat, config, str(c), f"{tput:.1f}" if tput is not None else "—",
                    f"{accept:.2f}" if accept is not None else "—",
                    f"{decode:.1f}" if decode is not None else "—"))
    return tuple(out)


_WORDS = {WIN: "wins", TIE: "ties", LOSS: "loses"}
_ORDER = {WIN: 0, TIE: 1, LOSS: 2}


@dataclass(frozen=True)
class Difference:
    """One candidate at one C whose verdicts differ across the categories of one prompt set."""

    config: str
    concurrency: int
    prompt_set: str  # "chat-mix.jsonl (chat-jsonl)"
    #: (category, verdict, ratio - 1), wins first, then ties, then losses.
    verdicts: tuple[tuple[str, str, float], ...]

    def sentence(self) -> str:
        parts = [f"{_WORDS[v]} on {fmt.text(cat)} ({fmt.pct(d)})" for cat, v, d in self.verdicts]
        return (f"{fmt.code(self.config)} at C={self.concurrency} on {fmt.text(self.prompt_set)}: "
                + ", ".join(parts) + ": the verdict depends on the category; deploy by category, or on the "
                "mix you serve.")

    def to_json(self) -> dict[str, object]:
        return {"config": self.config, "concurrency": self.concurrency, "prompt_set": self.prompt_set,
                "verdicts": {cat: {"verdict": v, "delta": round(d, 6)} for cat, v, d in self.verdicts}}


def differences(conclusions: Conclusions, fams: Mapping[str, Mapping[str, str]],
                suffix: str = "") -> list[Difference]:
    """Where a candidate's verdict at one C differs by category (it wins on
    coding and loses on chat). ``suffix``: the analysis suffix of simulated
    workloads."""
    out: list[Difference] = []
    by_name = {wc.workload: wc for wc in conclusions.workloads}
    for label, members in sorted(fams.items()):
        verdicts: dict[tuple[str, int], list[tuple[str, str, float]]] = {}
        for workload, cat in members.items():
            for name in (workload, workload + suffix):
                wc = by_name.get(name)
                if wc is None:
                    continue
                for cand in wc.candidates:
                    for comp in cand.comparisons:
                        verdicts.setdefault((cand.config, comp.concurrency), []).append(
                            (cat, comp.verdict, comp.delta))
        for (config, c), vs in sorted(verdicts.items()):
            if len({v for _, v, _ in vs}) > 1:
                out.append(Difference(config, c, label,
                                      tuple(sorted(vs, key=lambda x: (_ORDER[x[1]], -x[2], x[0])))))
    return out
