"""Ingest: read a file with an importer, then add it to the store atomically.

All-or-nothing: the importer validates the whole file before anything is
written, and the store write is a single atomic file.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Callable
from pathlib import Path

from findings import store
from findings.core.errors import InputError, SettingsError
from findings.importers import aiperf, common, detect, sglang_bench, table, vllm_bench
from findings.core.model import Run
from findings.store.schema import valid_date, valid_name


#: ``--slo-ttft-ms``, ``--slo-tpot-ms``, ``--slo-attainment`` (D102).
SloOption = common.SloOption


@dataclass(frozen=True)
class Ingested:
    run_id: str
    path: Path
    points: int
    campaigns: tuple[str, ...]
    #: ``ingest auto``: what decided the format (the keys only that tool writes, ...).
    detected_by: str | None = None
    #: The workloads a file was split into, one per definition (D98); empty when not split.
    split: tuple[str, ...] = ()
    #: Where findings.toml's SLO went (D108): None when it had none to apply.
    slo_note: str | None = None

    def summary(self) -> str:
        split = f"; split by definition into workloads: {', '.join(self.split)}" if self.split else ""
        slo = f"\n{self.slo_note}" if self.slo_note else ""
        return (f"ingested {self.points} points into run {self.run_id} "
                f"(campaigns: {', '.join(self.campaigns)}{split}) -> {self.path}{slo}")


@dataclass(frozen=True)
class Checks:
    """What a write is checked against beyond the store itself (D89)."""

    #: The configured baseline, which must not speculate by its facts.
    baseline: str | None = None
    #: Store a workload name under a new definition (the workload really changed).
    allow_workload_change: bool = False
    #: Make the store if it is not one yet (``--create``); else such a path is refused.
    create: bool = False
    #: The store is findings.toml's own: True when that is a simulated store,
    #: False when a real one; None for any other store (--store elsewhere).
    #: Simulated and real results never share the settings' own store (D108).
    home_simulated: bool | None = None


def _store(run: Run, store_dir: Path, checks: Checks, workload: str | None = None) -> Ingested:
    store.check_home_kind(store_dir, run.source == "simulated", checks.home_simulated,
                          run.source_file or run.run_id, "measured")
    path = store.add_run(store_dir, run, baseline=checks.baseline, allow_workload_change=checks.allow_workload_change,
                         create=checks.create)
    names = tuple(dict.fromkeys(p.workload for p in run.points))
    split = names if workload is not None and names != (workload,) else ()
    return Ingested(run.run_id, path, len(run.points), tuple(c.name for c in run.campaigns), split=split)


def _skip(store_dir: Path, skip_existing: bool) -> frozenset[str]:
    return store.known_line_hashes(store_dir) if skip_existing else frozenset()


def _own_format(src: common.Source, fmt: str) -> None:
    """An explicit importer refuses a file whose own keys say it is another
    tool's, as ``ingest auto`` tells them apart (a file it cannot tell is the
    named importer's to read or refuse)."""
    try:
        found, why = detect.explain(src)
    except InputError:
        return
    if found != fmt:
        raise InputError(src.path, None, None, f"this is {found} output, not {fmt} ({why}); use "
                                               f"'findings ingest {found}' (or 'findings ingest auto'); nothing was written")


def ingest_table(store_dir: Path, file: str, configs: str | None = None,
                 environment: str | None = None, skip_existing: bool = False, checks: Checks = Checks()) -> Ingested:
    src = common.read_source(file)
    _own_format(src, "table")
    run = table.read(
        src,
        configs_src=common.read_source(configs) if configs else None,
        environment=common.read_environment(environment),
        skip_lines=_skip(store_dir, skip_existing),
    )
    return _store(run, store_dir, checks)


def _check_point_options(config: str, campaign: str, workload: str, date: str) -> None:
    for label, value in (("--config", config), ("--campaign", campaign), ("--workload", workload)):
        if not valid_name(value):
            raise SettingsError(f"{label}: invalid name {value!r}")
    if not valid_date(date):
        raise SettingsError(f"--date: expected YYYY-MM-DD, got {date!r}")


def _ingest_labelled(fmt: str, reader: Callable[..., Run], store_dir: Path, file: str, *, config: str,
                     campaign: str, workload: str, date: str, order: int | None, concurrency: int | None,
                     environment: str | None, skip_existing: bool, checks: Checks,
                     slo: common.SloOption = common.SloOption()) -> Ingested:
    """The formats whose files do not name config, campaign, workload or date."""
    _check_point_options(config, campaign, workload, date)
    src = common.read_source(file)
    _own_format(src, fmt)
    run = reader(
        src,
        config=config, campaign=campaign, workload=workload, date=date, order=order,
        concurrency=concurrency,
        environment=common.read_environment(environment),
        skip_lines=_skip(store_dir, skip_existing),
    )
    run = common.apply_slo(run, slo)
    done = _store(run, store_dir, checks, workload)
    return replace(done, slo_note=_slo_note(run, slo)) if slo.from_settings and slo.set else done


def _slo_note(run: Run, slo: common.SloOption) -> str | None:
    judged, without = common.slo_applied(run)
    if not judged and not without:
        return None  # a closed-loop file: nothing for an SLO to judge
    text = f"findings.toml's SLO ({slo.describe()}) judged {judged} open-loop point{'s' * (judged != 1)}"
    if without:
        text += (f"; {without} had no per-request times (sglang.bench_serving --output-details, "
                 f"vllm bench serve --save-detailed) and have no goodput")
    return text


def ingest_sglang_bench(store_dir: Path, file: str, *, config: str, campaign: str, workload: str,
                        date: str, order: int | None = None, concurrency: int | None = None,
                        environment: str | None = None, skip_existing: bool = False,
                        checks: Checks = Checks(), slo: common.SloOption = common.SloOption()) -> Ingested:
    """``sglang.bench_serving --output-file`` JSONL: one point per line."""
    return _ingest_labelled("sglang-bench", sglang_bench.read, store_dir, file, config=config, campaign=campaign,
                            workload=workload, date=date, order=order, concurrency=concurrency,
                            environment=environment, skip_existing=skip_existing, checks=checks, slo=slo)


def ingest_vllm_bench(store_dir: Path, file: str, *, config: str, campaign: str, workload: str,
                      date: str, order: int | None = None, concurrency: int | None = None,
                      environment: str | None = None, skip_existing: bool = False,
                      checks: Checks = Checks(), slo: common.SloOption = common.SloOption()) -> Ingested:
    """``vllm bench serve --save-result`` JSON: one point per result object."""
    return _ingest_labelled("vllm-bench", vllm_bench.read, store_dir, file, config=config, campaign=campaign,
                            workload=workload, date=date, order=order, concurrency=concurrency,
                            environment=environment, skip_existing=skip_existing, checks=checks, slo=slo)


def ingest_aiperf(store_dir: Path, file: str, *, config: str, campaign: str, workload: str,
                  date: str, order: int | None = None, concurrency: int | None = None,
                  environment: str | None = None, skip_existing: bool = False,
                  checks: Checks = Checks(), slo: common.SloOption = common.SloOption()) -> Ingested:
    """AIPerf ``profile_export_aiperf.json`` (or genai-perf's): one point."""
    return _ingest_labelled("aiperf", aiperf.read, store_dir, file, config=config, campaign=campaign,
                            workload=workload, date=date, order=order, concurrency=concurrency,
                            environment=environment, skip_existing=skip_existing, checks=checks, slo=slo)


def ingest_auto(store_dir: Path, file: str, *, config: str | None = None, campaign: str | None = None,
                workload: str | None = None, date: str | None = None, order: int | None = None,
                concurrency: int | None = None, configs: str | None = None,
                environment: str | None = None, skip_existing: bool = False,
                checks: Checks = Checks(), slo: common.SloOption = common.SloOption()) -> tuple[str, Ingested]:
    """Detect the format of ``file`` by its content, check the options it needs, ingest it.

    Returns the detected format's name and what was ingested (with what
    decided the format, ``detected_by``).
    """
    src = common.read_source(file)
    try:
        fmt, why = detect.explain(src)
    except detect.Undetected as exc:
        raise _nearest_reason(src, exc, config=config, campaign=campaign, workload=workload, date=date,
                              concurrency=concurrency) from None
    if fmt == "table":
        extra = [name for name, value in (("--config", config), ("--campaign", campaign), ("--workload", workload),
                                          ("--date", date), ("--order", order), ("--concurrency", concurrency),
                                          *(() if slo.from_settings else (
                                              ("--slo-ttft-ms", slo.ttft_ms), ("--slo-tpot-ms", slo.tpot_ms),
                                              ("--slo-attainment", slo.attainment))))
                 if value is not None]
        if extra:
            raise SettingsError(f"{file} is a table (campaign, config and workload are its columns): "
                                f"{', '.join(extra)} do not apply")
        return fmt, replace(ingest_table(store_dir, file, configs=configs, environment=environment,
                                         skip_existing=skip_existing, checks=checks), detected_by=why)
    if configs is not None:
        raise SettingsError(f"{file} is {fmt} output: --configs applies to tables only")
    missing = [name for name, value in (("--config", config), ("--campaign", campaign), ("--workload", workload),
                                        ("--date", date)) if value is None]
    if missing:
        raise SettingsError(f"{file} is {fmt} output, which needs {', '.join(missing)}")
    assert config is not None and campaign is not None and workload is not None and date is not None
    ingest = {"sglang-bench": ingest_sglang_bench, "vllm-bench": ingest_vllm_bench, "aiperf": ingest_aiperf}[fmt]
    return fmt, replace(ingest(store_dir, file, config=config, campaign=campaign, workload=workload, date=date,
                               order=order, concurrency=concurrency, environment=environment,
                               skip_existing=skip_existing, checks=checks, slo=slo), detected_by=why)


def _nearest_reason(src: common.Source, refused: detect.Undetected, *, config: str | None, campaign: str | None,
                    workload: str | None, date: str | None, concurrency: int | None) -> InputError:
    """``ingest auto`` could not place a file: ask the importer it is nearest
    to, and give that importer's own reason (D101), else the refusal as it was.
    Nothing is written either way."""
    near = detect.nearest(src)
    if near is None:
        return refused
    fmt, hint = near
    try:
        if fmt == "table":
            table.read(src)
        else:
            reader: Callable[..., Run] = {"sglang-bench": sglang_bench.read, "vllm-bench": vllm_bench.read,
                                          "aiperf": aiperf.read}[fmt]
            reader(src, config=config or "x", campaign=campaign or "x", workload=workload or "x",
                   date=date or "2000-01-01", concurrency=concurrency)
    except InputError as exc:
        where = f"line {exc.line}: " if exc.line is not None else ""
        what = f"field '{exc.field}': " if exc.field else ""
        return InputError(src.path, None, None, f"nearest format {fmt} ({hint}), whose importer refuses it: "
                                                f"{where}{what}{exc.message}")
    return InputError(src.path, None, None, f"cannot tell the format ({refused.why}); its nearest format, {fmt} "
                                            f"({hint}), reads it: use 'findings ingest {fmt}'")


@dataclass(frozen=True)
class Recovered:
    stored: tuple[str, ...]
    already: tuple[str, ...]
    points: int
    campaigns: tuple[str, ...]

    def summary(self) -> str:
        head = (f"ingested {len(self.stored)} recovered runs ({self.points} points; campaigns: "
                f"{', '.join(self.campaigns) or 'none'})")
        if self.already:
            head += f"; {len(self.already)} already stored ({', '.join(self.already)})"
        return head


def ingest_recovery(store_dir: Path, file: str, checks: Checks = Checks()) -> Recovered:
    """Store the runs of a ``findings bench`` recovery file (written when the
    store's disk refused them). Runs already stored are skipped, so the file
    can be ingested again after a partial success."""
    runs = store.load_recovery(Path(file))
    have = {r.run_id for r in store.load_runs(store_dir)}
    new = [r for r in runs if r.run_id not in have]
    if new:
        store.add_runs(store_dir, new, baseline=checks.baseline, allow_workload_change=checks.allow_workload_change,
                       create=checks.create)
    return Recovered(stored=tuple(r.run_id for r in new), already=tuple(r.run_id for r in runs if r.run_id in have),
                     points=sum(len(r.points) for r in new),
                     campaigns=tuple(sorted({c.name for r in new for c in r.campaigns})))
