"""A tune's search space: the matrix file's [tune] table, validated, and its
configs as the engine would run them. Pure: no I/O (docs/tune.md).

```toml
[tune]
name = "eagle-flags"          # the campaign: tune-eagle-flags
engine = "sglang"             # sglang | vllm: whose flags and rules
launch = "{python} -m findings emulate --port {port} --speed {speed}"   # each trial's flags are appended
baseline = "baseline"         # a config of [configs], measured once (trial 0)
workload = "tune-prompts"     # a workload of [workloads]
search = "auto"               # auto (grid if the space fits the budget) | grid | optuna
trials = 30                   # budget: trials (the baseline not counted) ...
minutes = 60                  # ... and/or wall minutes
seed = 1
gpus_per_trial = 0            # with --ray: what each trial asks of a node
prune = true                  # stop a trial once it cannot beat the best
start = { speculative-num-steps = 3, speculative-eagle-topk = 4, speculative-num-draft-tokens = 16 }

[tune.space]                  # the engine's flags: a list of choices, or { min = 1, max = 8 } (integers)
speculative-algorithm = ["EAGLE3"]
speculative-num-steps = [1, 2, 3, 4, 6]
speculative-eagle-topk = [1, 2, 4]
speculative-num-draft-tokens = [4, 8, 16]
disable-overlap-schedule = [false, true]
max-running-requests = [48, 128]

[tune.env]                    # environment variables with choices (optional)
# SGLANG_SOME_SWITCH = ["0", "1"]
```
"""

from __future__ import annotations

import itertools
import json
import math
from dataclasses import dataclass, field
from typing import Any, Mapping

from findings.core import engine_rules as rules
from findings.core.errors import InputError
from findings.core.model import Scalar
from findings.store.schema import valid_name

ENGINES = ("sglang", "vllm")
SEARCHES = ("auto", "grid", "optuna")
#: SGLang's flags a space may search, and the SglangSpec field each sets.
SGLANG_FLAGS: Mapping[str, str] = {
    "speculative-algorithm": "algorithm",
    "speculative-num-steps": "num_steps",
    "speculative-eagle-topk": "eagle_topk",
    "speculative-num-draft-tokens": "num_draft_tokens",
    "disable-overlap-schedule": "overlap",  # inverted
    "max-running-requests": "max_running_requests",
}
#: vLLM's n-gram speculation: keys of --speculative-config.
VLLM_KEYS: Mapping[str, str] = {
    "num_speculative_tokens": "num_speculative_tokens",
    "prompt_lookup_min": "prompt_lookup_min",
    "prompt_lookup_max": "prompt_lookup_max",
}
KEYS = frozenset({"name", "engine", "launch", "baseline", "workload", "search", "trials", "minutes", "seed",
                  "gpus_per_trial", "start", "space", "env", "prune"})
#: The most configs a space may hold (a grid past this is a typo, not a plan).
MAX_SPACE = 100_000


@dataclass(frozen=True)
class Dimension:
    name: str
    kind: str  # "flag" | "env"
    choices: tuple[Scalar, ...]


@dataclass(frozen=True)
class Candidate:
    """One config of the space, as the engine would run it."""

    #: the values asked for, one per dimension (what the search sampled).
    asked: tuple[tuple[str, Scalar], ...]
    #: the values it runs with, after the engine's rules (the identity of the config).
    params: tuple[tuple[str, Scalar], ...]
    name: str
    args: tuple[str, ...]
    env: tuple[tuple[str, str], ...]
    notes: tuple[str, ...] = ()

    def asked_json(self) -> str:
        return json.dumps(dict(self.asked), sort_keys=True)


@dataclass(frozen=True)
class TuneSpec:
    path: str
    name: str
    engine: str
    launch: str
    baseline: str
    workload: str
    search: str = "auto"
    trials: int | None = None
    minutes: float | None = None
    seed: int = 0
    gpus_per_trial: float = 0.0
    #: Stop a trial once it cannot beat the best (false: measure every C of every trial).
    prune: bool = True
    start: tuple[tuple[str, Scalar], ...] | None = None
    dims: tuple[Dimension, ...] = field(default_factory=tuple)

    @property
    def campaign(self) -> str:
        return f"tune-{self.name}"


def _fail(path: str, where: str, why: str) -> InputError:
    return InputError(path, None, f"tune.{where}" if where else "tune", why)


def _choices(path: str, where: str, v: Any) -> tuple[Scalar, ...]:
    if isinstance(v, dict):
        lo, hi, step = v.get("min"), v.get("max"), v.get("step", 1)
        if set(v) - {"min", "max", "step"} or not all(isinstance(x, int) and not isinstance(x, bool)
                                                    for x in (lo, hi, step)):
            raise _fail(path, where, "a range is { min = INT, max = INT } (optional step = INT)")
        assert isinstance(lo, int) and isinstance(hi, int) and isinstance(step, int)
        if step < 1 or hi < lo:
            raise _fail(path, where, f"empty range {lo}..{hi} (step {step})")
        return tuple(range(lo, hi + 1, step))
    if not isinstance(v, list) or not v:
        raise _fail(path, where, "expected a non-empty list of choices or a { min, max } range")
    if not all(isinstance(x, (str, int, float, bool)) for x in v):
        raise _fail(path, where, "choices are strings, numbers or booleans")
    if len(set(map(repr, v))) != len(v):
        raise _fail(path, where, "a choice is listed twice")
    return tuple(v)


def parse(path: str, t: Any, configs: Mapping[str, object], workloads: Mapping[str, object],
          variables: Mapping[str, Any]) -> TuneSpec:
    """The matrix file's [tune] table (``configs``/``workloads``: the
    matrix's, to check the names against; ``variables``: its [vars])."""
    if not isinstance(t, dict):
        raise _fail(path, "", "expected a table")
    unknown = sorted(set(t) - KEYS)
    if unknown:
        raise _fail(path, unknown[0], f"unknown key; expected one of {', '.join(sorted(KEYS))}")
    name = t.get("name")
    if not isinstance(name, str) or not valid_name(f"tune-{name}"):
        raise _fail(path, "name", "expected a name (a store name: no control characters or surrounding spaces)")
    engine = t.get("engine")
    if engine not in ENGINES:
        raise _fail(path, "engine", f"must be one of {', '.join(ENGINES)}")
    launch = t.get("launch")
    if not isinstance(launch, str) or "{port}" not in launch:
        raise _fail(path, "launch", "expected the server's command line with {port} (each trial's flags are "
                    "appended to it)")
    for var, value in variables.items():
        launch = launch.replace("{" + var + "}", str(value))
    baseline = t.get("baseline")
    if baseline not in configs:
        raise _fail(path, "baseline", f"expected a config of [configs] ({', '.join(sorted(configs)) or 'none'})")
    workload = t.get("workload")
    if workload not in workloads:
        raise _fail(path, "workload", f"expected a workload of [workloads] ({', '.join(sorted(workloads))})")
    search = t.get("search", "auto")
    if search not in SEARCHES:
        raise _fail(path, "search", f"must be one of {', '.join(SEARCHES)}")
    trials, minutes = t.get("trials"), t.get("minutes")
    if trials is not None and (isinstance(trials, bool) or not isinstance(trials, int) or trials < 1):
        raise _fail(path, "trials", "expected an integer >= 1")
    if minutes is not None and (isinstance(minutes, bool) or not isinstance(minutes, (int, float))
                                or not math.isfinite(minutes) or minutes <= 0):
        raise _fail(path, "minutes", "expected a number > 0")
    seed = t.get("seed", 0)
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        raise _fail(path, "seed", "expected an integer >= 0")
    prune = t.get("prune", True)
    if not isinstance(prune, bool):
        raise _fail(path, "prune", "expected true or false")
    gpus = t.get("gpus_per_trial", 0)
    if isinstance(gpus, bool) or not isinstance(gpus, (int, float)) or gpus < 0:
        raise _fail(path, "gpus_per_trial", "expected a number >= 0")
    space = t.get("space")
    if not isinstance(space, dict) or not space:
        raise _fail(path, "space", "expected a table of the engine's flags, each with its choices")
    allowed = SGLANG_FLAGS if engine == "sglang" else VLLM_KEYS
    dims = []
    for flag, v in space.items():
        if flag not in allowed:
            raise _fail(path, f"space.{flag}", f"not a {engine} flag findings tune knows; expected one of "
                        f"{', '.join(allowed)}")
        dims.append(Dimension(flag, "flag", _choices(path, f"space.{flag}", v)))
    env = t.get("env", {})
    if not isinstance(env, dict):
        raise _fail(path, "env", "expected a table of NAME = [choices]")
    for var, v in env.items():
        choices = _choices(path, f"env.{var}", v)
        dims.append(Dimension(var, "env", tuple(str(c) for c in choices)))
    size = math.prod(len(d.choices) for d in dims)
    if size > MAX_SPACE:
        raise _fail(path, "space", f"{size} combinations; at most {MAX_SPACE}")
    start = t.get("start")
    start_items = None
    if start is not None:
        if not isinstance(start, dict):
            raise _fail(path, "start", "expected a table of flag = value")
        known = {d.name: d for d in dims}
        for k, v in start.items():
            if k not in known:
                raise _fail(path, f"start.{k}", "not a dimension of [tune.space] or [tune.env]")
            if v not in known[k].choices:
                raise _fail(path, f"start.{k}", f"{v!r} is not one of its choices")
        start_items = tuple((d.name, start.get(d.name, d.choices[0])) for d in dims)
    assert isinstance(baseline, str) and isinstance(workload, str)
    spec = TuneSpec(path=path, name=name, engine=engine, launch=launch, baseline=baseline, workload=workload,
                    search=search, trials=trials, minutes=float(minutes) if minutes is not None else None,
                    seed=seed, gpus_per_trial=float(gpus), prune=prune, start=start_items, dims=tuple(dims))
    if start_items is not None:
        try:
            candidate(spec, dict(start_items))
        except ValueError as exc:
            raise _fail(path, "start", f"the engine refuses this config: {exc}") from None
    return spec


def _flag_value(flag: str, v: Scalar) -> str:
    return str(v).lower() if isinstance(v, bool) else str(v)


def candidate(spec: TuneSpec, asked: Mapping[str, Scalar]) -> Candidate:
    """The config ``asked`` (one value per dimension) as the engine would run
    it; ValueError (one line) when the engine refuses it at start-up."""
    flags = {d.name: asked[d.name] for d in spec.dims if d.kind == "flag"}
    env = tuple(sorted((d.name, str(asked[d.name])) for d in spec.dims if d.kind == "env"))
    notes: tuple[str, ...] = ()
    if spec.engine == "sglang":
        fields: dict[str, Any] = {"algorithm": "EAGLE3"}
        for flag, v in flags.items():
            fields[SGLANG_FLAGS[flag]] = (not v) if flag == "disable-overlap-schedule" else v
        s, notes = rules.sglang_normalize(rules.SglangSpec(**fields))
        args = tuple(rules.sglang_args(s))
        env = tuple(sorted({**dict(env), **rules.sglang_env(s)}.items()))
        params: dict[str, Scalar] = {
            "speculative-algorithm": s.algorithm, "speculative-num-steps": s.num_steps,
            "speculative-eagle-topk": s.eagle_topk, "speculative-num-draft-tokens": s.num_draft_tokens,
            "disable-overlap-schedule": not s.overlap, "max-running-requests": s.max_running_requests}
        name = (f"{str(s.algorithm).lower()}-s{s.num_steps}-k{s.eagle_topk}-d{s.num_draft_tokens}-"
                f"{'ov' if s.overlap else 'no'}" + (f"-r{s.max_running_requests}"
                                                    if s.max_running_requests is not None else ""))
    else:
        ngram = rules.VllmNgramSpec(**{VLLM_KEYS[k]: val for k, val in flags.items()})  # type: ignore[arg-type]
        ngram, notes = rules.vllm_normalize(ngram)
        args = tuple(rules.vllm_args(ngram))
        params = {"num_speculative_tokens": ngram.num_speculative_tokens,
                  "prompt_lookup_min": ngram.prompt_lookup_min, "prompt_lookup_max": ngram.prompt_lookup_max}
        name = f"ngram-k{ngram.num_speculative_tokens}-l{ngram.prompt_lookup_min}-{ngram.prompt_lookup_max}"
    if env:
        name += "-" + "-".join(f"{k.lower()}{val}" for k, val in env)
    name = "".join(ch if ch.isalnum() or ch in "-_." else "-" for ch in name)
    return Candidate(asked=tuple((d.name, asked[d.name]) for d in spec.dims),
                     params=tuple(sorted(params.items())) + tuple(("env." + k, val) for k, val in env),
                     name=name, args=args, env=env, notes=tuple(notes))


@dataclass(frozen=True)
class Grid:
    """Every distinct config of the space, in the order of its dimensions
    (configs the engine runs alike, e.g. draft tokens forced, counted once)."""

    candidates: tuple[Candidate, ...]
    #: (what was asked, why the engine refuses it)
    refused: tuple[tuple[str, str], ...]
    combinations: int


def grid(spec: TuneSpec) -> Grid:
    seen: dict[str, Candidate] = {}
    refused = []
    combos = 0
    for values in itertools.product(*(d.choices for d in spec.dims)):
        combos += 1
        asked = {d.name: v for d, v in zip(spec.dims, values)}
        try:
            c = candidate(spec, asked)
        except ValueError as exc:
            refused.append((json.dumps(asked, sort_keys=True), str(exc)))
            continue
        seen.setdefault(c.name, c)
    return Grid(candidates=tuple(seen.values()), refused=tuple(refused), combinations=combos)
