"""Benchmark matrices: TOML in, validated frozen dataclasses out. Every table
and key, its type, default and meaning: docs/matrix.md (``KEYS`` below is the
list of keys the loader accepts; tests/test_matrix_doc.py holds the page to it).

```toml
[defaults]                    # any key here applies to every campaign
api = "native"                # native | openai-chat | openai-completions
transport = "aiohttp"         # aiohttp | httpx | raw
concurrency = [1, 2, 5, 10, 30, 70, 100, 250]
repeats = 1
warmup = 2                    # warm-up requests per point, not counted
health_timeout_s = 120
read_timeout_s = 60

[workloads.chat]
dataset = "prompts/chat.jsonl"  # a prompt file (relative to this matrix's folder): ShareGPT JSON,
                              # chat or completion JSONL, MT-Bench question.jsonl, SPEED-Bench, text
# prompts = "humaneval"       # or a set a registry package ships (the [datasets] extra)
output_len = 256              # the output cap (a file's max_tokens lowers it per request)
split_by = "category"         # optional: one workload per category (chat-coding, chat-writing, ...)
# category = "coding"         # or: that category only
max_turns = 1                 # optional: multi-turn sets send at most this many turns
# ignore_eos defaults to false for prompt sets: natural output lengths

[workloads.diverse-prompts]
prompts = "diverse"           # random-ids | diverse | fixed (made-up prompts)
input_len = 256
output_len = 128
num_prompts = 32              # at least this many requests per point ...
prompts_per_concurrency = 2   # ... and at least this many per unit of C
ignore_eos = true             # fixed output lengths (the default); false: stop at the end of sequence
seed = 1

# Launch lines also get {port} (a free one), {host}, {python} (this findings'
# interpreter) and {store} (the results store this run writes to).
[vars]                        # {name} in launch lines is replaced by these
model = "/models/target"

[configs.baseline]
launch = "python -m sglang.launch_server --model-path {model} --port {port}"
env = { CUDA_VISIBLE_DEVICES = "0,1,2,3,4,5,6,7" }
# or: url = "http://127.0.0.1:30000"  (attach to a running server)

[[campaigns]]
name = "parallel-sweep"
configs = ["baseline", "eagle3-topk4-v1"]
workloads = ["diverse-prompts"]
concurrency = [1, 30, 100, 250]  # optional, overrides defaults
```
"""

from __future__ import annotations

import json
import os
import re
import tomllib
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Mapping

from findings.bench.protocol import APIS
from findings.bench.transport import TRANSPORTS
from findings import datasets
from findings.bench.workload import DATASET, KINDS, Workload
from findings.core.errors import FindingsError, InputError
from findings.load import spec as loadspec
from findings.store.schema import valid_name


@dataclass(frozen=True)
class ConfigSpec:
    name: str
    launch: str | None = None
    url: str | None = None
    env: Mapping[str, str] = field(default_factory=dict)
    facts: Mapping[str, str | int | float | bool] = field(default_factory=dict)


@dataclass(frozen=True)
class Sweep:
    api: str = "native"
    transport: str = "aiohttp"
    concurrency: tuple[int, ...] = (1,)
    repeats: int = 1
    warmup: int = 2
    health_timeout_s: float = 120.0
    read_timeout_s: float = 60.0
    flush_cache: bool = True
    #: Seconds between reads of the server's running-batch gauge during a
    #: point; 0: never. Each read is a /metrics render on the server (D84).
    running_sample_s: float = 1.0
    #: Worker processes per point (findings/bench/workers); None: chosen from
    #: the cores and the load (the number used is recorded with each point).
    workers: int | None = None


@dataclass(frozen=True)
class CampaignSpec:
    name: str
    configs: tuple[str, ...]
    workloads: tuple[str, ...]
    sweep: Sweep


@dataclass(frozen=True)
class Matrix:
    path: str
    configs: Mapping[str, ConfigSpec]
    workloads: Mapping[str, Workload]
    campaigns: tuple[CampaignSpec, ...]
    #: [defaults]' sweep (a tune's trials use it: findings/tune).
    defaults: Sweep = field(default_factory=Sweep)


SWEEP_KEYS = {"api", "transport", "concurrency", "repeats", "warmup", "health_timeout_s", "read_timeout_s",
              "flush_cache", "running_sample_s", "workers"}


def _sweep(path: str, where: str, table: Mapping[str, Any], base: Sweep) -> Sweep:
    values: dict[str, Any] = dict(base.__dict__)
    for key, v in table.items():
        if key not in SWEEP_KEYS:
            continue
        if key == "api" and v not in APIS:
            raise InputError(path, None, f"{where}.api", f"must be one of {', '.join(APIS)}")
        if key == "transport" and v not in TRANSPORTS:
            raise InputError(path, None, f"{where}.transport", f"must be one of {', '.join(TRANSPORTS)}")
        if key == "concurrency":
            if not isinstance(v, list) or not v or not all(isinstance(c, int) and c >= 1 for c in v):
                raise InputError(path, None, f"{where}.concurrency", "expected a list of integers >= 1")
            v = tuple(sorted(set(v)))
        if key in ("repeats",) and (not isinstance(v, int) or v < 1):
            raise InputError(path, None, f"{where}.{key}", "expected an integer >= 1")
        if key == "warmup" and (not isinstance(v, int) or v < 0):
            raise InputError(path, None, f"{where}.{key}", "expected an integer >= 0")
        if key in ("health_timeout_s", "read_timeout_s") and (not isinstance(v, (int, float)) or v <= 0):
            raise InputError(path, None, f"{where}.{key}", "expected a number > 0")
        if key == "running_sample_s" and (isinstance(v, bool) or not isinstance(v, (int, float)) or v < 0):
            raise InputError(path, None, f"{where}.{key}", "expected a number >= 0 (0: no sampling)")
        if key == "workers" and (isinstance(v, bool) or not isinstance(v, int) or v < 1):
            raise InputError(path, None, f"{where}.workers", "expected an integer >= 1 (leave it out: chosen "
                             "from the cores and the load)")
        if key == "flush_cache" and not isinstance(v, bool):
            raise InputError(path, None, f"{where}.{key}", "expected true or false")
        values[key] = float(v) if key.endswith("_s") else v
    return Sweep(**values)


def _int(path: str, where: str, v: Any, minimum: int) -> int:
    if not isinstance(v, int) or isinstance(v, bool) or v < minimum:
        raise InputError(path, None, where, f"expected an integer >= {minimum}")
    return v


WORKLOAD_KEYS = {"prompts", "dataset", "input_len", "output_len", "num_prompts", "seed",
                 "prompts_per_concurrency", "ignore_eos", "split_by", "category", "max_turns", "vocab_size"}


def workload_from(path: str, name: str, t: Mapping[str, Any], base: Path | None = None) -> Workload:
    """One workload table. ``base``: the folder relative dataset paths start from
    (the matrix file's); the prompt file is read and validated here."""
    where = f"workloads.{name}"
    unknown = sorted(set(t) - WORKLOAD_KEYS - loadspec.KEYS)
    if unknown:
        raise InputError(path, None, f"{where}.{unknown[0]}",
                         f"unknown key; expected one of {', '.join(sorted(WORKLOAD_KEYS | loadspec.KEYS))}")
    load = loadspec.parse(path, where, t, base)
    w = _workload(path, name, {k: v for k, v in t.items() if k not in loadspec.KEYS}, base)
    if load is None:
        return w
    if load.mode == "trace":
        if w.prompt_set is not None or w.kind == "fixed":
            raise InputError(path, None, f"{where}.trace", "a trace builds its own prompts from its hash ids: "
                             "give prompts = \"random-ids\" (token ids) or \"diverse\" (text), not a prompt set")
        for key in ("input_len", "output_len", "num_prompts"):
            if key in t:
                raise InputError(path, None, f"{where}.{key}", "a trace gives each request's lengths and count")
    return replace(w, load=load)


def _workload(path: str, name: str, t: Mapping[str, Any], base: Path | None) -> Workload:
    where = f"workloads.{name}"
    kind = t.get("prompts", DATASET if "dataset" in t else "random-ids")
    if "dataset" in t or kind in datasets.REGISTRY:
        return _set_workload(path, name, t, base, kind)
    if kind not in KINDS:
        raise InputError(path, None, f"{where}.prompts",
                         f"must be one of {', '.join(KINDS + datasets.REGISTRY)} (or give dataset = \"PATH\")")
    for key in ("split_by", "category", "max_turns"):
        if key in t:
            raise InputError(path, None, f"{where}.{key}", "only for a prompt set (dataset or humaneval)")
    return Workload(
        name=name, kind=kind,
        input_len=_int(path, f"{where}.input_len", t.get("input_len", 256), 1),
        output_len=_int(path, f"{where}.output_len", t.get("output_len", 128), 1),
        num_prompts=_int(path, f"{where}.num_prompts", t.get("num_prompts", 32), 1),
        seed=_int(path, f"{where}.seed", t.get("seed", 1), 0),
        per_concurrency=_int(path, f"{where}.prompts_per_concurrency", t.get("prompts_per_concurrency", 1), 0),
        ignore_eos=_bool(path, f"{where}.ignore_eos", t.get("ignore_eos", True)),
        vocab_size=_int(path, f"{where}.vocab_size", t["vocab_size"], 2) if "vocab_size" in t else None,
    )


def _set_workload(path: str, name: str, t: Mapping[str, Any], base: Path | None, kind: str) -> Workload:
    where = f"workloads.{name}"
    if "dataset" in t and kind not in (DATASET,):
        raise InputError(path, None, f"{where}.prompts", "give either dataset = \"PATH\" or prompts, not both")
    if "input_len" in t:
        raise InputError(path, None, f"{where}.input_len", "a prompt set's prompts have their own lengths")
    if "dataset" in t:
        file = t["dataset"]
        if not isinstance(file, str) or not file.strip():
            raise InputError(path, None, f"{where}.dataset", "expected a file path")
        p = Path(file).expanduser()
        if not p.is_absolute() and base is not None:
            p = base / p
        ps = datasets.load(p)
    else:
        try:
            ps = datasets.named(kind)
        except FindingsError as exc:
            raise InputError(path, None, f"{where}.prompts", str(exc)) from None
    max_turns = _int(path, f"{where}.max_turns", t["max_turns"], 1) if "max_turns" in t else None
    split = t.get("split_by")
    if split is not None and split != "category":
        raise InputError(path, None, f"{where}.split_by", "the only split is \"category\"")
    if split is not None and not ps.categories:
        raise InputError(path, None, f"{where}.split_by", f"{ps.source}: its records name no category")
    only = t.get("category")
    if only is not None:
        if split is not None:
            raise InputError(path, None, f"{where}.category", "give either category or split_by, not both")
        if not isinstance(only, str) or only not in ps.categories:
            raise InputError(path, None, f"{where}.category",
                             f"not a category of {ps.source} ({', '.join(ps.categories) or 'it names none'})")
        ps = ps.only(only)
    return Workload(
        name=name, kind=DATASET, input_len=0,
        output_len=_int(path, f"{where}.output_len", t.get("output_len", 256), 1),
        num_prompts=_int(path, f"{where}.num_prompts", t.get("num_prompts", 32), 1),
        seed=_int(path, f"{where}.seed", t.get("seed", 1), 0),
        per_concurrency=_int(path, f"{where}.prompts_per_concurrency", t.get("prompts_per_concurrency", 1), 0),
        ignore_eos=_bool(path, f"{where}.ignore_eos", t.get("ignore_eos", False)),
        prompt_set=ps, max_turns=max_turns, category="*" if split else only,
    )


def api_problem(w: Workload, api: str) -> str | None:
    """Why a workload cannot run on an API (None: it can)."""
    ps = w.prompt_set
    if ps is not None and ps.multi_turn and w.max_turns != 1 and api != "openai-chat":
        return (f"workload {w.name!r} is multi-turn ({ps.format}, {ps.name}): each later turn carries the "
                f"live reply in the chat history, so it needs api = \"openai-chat\" (or max_turns = 1)")
    if w.kind == "random-ids" and api == "openai-chat":
        return f"workload {w.name!r}: random-ids prompts are token ids, which the chat API cannot take"
    return None


def split(w: Workload) -> list[Workload]:
    """``split_by = "category"``: one workload per category, named
    ``{workload}-{category}`` (the category as a name: lower case, runs of
    other characters as one dash)."""
    if w.category != "*" or w.prompt_set is None:
        return [w]
    out = []
    for cat in w.prompt_set.categories:
        slug = re.sub(r"[^a-z0-9]+", "-", cat.lower()).strip("-") or "other"
        out.append(replace(w, name=f"{w.name}-{slug}", prompt_set=w.prompt_set.only(cat), category=cat))
    return out


def _bool(path: str, where: str, v: Any) -> bool:
    if not isinstance(v, bool):
        raise InputError(path, None, where, "expected true or false")
    return v


#: A config's keys (exactly one of launch and url).
CONFIG_KEYS = frozenset({"launch", "url", "env", "facts"})
#: A ``[[campaigns]]`` entry's keys: its name, configs and workloads, and any sweep key.
CAMPAIGN_KEYS = frozenset({"name", "configs", "workloads"}) | SWEEP_KEYS
#: Every table of a matrix and the keys each takes (``vars``: any name). Every
#: key here is documented in docs/matrix.md (tests/test_matrix_doc.py checks).
KEYS: Mapping[str, frozenset[str]] = {
    "defaults": frozenset(SWEEP_KEYS),
    "workloads": frozenset(WORKLOAD_KEYS | loadspec.KEYS),
    "vars": frozenset(),
    "configs": CONFIG_KEYS,
    "campaigns": CAMPAIGN_KEYS,
    "tune": frozenset(),  # findings tune's table: checked by findings/tune/space.py (docs/tune.md)
}


def _known(path: str, where: str, table: Mapping[str, Any], allowed: frozenset[str]) -> None:
    """A key the loader does not know is refused, not ignored (a typo would be a silent default)."""
    unknown = sorted(set(table) - allowed)
    if unknown:
        raise InputError(path, None, f"{where}.{unknown[0]}",
                         f"unknown key; expected one of {', '.join(sorted(allowed))}")


def parse(path: str, text: str, campaigns_required: bool = True) -> Matrix:
    """A matrix file's text, validated (docs/matrix.md); relative dataset and
    trace paths start from the file's folder."""
    try:
        doc = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise InputError(path, None, None, f"not valid TOML: {exc}") from None
    unknown = sorted(set(doc) - set(KEYS))
    if unknown:
        raise InputError(path, None, unknown[0], f"unknown table; expected {', '.join(KEYS)}")
    for table in ("defaults", "workloads", "configs"):
        if not isinstance(doc.get(table, {}), dict):
            raise InputError(path, None, table, "expected a table")
    if not isinstance(doc.get("campaigns", []), list):
        raise InputError(path, None, "campaigns", "expected an array of tables: [[campaigns]]")
    _known(path, "defaults", doc.get("defaults", {}), KEYS["defaults"])
    defaults = _sweep(path, "defaults", doc.get("defaults", {}), Sweep(concurrency=(1, 2, 5, 10, 30, 70, 100, 250)))
    workloads: dict[str, Workload] = {}
    expanded: dict[str, list[str]] = {}
    for name, t in doc.get("workloads", {}).items():
        if not valid_name(name) or not isinstance(t, dict):
            raise InputError(path, None, f"workloads.{name}", "expected a table with a valid name")
        parts = split(workload_from(path, name, t, Path(path).parent))
        expanded[name] = [w.name for w in parts]
        for w in parts:
            if w.name in workloads:
                raise InputError(path, None, f"workloads.{name}.split_by",
                                 f"the category workload {w.name!r} clashes with another workload's name")
            workloads[w.name] = w
    variables = doc.get("vars", {})
    if not isinstance(variables, dict) or not all(isinstance(v, (str, int, float)) for v in variables.values()):
        raise InputError(path, None, "vars", "expected a table of strings")
    configs = {}
    for name, t in doc.get("configs", {}).items():
        where = f"configs.{name}"
        if not valid_name(name) or not isinstance(t, dict):
            raise InputError(path, None, where, "expected a table with a valid name")
        _known(path, where, t, CONFIG_KEYS)
        launch, url = t.get("launch"), t.get("url")
        if (launch is None) == (url is None):
            raise InputError(path, None, where, "give exactly one of 'launch' or 'url'")
        if launch is not None and (not isinstance(launch, str) or not launch.strip()):
            raise InputError(path, None, f"{where}.launch", "expected a command line")
        if isinstance(launch, str):
            for var, value in variables.items():
                launch = launch.replace("{" + var + "}", str(value))
        if url is not None and (not isinstance(url, str) or not url.startswith(("http://", "https://"))):
            raise InputError(path, None, f"{where}.url", "expected an http(s) URL")
        env = t.get("env", {})
        if not isinstance(env, dict) or not all(isinstance(v, (str, int, float)) for v in env.values()):
            raise InputError(path, None, f"{where}.env", "expected a table of strings")
        facts = t.get("facts", {})
        if not isinstance(facts, dict):
            raise InputError(path, None, f"{where}.facts", "expected a table")
        configs[name] = ConfigSpec(name=name, launch=launch, url=url,
                                   env={k: str(v) for k, v in env.items()}, facts=facts)
    campaigns = []
    seen = set()
    for i, t in enumerate(doc.get("campaigns", [])):
        where = f"campaigns[{i}]"
        if not isinstance(t, dict):
            raise InputError(path, None, where, "expected a table")
        _known(path, where, t, CAMPAIGN_KEYS)
        name = t.get("name")
        if not isinstance(name, str) or not valid_name(name) or name in seen:
            raise InputError(path, None, f"{where}.name", "expected a unique valid name")
        seen.add(name)
        cfgs = t.get("configs", [])
        wls = t.get("workloads", list(expanded))
        for c in cfgs:
            if c not in configs:
                raise InputError(path, None, f"{where}.configs", f"unknown config {c!r}")
        for w in wls:
            if w not in expanded:
                raise InputError(path, None, f"{where}.workloads", f"unknown workload {w!r}")
        wls = [part for w in wls for part in expanded[w]]
        if not cfgs or not wls:
            raise InputError(path, None, where, "needs at least one config and one workload")
        sweep = _sweep(path, where, t, defaults)
        for w in wls:
            problem = api_problem(workloads[w], sweep.api)
            if problem:
                raise InputError(path, None, f"{where}.api", problem)
        campaigns.append(CampaignSpec(name=name, configs=tuple(cfgs), workloads=tuple(wls), sweep=sweep))
    if not campaigns and campaigns_required:
        raise InputError(path, None, "campaigns", "the matrix lists no [[campaigns]]")
    return Matrix(path=path, configs=configs, workloads=workloads, campaigns=tuple(campaigns), defaults=defaults)


def attach_workload(name: str, *, api: str, prompts: str | None, dataset: str | None, input_len: int,
                    output_len: int, num_prompts: int, seed: int, ignore_eos: bool | None,
                    split_by: str | None, max_turns: int | None, vocab_size: int | None,
                    load: Mapping[str, Any] | None = None) -> Workload:
    """``findings bench --url``'s workload, validated as a matrix's would be
    (a relative --dataset path is taken from the current folder)."""
    if not valid_name(name):
        raise FindingsError(f"--workload: invalid name {name!r}")
    t: dict[str, Any] = {"output_len": output_len, "num_prompts": num_prompts, "seed": seed}
    if dataset is not None:
        if prompts is not None:
            raise FindingsError("give either --dataset or --prompts, not both")
        t["dataset"] = os.path.abspath(Path(dataset).expanduser())
    else:
        t["prompts"] = prompts or ("random-ids" if api == "native" else "diverse")
        if t["prompts"] not in datasets.REGISTRY:
            t["input_len"] = input_len
    for key, v in (("ignore_eos", ignore_eos), ("split_by", split_by), ("max_turns", max_turns),
                   ("vocab_size", vocab_size)):
        if v is not None:
            t[key] = v
    if load and "trace" in load:
        for key in ("input_len", "output_len", "num_prompts"):
            t.pop(key, None)
    t.update(load or {})
    if isinstance(t.get("trace"), str):
        t["trace"] = os.path.abspath(Path(t["trace"]).expanduser())
    return replace(workload_from("command line", name, t, Path.cwd()), source_table=t)


def _toml(value: Any) -> str:
    """One TOML value: a string, number, boolean or (nested) list."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)  # inf is TOML's inf too
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)  # a TOML basic string
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_toml(v) for v in value) + "]"
    raise TypeError(f"no TOML form for {value!r}")


def attach_matrix_toml(url: str, config: str, campaign: str, workload: Workload, sweep: Sweep) -> str | None:
    """The matrix that ``findings bench --url`` with these options amounts to:
    the config attached by its ``url``, the workload's table, the sweep as
    ``[defaults]``. Each run of an attach-mode bench records it (provenance
    ``bench_matrix``), so that ``findings plan --output`` can write a matrix for
    such runs. None when the workload was not made by ``attach_workload``."""
    if workload.source_table is None:
        return None
    lines = ["# findings bench --url, as a matrix (docs/matrix.md)", "[defaults]"]
    lines += [f"{key} = {_toml(getattr(sweep, key))}" for key in sorted(SWEEP_KEYS) if getattr(sweep, key) is not None]
    lines += ["", f"[workloads.{workload.name}]"]
    lines += [f"{key} = {_toml(v)}" for key, v in workload.source_table.items()]
    lines += ["", f"[configs.{config}]", f"url = {_toml(url)}", "", "[[campaigns]]", f"name = {_toml(campaign)}",
              f"configs = {_toml([config])}", f"workloads = {_toml([workload.name])}"]
    return "\n".join(lines) + "\n"


def attach_load(*, request_rate: str | None, burstiness: str | None, max_concurrency: int | None,
                duration_s: float | None, load_profile: str | None, trace: str | None, time_scale: float | None,
                block_size: int | None, slo_ttft_ms: float | None, slo_tpot_ms: float | None,
                slo_attainment: float | None, rate_search: int | None = None) -> dict[str, Any]:
    """The command line's open-loop options as a workload table's keys (the
    matrix validates them: findings.load.spec)."""
    t: dict[str, Any] = {}
    try:
        if request_rate is not None:
            t["request_rate"] = [float(x) for x in request_rate.split(",") if x.strip()]
        if burstiness is not None:
            t["burstiness"] = float(burstiness)
        if load_profile is not None:
            t["profile"] = [[float(a), float(b)] for a, _, b in
                            (part.partition(":") for part in load_profile.split(",") if part.strip())]
    except ValueError as exc:
        raise FindingsError(f"open-loop options: expected numbers ({exc})") from None
    for key, v in (("max_concurrency", max_concurrency), ("duration_s", duration_s), ("trace", trace),
                   ("time_scale", time_scale), ("block_size", block_size), ("slo_ttft_ms", slo_ttft_ms),
                   ("slo_tpot_ms", slo_tpot_ms), ("slo_attainment", slo_attainment), ("rate_search", rate_search)):
        if v is not None:
            t[key] = v
    return t
