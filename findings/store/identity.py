"""What a name stands for, and the refusals when a new run says otherwise.

Pure: functions of runs, no I/O. The store's writer asks before anything is
written (findings/store/__init__.py), so a mislabelled import is refused with one
line naming the differing keys, instead of being pooled (D89):

- a **workload** name has one definition across the store: input and output
  lengths, the prompt set or dataset hash, ``ignore_eos``, the API; within
  one run too, even under ``--allow-workload-change`` (D98: the importers
  split a file by definition, so only a table or a hand-made run gets here);
- within one **campaign**, a config name has one set of **facts**
  (facts may change between campaigns: that is how regressions are explained);
- the **baseline** does not speculate by its recorded facts.

A key recorded by one side only is unknown on the other, never a
difference: a hand-made table that records no lengths is never refused
against a runner's points that do.
"""

from __future__ import annotations

import datetime as _dt

from typing import Iterable, Mapping

from findings.core.model import Run, Scalar
from findings.store.schema import _shared

#: Workload keys every tool means the same by: (our key, the tools' keys).
NEUTRAL = (
    ("input_len", ("input_len", "random_input_len")),
    ("output_len", ("output_len", "random_output_len", "sharegpt_output_len")),
    ("ignore_eos", ("ignore_eos",)),
    ("dataset_sha256", ("dataset_sha256",)),
)
#: Keys compared only between runs of the same importer, whose names for a
#: prompt set or an API are their own (sglang's "random" is findings'
#: "random-ids"; vLLM's "openai" endpoint is findings' "openai-completions").
OWN = ("prompts", "dataset", "dataset_name", "dataset_file", "api", "endpoint_type", "backend",
       "random_range_ratio", "multi_turn", "max_turns", "dataset_category", "tool")
#: Facts that name where and when a server ran, not what it is: a config
#: relaunched on another port (a campaign continued with --append) is the same.
VOLATILE_FACTS = frozenset({"launch_command", "launch", "emulator_speed"})
#: speculative_algorithm values that mean "no speculation".
NO_SPECULATION = frozenset({"", "none", "null", "false", "off", "disabled"})


def _bool(v: Scalar) -> Scalar:
    if isinstance(v, str) and v.lower() in ("true", "false", "1", "0", "yes", "no"):
        return v.lower() in ("true", "1", "yes")
    return v


def _number(v: Scalar) -> Scalar:
    if isinstance(v, float) and v.is_integer():
        return int(v)
    if isinstance(v, str):
        try:
            f = float(v)
        except ValueError:
            return v
        return int(f) if f.is_integer() else f
    return v


def definition(importer: str, params: Mapping[str, Scalar]) -> dict[str, Scalar]:
    """A point's workload definition, in comparable keys."""
    out: dict[str, Scalar] = {}
    for ours, theirs in NEUTRAL:
        for key in theirs:
            if params.get(key) is not None:
                v = params[key]
                out[ours] = _bool(v) if ours == "ignore_eos" else _number(v) if ours.endswith("_len") else v
                break
    for key in OWN:
        if params.get(key) is not None:
            out[f"{importer}:{key}"] = params[key]
    return out


def _defined(importer: str, params: Mapping[str, Scalar]) -> dict[str, Scalar]:
    """``definition``, once per process for equal parameters (the same
    workload at each C, run after run), in the reader's table of shared
    values (schema._shared), keyed by the names, the values and their types
    (1, 1.0 and True stay apart). Parameters with a float are defined each
    time: 0.0 and -0.0 are equal keys, but not the same value."""
    types = tuple(map(type, params.values()))
    if float in types:
        return definition(importer, params)
    return _shared(("definition", importer, tuple(params), tuple(params.values()), types),  # type: ignore[no-any-return]
                   lambda: definition(importer, params))


def workload_definitions(run: Run) -> dict[str, dict[str, set[Scalar]]]:
    """{workload: {key: the values the run's points give it}}."""
    out: dict[str, dict[str, set[Scalar]]] = {}
    for p in run.points:
        here = out.setdefault(p.workload, {})
        for k, v in _defined(run.importer, p.workload_params).items():
            here.setdefault(k, set()).add(v)
    return out


def _show(key: str, v: Scalar) -> str:
    return f"{key.split(':', 1)[-1]}={v!r}" if isinstance(v, str) else f"{key.split(':', 1)[-1]}={v}"


def sortable_time(stamp: str) -> str:
    """A stored time stamp (``created_at``, an amendment's ``when``) in one
    form that sorts as the times do: ``YYYY-MM-DDTHH:MM:SS.ffffffZ``. Runs
    written before microseconds were recorded (``...:SSZ``) and after sort
    together; a stamp that is not an ISO time is kept as it is."""
    try:
        t = _dt.datetime.fromisoformat(stamp.replace("Z", "+00:00"))
    except ValueError:
        return stamp
    if t.tzinfo is not None:
        t = t.astimezone(_dt.timezone.utc).replace(tzinfo=None)
    return t.isoformat(timespec="microseconds") + "Z"


class Known:
    """What the stored runs say the names stand for, built in one pass: each
    workload key's latest-written definition, and each (config, campaign)'s
    facts as first stored (a write keeps them agreeing)."""

    def __init__(self, runs: Iterable[Run] = ()) -> None:
        #: (workload, key) -> ((created_at, run_id), values)
        self.definitions: dict[tuple[str, str], tuple[tuple[str, str], set[Scalar]]] = {}
        #: (config, campaign) -> key -> (value, run_id)
        self.facts: dict[tuple[str, str], dict[str, tuple[Scalar, str]]] = {}
        for run in runs:
            self.add(run)

    def add(self, run: Run) -> None:
        when = (sortable_time(run.created_at), run.run_id)
        for name, keys in workload_definitions(run).items():
            for key, values in keys.items():
                old = self.definitions.get((name, key))
                if old is None or old[0] < when:
                    self.definitions[name, key] = (when, values)
        for pair in measured(run):
            here = self.facts.setdefault(pair, {})
            for key, value in facts_of(run, *pair).items():
                here.setdefault(key, (value, run.run_id))

    def workload_conflicts(self, run: Run) -> list[str]:
        """Why ``run`` redefines a workload name stored before: one phrase per
        workload, naming each differing key once; empty when it does not (see
        ``several_definitions`` for a run that defines one name twice itself)."""
        mine = workload_definitions(run)
        out: list[str] = []
        for name, keys in sorted(mine.items()):
            here: list[str] = []
            there: dict[str, list[str]] = {}  # run id -> its values of the differing keys
            for key, values in sorted(keys.items(), key=lambda kv: _shown_key(kv[0])):
                old = self.definitions.get((name, key))
                if len(values) == 1 and old is not None and values != old[1]:
                    (v,) = values
                    here.append(_show(key, v))
                    there.setdefault(old[0][1], []).append(", ".join(sorted(_show(key, x) for x in old[1])))
            if here:  # one phrase per name, each key once (issue 37: the message repeated itself)
                was = ", ".join(f"{' and '.join(vals)} in run {rid}" for rid, vals in there.items())
                out.append(f"workload {name!r}: {' and '.join(here)} here, {was}")
        return out

    def facts_conflicts(self, run: Run) -> list[str]:
        """Why ``run`` gives a config other facts than the store gives it in
        the same campaign: one phrase per (config, campaign)."""
        out: list[str] = []
        for config, campaign in sorted(measured(run)):
            theirs = self.facts.get((config, campaign))
            if not theirs:
                continue
            facts = facts_of(run, config, campaign)
            differ = sorted((k for k in facts.keys() & theirs.keys() if facts[k] != theirs[k][0]),
                            key=lambda k: (not k.startswith("speculative"), k))
            if differ:
                shown = "; ".join(f"{k}={facts[k]!r} here, {theirs[k][0]!r} in run {theirs[k][1]}"
                                  for k in differ[:3])
                more = f" and {len(differ) - 3} more" if len(differ) > 3 else ""
                out.append(f"config {config!r} in campaign {campaign!r}: {shown}{more}")
        return out


def several_definitions(run: Run) -> list[str]:
    """The workload names ``run`` itself gives several definitions: one
    phrase per name, its differing keys each listed once
    (``workload 'w' (input_len 1000, 2000; output_len 100, 200)``)."""
    out = []
    for name, keys in sorted(workload_definitions(run).items()):
        differ = [f"{_shown_key(key)} {', '.join(sorted(_value(v) for v in values))}"
                  for key, values in sorted(keys.items(), key=lambda kv: _shown_key(kv[0])) if len(values) > 1]
        if differ:
            out.append(f"workload {name!r} ({'; '.join(differ)})")
    return out


def _shown_key(key: str) -> str:
    return key.split(":", 1)[-1]


def _value(v: Scalar) -> str:
    return repr(v) if isinstance(v, str) else str(v)


def workload_conflicts(stored: Iterable[Run], run: Run) -> list[str]:
    """``Known(stored).workload_conflicts(run)``. A key's stored definition
    is the one of the latest-written run that records it, so a change stored
    with ``--allow-workload-change`` defines the name from then on."""
    return Known(stored).workload_conflicts(run)


def facts_conflicts(stored: Iterable[Run], run: Run) -> list[str]:
    """``Known(stored).facts_conflicts(run)``."""
    return Known(stored).facts_conflicts(run)


def facts_of(run: Run, config: str, campaign: str) -> dict[str, Scalar]:
    facts = dict(run.configs.get(config, {}))
    facts.update(run.campaign_configs.get(campaign, {}).get(config, {}))
    return {k: v for k, v in facts.items() if k not in VOLATILE_FACTS}


def measured(run: Run) -> set[tuple[str, str]]:
    return {(p.config, p.campaign) for p in run.points}


def speculates(facts: Mapping[str, Scalar]) -> str | None:
    """The speculative algorithm the facts record, or None when they record none."""
    algo = facts.get("speculative_algorithm")
    if algo is None or str(algo).strip().lower() in NO_SPECULATION:
        return None
    return str(algo)


def baseline_conflicts(run: Run, baseline: str) -> list[str]:
    """The baseline's campaigns in which its recorded facts say it speculates."""
    out = []
    for config, campaign in sorted(measured(run)):
        if config == baseline:
            algo = speculates(facts_of(run, config, campaign))
            if algo is not None:
                out.append(f"config {baseline!r} is the baseline, but its recorded facts in campaign "
                           f"{campaign!r} say speculative_algorithm={algo}")
    return out
