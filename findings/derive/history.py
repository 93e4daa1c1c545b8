"""History: replay campaigns in order and record what each one changed.

After each campaign the conclusions are derived from all data up to and
including it; the difference from the previous conclusions, with the numbers
behind it, is that campaign's entry. Pure: no I/O.
"""

from __future__ import annotations

import bisect
import copy
import functools
import hashlib
import marshal
from dataclasses import dataclass, field
from operator import attrgetter
from sys import intern
from typing import Any, Callable, Mapping

from findings.core import fmt
from findings.core.aside import Aside, Limit, Pending
from findings.derive import regressions
from findings.derive.analysis import (Best, Candidate, Cell, Comparison, Conclusions, Rules, Table, WorkloadConclusion,
                                      cells, conclude_table)
from findings.core.model import Campaign, Dataset, slotted_maker
from findings.derive.regressions import FactChange

#: (old config, old campaign, new config, new campaign, one-sided) -> the facts that changed
#: (regressions.FactsBetween: each pair once).
Between = Callable[[str, str, str, str, bool], tuple[FactChange, ...]]


@dataclass(frozen=True, slots=True)
class Provenance:
    """What the records say changed for one config of a comparison: its facts
    in the campaign now used against the campaign it was measured in before
    (``between``), or, for a new candidate, against the config it overtakes
    (``versus``)."""

    config: str
    facts_changed: tuple[FactChange, ...]
    between: tuple[str, str] | None = None
    versus: str | None = None

    @property
    def text(self) -> str:
        if self.versus is not None:
            what = regressions.describe_facts(self.facts_changed) or "no recorded fact differs"
            return f"{self.config} vs {self.versus}: {what}"
        assert self.between is not None
        if not self.facts_changed:
            return f"{self.config}: no recorded fact changed ({self.between[0]} → {self.between[1]})"
        return f"{self.config}: {regressions.describe_facts(self.facts_changed)} ({self.between[0]} → {self.between[1]})"


@dataclass(frozen=True, slots=True)
class Change:
    workload: str
    subject: str  # "policy of CFG", "latency best", "throughput best"
    before: str | None  # None: first time this was derived
    after: str
    evidence: tuple[str, ...]
    #: The recorded facts behind it, per config of the comparison.
    provenance: tuple[Provenance, ...] = ()

    @property
    def provenance_text(self) -> str:
        """``baseline: sglang_version 0.5.20 → 0.5.23 (c1 → c2); ...``, or "": configs
        with nothing changed grouped by the campaigns compared."""
        parts = [p.text for p in self.provenance if p.facts_changed or p.versus is not None]
        quiet: dict[tuple[str, str], list[str]] = {}
        for p in self.provenance:
            if not p.facts_changed and p.versus is None and p.between is not None:
                quiet.setdefault(p.between, []).append(p.config)
        for (old, new), names in quiet.items():
            parts.append(f"no recorded fact of {', '.join(names)} changed ({old} → {new})")
        return "; ".join(parts)

    @property
    def text(self) -> str:
        if self.before is None:
            head = f"{self.workload}: {self.subject} is {self.after}"
        else:
            head = f"{self.workload}: {self.subject} {self.before} → {self.after}"
        return head + (f": {'; '.join(self.evidence)}" if self.evidence else "")


#: ``Provenance(*fields)`` and ``Change(*fields)``, every field in order:
#: what they are unpickled through (the replay's state kept between
#: commands holds 70k changes and 143k provenances at a million points:
#: slotted, D177).
make_provenance: Callable[..., Provenance] = slotted_maker(Provenance, "make_provenance")
make_change: Callable[..., Change] = slotted_maker(Change, "make_change")


@dataclass(frozen=True)
class Entry:
    campaign: Campaign
    #: workload -> candidate -> its policy, as they stood after this campaign
    #: (the whole conclusions at each step: ``steps``).
    policies: Mapping[str, Mapping[str, str]]
    changes: tuple[Change, ...]


@dataclass
class HistoryCache:
    """The replay's state after a prefix of campaigns, keyed by content, so a
    new campaign costs the new campaign, not the store (issue 28).

    ``chain[k]`` hashes everything campaign k's entry depends on and the link
    before it: the rules and every config's latest facts (``facts_of`` falls
    back to them), then per campaign its name and date, its valid cells
    (values, point ids, window series), its configs' recorded facts and the
    baseline's steps known by then. A stored state is resumed only when its
    chain is a prefix of the current one; otherwise the replay starts again.
    The caller keeps it between commands (the render cache, findings/document/cache.py);
    what it holds never changes what the replay returns."""

    chain: tuple[str, ...] = ()
    #: The entries of the campaigns in ``chain``.
    entries: tuple[Entry, ...] = ()
    #: workload -> (its conclusion after the last campaign that measured it,
    #: that campaign's rank).
    concluded: Mapping[str, tuple[WorkloadConclusion, int]] = field(default_factory=dict)
    #: Campaigns replayed by the last call (not stored: how much the cache saved).
    replayed: int = 0


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
    # The candidate against the baseline when the baseline is one of the two:
    # the verdicts' direction (prose.latency says the same).
    lead = b.versus if b.versus is not None else b.lead
    where_a = f"C={lead.a.concurrency}"
    where_b = f"C={lead.b.concurrency}"
    return (
        f"{lead.a.config} {fmt.tput(lead.a.mean)} tok/s at {where_a} vs {lead.b.config} "
        f"{fmt.tput(lead.b.mean)} tok/s at {where_b}, {fmt.pct(lead.delta)}, band {fmt.band(lead.band)}",
    )


def _earlier(table: Table, config: str, conc: int, cell: Cell) -> Cell | None:
    """The config's cell at ``conc`` in the campaign before ``cell``'s."""
    return table.before(config, conc, cell.rank)


def _provenance(used: list[Cell], table: Table, between: Between) -> tuple[Provenance, ...]:
    """For each config of the cells a conclusion now rests on: its facts now
    against its facts in the campaign it was measured in before (at those C)."""
    pairs: dict[str, dict[tuple[str, str], None]] = {}
    for cell in used:
        prev = _earlier(table, cell.config, cell.concurrency, cell)
        if prev is not None:
            pairs.setdefault(cell.config, {})[(prev.campaign, cell.campaign)] = None
    out = []
    shared: dict[tuple[str, str], tuple[str, str]] = {}  # (one tuple per pair of campaigns: D177)
    for config in sorted(pairs, key=table.config_order):
        for pair in pairs[config]:
            pair = shared.setdefault(pair, pair)
            out.append(Provenance(config, between(config, pair[0], config, pair[1], False), between=pair))
    return tuple(out)


def _overtaken(cand: Candidate, before: WorkloadConclusion | None, table: Table,
               facts_of: Between) -> Provenance | None:
    """A new candidate against the strongest config it now outdoes (peak throughput)."""
    mine = table.peak(cand.config)
    if mine is None:
        return None
    existing = before.configs if before is not None else table.configs
    beaten = [(peak.mean, other, peak) for other in existing
              if other != cand.config and (peak := table.peak(other)) is not None and peak.mean < mine.mean]
    if not beaten:
        return None
    _, other, peak = max(beaten, key=lambda b: (b[0], b[1]))
    here = table.cells_of(other, mine.concurrency).get(mine.campaign)
    theirs = (here or peak).campaign
    return Provenance(cand.config, facts_of(other, theirs, cand.config, mine.campaign, True), versus=other)


def _change(workload: str, subject: str, before: str | None, after: str, evidence: tuple[str, ...],
            provenance: tuple[Provenance, ...]) -> Change:
    """A Change, its subject and labels each one string however many changes
    say it (the replay's state, kept between commands, holds 70k changes at
    a million points: pickled, one string each per piece, D177)."""
    return Change(workload, intern(subject), None if before is None else intern(before), intern(after), evidence,
                  provenance)


def _changes(before: WorkloadConclusion | None, after: WorkloadConclusion, table: Table | None = None,
             facts_of: Between | None = None) -> list[Change]:
    w = after.workload
    out: list[Change] = []

    def prov(used: list[Cell], extra: Provenance | None = None) -> tuple[Provenance, ...]:
        if table is None or facts_of is None:
            return ()
        found = _provenance(used, table, facts_of)
        return ((extra,) if extra else ()) + found

    for attr, subject in (("latency", "latency best"), ("throughput", "throughput best")):
        new: Best | None = getattr(after, attr)
        old: Best | None = getattr(before, attr) if before else None
        if new is None:
            continue
        if old is None or (old.config, old.decisive) != (new.config, new.decisive):
            used = [new.lead.a, new.lead.b] if new.lead else [new.cell]
            out.append(_change(w, subject, best_label(old) if old else None, best_label(new), best_evidence(new),
                               prov(used)))
    for cand in after.candidates:
        prev = before.candidate(cand.config) if before else None
        if prev is None:
            versus = _overtaken(cand, before, table, facts_of) if table is not None and facts_of else None
            out.append(
                _change(w, f"policy of {cand.config}", None, policy_label(cand),
                        tuple(describe(c) for c in cand.comparisons),
                        prov([c.b for c in cand.comparisons], versus))
            )
            continue
        old_v, new_v = prev.verdicts, cand.verdicts
        if old_v == new_v and (prev.policy, prev.threshold) == (cand.policy, cand.threshold):
            continue  # nothing of it changed (most candidates at most steps)
        flips = [c for c in cand.comparisons if old_v.get(c.concurrency) != new_v[c.concurrency]]
        flipped = tuple(describe(c) for c in flips)
        used = [x for c in (flips or list(cand.comparisons)) for x in (c.a, c.b)]
        if (prev.policy, prev.threshold) != (cand.policy, cand.threshold):
            out.append(_change(w, f"policy of {cand.config}", policy_label(prev), policy_label(cand), flipped,
                               prov(used)))
        elif flipped:
            out.append(_change(w, f"verdicts of {cand.config}", policy_label(prev), "unchanged policy", flipped,
                               prov(used)))
    return out


_CONFIG = attrgetter("config")


def _chain(data: Dataset, rules: Rules, by_rank: Mapping[int, list[Cell]],
           breaks_at: Callable[[int], Mapping[str, Mapping[int, frozenset[int]]]],
           keyed: Mapping[str, str] | None = None) -> list[str]:
    """HistoryCache.chain for ``data``. ``keyed``: campaign -> its cells'
    key and its suspect pairs (``_Job.keyed``), hashed for its cells where
    given: the same key, the same cells, at no cost a cell (a million
    points' cells marshalled and hashed took 0.7 s of each render)."""
    h = hashlib.sha256(repr((rules, sorted((k, sorted(v.items(), key=repr)) for k, v in data.configs.items())))
                       .encode()).hexdigest()
    out = []
    # The breaks change only where a step becomes known (``_Job.breaks_at``
    # hands out one mapping per number of steps known): each one's digest
    # made once, not a repr of every step known at every campaign (0.4 s of
    # a million points' chain, D171). id -> (the mapping, kept alive so that
    # its id is never another's, its digest).
    digests: dict[int, tuple[Any, str]] = {}
    for rank, campaign in enumerate(data.campaigns):
        cs = by_rank.get(rank, [])
        configs = sorted(set(map(_CONFIG, cs)))
        facts = [(n, sorted(data.facts.get((n, campaign.name), {}).items(), key=repr)) for n in configs]
        breaks = breaks_at(rank)
        known = digests.get(id(breaks))
        if known is None or known[0] is not breaks:
            cuts = sorted((w, [(c, sorted(r)) for c, r in sorted(b.items())]) for w, b in breaks.items())
            known = digests[id(breaks)] = (breaks, hashlib.sha256(repr(cuts).encode()).hexdigest())
        link = hashlib.sha256(repr((h, campaign, facts, known[1])).encode())
        mark = keyed.get(campaign.name) if keyed is not None else None
        if mark is not None:
            link.update(b"slice|" + mark.encode())
        else:
            _cells_digest(link, cs)
        h = link.hexdigest()
        out.append(h)
    return out


def _cells_digest(h: "hashlib._Hash", cs: list[Cell]) -> None:
    """Adds the cells to ``h``, every field of each: marshal's format 2,
    which writes strings by value (no references: the same bytes whichever
    objects hold equal strings) and each float's bits; at C speed (a
    repr of each float, then an f-string per cell, took most of a resumed
    render's hashing; issue 38)."""
    h.update(marshal.dumps(list(map(tuple, cs)), 2))


def steps(data: Dataset, rules: Rules, all_cells: list[Cell] | None = None,
          found: list[regressions.Move] | None = None) -> list[tuple[Campaign, Conclusions]]:
    """The whole conclusions after each campaign, in turn (what ``replay``
    records of them is each candidate's policy): for the tests that hold
    each step equal to deriving that prefix of the store again."""
    seen: list[tuple[Campaign, Conclusions]] = []
    replay(data, rules, all_cells, found, on_step=lambda c, k: seen.append((c, k)))
    return seen


def replay(data: Dataset, rules: Rules, all_cells: list[Cell] | None = None,
           found: list[regressions.Move] | None = None, cache: HistoryCache | None = None,
           on_step: Callable[[Campaign, Conclusions], None] | None = None) -> list[Entry]:
    """Each campaign in turn, with the conclusions from all data up to it.

    The conclusions after campaign k are those of ``conclude(data.upto(k))``
    (less the cross-checks): a cell depends only on its own campaign's
    points, so the cells are derived once and added to per-workload tables
    campaign by campaign, instead of re-deriving every prefix of the store.
    The baseline's steps (findings/derive/regressions.py) leave its drift as they
    become known: a step called thanks to a later campaign counts from then.
    ``all_cells``: ``cells(data, rules)``, and ``found``: the moves, if the
    caller has them. ``cache``: resumed where its chain is a prefix of this
    data's, and left holding this replay's state (HistoryCache).
    """
    return begin(data, rules, all_cells, found, cache, on_step).result()


#: A replay of at least this many cells runs aside when the caller can run
#: work aside (D137): fewer take less time than forking costs.
ASIDE_CELLS = 20_000

#: workload -> (its conclusion after the last campaign that measured it, that campaign's rank).
_Concluded = dict[str, tuple[WorkloadConclusion, int]]


class Replay:
    """A replay begun (``begin``): ``result()`` is ``replay``'s list of
    entries, computed here when asked for, or aside from the start;
    ``close()`` stops what runs aside if the result is not asked for."""

    def __init__(self, entries: Callable[[], list[Entry]], *aside: Pending) -> None:
        self._entries = entries
        self._aside = aside

    def result(self) -> list[Entry]:
        try:
            return self._entries()
        finally:
            self.close()

    def close(self) -> None:
        for pending in self._aside:
            pending.close()


def begin(data: Dataset, rules: Rules, all_cells: list[Cell] | None = None,
          found: list[regressions.Move] | None = None, cache: HistoryCache | None = None,
          on_step: Callable[[Campaign, Conclusions], None] | None = None, aside: Aside | None = None,
          cell_keys: Mapping[str, str] | None = None, final: Mapping[str, Table] | None = None) -> Replay:
    """``replay``, begun. Without ``aside`` it is all done when the result is
    asked for (never, if it is not). With ``aside`` (findings/core/aside.py),
    a replay of a large store
    (``ASIDE_CELLS``) runs aside from now on, while the caller derives the
    rest: a whole replay, or one resumed from the cache with many cells
    new, whose tables are built again from every cell before its first new
    campaign (D143; only the new entries come back). With a cache to
    resume from, its chain is hashed here first; a replay it resumes with
    fewer than ``ASIDE_CELLS`` cells new runs here, when the result is asked
    for (D171). With nothing to resume, the chain is hashed here while the
    replay runs aside (D146). The cache is left holding the replay's state
    once the result is asked for. The result is the same either way.
    ``cell_keys``: campaign -> the key of its valid cells (its slice's,
    findings/derive/slices.py), when ``all_cells`` are those cells less the
    suspect moves' (as ``derive`` gives them): the chain then hashes each
    campaign's key and its suspect (workload, config) pairs, not its cells
    (D174). ``final``: the step-aware tables of ``all_cells`` (each
    workload's table with the baseline's steps as known after the last
    campaign), which the caller may fill once it has them, before the
    result is asked for: a replay here that resumes for the last campaign
    alone takes the tables of the workloads it measured from them, rather
    than building each from every cell again (D175)."""
    if aside is None or on_step is not None:
        return Replay(lambda: _Job(data, rules, all_cells, found, cache, on_step, cell_keys, final).finish())
    job = _Job(data, rules, all_cells, found, cache, on_step, cell_keys, final)
    if job.cells < ASIDE_CELLS:
        return Replay(job.finish)
    if job.resume and job.new_cells < ASIDE_CELLS:  # (resume: the chain hashed here)
        # Resumed, with a few campaigns new: replayed here when asked for.
        # Aside, this process paid more for the pages the fork shared
        # (copied as it went on deriving) than the replay takes (D171).
        return Replay(job.finish)
    if job.cells >= SPLIT_CELLS and not job.resume:
        return _split(job, aside)
    pending = aside(job.run_new)
    if cache is not None and not job.may_resume:
        # Nothing to resume: the chain is only left in the cache after. The
        # whole replay aside takes longer than the rest here, so hash it here
        # meanwhile.
        job._hashed()
    return Replay(lambda: job.done(*job.joined(*pending.result())), pending)


#: A whole replay of at least this many cells is split (D154): its first
#: campaigns replayed aside, the rest here when the result is asked for.
#: Since the split is chosen when the result is asked for (D155), it pays
#: at 83k cells; at 24k the part aside is all but done by then (D156).
SPLIT_CELLS = 50_000


def split_rank(by_rank: Mapping[int, list[Cell]], start: int, campaigns: int, share: float = 0.5) -> int:
    """Where to split the campaigns from ``start`` on (by rank): the first
    campaign after which those from ``start`` hold ``share`` of their cells
    or more; ``campaigns`` (no split) when fewer than two are left."""
    if campaigns - start < 2:
        return campaigns
    sizes = [len(by_rank.get(rank, ())) for rank in range(start, campaigns)]
    total, seen = sum(sizes), 0
    for i, n in enumerate(sizes):
        seen += n
        if seen >= share * total:
            return min(start + i + 1, campaigns - 1)
    return campaigns - 1


def _split(job: _Job, aside: Aside) -> Replay:
    """A whole replay in two parts (D154, D155): from the first campaign on,
    aside from now on; when the result is asked for, the campaigns not yet
    replayed there are split in two, by their cells (``split_rank``), and
    the later ones are replayed here, each workload's state before them
    found again from its cells, while the part aside stops where they begin
    (core/aside.py ``Limit``). The two cores a large store's render has
    both replay, rather than one replaying while the other waits, however
    much this process did first. Where nothing can run aside, the whole
    replay runs here. The cache's chain is hashed here meanwhile, as for a
    whole replay aside (D146)."""
    campaigns = len(job.data.campaigns)
    limit = Limit(campaigns)
    pending = aside(functools.partial(job.run_part, 0, limit.claim))
    if not pending.running:
        pending.close()
        return Replay(job.finish)
    if job.cache is not None:
        job._hashed()

    def entries() -> list[Entry]:
        k = limit.cut(lambda taken: split_rank(job.by_rank, taken, campaigns))
        tail, concluded = job.run_part(k) if k < campaigns else ([], None)
        head, state = pending.result()
        assert len(head) == k, (len(head), k)
        return job.done(head + tail, state if concluded is None else concluded)

    return Replay(entries, pending)


class _Job:
    """A replay's inputs, in the order it reads them, and whether it resumes
    from the cache."""

    def __init__(self, data: Dataset, rules: Rules, all_cells: list[Cell] | None,
                 found: list[regressions.Move] | None, cache: HistoryCache | None,
                 on_step: Callable[[Campaign, Conclusions], None] | None,
                 cell_keys: Mapping[str, str] | None = None, final: Mapping[str, Table] | None = None) -> None:
        self.final = final
        if all_cells is None:
            all_cells = cells(data, rules)
        if found is None:
            found = regressions.analyse(data, rules, all_cells)
        self.data, self.rules, self.cache, self.on_step = data, rules, cache, on_step
        self.cells = len(all_cells)
        by_rank: dict[int, list[Cell]] = {}
        for cell in all_cells:
            by_rank.setdefault(cell.rank, []).append(cell)
        self.by_rank = by_rank
        base_steps = [m for m in regressions.steps(found) if m.config == rules.baseline]
        # The breaks known after a campaign change only where a step becomes
        # known: one mapping per number of steps known, not one per campaign
        # (which read every step at every campaign: quadratic in a long history).
        known = sorted(m.known_at for m in base_steps)
        by_known: dict[int, dict[str, dict[int, frozenset[int]]]] = {}

        def breaks_at(rank: int) -> dict[str, dict[int, frozenset[int]]]:
            k = bisect.bisect_right(known, rank)
            found = by_known.get(k)
            if found is None:
                found = by_known[k] = regressions.baseline_breaks(base_steps, rules.baseline, upto=rank)
            return found

        self.breaks_at = breaks_at
        #: campaign -> what the chain hashes of its cells, where their key is given
        self.keyed: dict[str, str] | None = None
        if cell_keys is not None:
            odd: dict[str, set[tuple[str, str]]] = {}
            for m in found:
                if m.suspect:
                    odd.setdefault(m.campaign, set()).add((m.workload, m.config))
            self.keyed = {name: f"{key}|{sorted(odd.get(name, ()))!r}" for name, key in cell_keys.items()}
        self._chain: list[str] | None = None
        self._resume = False

    @property
    def may_resume(self) -> bool:
        """Whether there is a cache to resume from: only then is the chain
        needed before the replay (to tell whether the cache's is a prefix
        of it); otherwise only to leave it in the cache after."""
        return self.cache is not None and bool(self.cache.chain) and self.on_step is None

    def _hashed(self) -> None:
        """The cache's chain for this data, and whether the cache's is a prefix
        of it."""
        if self._chain is not None:
            return
        cache = self.cache
        self._chain = (_chain(self.data, self.rules, self.by_rank, self.breaks_at, self.keyed)
                       if cache is not None else [])
        self._resume = self.may_resume and cache is not None and tuple(self._chain[:len(cache.chain)]) == cache.chain

    @property
    def chain(self) -> list[str]:
        self._hashed()
        assert self._chain is not None
        return self._chain

    @property
    def resume(self) -> bool:
        if not self.may_resume:
            return False
        self._hashed()
        return self._resume

    def run(self) -> tuple[list[Entry], _Concluded]:
        """The entries, and each workload's state at the end."""
        return _run(self.data, self.rules, self.by_rank, self.breaks_at, self.cache if self.resume else None,
                    self.on_step, final=self.final)

    def run_part(self, start: int, claim: Callable[[int], bool] | None = None) -> tuple[list[Entry], _Concluded]:
        """``run`` of the campaigns from ``start`` (by rank) up to the first
        that ``claim(rank)`` refuses, if given, from nothing cached: the
        entries of those campaigns, and each workload's state after them."""
        return _run(self.data, self.rules, self.by_rank, self.breaks_at, None, None, start, claim)

    def run_new(self) -> tuple[list[Entry], _Concluded, list[str] | None, bool]:
        """``run``, less the entries the cache it resumes from holds, with the
        chain if it was hashed here and whether it resumed (what a replay
        aside sends back: ``joined`` puts the kept entries before)."""
        entries, concluded = self.run()
        return entries[self.kept:], concluded, self._chain, self.resume

    @property
    def new_cells(self) -> int:
        """The cells of the campaigns the replay does not take from the cache
        (all, where it resumes none)."""
        return sum(len(self.by_rank.get(rank, ())) for rank in range(self.kept, len(self.data.campaigns)))

    @property
    def kept(self) -> int:
        """The entries taken from the cache: those of the prefix it resumes."""
        return len(self.cache.chain) if self.resume and self.cache is not None else 0

    def joined(self, new: list[Entry], concluded: _Concluded, chain: list[str] | None,
               resume: bool) -> tuple[list[Entry], _Concluded]:
        """``run``'s result from ``run_new``'s (computed aside: its chain, if
        hashed there, and resume are taken as they were found there)."""
        if chain is not None:
            self._chain, self._resume = chain, resume
        assert resume == self.resume
        if not self.kept:
            return new, concluded
        assert self.cache is not None
        return list(self.cache.entries) + new, concluded  # the prefix's: ``kept`` of them

    def done(self, entries: list[Entry], concluded: _Concluded) -> list[Entry]:
        """The entries, with the cache (if any) left holding this replay's state."""
        cache = self.cache
        if cache is not None:
            cache.replayed = len(self.data.campaigns) - self.kept
            cache.chain = tuple(self.chain)
            cache.entries = tuple(entries)
            cache.concluded = concluded
        return entries

    def finish(self) -> list[Entry]:
        return self.done(*self.run())


def _run(data: Dataset, rules: Rules, by_rank: Mapping[int, list[Cell]],
         breaks_at: Callable[[int], Mapping[str, Mapping[int, frozenset[int]]]], cache: HistoryCache | None,
         on_step: Callable[[Campaign, Conclusions], None] | None, start: int = 0,
         claim: Callable[[int], bool] | None = None,
         final: Mapping[str, Table] | None = None) -> tuple[list[Entry], _Concluded]:
    """The replay of the cells ``by_rank``, resumed from ``cache`` when
    given (a replay of every workload): its entries and each workload's
    state at the end.

    Or the part of it from campaign ``start`` (by rank; the entries of
    those campaigns only), stopping before the first campaign ``claim``
    refuses (the part aside of a split, D155): from ``start`` on, each workload's
    state before it found again from its cells (``_state_before``), as a
    replay from the first campaign would have left it (the history split,
    D154). ``final`` (``begin``): where it resumes for the last campaign
    alone, the tables of the workloads that campaign measured."""
    tables: dict[str, Table] = {}
    last_only = False
    concluded: dict[str, WorkloadConclusion] = {}
    last_rank: dict[str, int] = {}
    entries: list[Entry] = []
    between = regressions.FactsBetween(data.facts_of)
    previous: dict[str, WorkloadConclusion] = {}
    if cache is not None:
        # Resume: each workload's table as the replay left it (its cells up to
        # the prefix, the steps known when it was last measured), its conclusion
        # as it stood then.
        start = len(cache.chain)
        entries = list(cache.entries)
        # Only the last campaign new, and the tables of every cell known:
        # each table it needs is that of every cell (a copy of it, for the
        # verdicts only), as the cells up to it plus its own would make it,
        # and the other workloads need none (D175).
        last_only = (final is not None and start == len(data.campaigns) - 1
                     and all(cell.workload in final for cell in by_rank.get(start, ())))
        mine = {} if last_only else _by_workload(by_rank, start)
        for workload, (wc, rank) in cache.concluded.items():
            if not last_only:
                tables[workload] = Table(mine.get(workload, []), rules, verdicts_only=True,
                                         breaks=breaks_at(rank).get(workload))
            concluded[workload] = wc
            last_rank[workload] = rank
        previous = dict(concluded)
    elif start:
        tables, concluded, last_rank = _state_before(rules, by_rank, breaks_at, start)
        previous = dict(concluded)
    for rank in range(start, len(data.campaigns)):
        if claim is not None and not claim(rank):
            break
        campaign = data.campaigns[rank]
        breaks = breaks_at(rank)
        new: dict[str, list[Cell]] = {}
        for cell in by_rank.get(rank, []):
            new.setdefault(cell.workload, []).append(cell)
        for workload, added in new.items():
            if last_only and final is not None:
                view = tables[workload] = copy.copy(final[workload])  # (its dicts shared: only read, or memos)
                view.verdicts_only = True
                view.set_breaks(breaks.get(workload, {}))
            elif workload in tables:
                tables[workload].set_breaks(breaks.get(workload, {}))
                tables[workload].add(added)
            else:
                tables[workload] = Table(added, rules, verdicts_only=True, breaks=breaks.get(workload))
            # A workload this campaign did not measure concludes as before.
            concluded[workload] = conclude_table(workload, tables[workload], cross=False, detail=on_step is not None)
            last_rank[workload] = rank
        current = [concluded[w] for w in sorted(concluded)]
        changes: list[Change] = []
        for wc in current:
            old = previous.get(wc.workload)
            if wc.workload in new or old is None:
                changes.extend(_changes(old, wc, tables[wc.workload], between))
            else:
                changes.extend(_changes(old, wc))
        policies = {wc.workload: {c.config: c.policy for c in wc.candidates} for wc in current}
        entries.append(Entry(campaign=campaign, policies=policies, changes=tuple(changes)))
        if on_step is not None:
            on_step(campaign, Conclusions(rules=rules, workloads=tuple(current)))
        previous = dict(concluded)
    return entries, {w: (concluded[w], last_rank[w]) for w in concluded}


def _by_workload(by_rank: Mapping[int, list[Cell]], start: int) -> dict[str, list[Cell]]:
    """The cells of the campaigns before ``start``, by workload: in rank
    order, each campaign's as ``by_rank`` holds them; the workloads in the
    order they were first measured."""
    out: dict[str, list[Cell]] = {}
    for r in range(start):
        for c in by_rank.get(r, ()):
            found = out.get(c.workload)
            if found is None:
                out[c.workload] = [c]
            else:
                found.append(c)
    return out


def _state_before(rules: Rules, by_rank: Mapping[int, list[Cell]],
                  breaks_at: Callable[[int], Mapping[str, Mapping[int, frozenset[int]]]],
                  start: int) -> tuple[dict[str, Table], dict[str, WorkloadConclusion], dict[str, int]]:
    """Each workload's table, conclusion and last campaign (rank) before
    campaign ``start``, as the replay leaves them: its cells up to then,
    the baseline's steps known at the last campaign that measured it, and
    that table concluded. A table filled at once is the one grown campaign
    by campaign (analysis.Table), and a conclusion depends only on its
    table (tests/test_scaling.py, tests/test_history_split.py)."""
    tables: dict[str, Table] = {}
    concluded: dict[str, WorkloadConclusion] = {}
    last_rank: dict[str, int] = {}
    for workload, mine in _by_workload(by_rank, start).items():
        rank = mine[-1].rank
        tables[workload] = table = Table(mine, rules, verdicts_only=True, breaks=breaks_at(rank).get(workload))
        concluded[workload] = conclude_table(workload, table, cross=False, detail=False)
        last_rank[workload] = rank
    return tables, concluded, last_rank

