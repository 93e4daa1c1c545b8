"""History: replay campaigns in order and record what each one changed.

After each campaign the conclusions are derived from all data up to and
including it; the difference from the previous conclusions, with the numbers
behind it, is that campaign's entry. Pure: no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass

from findings import fmt
from findings.analysis import (Best, Candidate, Cell, Comparison, Conclusions, Rules, Table, WorkloadConclusion, cells,
                               conclude_table)
from findings.model import Campaign, Dataset


@dataclass(frozen=True)
class Change:
    workload: str
    subject: str  # "policy of CFG", "latency best", "throughput best"
    before: str | None  # None: first time this was derived
    after: str
    evidence: tuple[str, ...]

    @property
    def text(self) -> str:
        if self.before is None:
            head = f"{self.workload}: {self.subject} is {self.after}"
        else:
            head = f"{self.workload}: {self.subject} {self.before} → {self.after}"
        return head + (f": {'; '.join(self.evidence)}" if self.evidence else "")


@dataclass(frozen=True)
class Entry:
    campaign: Campaign
    #: The conclusions as they stood after this campaign, without the
    #: cross-checks against other campaigns' baselines (Candidate.cross).
    conclusions: Conclusions
    changes: tuple[Change, ...]


def describe(comp: Comparison) -> str:
    """C=30 win 759.3 vs 689.4 tok/s (+10.1%, band ±4.0%)."""
    unpaired = "" if comp.paired else ", unpaired"
    return (
        f"C={comp.concurrency} {comp.verdict}, {fmt.tput(comp.a.mean)} vs {fmt.tput(comp.b.mean)} tok/s, "
        f"{fmt.pct(comp.delta)}, band {fmt.band(comp.band)}{unpaired}"
    )


def policy_label(c: Candidate) -> str:
    if c.threshold is None:
        return c.policy
    return f"{c.policy} (threshold C={c.threshold})"


def best_label(b: Best | None) -> str:
    if b is None:
        return "none"
    return f"{b.config} ({'beyond noise' if b.decisive else 'within noise'})"


def best_evidence(b: Best) -> tuple[str, ...]:
    if b.lead is None:
        return (f"{b.config} alone at C={b.concurrency}: {fmt.tput(b.cell.mean)} tok/s",)
    lead = b.lead
    where_a = f"C={lead.a.concurrency}"
    where_b = f"C={lead.b.concurrency}"
    return (
        f"{lead.a.config} {fmt.tput(lead.a.mean)} tok/s at {where_a} vs {lead.b.config} "
        f"{fmt.tput(lead.b.mean)} tok/s at {where_b}, {fmt.pct(lead.delta)}, band {fmt.band(lead.band)}",
    )


def _changes(before: WorkloadConclusion | None, after: WorkloadConclusion) -> list[Change]:
    w = after.workload
    out: list[Change] = []
    for attr, subject in (("latency", "latency best"), ("throughput", "throughput best")):
        new: Best | None = getattr(after, attr)
        old: Best | None = getattr(before, attr) if before else None
        if new is None:
            continue
        if old is None or (old.config, old.decisive) != (new.config, new.decisive):
            out.append(Change(w, subject, best_label(old) if old else None, best_label(new), best_evidence(new)))
    for cand in after.candidates:
        prev = before.candidate(cand.config) if before else None
        if prev is None:
            out.append(
                Change(w, f"policy of {cand.config}", None, policy_label(cand),
                       tuple(describe(c) for c in cand.comparisons))
            )
            continue
        old_v = prev.verdicts
        flipped = tuple(describe(c) for c in cand.comparisons if old_v.get(c.concurrency) != c.verdict)
        if (prev.policy, prev.threshold) != (cand.policy, cand.threshold):
            out.append(Change(w, f"policy of {cand.config}", policy_label(prev), policy_label(cand), flipped))
        elif flipped:
            out.append(Change(w, f"verdicts of {cand.config}", policy_label(prev), "unchanged policy", flipped))
    return out


def replay(data: Dataset, rules: Rules, all_cells: list[Cell] | None = None) -> list[Entry]:
    """Each campaign in turn, with the conclusions from all data up to it.

    The conclusions after campaign k are those of ``conclude(data.upto(k))``
    (less the cross-checks): a cell depends only on its own campaign's
    points, so the cells are derived once and added to per-workload tables
    campaign by campaign, instead of re-deriving every prefix of the store.
    ``all_cells``: ``cells(data, rules)``, if the caller has them.
    """
    by_rank: dict[int, list[Cell]] = {}
    for cell in cells(data, rules) if all_cells is None else all_cells:
        by_rank.setdefault(cell.rank, []).append(cell)
    tables: dict[str, Table] = {}
    concluded: dict[str, WorkloadConclusion] = {}
    entries: list[Entry] = []
    previous: Conclusions | None = None
    for rank, campaign in enumerate(data.campaigns):
        new: dict[str, list[Cell]] = {}
        for cell in by_rank.get(rank, []):
            new.setdefault(cell.workload, []).append(cell)
        for workload, added in new.items():
            if workload in tables:
                tables[workload].add(added)
            else:
                tables[workload] = Table(added, rules, verdicts_only=True)
            # A workload this campaign did not measure concludes as before.
            concluded[workload] = conclude_table(workload, tables[workload], cross=False)
        current = Conclusions(rules=rules, workloads=tuple(concluded[w] for w in sorted(concluded)))
        changes: list[Change] = []
        for wc in current.workloads:
            old = previous.workload(wc.workload) if previous else None
            changes.extend(_changes(old, wc))
        entries.append(Entry(campaign=campaign, conclusions=current, changes=tuple(changes)))
        previous = current
    return entries
