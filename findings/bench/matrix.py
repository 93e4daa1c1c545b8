"""Benchmark matrices: TOML in, validated frozen dataclasses out.

```toml
[defaults]                    # any key here applies to every campaign
api = "native"                # native | openai-chat | openai-completions
transport = "aiohttp"         # aiohttp | httpx
concurrency = [1, 2, 5, 10, 30, 70, 100, 250]
repeats = 1
warmup = 2                    # warm-up requests per point, not counted
health_timeout_s = 120
read_timeout_s = 60

[workloads.diverse-prompts]
prompts = "diverse"           # random-ids | diverse | fixed
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

import tomllib
from dataclasses import dataclass, field
from typing import Any, Mapping

from findings.bench.protocol import APIS
from findings.bench.transport import TRANSPORTS
from findings.bench.workload import KINDS, Workload
from findings.errors import InputError
from findings.schema import valid_name


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


SWEEP_KEYS = {"api", "transport", "concurrency", "repeats", "warmup", "health_timeout_s", "read_timeout_s",
              "flush_cache"}


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
        if key == "flush_cache" and not isinstance(v, bool):
            raise InputError(path, None, f"{where}.{key}", "expected true or false")
        values[key] = float(v) if key.endswith("_s") else v
    return Sweep(**values)


def _int(path: str, where: str, v: Any, minimum: int) -> int:
    if not isinstance(v, int) or isinstance(v, bool) or v < minimum:
        raise InputError(path, None, where, f"expected an integer >= {minimum}")
    return v


def workload_from(path: str, name: str, t: Mapping[str, Any]) -> Workload:
    where = f"workloads.{name}"
    kind = t.get("prompts", "random-ids")
    if kind not in KINDS:
        raise InputError(path, None, f"{where}.prompts", f"must be one of {', '.join(KINDS)}")
    return Workload(
        name=name, kind=kind,
        input_len=_int(path, f"{where}.input_len", t.get("input_len", 256), 1),
        output_len=_int(path, f"{where}.output_len", t.get("output_len", 128), 1),
        num_prompts=_int(path, f"{where}.num_prompts", t.get("num_prompts", 32), 1),
        seed=_int(path, f"{where}.seed", t.get("seed", 1), 0),
        per_concurrency=_int(path, f"{where}.prompts_per_concurrency", t.get("prompts_per_concurrency", 1), 0),
        ignore_eos=_bool(path, f"{where}.ignore_eos", t.get("ignore_eos", True)),
    )


def _bool(path: str, where: str, v: Any) -> bool:
    if not isinstance(v, bool):
        raise InputError(path, None, where, "expected true or false")
    return v


def parse(path: str, text: str) -> Matrix:
    try:
        doc = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise InputError(path, None, None, f"not valid TOML: {exc}") from None
    defaults = _sweep(path, "defaults", doc.get("defaults", {}), Sweep(concurrency=(1, 2, 5, 10, 30, 70, 100, 250)))
    workloads = {}
    for name, t in doc.get("workloads", {}).items():
        if not valid_name(name) or not isinstance(t, dict):
            raise InputError(path, None, f"workloads.{name}", "expected a table with a valid name")
        workloads[name] = workload_from(path, name, t)
    variables = doc.get("vars", {})
    if not isinstance(variables, dict) or not all(isinstance(v, (str, int, float)) for v in variables.values()):
        raise InputError(path, None, "vars", "expected a table of strings")
    configs = {}
    for name, t in doc.get("configs", {}).items():
        where = f"configs.{name}"
        if not valid_name(name) or not isinstance(t, dict):
            raise InputError(path, None, where, "expected a table with a valid name")
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
        name = t.get("name")
        if not isinstance(name, str) or not valid_name(name) or name in seen:
            raise InputError(path, None, f"{where}.name", "expected a unique valid name")
        seen.add(name)
        cfgs = t.get("configs", [])
        wls = t.get("workloads", list(workloads))
        for c in cfgs:
            if c not in configs:
                raise InputError(path, None, f"{where}.configs", f"unknown config {c!r}")
        for w in wls:
            if w not in workloads:
                raise InputError(path, None, f"{where}.workloads", f"unknown workload {w!r}")
        if not cfgs or not wls:
            raise InputError(path, None, where, "needs at least one config and one workload")
        campaigns.append(CampaignSpec(name=name, configs=tuple(cfgs), workloads=tuple(wls),
                                      sweep=_sweep(path, where, t, defaults)))
    if not campaigns:
        raise InputError(path, None, "campaigns", "the matrix lists no [[campaigns]]")
    return Matrix(path=path, configs=configs, workloads=workloads, campaigns=tuple(campaigns))
