"""Regressions and improvements: each config's own throughput, campaign after
campaign, and the recorded facts that changed with it. Pure: no I/O.

Every config is followed on its own, the baseline included: at each C, its
cell in one campaign against its cell in the previous campaign that measured
it (a *pair*). A pair that moved beyond the config's own noise at some C is a
*move*; a move is called a *step* (a regression or an improvement) only on
evidence beyond one noisy pair (docs/decisions.md D72):

1. **Beyond the band.** At each common C, the ratio new / old against
   the config's own band: the larger of the noise floor and the spread of
   the repeats in either cell (with repeats in both, the bootstrap interval
   of the ratio must also exclude 1). The baseline's drift is not part of
   it: a config is never judged by another's noise.
2. **Consistent across C.** Every common C moved the same way (all ratios
   on one side of 1), and at least half of them beyond the band.
3. **And one of:**
   - a recorded fact changed between the two campaigns (an engine upgrade,
     another flag): the strongest evidence, and the cause to name;
   - every common C (two at least) moved beyond the band, and the config's
     next campaign stayed at the new level (within the band of it, beyond the
     band of the old one): a level that held, called from that campaign on.

Repeats inside each campaign are not enough: they measure the noise within
a campaign, and this kind of machine drifts far more between campaigns
(the llama.cpp tier's baseline moved by -30% and then +48% with tight
repeats and nothing changed). A move that is none of these is *drift*: noise the baseline's drift band
absorbs, as before. A step is a change, not noise: the baseline's drift
(analysis.Table) is measured within the stretches between its steps, so a
step never widens the band that judges the candidates.

Facts compared: every fact recorded in both campaigns but free text
(``notes``); a fact recorded on one side only is a change in what was
recorded, not in the server. A launch command is compared flag by flag
(``launch --speculative-num-steps 3 → 5``), a flag added or dropped
included, without the port and host that differ on every launch (a
positional port number as well).
"""

from __future__ import annotations

import bisect
import functools
import hashlib
import itertools
import math
import operator
import shlex
import struct
import types
from dataclasses import dataclass, field
from dataclasses import replace as dataclasses_replace
from typing import Any, Callable, Iterable, Iterator, Mapping, Sequence

from findings.core import fmt
from findings.derive.analysis import (Cell, Conclusions, Rules, Table, WorkloadConclusion, cells, conclude_tables,
                                      workload_tables)
from findings.core.model import Dataset, Scalar, slotted_maker
from findings.derive.stats import Steps, codes, ratio_bounds, ratio_ci, step_pairs

REGRESSION, IMPROVEMENT, DRIFT, SUSPECT = "regression", "improvement", "drift", "suspect"

#: A config's own throughput moving by this factor or more (either way) at a
#: C between two campaigns, with no recorded fact changed, is *suspect*: far
#: beyond any drift seen on real machines (the llama.cpp tier's widest move
#: is 1.47x, its widest drift 37%), and what a wrong label looks like (a
#: 64/32 file filed under a 512/256 workload moved the seed's baseline 3.9x).
#: A suspect move is neither a step nor drift: it never widens a band (D89).
SUSPECT_RATIO = 2.0

#: Facts of free text, never compared.
FREE_TEXT = frozenset({"notes", "note", "description", "comment"})
#: Launch-command facts, compared flag by flag.
LAUNCH_FACTS = frozenset({"launch", "launch_command"})
#: Flags whose values differ on every launch of the same config.
PER_LAUNCH_FLAGS = frozenset({"--port", "--host", "--log-file", "--log-dir"})

#: fact, its value in the old campaign (or config), in the new; None: not recorded.
FactChange = tuple[str, Scalar, Scalar]


# ---------------------------------------------------------------- facts

def _same(a: Scalar, b: Scalar) -> bool:
    if isinstance(a, bool) or isinstance(b, bool):
        return a is b
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return float(a) == float(b)
    return a == b


def _flags(command: str) -> Mapping[str, str]:
    """``--flag value`` / ``--flag=value`` / bare ``--flag`` of a command line (the program and
    positional words are kept as ``argv[0]``, ``arg1``, ...). Read-only: a
    store repeats a few launch lines thousands of times."""
    return _flags_of(command)


@functools.lru_cache(maxsize=1024)
def _flags_of(command: str) -> Mapping[str, str]:
    try:
        words = shlex.split(command)
    except ValueError:
        words = command.split()
    out: dict[str, str] = {}
    positional = 0
    i = 0
    while i < len(words):
        w = words[i]
        if w.startswith("-") and len(w) > 1 and not _number(w):
            if "=" in w:
                k, v = w.split("=", 1)
                out[k] = v
            elif i + 1 < len(words) and not (words[i + 1].startswith("-") and not _number(words[i + 1])):
                out[w] = words[i + 1]
                i += 1
            else:
                out[w] = "(set)"
        else:
            out["argv[0]" if positional == 0 else f"arg{positional}"] = w
            positional += 1
        i += 1
    return types.MappingProxyType(out)


def _ports(a: str | None, b: str | None) -> bool:
    """Two port numbers (a launch line's positional port differs on every launch)."""
    return a is not None and b is not None and a.isdigit() and b.isdigit() and \
        all(1024 <= int(x) <= 65535 for x in (a, b))


def _number(word: str) -> bool:
    try:
        float(word)
        return True
    except ValueError:
        return False


def facts_changed(old: Mapping[str, Scalar], new: Mapping[str, Scalar],
                  one_sided: bool = False) -> tuple[FactChange, ...]:
    """The recorded facts that differ, sorted by name; launch commands flag by
    flag. A fact recorded on one side only counts with ``one_sided`` (two
    different configs: a baseline has no speculative settings at all), not
    between two campaigns of one config (what was recorded changed, not the
    server)."""
    out: list[FactChange] = []
    # The server's own launch command where both sides report one; findings'
    # launch line says the same with less detail.
    both = [k for k in ("launch_command", "launch") if isinstance(old.get(k), str) and isinstance(new.get(k), str)]
    for key in sorted(set(old) | set(new)):
        if key in FREE_TEXT or (key in LAUNCH_FACTS and both and key != both[0]):
            continue
        a, b = old.get(key), new.get(key)
        if key in LAUNCH_FACTS and isinstance(a, str) and isinstance(b, str):
            fa, fb = _flags(a), _flags(b)
            for flag in sorted(set(fa) | set(fb)):
                if flag in PER_LAUNCH_FLAGS or flag == "argv[0]" or _ports(fa.get(flag), fb.get(flag)):
                    continue
                if fa.get(flag) != fb.get(flag):
                    out.append((f"{key} {flag}", fa.get(flag), fb.get(flag)))
            continue
        if (a is None or b is None) and not (one_sided and (a, b) != (None, None)):
            continue
        if not _same(a, b):
            out.append((key, a, b))
    return tuple(out)


class FactsBetween:
    """``facts_changed`` between the facts of two (config, campaign) of one
    dataset (``facts_of``), each pair computed once: the history asks for
    the same pairs campaign after campaign, and every workload of a
    campaign for the same config's pair. Facts of equal content (a store of
    years holds a few distinct sets in thousands of copies, one per config
    and campaign) are compared once: a pair of contents, each fact's value
    with its type and, for a float, its repr (``True``, ``1`` and ``1.0``,
    or ``0.0`` and ``-0.0``, are not the same content)."""

    def __init__(self, facts_of: Callable[[str, str], Mapping[str, Scalar]]) -> None:
        self.facts_of = facts_of
        self._memo: dict[tuple[str, str, str, str, bool], tuple[FactChange, ...]] = {}
        #: id of a facts mapping -> (the mapping, kept alive so the id is not reused; its content).
        self._content: dict[int, tuple[Mapping[str, Scalar], tuple[object, ...]]] = {}
        self._by_content: dict[tuple[object, object, bool], tuple[FactChange, ...]] = {}

    def _key(self, facts: Mapping[str, Scalar]) -> tuple[object, ...]:
        found = self._content.get(id(facts))
        if found is None:
            found = self._content[id(facts)] = (facts, tuple(
                (k, v.__class__, repr(v) if v.__class__ is float else v) for k, v in facts.items()))
        return found[1]

    def __call__(self, old_config: str, old_campaign: str, new_config: str, new_campaign: str,
                 one_sided: bool = False) -> tuple[FactChange, ...]:
        key = (old_config, old_campaign, new_config, new_campaign, one_sided)
        found = self._memo.get(key)
        if found is None:
            old, new = self.facts_of(old_config, old_campaign), self.facts_of(new_config, new_campaign)
            content = (self._key(old), self._key(new), one_sided)
            try:
                found = self._by_content.get(content)
            except TypeError:  # a value that is no Scalar (an import's list, say): compared as it is
                found = facts_changed(old, new, one_sided)
            if found is None:
                found = self._by_content[content] = facts_changed(old, new, one_sided)
            self._memo[key] = found
        return found


#: Longer values are shown cut (the JSON keeps them whole).
SHOWN = 60


def _value(v: Scalar) -> str:
    if v is None:
        return "(not recorded)"
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, float) and v.is_integer():
        return str(int(v))
    text = str(v)
    return text if len(text) <= SHOWN else text[:SHOWN - 1] + "…"


def _pair(a: Scalar, b: Scalar) -> str:
    """``old → new``; two long strings shown from a little before where they differ."""
    if isinstance(a, str) and isinstance(b, str) and max(len(a), len(b)) > SHOWN:
        same = 0
        while same < min(len(a), len(b)) and a[same] == b[same]:
            same += 1
        start = max(0, same - 12)
        if start > 0:
            a, b = "…" + a[start:], "…" + b[start:]
    return f"{_value(a)} → {_value(b)}"


def describe_facts(changes: Sequence[FactChange]) -> str:
    """``sglang_version 0.5.20 → 0.5.23, eagle_topk 4 → 1``. Facts that changed
    from and to the same values are one change, named together
    (``model_path / served_model_name / launch_command --model-path a → b``):
    one new model is not three changes."""
    groups: dict[str, list[str]] = {}
    for k, a, b in changes:
        groups.setdefault(_pair(a, b), []).append(k)
    return ", ".join(f"{' / '.join(keys)} {pair}" for pair, keys in groups.items())


def facts_json(changes: Sequence[FactChange]) -> dict[str, list[Scalar]]:
    return {k: [a, b] for k, a, b in changes}


# ---------------------------------------------------------------- moves

@dataclass(frozen=True, slots=True)
class Move:
    """One config's change between two consecutive campaigns that measured it."""

    workload: str
    config: str
    previous_campaign: str
    campaign: str
    rank: int  # the campaign's place in replay order (where a step takes effect)
    #: (C, new / old, the config's own band at C), for every C both measured.
    #: (a ``Ratios`` where the moves were kept between commands: the same triples)
    ratios: Sequence[tuple[int, float, float]]
    facts_changed: tuple[FactChange, ...]
    kind: str  # REGRESSION | IMPROVEMENT | DRIFT
    reason: str
    #: From which campaign (rank) on the call is known: ``rank``, or later
    #: when a following campaign confirmed the level.
    known_at: int
    #: The config's next campaign (rank) after this one, if any: where the
    #: level after a suspect move's campaign is measured again.
    next_rank: int | None = None
    #: The runs holding the new campaign's cells (what to relabel or retract).
    run_ids: tuple[str, ...] = ()

    @property
    def is_step(self) -> bool:
        return self.kind in (REGRESSION, IMPROVEMENT)

    @property
    def suspect(self) -> bool:
        return self.kind == SUSPECT

    @property
    def moved(self) -> tuple[int, ...]:
        """The Cs beyond the band (in the step's direction, for a step)."""
        return tuple(c for c, r, b in self.ratios
                     if abs(r - 1) > b and (not self.is_step or (r < 1) == (self.kind == REGRESSION)))

    @property
    def concurrency(self) -> tuple[int, ...]:
        return self.moved

    @property
    def ratio(self) -> float:
        """The geometric mean of new / old over the moved Cs."""
        rs = [r for c, r, _ in self.ratios if c in self.moved] or [r for _, r, _ in self.ratios]
        return math.exp(math.fsum(math.log(r) for r in rs) / len(rs))

    def per_c(self) -> str:
        """``C=1 -12.0%, C=30 -11.8% (band ±4.0%)``."""
        return ", ".join(f"C={c} {fmt.pct(r - 1)}" for c, r, _ in self.ratios) + \
            f" (band {fmt.band(max(b for _, _, b in self.ratios))})"


#: ``Move(*fields)``, every field in order: what a Move is unpickled through
#: (the moves kept between commands, D175; slotted, D177).
make_move: Callable[..., Move] = slotted_maker(Move, "make_move")


def _band(old: Cell, new: Cell, rules: Rules) -> float:
    return max(rules.noise_floor, old.spread, new.spread)


def _interval_beyond(old: Cell, new: Cell, rules: Rules) -> bool:
    """For a ratio beyond the band between two cells of repeats: whether the
    bootstrap interval of new / old excludes 1 too (or cannot be found)."""
    # Every resampled ratio on one side of 1 (stats.ratio_bounds): the
    # interval excludes 1 for certain, and the bootstrap can be skipped.
    bounds = ratio_bounds(new.values, old.values)
    if bounds is None or bounds[0] <= 1 <= bounds[1]:
        lo, hi = ratio_ci(new.values, old.values, rules.confidence, rules.resamples,
                          "|".join(new.point_ids + old.point_ids))
        if math.isfinite(lo) and math.isfinite(hi):
            return lo > 1 or hi < 1
    return True


def moves(all_cells: Iterable[Cell], facts_of: Callable[[str, str], Mapping[str, Scalar]],
          rules: Rules) -> list[Move]:
    """Every move of every config beyond its own band, steps and drift, in
    (workload, config, rank) order. ``facts_of(config, campaign)``: the
    config's facts in that campaign.

    In columns (issue 38): every cell set against its series' previous
    campaign at C speed (stats.step_pairs); Python only walks the pairs that
    moved beyond the band, and those after a suspect move (set against the
    level before it). ``_moves_pairwise`` is the same, pair by pair: what
    non-finite values take, and what the tests hold this to."""
    cells_ = all_cells if isinstance(all_cells, list) else list(all_cells)
    return moves_kept(cells_, facts_of, rules, None, None)[0]


#: A move's ratio as ``Ratios`` packs it: (C, new / old, band), little-endian.
_RATIO = struct.Struct("<qdd")


class Ratios(Sequence[tuple[int, float, float]]):
    """A move's ``ratios`` as the moves kept between commands hold them
    (``MovesKept.packed``, D177): the triples packed in one ``bytes``, read
    back as the tuple of triples (equal to it, hashed and printed as it),
    each triple made as it is read. At a million points the 65k moves kept
    held their 578k triples in 69 MiB of tuples and floats, 14 MB packed;
    a render after a new campaign reads the ratios of a few of them."""

    __slots__ = ("_packed",)

    def __init__(self, packed: bytes) -> None:
        self._packed = packed

    @classmethod
    def of(cls, ratios: Sequence[tuple[int, float, float]]) -> Ratios | None:
        """``ratios`` packed, or None where a triple is not (int, float,
        float) with an int of 64 bits and finite floats (kept as it is: a
        NaN read back is another object, and unequal to itself)."""
        if not all(type(t) is tuple and len(t) == 3 and type(t[0]) is int and -2**63 <= t[0] < 2**63
                   and type(t[1]) is float and type(t[2]) is float and math.isfinite(t[1])
                   and math.isfinite(t[2]) for t in ratios):
            return None
        return cls(b"".join(_RATIO.pack(*t) for t in ratios))

    def __len__(self) -> int:
        return len(self._packed) // _RATIO.size

    def __iter__(self) -> Iterator[tuple[int, float, float]]:
        return _RATIO.iter_unpack(self._packed)

    def __getitem__(self, i):  # type: ignore[no-untyped-def]
        return tuple(self)[i]

    def _tuple(self) -> tuple[tuple[int, float, float], ...]:
        return tuple(self)

    def __eq__(self, other: object) -> bool:
        if type(other) is Ratios:
            return self._packed == other._packed
        return self._tuple() == other

    def __hash__(self) -> int:
        return hash(self._tuple())

    def __repr__(self) -> str:
        return repr(self._tuple())

    def __reduce__(self) -> tuple[Any, tuple[bytes]]:
        return (Ratios, (self._packed,))


#: Bump when what ``MovesKept`` holds, or how its chain is made, changes.
MOVES_VERSION = "1"

#: A series of moves: (workload, config).
Series = tuple[str, str]


@dataclass(frozen=True)
class MovesKept:
    """Every move of a store, kept between commands so that the next one
    resumes from them (D175): after a new campaign, only the moves it can
    change are found again."""

    #: One link per campaign, in rank order (``moves_chain``).
    chain: tuple[str, ...]
    #: ``moves`` of the store, in its order.
    moves: tuple[Move, ...]
    #: Each series' groups: the ranks of the campaigns where it has a cell
    #: of some throughput (what stats.step_pairs pairs), ascending.
    groups: Mapping[Series, tuple[int, ...]]

    def packed(self) -> MovesKept:
        """The same moves, each one's ratios packed (``Ratios``): what the
        caller keeps between commands."""
        out = []
        for m in self.moves:
            got = Ratios.of(m.ratios) if type(m.ratios) is tuple else None
            out.append(m if got is None else dataclasses_replace(m, ratios=got))
        return MovesKept(chain=self.chain, moves=tuple(out), groups=self.groups)


def moves_chain(rules: Rules, configs: Mapping[str, Mapping[str, Scalar]], keys: Sequence[str]) -> tuple[str, ...]:
    """The links ``MovesKept.chain`` holds: link k hashes link k - 1 and
    campaign k's key (``keys``, one per campaign in rank order, a key that
    changes with the campaign's cells, its rank, and its configs' facts:
    findings/derive/slices.py), the first the rules and every config's
    latest facts (``Dataset.facts_of`` falls back to them)."""
    head = hashlib.sha256(repr((MOVES_VERSION, rules, sorted(
        (k, sorted(v.items(), key=repr)) for k, v in configs.items()))).encode()).hexdigest()
    out = []
    for key in keys:
        head = hashlib.sha256(f"{head}|{key}".encode()).hexdigest()
        out.append(head)
    return tuple(out)


def moves_kept(all_cells: list[Cell], facts_of: Callable[[str, str], Mapping[str, Scalar]], rules: Rules,
               chain: tuple[str, ...] | None, kept: MovesKept | None) -> tuple[list[Move], MovesKept | None]:
    """``moves``, resumed from ``kept`` (the moves of an earlier state of the
    store) where its chain shares a prefix with ``chain`` (this store's),
    and what to keep for the next command (None: nothing to keep). The
    moves are the same either way (tests/test_moves_kept.py).

    Campaigns up to the first link that differs (rank K) have the same
    cells. A move there depends on its series' group before it, its own
    and the one after (``_moves_stepped``: its later group). So a kept move
    stands where its group and the one after it are before K, and every
    move of a series with no group from K on, in either state, stands. For
    the other series, the moves from the last group before K (L) on are
    found again from the cells of L's group before (L - 1), L's, and those
    from K on: the walk starts at L - 1 as it did, unless the move at L - 1
    was suspect (the walk then set L against a level before L - 1), where
    every move is found again, as it is when a series' values are not all
    finite."""
    if kept is not None and chain is not None:
        got = _resume(all_cells, facts_of, rules, chain, kept)
        if got is not None:
            return got
    steps = _steps(all_cells, rules.noise_floor) if all_cells else None
    if steps is None:
        return _moves_pairwise(all_cells, facts_of, rules), None
    found = _moves_stepped(all_cells, steps, facts_of, rules)
    if chain is None:
        return found, None
    return found, MovesKept(chain, tuple(found), {s: tuple(rs) for s, rs in _groups(all_cells, steps).items()})


def _groups(cells_: list[Cell], steps: Steps, since: int = 0) -> dict[Series, list[int]]:
    """Each series' groups (their ranks, ascending) in ``steps``, from rank ``since`` on."""
    out: dict[Series, list[int]] = {}
    order, starts = steps.order, steps.starts
    for g in range(len(steps.series)):
        head = cells_[order[starts[g]]]
        if head.rank >= since:
            out.setdefault((head.workload, head.config), []).append(head.rank)
    return out


def _resume(cells_: list[Cell], facts_of: Callable[[str, str], Mapping[str, Scalar]], rules: Rules,
            chain: tuple[str, ...], kept: MovesKept) -> tuple[list[Move], MovesKept] | None:
    """``moves_kept`` from ``kept``, or None where it cannot be resumed."""
    old = kept.chain
    k, most = 0, min(len(old), len(chain))
    while k < most and old[k] == chain[k]:
        k += 1
    if k == 0:
        return None
    if k == len(old) == len(chain):
        return list(kept.moves), kept
    ranks = list(map(_RANK, cells_))
    newer = list(itertools.compress(cells_, map(k.__le__, ranks)))
    affected = {s for s, rs in kept.groups.items() if rs and rs[-1] >= k}
    affected.update(zip(map(_WORKLOAD, newer), map(_CONFIG, newer)))
    suspect = {(m.workload, m.config, m.rank) for m in kept.moves if m.kind == SUSPECT}
    restart: dict[Series, tuple[int, ...]] = {}  # series -> its groups L - 1 and L (those it has)
    for s in affected:
        rs = kept.groups.get(s, ())
        tail = tuple(rs[max(0, bisect.bisect_left(rs, k) - 2):bisect.bisect_left(rs, k)])
        if len(tail) == 2 and (s[0], s[1], tail[0]) in suspect:
            return None
        restart[s] = tail
    wanted = set(itertools.chain.from_iterable(restart.values()))
    again = [c for c in itertools.compress(cells_, map(wanted.__contains__, ranks))
             if c.rank in restart.get((c.workload, c.config), ())]
    again.extend(newer)
    steps = _steps(again, rules.noise_floor) if again else None
    if again and steps is None:
        return None
    found = _moves_stepped(again, steps, facts_of, rules) if steps is not None else []
    stands = [m for m in kept.moves if m.rank < k and ((m.workload, m.config) not in affected
                                                       or (m.next_rank is not None and m.next_rank < k))]
    out = sorted(stands + found, key=_SERIES_RANK)
    groups = {s: rs for s, rs in kept.groups.items() if s not in affected}
    later = _groups(again, steps, k) if steps is not None else {}
    for s in affected:
        rs = kept.groups.get(s, ())
        mine = (*rs[:bisect.bisect_left(rs, k)], *later.get(s, ()))
        if mine:
            groups[s] = mine
    return out, MovesKept(chain, tuple(out), groups)


_SERIES_RANK = operator.attrgetter("workload", "config", "rank")


_WORKLOAD, _CONFIG, _RANK, _CONC, _MEAN, _LO, _HI, _N = (
    operator.attrgetter(name) for name in ("workload", "config", "rank", "concurrency", "mean", "lo", "hi", "n"))


def _steps(cells_: list[Cell], floor: float) -> Steps | None:
    """The cells as series of (workload, config), paired campaign after campaign (stats.step_pairs)."""
    workloads, _ = codes(list(map(_WORKLOAD, cells_)))
    configs, nc = codes(list(map(_CONFIG, cells_)))
    series = [w * nc + c for w, c in zip(workloads, configs)]  # (workload, config) order, as sorted tuples
    return step_pairs(series, list(map(_RANK, cells_)), list(map(_CONC, cells_)), list(map(_MEAN, cells_)),
                      list(map(_LO, cells_)), list(map(_HI, cells_)), list(map(_N, cells_)), floor,
                      far=SUSPECT_RATIO)


class _Group(Mapping[int, Cell]):
    """One campaign's cells of one series by C, made when first read (most
    moves never read the cells before or after them)."""

    __slots__ = ("_cells", "_order", "_lo", "_hi", "_by_c")

    def __init__(self, cells_: list[Cell], order: list[int], lo: int, hi: int) -> None:
        self._cells, self._order, self._lo, self._hi = cells_, order, lo, hi
        self._by_c: dict[int, Cell] | None = None

    def _map(self) -> dict[int, Cell]:
        if self._by_c is None:
            cells_, order = self._cells, self._order
            self._by_c = {cell.concurrency: cell for cell in (cells_[order[i]] for i in range(self._lo, self._hi))}
        return self._by_c

    def __getitem__(self, c: int) -> Cell:
        return self._map()[c]

    def __contains__(self, c: object) -> bool:
        return c in self._map()

    def __iter__(self) -> Iterator[int]:
        return iter(self._map())

    def __len__(self) -> int:
        return self._hi - self._lo


def _measure(old: Mapping[int, Cell], new: Mapping[int, Cell], rules: Rules,
             bootstrap: bool) -> list[tuple[int, float, float, bool]]:
    """At every C both measured: the ratio, the band (``_band``, inlined: a
    million cells), and whether it is beyond the band (the bootstrap only
    ever takes one back)."""
    floor = rules.noise_floor
    measured: list[tuple[int, float, float, bool]] = []
    for c in sorted(old.keys() & new.keys()):
        o, n = old[c], new[c]
        ratio = n.mean / o.mean
        band = max(floor, o.spread, n.spread)
        beyond = abs(ratio - 1) > band
        if beyond and bootstrap and o.n >= 2 and n.n >= 2:
            beyond = _interval_beyond(o, n, rules)
        measured.append((c, ratio, band, beyond))
    return measured


_FIRST = operator.itemgetter(0)
_POINT_IDS = operator.attrgetter("point_ids")


def _runs_of(news: list[Cell]) -> tuple[str, ...]:
    """The run ids of the cells' points (each id's part before its last
    "/"), sorted: at C speed (0.35 s of a million points' moves, D174)."""
    ids = itertools.chain.from_iterable(map(_POINT_IDS, news))
    return tuple(sorted(set(map(_FIRST, map(str.rsplit, ids, itertools.repeat("/"), itertools.repeat(1))))))


def _moves_stepped(cells_: list[Cell], steps: Steps, facts_of: Callable[[str, str], Mapping[str, Scalar]],
                   rules: Rules) -> list[Move]:
    """``moves`` from the pairs stats.step_pairs found."""
    order, starts, gseries, partner = steps.order, steps.starts, steps.series, steps.partner
    ratio, band, beyond, moved = steps.ratio, steps.band, steps.beyond, steps.moved
    paired, down, up, below, far, repeated = steps.paired, steps.down, steps.up, steps.below, steps.far, steps.repeated
    candidates = list(itertools.compress(range(len(gseries)), moved))
    between = FactsBetween(facts_of)
    bootstrap = rules.interval != "band"
    out: list[Move] = []

    def first(g: int) -> Cell:
        return cells_[order[starts[g]]]

    def direct(q: int) -> tuple[list[tuple[int, float, float, bool]], list[Cell]]:
        """Group q set against the group before it, from the pairs found in
        columns; and its cells at those C."""
        lo, hi = starts[q], starts[q + 1]
        if paired[q] == hi - lo and not (bootstrap and repeated[q]):  # every C paired, as found: sliced
            news = list(map(cells_.__getitem__, order[lo:hi]))
            return list(zip(map(_CONC, news), ratio[lo:hi], band[lo:hi], beyond[lo:hi])), news
        measured, news = [], []
        for pos in range(lo, hi):
            o = partner[pos]
            if o < 0:
                continue
            new = cells_[order[pos]]
            b = beyond[pos]
            if b and bootstrap and new.n >= 2:
                old = cells_[order[o]]
                if old.n >= 2:
                    b = _interval_beyond(old, new, rules)
            measured.append((new.concurrency, ratio[pos], band[pos], b))
            news.append(new)
        return measured, news

    def group(g: int) -> _Group:
        return _Group(cells_, order, starts[g], starts[g + 1])

    g, total = 0, len(gseries)
    while g < total:
        end = bisect.bisect_right(gseries, gseries[g], g)  # the series' groups: g .. end - 1
        head = first(g)
        workload, config = head.workload, head.config
        p, q = g, g + 1
        while q < end:
            if p == q - 1:
                if not moved[q]:  # nothing beyond the band: on to the next pair that moved
                    j = bisect.bisect_left(candidates, q)
                    if j == len(candidates) or candidates[j] >= end:
                        break
                    p, q = candidates[j] - 1, candidates[j]
                    continue
                measured, news = direct(q)
            else:  # after a suspect move: against the level before it
                at_q = group(q)
                measured = _measure(group(p), at_q, rules, bootstrap)
                news = [at_q[m[0]] for m in measured]
            if not any(m[3] for m in measured):
                p, q = q, q + 1
                continue
            old_name, new_cell = first(p).campaign, first(q)
            changed = between(config, old_name, config, new_cell.campaign)
            later_group = q + 1 if q + 1 < end else None
            later_cell = first(later_group) if later_group is not None else None
            later_rank = later_cell.rank if later_cell is not None else None
            told = None
            if p == q - 1 and not (bootstrap and repeated[q]) and (changed or not far[q]):
                told = _told(paired[q], down[q], up[q], below[q], bool(changed))
            kind, reason, known = told if told is not None else _classify(
                measured, group(p), group(q), group(later_group) if later_group is not None else None, later_rank,
                changed, rules, later_cell.campaign if later_cell is not None else None)
            runs = _runs_of(news)
            out.append(Move(workload=workload, config=config, previous_campaign=old_name,
                            campaign=new_cell.campaign, rank=new_cell.rank,
                            ratios=tuple((c, r, b) for c, r, b, _ in measured), facts_changed=changed, kind=kind,
                            reason=reason, known_at=new_cell.rank if known is None else known,
                            next_rank=later_rank, run_ids=runs))
            if kind != SUSPECT:
                p = q  # after a suspect campaign, the next is set against the level before it
            q += 1
        g = end
    return out


def _moves_pairwise(all_cells: Iterable[Cell], facts_of: Callable[[str, str], Mapping[str, Scalar]],
                    rules: Rules) -> list[Move]:
    """``moves``, pair by pair, in Python."""
    series: dict[tuple[str, str], dict[int, dict[int, Cell]]] = {}
    names: dict[int, str] = {}
    for cell in all_cells:
        if cell.mean <= 0:
            continue
        series.setdefault((cell.workload, cell.config), {}).setdefault(cell.rank, {})[cell.concurrency] = cell
        names[cell.rank] = cell.campaign
    out: list[Move] = []
    between = FactsBetween(facts_of)
    bootstrap = rules.interval != "band"
    for (workload, config), by_rank in sorted(series.items()):
        ranks = sorted(by_rank)
        p = ranks[0]
        for i in range(1, len(ranks)):
            q = ranks[i]
            old, new = by_rank[p], by_rank[q]
            measured = _measure(old, new, rules, bootstrap)
            if not any(m[3] for m in measured):
                p = q
                continue
            changed = between(config, names[p], config, names[q])
            later = by_rank.get(ranks[i + 1]) if i + 1 < len(ranks) else None
            later_rank = ranks[i + 1] if i + 1 < len(ranks) else None
            kind, reason, known = _classify(measured, old, new, later, later_rank, changed, rules,
                                            names.get(later_rank) if later_rank is not None else None)
            runs = tuple(sorted({pid.rsplit("/", 1)[0] for c, _, _, _ in measured for pid in new[c].point_ids}))
            out.append(Move(workload=workload, config=config, previous_campaign=names[p], campaign=names[q],
                            rank=q, ratios=tuple((c, r, b) for c, r, b, _ in measured), facts_changed=changed,
                            kind=kind, reason=reason, known_at=q if known is None else known,
                            next_rank=later_rank, run_ids=runs))
            if kind != SUSPECT:
                p = q  # after a suspect campaign, the next is set against the level before it
    return out


def _told(measured: int, down: int, up: int, below: int, changed: bool) -> tuple[str, str, None] | None:
    """What ``_classify`` decides from counts alone, after its suspect
    check: of the Cs both measured, how many moved beyond the band down and
    up, and how many have a ratio under 1. None where only the cells tell (a
    level that held). The columns' walk calls it straight from
    stats.step_pairs' counts, for a pair no bootstrap can take a C back from
    and not one moved as far as a suspect's with no fact changed."""
    if down and up:
        return DRIFT, "moved both ways beyond the band", None
    direction = REGRESSION if down else IMPROVEMENT
    if below != (measured if down else 0):
        return DRIFT, "not consistent across C (moved one way at one C and the other way at another)", None
    moved = down or up
    if 2 * moved < measured:
        return DRIFT, f"beyond the band at {moved} of {measured} C only", None
    if changed:
        return direction, "a recorded fact changed", None
    return None


def _classify(measured: list[tuple[int, float, float, bool]], old: Mapping[int, Cell], new: Mapping[int, Cell],
              later: Mapping[int, Cell] | None, later_rank: int | None, changed: tuple[FactChange, ...],
              rules: Rules, later_name: str | None) -> tuple[str, str, int | None]:
    down = [c for c, r, _, b in measured if b and r < 1]
    up = [c for c, r, _, b in measured if b and r > 1]
    # (the peak is looked for only when some C moved that far: most moves are drift)
    if not changed and any(r >= SUSPECT_RATIO or 1 / r >= SUSPECT_RATIO for _, r, _, _ in measured):
        c, r = max(((c, r) for c, r, _, _ in measured), key=lambda m: abs(math.log(m[1])))
        if max(r, 1 / r) >= SUSPECT_RATIO:
            if _held(measured, old, new, later, rules):
                kind = REGRESSION if r < 1 else IMPROVEMENT
                return kind, (f"moved {r:.2f}x at C={c} with no recorded fact changed, and the new level held "
                              f"in {later_name}"), later_rank
            return SUSPECT, (f"moved {r:.2f}x at C={c} with no recorded fact changed, beyond any plausible drift "
                             f"({SUSPECT_RATIO:g}x): suspect: check the labels"), None
    told = _told(len(measured), len(down), len(up), sum(1 for _, r, _, _ in measured if r < 1), bool(changed))
    if told is not None:
        return told
    direction = REGRESSION if down else IMPROVEMENT
    moved = down or up
    everywhere = len(measured) >= 2 and len(moved) == len(measured)
    if not everywhere:
        return DRIFT, "no recorded fact changed, and not beyond the band at every C (two at least)", None
    if later is not None and later_rank is not None:
        common = [c for c in moved if c in later]
        held = bool(common) and all(
            (later[c].mean / old[c].mean < 1) == (direction == REGRESSION)
            and abs(later[c].mean / old[c].mean - 1) > _band(old[c], later[c], rules)
            and abs(later[c].mean / new[c].mean - 1) <= _band(new[c], later[c], rules)
            for c in common)
        if held:
            return direction, f"no recorded fact changed; the new level held in {later_name}", later_rank
    return DRIFT, "no recorded fact changed, and one unrepeated pair of campaigns", None


def _held(measured: list[tuple[int, float, float, bool]], old: Mapping[int, Cell], new: Mapping[int, Cell],
          later: Mapping[int, Cell] | None, rules: Rules) -> bool:
    """Whether the config's next campaign stayed at the new level at every C
    it shares with the move (within the band of it, beyond the band of the old)."""
    if later is None:
        return False
    common = [c for c, *_ in measured if c in later]
    return bool(common) and all(
        abs(later[c].mean / old[c].mean - 1) > _band(old[c], later[c], rules)
        and abs(later[c].mean / new[c].mean - 1) <= _band(new[c], later[c], rules)
        for c in common)


def steps(all_moves: Iterable[Move], upto: int | None = None) -> list[Move]:
    """The moves called steps (as known after campaign rank ``upto``, if given)."""
    return [m for m in all_moves if m.is_step and (upto is None or m.known_at <= upto)]


def suspects(all_moves: Iterable[Move], upto: int | None = None) -> list[Move]:
    """The moves too large to be drift with no fact changed (as known after ``upto``)."""
    return [m for m in all_moves if m.suspect and (upto is None or m.rank <= upto)]


def baseline_breaks(all_moves: Iterable[Move], baseline: str,
                    upto: int | None = None) -> dict[str, dict[int, frozenset[int]]]:
    """workload -> C -> the ranks at which the baseline stepped there (every C
    of the pair: the level changed as a whole)."""
    out: dict[str, dict[int, set[int]]] = {}
    for m in steps(all_moves, upto):
        if m.config != baseline:
            continue
        for c, _, _ in m.ratios:
            out.setdefault(m.workload, {}).setdefault(c, set()).add(m.rank)
    return {w: {c: frozenset(r) for c, r in by_c.items()} for w, by_c in out.items()}


def c_range(cs: Sequence[int], of: int) -> str:
    """``C=1–250 (4 of 4)``, ``C=250 (1 of 4)``."""
    if not cs:
        return "no C"
    span = f"C={cs[0]}" if len(cs) == 1 else f"C={cs[0]}–{cs[-1]}"
    return f"{span} ({len(cs)} of {of})"


def analyse(data: Dataset, rules: Rules, all_cells: list[Cell]) -> list[Move]:
    """Every move in ``data`` (its valid cells ``all_cells``)."""
    return moves(all_cells, data.facts_of, rules)


@dataclass
class MovesCache:
    """The moves kept by the last command (``kept``, the caller's to give)
    and those to keep from this one (``made``, set by ``analyse_kept``), for
    the caller to keep between commands (the render cache). What it holds
    never changes the moves found."""

    kept: MovesKept | None = None
    made: MovesKept | None = None


def analyse_kept(data: Dataset, rules: Rules, all_cells: list[Cell], keys: Mapping[str, str] | None,
                 cache: MovesCache | None) -> list[Move]:
    """``analyse``, resumed from ``cache.kept`` (``moves_kept``) where the
    campaigns' keys are known (``keys``: campaign name -> the key of its
    slice, findings/derive/slices.py), with what to keep set in ``cache.made``."""
    if cache is None or keys is None or any(c.name not in keys for c in data.campaigns):
        return analyse(data, rules, all_cells)
    chain = moves_chain(rules, data.configs, [keys[c.name] for c in data.campaigns])
    found, cache.made = moves_kept(all_cells, data.facts_of, rules, chain, cache.kept)
    return found


def tables(data: Dataset, rules: Rules, all_cells: list[Cell],
           found: list[Move] | None = None) -> dict[str, Table]:
    """analysis.workload_tables with the baseline's steps left out of its
    drift, and the cells of suspect moves left out altogether."""
    found = analyse(data, rules, all_cells) if found is None else found
    return workload_tables(without_suspects(all_cells, found), rules, baseline_breaks(found, rules.baseline))


def conclude(data: Dataset, rules: Rules, all_cells: list[Cell] | None = None,
             tabs: Mapping[str, Table] | None = None) -> Conclusions:
    """The current conclusions. ``all_cells``: ``cells(data, rules)``, and
    ``tabs``: ``tables`` of them, if the caller has them."""
    if tabs is None:
        tabs = tables(data, rules, cells(data, rules) if all_cells is None else all_cells)
    return conclude_tables(rules, tabs)


def without_suspects(all_cells: list[Cell], found: Iterable[Move]) -> list[Cell]:
    """The cells less those of the suspect moves' new campaigns."""
    odd = {(m.workload, m.config, m.campaign) for m in found if m.suspect}
    return [c for c in all_cells if (c.workload, c.config, c.campaign) not in odd] if odd else all_cells


def _verdict_before(table: Table, config: str, baseline: str, conc: int, before: str) -> str | None:
    """The verdict of ``config`` against the baseline in campaign ``before`` at C, if both were measured there."""
    a = table.cells_of(config, conc).get(before)
    b = table.cells_of(baseline, conc).get(before)
    if a is None or b is None:
        return None
    comp = table.compare_cells(a, b, verdict_only=True)
    return comp.verdict if comp is not None else None


@dataclass(frozen=True)
class BaselineMoved:
    """A candidate whose verdicts flipped because the baseline stepped."""

    config: str
    baseline: str
    flips: tuple[tuple[int, str, str], ...]  # (C, verdict before, verdict now)
    step: Move

    def sentence(self, code: Callable[[str], str] = str, text: Callable[[str], str] = str) -> str:
        """One sentence; ``code`` and ``text`` format names and free text
        (fmt.code and fmt.text for markdown; plain by default)."""
        s, cand, base = self.step, code(self.config), code(self.baseline)
        what = sorted({f"{a} → {b}" for _, a, b in self.flips})
        facts = f", with {text(describe_facts(s.facts_changed))}" if s.facts_changed else ""
        moved = "regressed" if s.kind == REGRESSION else "improved"
        return (f"{cand}'s verdicts against {base} changed at {fmt.conc_list([c for c, _, _ in self.flips])} "
                f"({', '.join(what)}) because {base} moved, not {cand}: {base} {moved} by "
                f"{abs(s.ratio - 1) * 100:.1f}% from {code(s.previous_campaign)} to {code(s.campaign)}{facts}, "
                f"while {cand} stayed within its own band of its {code(s.previous_campaign)} figures.")


def baseline_moved(wc: WorkloadConclusion, table: Table, found: Sequence[Move], baseline: str) -> dict[str, BaselineMoved]:
    """candidate -> why its verdicts against the baseline changed, where
    they changed because the baseline stepped while the candidate did not
    move: the flip is the baseline's, not the candidate's."""
    out: dict[str, BaselineMoved] = {}
    base_steps = {m.campaign: m for m in found
                  if m.is_step and m.workload == wc.workload and m.config == baseline}
    for cand in wc.candidates:
        mine = {m.campaign for m in found if m.workload == wc.workload and m.config == cand.config}
        flips: list[tuple[int, str, str]] = []
        step: Move | None = None
        for comp in cand.comparisons:
            s = base_steps.get(comp.b.campaign)
            if s is None or not comp.paired or s.campaign in mine:
                continue
            if comp.concurrency not in {c for c, _, _ in s.ratios}:
                continue
            old = _verdict_before(table, cand.config, baseline, comp.concurrency, s.previous_campaign)
            if old is not None and old != comp.verdict:
                flips.append((comp.concurrency, old, comp.verdict))
                step = s
        if flips and step is not None:
            out[cand.config] = BaselineMoved(cand.config, baseline, tuple(flips), step)
    return out


def suspect_sentence(m: Move, code: Callable[[str], str] = str, cli: str = "findings") -> str:
    """``baseline`` moved 3.90x ... and the commands that fix a wrong label
    (``cli``: ``findings`` and the options that find the store)."""
    worst = max(m.ratios, key=lambda x: abs(math.log(x[1])))
    run = m.run_ids[0] if len(m.run_ids) == 1 else "RUN_ID"
    runs = "" if len(m.run_ids) == 1 else f" (runs {', '.join(code(r) for r in m.run_ids)})"
    return (f"{code(m.config)} moved {worst[1]:.2f}x at C={worst[0]} from {code(m.previous_campaign)} to "
            f"{code(m.campaign)} ({m.per_c()}) with no recorded fact changed, beyond any plausible drift "
            f"({SUSPECT_RATIO:g}x): its points there are left out of every verdict, band and best. If a label is "
            f"wrong{runs}: {code(f'{cli} store relabel {run} --workload NEW')} (or --config, --campaign), "
            f"or {code(f'{cli} store retract {run} --why TEXT')}.")


def to_json(step: Move) -> dict[str, object]:
    """One item of ``conclusions --json``'s ``regressions``, ``drift`` and
    ``suspect`` lists (docs/conclusions.md)."""
    return {
        "workload": step.workload,
        "config": step.config,
        "campaign": step.campaign,
        "previous_campaign": step.previous_campaign,
        "direction": step.kind,
        "concurrency": list(step.concurrency),
        "ratio": round(step.ratio, 4),
        "ratios": {str(c): round(r, 4) for c, r, _ in step.ratios},
        "band": round(max(b for _, _, b in step.ratios), 4),
        "facts_changed": facts_json(step.facts_changed),
        "evidence": step.reason,
        **({"runs": list(step.run_ids)} if step.suspect else {}),
    }


@dataclass(frozen=True)
class Concluded:
    """The conclusions with what this module adds: the moves, the tables whose
    baseline drift leaves the steps out, and the baseline-moved sentences."""

    conclusions: Conclusions
    moves: list[Move]
    tables: dict[str, Table]
    #: workload -> candidate -> why its verdicts flipped (baseline_moved)
    baseline_moved: dict[str, dict[str, BaselineMoved]]
    #: The cells the conclusions rest on: the valid cells less those of the
    #: suspect moves' campaigns.
    cells: list[Cell] = field(default_factory=list)
    #: point id -> why it is left out, for the points of suspect moves (they
    #: join the validity gates' flags: marked in their campaign, in no verdict).
    suspect_flags: dict[str, tuple[str, ...]] = field(default_factory=dict)

    # Each found once, when first read (the document reads the suspect
    # moves once per workload: a pass over every move each time).
    @functools.cached_property
    def steps(self) -> list[Move]:
        return steps(self.moves)

    @functools.cached_property
    def drift(self) -> list[Move]:
        return [m for m in self.moves if m.kind == DRIFT]

    @functools.cached_property
    def suspect(self) -> list[Move]:
        return suspects(self.moves)


def conclude_with_steps(data: Dataset, rules: Rules, all_cells: list[Cell],
                        found: list[Move] | None = None) -> Concluded:
    """The moves, then the conclusions from the cells less those of suspect
    moves: a level far beyond any drift with no fact changed (a wrong label,
    most likely) widens no band, makes no best and no verdict. ``found``:
    ``analyse`` of the cells, if the caller has it."""
    found = analyse(data, rules, all_cells) if found is None else found
    odd = {(m.workload, m.config, m.campaign): m for m in found if m.suspect}
    kept = without_suspects(all_cells, found)
    why: dict[str, tuple[str, ...]] = {}
    for c in all_cells:
        m = odd.get((c.workload, c.config, c.campaign))
        if m is not None:
            for pid in c.point_ids:
                why[pid] = (f"suspect: moved {m.ratio:.2f}x from campaign {m.previous_campaign} with no recorded "
                            f"fact changed: check the labels",)
    tabs = tables(data, rules, kept, found)
    result = conclude(data, rules, kept, tabs)
    moved = {wc.workload: s for wc in result.workloads
             if (s := baseline_moved(wc, tabs[wc.workload], found, rules.baseline))}
    return Concluded(result, found, tabs, moved, kept, why)
