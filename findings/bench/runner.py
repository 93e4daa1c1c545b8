"""Run benchmark sweeps and store every finished point.

One point is one store run (file), written atomically the moment it is
measured: Ctrl-C, a crash of the runner or of the server loses at most the
point in flight, never a stored one.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import hashlib
import json
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable, Iterator, Mapping

from findings import store
from findings.core.version import __version__
from findings.core import diskio, serverinfo
from findings.derive import sequential, validity
from findings.derive.validity import Gates
from findings.bench import eventloop, host, launch, vocab
from findings.bench.client import PointPlan, planned_requests, run_point
from findings.bench import workers as worker_procs
from findings.bench.matrix import CampaignSpec, ConfigSpec, Matrix, Sweep
from findings.bench.metrics import derive, raw_columns
from findings.bench.progress import Progress
from findings.bench.prometheus import parse_prometheus, running_gauge, running_gauge_text  # noqa: F401 (re-exported)
from findings.bench import resume
from findings.bench.resume import load_axis
from findings.bench.records import PointOutcome
from findings.bench.transport import Control, make_transport
from findings.bench.workload import Workload, make_prompts, trace_prompts
from findings.core.errors import FindingsError, NotAStoreError
from findings.load.spec import next_search_rate
from findings.core.model import Campaign, Input, Point, Run, Scalar
from findings.store.schema import SCHEMA_VERSION, point_id
from findings.document.settings import Settings

IMPORTER = "findings-bench"
IMPORTER_VERSION = "1"


@dataclass(frozen=True)
class BenchOptions:
    store: Path
    home_store: Path | None  # the store the settings file names
    log_dir: Path
    date: str
    home_simulated: bool = False  # whether that store is for simulated results only
    campaign_suffix: str = ""
    api_key: str | None = None
    progress: bool = True
    root: Path | None = None  # for the git commit in provenance
    matrix: Path | None = None  # the matrix file, hashed into each run's inputs
    until_decided: UntilDecided | None = None
    #: The configured baseline, which must not speculate by its server's facts.
    baseline: str | None = None
    #: Store a workload name under a new definition (``--allow-workload-change``).
    allow_workload_change: bool = False
    #: Add points to a campaign already in the store (``--append``).
    append: bool = False
    #: Make the store if it is not one yet (``--create``); else such a path is refused.
    create: bool = False
    #: Attach mode: the matrix its options amount to, recorded in each run's
    #: provenance as ``bench_matrix`` (``findings plan --output`` writes from it).
    recorded_matrix: str | None = None
    #: After each closed-loop point: (config, C, its metrics) -> whether to go
    #: on with that config's sweep (findings tune stops a beaten trial, D115).
    keep_going: Callable[[str, int, Mapping[str, float]], bool] | None = None
    #: The settings' validity gates: a point they flag as client-bound gets a
    #: warning that says what would measure the server instead (``client_bound_note``).
    gates: Gates | None = None
    #: Launched servers die with this process, even when it is SIGKILLed
    #: (a tune's trial on a Ray node that is lost: launch.start).
    servers_die_with_launcher: bool = False
    # Computed once per invocation by run_matrix, not once per point:
    commit: str | None = None  # git commit of the findings repo
    matrix_input: Input | None = None


@dataclass(frozen=True)
class UntilDecided:
    """``--until-decided``: repeat each point until its comparison with the
    baseline is decided (findings/derive/sequential.py), within these limits."""

    baseline: str
    noise_floor: float
    confidence: float
    max_repeats: int = 10
    max_minutes: float | None = None


@dataclass
class BenchReport:
    written: list[Path] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    #: --until-decided: one line per candidate and point.
    decisions: list[str] = field(default_factory=list)
    interrupted: bool = False
    #: The signal that interrupted the run (SIGINT: Ctrl-C; SIGTERM, SIGHUP).
    signal: int = signal.SIGINT
    #: The labels of the stored points ("baseline chat C=4 rep 1/1"), in order.
    labels: list[str] = field(default_factory=list)
    #: A write the disk refused stopped the run (the problem says what was kept where).
    stopped: bool = False
    #: Points stored, but flagged as client-bound by the gates: what to change.
    warnings: list[str] = field(default_factory=list)

    def summary(self) -> str:
        head = f"stored {len(self.written)} points"
        if self.interrupted:
            by = "" if self.signal == signal.SIGINT else f" by {signal.Signals(self.signal).name}"
            head = (f"interrupted{by}: kept {len(self.written)} finished points (the point in flight was "
                    f"dropped; every launched server stopped)")
        if self.stopped:
            where = f" in {self.written[0].parent.parent}" if self.written else ""
            n = len(self.written)
            head = (f"stopped at the first refused write: stored {n} point{'' if n == 1 else 's'}{where}"
                    + (f" ({'; '.join(self.labels)})" if self.labels else ""))
        return "\n".join([head] + [f"sequential: {d}" for d in self.decisions]
                         + [f"warning: {w}" for w in self.warnings] + [f"problem: {p}" for p in self.problems])


class _Stopped(Exception):
    """A store write was refused: measure nothing more."""


class Terminated(KeyboardInterrupt):
    """A stop signal (SIGINT: Ctrl-C; SIGTERM, SIGHUP), taken as Ctrl-C is:
    the finished points are kept and every launched server is stopped (its
    whole process group)."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


#: Signals a bench run stops on: Ctrl-C (SIGINT), what `timeout`, a CI
#: cancel, Slurm and `docker stop` send (SIGTERM), and a closed terminal
#: (SIGHUP). SIGINT is handled here too, not by asyncio's runner: its
#: handler cancels the loop's task, and a task that swallowed that cancel
#: (asyncio.wait_for can, on Python 3.11) went on measuring (D147).
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


@contextlib.contextmanager
def stop_signals() -> Iterator[None]:
    """While measuring, a stop signal raises ``Terminated`` in the main
    thread, once: a second one during the cleanup is ignored, so that the
    servers are still stopped. Inside a measurement's event loop the loop's
    task is cancelled instead and ``Terminated`` raised once it has unwound,
    or once it ends if it swallowed the cancel (eventloop.stop_running,
    D138). The handlers before are put back after."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    fired: list[int] = []

    def handler(signum: int, _frame: object) -> None:
        if fired:
            return
        fired.append(signum)
        if not eventloop.stop_running(Terminated(signum)):
            raise Terminated(signum)

    before = {s: signal.signal(s, handler) for s in STOP_SIGNALS}
    try:
        yield
    finally:
        for s, h in before.items():
            signal.signal(s, h)


def git_commit(root: Path | None) -> str | None:
    if root is None:
        return None
    try:
        r = subprocess.run(["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return r.stdout.strip() if r.returncode == 0 else None


def _now_iso() -> str:
    """To the microsecond, as the importers' created_at (importers/common.py now_utc)."""
    return dt.datetime.now(dt.timezone.utc).isoformat(timespec="microseconds").replace("+00:00", "Z")


@dataclass
class _Target:
    """One config's server for the duration of its sweep."""

    spec: ConfigSpec
    url: str
    control: Control
    server: launch.Server | None
    info: dict[str, Any]
    model: str
    simulated: bool
    facts: dict[str, Scalar]
    model_info: dict[str, Any] = field(default_factory=dict)
    models_doc: dict[str, Any] | None = None
    #: random-ids: the vocabulary ids are drawn below, and where it came from.
    vocab: tuple[int, str] | None = None


def _connect(spec: ConfigSpec, sweep: Sweep, opts: BenchOptions) -> _Target:
    server = None
    if spec.launch:
        server = launch.start(spec.name, spec.launch, spec.env, opts.log_dir, store=str(opts.store),
                              die_with_launcher=opts.servers_die_with_launcher)
        url = server.url
    else:
        assert spec.url is not None
        url = spec.url
    try:
        return _describe(spec, sweep, opts, server, url)
    except BaseException:
        # Anything before the sweep's own cleanup takes over (a failed
        # health check, Ctrl-C, SIGTERM while asking the server): stop it.
        if server is not None:
            server.stop()
        raise


def _describe(spec: ConfigSpec, sweep: Sweep, opts: BenchOptions, server: launch.Server | None,
              url: str) -> _Target:
    """The target once its server answers: its facts, model and vocabulary."""
    control = Control(url, opts.api_key)
    try:
        if server is not None:
            launch.wait_healthy(server, control.healthy, sweep.health_timeout_s)
        elif not control.healthy() and not control.models():
            raise FindingsError(f"config {spec.name}: no server answers at {url} (/health and /v1/models failed)")
        info = control.get_json("/server_info", "/get_server_info") or {}
        model_info = control.get_json("/model_info", "/get_model_info") or {}
        models_doc = control.get_json("/v1/models")
        models = control.models()
    except BaseException:
        control.close()
        raise
    try:
        facts = serverinfo.facts(info)
    except serverinfo.FactError as exc:
        facts = {}
        print(f"warning: ignoring server_info.{exc.key}: {exc}", file=sys.stderr)
    if not info:
        # llama.cpp's server has no /server_info; it describes itself in /props.
        props = control.get_json("/props")
        if props:
            facts.update(serverinfo.props_facts(props, control.get_any("/slots")))
        else:
            version = control.get_json("/version")
            counters = parse_prometheus(control.metrics_text()) or {}
            if version and any(k.startswith("vllm:") for k in counters):
                command = server.running_command() if server is not None else None
                facts.update(serverinfo.vllm_facts(version, control.get_json("/v1/models"), command,
                                                   any(k.startswith("vllm:spec_decode") for k in counters)))
    model = (models[0] if models else None) or str(model_info.get("model_path") or info.get("model_path") or "default")
    facts.setdefault("model_path", str(model_info.get("model_path") or model))
    archs = model_info.get("architectures")
    if isinstance(archs, list) and archs:
        facts["model_architectures"] = " ".join(str(a) for a in archs)
    for k, v in spec.facts.items():
        facts[k] = serverinfo.redact(v) if isinstance(v, str) else v
    if server is not None:
        facts["launch"] = serverinfo.redact(" ".join(server.command))
    return _Target(spec=spec, url=url, control=control, server=server, info=info, model=model,
                   simulated=serverinfo.is_emulated(info), facts=facts, model_info=model_info,
                   models_doc=models_doc)


def _check_vocab(target: _Target, workloads: list[Workload]) -> None:
    """random-ids needs the vocabulary size: found now, or refused before any point."""
    given = {w.vocab_size for w in workloads if w.kind == "random-ids"}
    if given:
        target.vocab = vocab.require(target.spec.name, target.url, min((g for g in given if g), default=None),
                                     target.model_info, target.models_doc)


def _run_id(doc: dict[str, Any]) -> tuple[str, str]:
    sha = hashlib.sha256(json.dumps(doc, sort_keys=True, default=str).encode()).hexdigest()
    return f"bench-{time.strftime('%Y%m%d-%H%M%S', time.gmtime())}-{sha[:10]}", sha


def _params(target: _Target, w: Workload, sweep: Sweep, planned: int, rate: float | None,
            conversations: int | None) -> dict[str, Scalar]:
    """The workload parameters a point records."""
    params: dict[str, Scalar] = {**w.params(), "num_prompts": planned, "api": sweep.api,
                                 "transport": sweep.transport, "warmup": sweep.warmup}
    if w.load is not None:
        params.update(w.load.params(rate))
        if w.load.mode == "trace":
            for key in ("input_len", "output_len"):
                params.pop(key, None)
    if w.prompt_set is not None and conversations is not None:
        params["dataset_prompts"] = conversations  # conversations drawn (num_prompts: requests, every turn)
    if w.kind == "random-ids" and target.vocab is not None:
        params["vocab_size"] = target.vocab[0]
        params["vocab_source"] = target.vocab[1]
    return params


def _preflight(target: _Target, campaign: Campaign, workloads: list[Workload], sweep: Sweep,
               opts: BenchOptions) -> None:
    """Before the first point: would the store take this config's points?
    The server's facts are read by now, so a simulated server into a real
    campaign, a baseline that speculates, a redefined workload or a config
    with other facts in this campaign is refused before anything is measured."""
    source = "simulated" if target.simulated else "runner"
    probes = []
    for i, w in enumerate(workloads):
        rid = f"preflight-{i}"
        rates = w.load.rates if w.load is not None and w.load.rates else (None,)
        point = Point(id=point_id(rid, 0), run_id=rid, campaign=campaign.name, config=target.spec.name,
                      workload=w.name, concurrency=sweep.concurrency[0] if sweep.concurrency else 1, metrics={},
                      source=source, source_file=None, source_line=None,
                      workload_params=_params(target, w, sweep, w.num_prompts, rates[0], None))
        probes.append(Run(schema_version=SCHEMA_VERSION, run_id=rid, source=source, importer=IMPORTER,
                          importer_version=IMPORTER_VERSION, tool_version=__version__, created_at=_now_iso(),
                          source_file=f"config {target.spec.name}", source_sha256=f"preflight-{time.time_ns()}-{i}",
                          environment={}, campaigns=(campaign,), configs={target.spec.name: target.facts},
                          points=(point,)))
    stored = store.preflight(opts.store, probes, baseline=opts.baseline,
                             allow_workload_change=opts.allow_workload_change)
    names = {w.name for w in workloads}
    again = sum(1 for p in stored if p.campaign == campaign.name and p.config == target.spec.name
                and p.workload in names)
    if again and not opts.append:
        raise FindingsError(
            f"campaign {campaign.name!r} already holds {again} point{'' if again == 1 else 's'} of config {target.spec.name!r} on "
            f"{', '.join(sorted(names))} in {opts.store}: pass --append to add this run's points to them (more "
            f"repeats, an interrupted run), or --campaign-suffix SUFFIX for a new campaign; nothing was measured")


def _point_run(opts: BenchOptions, target: _Target, campaign: Campaign, w: Workload, sweep: Sweep,
               concurrency: int, repeat: int, outcome: PointOutcome, started_wall: str,
               environment: dict[str, Scalar], metrics: dict[str, float], conversations: int | None = None,
               rate: float | None = None) -> Run:
    requests = raw_columns(outcome)
    source = "simulated" if target.simulated else "runner"
    params = _params(target, w, sweep, outcome.planned, rate, conversations)
    provenance: dict[str, Scalar] = {
        "url": target.url, "repeat": repeat, "started_at": started_wall, "ended_at": _now_iso(),
        "flush_cache": sweep.flush_cache, "running_sample_s": sweep.running_sample_s, "tool_version": __version__,
        # Worker processes: those asked for ("auto": chosen from the cores and the load); metrics
        # client_workers holds the number used.
        "workers": sweep.workers if sweep.workers is not None else "auto",
        "event_loop": eventloop.name(),  # the client's own (D135)
    }
    if target.server is not None:
        provenance["server_log"] = str(target.server.log)
        provenance["launch_command"] = serverinfo.redact(" ".join(target.server.command))
        for k, v in sorted(target.spec.env.items()):
            provenance[f"env.{k}"] = serverinfo.REDACTED if serverinfo.secret_name(k) else serverinfo.redact(v)
    if opts.commit:
        provenance["findings_commit"] = opts.commit
    if opts.recorded_matrix:
        provenance["bench_matrix"] = opts.recorded_matrix
    identity = {"campaign": campaign.name, "config": target.spec.name, "workload": w.name, "c": concurrency,
                "rate": rate, "repeat": repeat, "metrics": metrics, "started": started_wall}
    rid, sha = _run_id(identity)
    point = Point(id=point_id(rid, 0), run_id=rid, campaign=campaign.name, config=target.spec.name,
                  workload=w.name, concurrency=concurrency, metrics=metrics, source=source,
                  source_file=None, source_line=None, workload_params=params, requests=requests)
    extra: tuple[Input, ...] = (opts.matrix_input,) if opts.matrix_input else ()
    run = Run(schema_version=SCHEMA_VERSION, run_id=rid, source=source, importer=IMPORTER,
              importer_version=IMPORTER_VERSION, tool_version=__version__, created_at=_now_iso(),
              source_file=None, source_sha256=sha, environment=environment, campaigns=(campaign,),
              configs={target.spec.name: target.facts}, points=(point,), provenance=provenance,
              extra_inputs=extra)
    return run


def _recovery_folders(opts: BenchOptions) -> list[Path]:
    """Where a refused point goes: beside the logs, else the temp folder, else home."""
    folders = [opts.log_dir]
    try:
        folders.append(Path(tempfile.gettempdir()))
    except OSError:  # no usable temp folder at all (it probes by writing)
        pass
    folders.append(Path.home())
    return list(dict.fromkeys(folders))


def _refused(opts: BenchOptions, report: BenchReport, run: Run, label: str,
             exc: diskio.DiskError | NotAStoreError) -> None:
    """Keep a point the store's disk refused in a recovery file, and say where."""
    try:
        kept = store.save_recovery([run], opts.store, str(exc), _recovery_folders(opts))
    except FindingsError as again:
        rest = f"its measurements are lost: the recovery file could not be written either ({again})"
    else:
        rest = f"its measurements are in {kept} (store them later: findings ingest recovery {kept})"
    what = (exc.with_outcome(f"the point {label} was not stored") if isinstance(exc, diskio.DiskError)
            else f"{exc} (the point {label} was not stored)")
    report.problems.append(f"{what}; {rest}")
    report.stopped = True


def client_bound_note(label: str, point: Point, gates: Gates, workers: int, cpus: int,
                      transport: str) -> str | None:
    """A warning for a point the gates flag as client-bound (the document
    leaves it out of every verdict), with what would measure the server
    instead on this machine: more worker processes where cores are free
    (one stays for the parent), the raw transport where another read the
    streams (D125), else a client machine with more cores. None for a point
    that is not client-bound."""
    bound = [r.replace(": client-bound", "") for r in validity.client_bound(point.metrics, gates)]
    if not bound:
        return None
    fixes = []
    if workers < cpus - 1:
        fixes.append(f"more worker processes (--workers, up to {cpus - 1} on this machine's {cpus} cores; "
                     f"this point ran {workers})")
    if transport != "raw":
        fixes.append(f"--transport raw, which reads the streams with less CPU than {transport}")
    if not fixes:
        fixes.append(f"a client machine with more cores than this one's {cpus}")
    return (f"{label} is client-bound ({'; '.join(bound)}): the document leaves it out of every verdict. "
            f"To measure the server instead: {', or '.join(fixes)}.")


def _point_line(label: str, outcome: PointOutcome, m: dict[str, float]) -> str:
    parts = [f"{label}: {int(m['completed'])}/{outcome.planned} ok",
             f"{m.get('output_throughput_tok_s', 0):.1f} tok/s"]
    if "median_ttft_ms" in m:
        parts.append(f"TTFT p50 {m['median_ttft_ms']:.1f} ms")
    if "accept_length" in m:
        parts.append(f"accept {m['accept_length']:.2f}")
    if "client_loop_lag_p99_ms" in m:
        parts.append(f"loop lag p99 {m['client_loop_lag_p99_ms']:.1f} ms")
    kinds = sorted(k for k in m if k.startswith("errors_"))
    if kinds:
        parts.append("errors " + ", ".join(f"{k[7:]}={int(m[k])}" for k in kinds))
    return ", ".join(parts)


class _Driver:
    """One server's client side for a sweep: its transport, progress line and
    metrics scrapes; ``point`` measures and stores one point."""

    def __init__(self, target: _Target, sweep: Sweep, opts: BenchOptions, report: BenchReport,
                 environment: dict[str, Scalar], workloads: list[Workload] | None = None) -> None:
        self.target, self.sweep, self.opts, self.report, self.environment = target, sweep, opts, report, environment
        pool = max([*sweep.concurrency, *(w.load.cap for w in workloads or () if w.load is not None)])
        self.transport = make_transport(sweep.transport, target.url, pool, sweep.read_timeout_s, opts.api_key)
        self.progress = Progress(opts.progress)

    async def scrape(self) -> dict[str, float] | None:
        return parse_prometheus(await self.transport.get_text("/metrics"))

    async def sample(self) -> float | None:
        return running_gauge_text(await self.transport.get_text("/metrics"))

    async def point(self, campaign: Campaign, w: Workload, c: int, repeat: int, of: int | str,
                    rate: float | None = None) -> dict[str, float]:
        """Measure and store one point (an open loop's at ``rate``, or over its
        profile or trace) and return its metrics; raise _Stopped if the store
        refused it, _Gone if the server died."""
        target, sweep = self.target, self.sweep
        ids_below = target.vocab[0] if target.vocab is not None else None
        load = w.load
        offsets: tuple[float, ...] | None = None
        if load is None:
            salt = c * 1000 + repeat
            prompts = tuple(make_prompts(w, w.requests_at(c), salt=salt, ids=False, vocab=ids_below))
        else:
            salt = (round(rate * 1000) if rate is not None else 0) * 1000 + repeat
            offsets = load.offsets(rate, load.requests(rate, w.num_prompts), seed=w.seed * 1_000_003 + salt)
            if load.trace is not None:
                prompts = tuple(trace_prompts(w, load.trace.requests, load.trace.block_size,
                                              ids=w.kind == "random-ids", vocab=ids_below))
            else:
                prompts = tuple(make_prompts(w, len(offsets), salt=salt, ids=False, vocab=ids_below))
        warm = tuple(make_prompts(w, sweep.warmup, salt=-salt, vocab=ids_below)) if sweep.warmup else ()
        slo = (load.slo.ttft_ms, load.slo.tpot_ms) if load is not None and load.slo.set else None
        plan = PointPlan(api=sweep.api, concurrency=c, prompts=prompts, warmup=warm,
                         output_len=w.output_len, model=target.model, ignore_eos=w.ignore_eos,
                         rid_prefix=f"{campaign.name}-{target.spec.name}-{c}-{repeat}-{time.time_ns()}",
                         offsets=offsets, phase_ends=load.phase_ends() if load is not None else (), slo=slo)
        if sweep.flush_cache:
            await asyncio.to_thread(target.control.flush_cache)
        label = f"{target.spec.name} {w.name} {_load_label(w, c, rate)} rep {repeat}/{of}"
        started_wall = _now_iso()
        self.progress.start(label, planned_requests(prompts))
        every = sweep.running_sample_s
        n = worker_procs.resolve_workers(sweep.workers, c, rate if load is not None else None,
                                         worker_procs.cpus()) if load is None or load.mode == "rate" \
            else max(1, min(sweep.workers or 1, c))
        parent_cpu: float | None = None
        if n == 1:
            outcome = await run_point(self.transport, plan, self.progress.tick, self.scrape,
                                      self.sample if every > 0 else None, every)
        else:
            try:
                outcome, parent_cpu = await worker_procs.run_point_workers(
                    n, plan, target.url, sweep.transport, sweep.read_timeout_s, self.opts.api_key,
                    self.progress.advance, self.scrape, self.sample if every > 0 else None, every)
            except worker_procs.WorkerDied as exc:
                self.progress.end(f"{label}: failed: {exc}")
                self.report.problems.append(f"{target.spec.name} {w.name} {_load_label(w, c, rate)} rep "
                                            f"{repeat}: {exc}; the sweep of this config stops here")
                raise _Gone from None
        metrics = derive(outcome)  # once: the summary line, the stored point and the caller's decisions
        if parent_cpu is not None:
            metrics["client_parent_cpu_s"] = parent_cpu
        self.progress.end(_point_line(label, outcome, metrics))
        run = _point_run(self.opts, target, campaign, w, sweep, c, repeat, outcome, started_wall, self.environment,
                         metrics, conversations=len(prompts), rate=rate)
        try:
            path = store.add_run(self.opts.store, run, baseline=self.opts.baseline,
                                 allow_workload_change=self.opts.allow_workload_change, create=self.opts.create)
        except (diskio.DiskError, NotAStoreError) as exc:  # the latter: the store went away mid-run
            _refused(self.opts, self.report, run, label, exc)
            raise _Stopped from None
        self.report.written.append(path)
        self.report.labels.append(label)
        if self.opts.gates is not None and run.points:
            warn = client_bound_note(label, run.points[0], self.opts.gates, n, worker_procs.cpus(),
                                     sweep.transport)
            if warn is not None:
                self.report.warnings.append(warn)
        if _server_gone(target, outcome):
            self.report.problems.append(_gone_message(target))
            raise _Gone
        return metrics


def _load_label(w: Workload, c: int, rate: float | None) -> str:
    if w.load is None:
        return f"C={c}"
    if rate is not None:
        return f"{rate:g} req/s"
    return w.load.mode


class _Gone(Exception):
    """The server of a sweep died: that sweep ends (the points so far are stored)."""


async def _sweep_config(target: _Target, campaign: Campaign, spec: CampaignSpec, workloads: list[Workload],
                        opts: BenchOptions, report: BenchReport, environment: dict[str, Scalar],
                        have: resume.Stored | None = None) -> None:
    """``have``: the campaign's stored points (``--append``), not measured again."""
    sweep = spec.sweep
    driver = _Driver(target, sweep, opts, report, environment, workloads)

    async def point(w: Workload, c: int, repeat: int, rate: float | None) -> Mapping[str, float]:
        old = resume.find(have, target.spec.name, w, sweep.api, c, rate, repeat) if have else None
        return old.metrics if old is not None else await driver.point(campaign, w, c, repeat, sweep.repeats, rate)

    await driver.transport.start()
    try:
        for w in workloads:
            attained: dict[float, list[float]] = {}
            for c, rate in load_axis(w, sweep):
                for repeat in range(1, sweep.repeats + 1):
                    metrics = await point(w, c, repeat, rate)
                    if rate is not None:
                        attained.setdefault(rate, []).append(metrics.get("slo_attainment", 0.0))
                if opts.keep_going is not None and rate is None and not opts.keep_going(target.spec.name, c,
                                                                                          metrics):
                    return
            load = w.load
            for _ in range(load.rate_search if load is not None else 0):
                assert load is not None
                means = {r: sum(v) / len(v) for r, v in attained.items()}
                rate = next_search_rate(means, load.slo.attainment)
                if rate is None:
                    break
                for repeat in range(1, sweep.repeats + 1):
                    metrics = await point(w, load.cap, repeat, rate)
                    attained.setdefault(rate, []).append(metrics.get("slo_attainment", 0.0))
    except _Gone:
        return
    finally:
        await driver.transport.close()


async def _sweep_until_decided(targets: dict[str, _Target], campaign: Campaign, spec: CampaignSpec,
                               workloads: list[Workload], opts: BenchOptions, report: BenchReport,
                               environment: dict[str, Scalar], bands: Callable[[Workload, int, bool], float]) -> None:
    """Every candidate against the baseline, at each workload and C: repeat
    in alternating order (baseline first in odd rounds, last in even ones)
    until findings.derive.sequential decides, or the repeats or minutes run out."""
    until = opts.until_decided
    assert until is not None
    base = until.baseline
    drivers = {name: _Driver(t, spec.sweep, opts, report, environment) for name, t in targets.items()}
    for driver in drivers.values():
        await driver.transport.start()
    deadline = time.monotonic() + until.max_minutes * 60 if until.max_minutes else None
    try:
        for w in workloads:
            for c in spec.sweep.concurrency:
                band = bands(w, c, targets[base].simulated)
                values: dict[str, list[float]] = {name: [] for name in targets}
                open_ = [name for name in targets if name != base]
                for r in range(1, until.max_repeats + 1):
                    order = [base, *open_] if r % 2 else [*open_, base]
                    for name in order:
                        tput = (await drivers[name].point(campaign, w, c, r, f"≤{until.max_repeats}")
                                ).get("output_throughput_tok_s")
                        if tput is None:
                            report.problems.append(f"{name} {w.name} C={c}: every request failed; "
                                                   f"no sequential decision at this C")
                            raise _Gone
                        values[name].append(tput)
                    still = []
                    for name in open_:
                        dec = sequential.decide(values[name], values[base], band, until.confidence,
                                                until.max_repeats - 1)
                        if dec.verdict is not None:
                            report.decisions.append(_decision_line(name, base, w, c, dec, band))
                        else:
                            still.append(name)
                    open_ = still
                    out_of_time = deadline is not None and time.monotonic() > deadline
                    if not open_ or out_of_time:
                        break
                for name in open_:
                    dec = sequential.decide(values[name], values[base], band, until.confidence,
                                            until.max_repeats - 1)
                    why = "the minutes ran out" if deadline is not None and time.monotonic() > deadline \
                        else f"{until.max_repeats} repeats"
                    report.decisions.append(_decision_line(name, base, w, c, dec, band, undecided=why))
                if deadline is not None and time.monotonic() > deadline:
                    return
    except _Gone:
        return
    finally:
        for driver in drivers.values():
            await driver.transport.close()


def _decision_line(name: str, base: str, w: Workload, c: int, d: sequential.Decision, band: float,
                   undecided: str | None = None) -> str:
    what = f"undecided after {d.repeats} repeats each ({undecided})" if undecided else \
        f"decided {d.verdict} after {d.repeats} repeats each"
    return (f"{name} vs {base} {w.name} C={c}: {what}: ratio {d.ratio - 1:+.1%}, sequential "
            f"{d.level:.2%} interval {d.lo - 1:+.1%}…{d.hi - 1:+.1%}, band ±{band:.1%}")


def _server_gone(target: _Target, outcome: PointOutcome) -> bool:
    if target.server is not None and not target.server.alive():
        return True
    fatal = {"connect", "reset"}
    return bool(outcome.records) and all(r.error_type in fatal for r in outcome.records[-3:]) \
        and not target.control.healthy()


def _gone_message(target: _Target) -> str:
    if target.server is not None:
        code = target.server.proc.poll()
        return (f"config {target.spec.name}: the server died mid-sweep (exit code {code}); the points "
                f"measured so far are stored, failed requests are counted; last lines of "
                f"{target.server.log}:\n{launch.tail(target.server.log)}")
    return (f"config {target.spec.name}: the server at {target.url} stopped answering mid-sweep; the points "
            f"measured so far are stored, failed requests are counted")


def _campaign(name: str, opts: BenchOptions, index: int, stamp: int) -> Campaign:
    existing = {c.name: c for c in store.merge(store.load_runs(opts.store, requests=False)).campaigns}
    old = existing.get(name)
    if old is not None:
        if old.date != opts.date:
            raise FindingsError(
                f"campaign {name!r} already exists in {opts.store} with date {old.date or old.when}; "
                f"choose another name (or --campaign-suffix); nothing was measured")
        return old
    return Campaign(name=name, date=opts.date, order=stamp * 100 + index)


def _check_store(target: _Target, opts: BenchOptions) -> None:
    """Simulated and real results never share the settings' own store."""
    home = opts.home_store is not None and opts.store.resolve() == opts.home_store.resolve()
    store.check_home_kind(opts.store, target.simulated, opts.home_simulated if home else None,
                          f"config {target.spec.name}: the server", "is")


def run_matrix(matrix: Matrix, opts: BenchOptions, only: Callable[[str], bool] | None = None) -> BenchReport:
    report = BenchReport()
    matrix_input = None
    if opts.matrix is not None and opts.matrix.is_file():
        matrix_input = Input(str(opts.matrix), hashlib.sha256(opts.matrix.read_bytes()).hexdigest(), "matrix")
    opts = replace(opts, commit=git_commit(opts.root), matrix_input=matrix_input)
    eventloop.check()
    environment = host.facts()
    stamp = int(time.strftime("%H%M%S", time.gmtime()))
    try:
        store.writable(opts.store, opts.create)
    except diskio.DiskError as exc:
        raise exc.with_outcome("nothing was measured; the store is unchanged") from None
    if opts.until_decided is not None:
        base = opts.until_decided.baseline
        lacking = [c.name for c in matrix.campaigns if base not in c.configs or len(c.configs) < 2]
        if lacking:
            raise FindingsError(f"--until-decided compares candidates with the baseline {base!r}: campaign "
                                f"{lacking[0]!r} needs it and at least one candidate")
        open_loop = [w for c in matrix.campaigns for w in c.workloads if matrix.workloads[w].load is not None]
        if open_loop:
            raise FindingsError(f"--until-decided repeats closed-loop points until their throughput verdict is "
                                f"decided; workload {open_loop[0]!r} is an open loop (its verdicts are on "
                                f"latency and goodput): run it without --until-decided")
    try:
        with stop_signals():
            _campaigns(matrix, opts, report, environment, stamp)
    except KeyboardInterrupt as exc:
        report.interrupted = True
        report.signal = exc.signum if isinstance(exc, Terminated) else signal.SIGINT
    except _Stopped:
        pass
    return report


def _campaigns(matrix: Matrix, opts: BenchOptions, report: BenchReport, environment: dict[str, Scalar],
               stamp: int) -> None:
    """Every campaign of the matrix, each config's server stopped after its sweep."""
    for index, spec in enumerate(matrix.campaigns):
        campaign = _campaign(spec.name + opts.campaign_suffix, opts, index, stamp)
        if opts.until_decided is not None:
            _until_decided_campaign(matrix, spec, campaign, opts, report, environment)
            continue
        workloads = [matrix.workloads[w] for w in spec.workloads]
        have = resume.stored(store.load_runs(opts.store, requests=False), campaign.name) if opts.append else None
        done: tuple[str, ...] = ()
        if have is not None:
            found = resume.plan(have, spec, workloads)
            line = found.line()
            if line:
                print(line, file=sys.stderr, flush=True)
            done = found.done
        for cname in spec.configs:
            if cname in done:
                continue
            target = _connect_or_stop(matrix.configs[cname], spec, opts, report)
            try:
                _check_store(target, opts)
                _check_vocab(target, workloads)
                _preflight(target, campaign, workloads, spec.sweep, opts)
                eventloop.run(_sweep_config(target, campaign, spec, workloads, opts, report, environment, have))
            finally:
                target.control.close()
                if target.server is not None:
                    target.server.stop()


def _connect_or_stop(config: ConfigSpec, spec: CampaignSpec, opts: BenchOptions, report: BenchReport) -> _Target:
    """The config's server; a refused write (its log) stops the run once points are stored."""
    try:
        return _connect(config, spec.sweep, opts)
    except diskio.DiskError as exc:
        if not report.written:
            raise
        report.problems.append(str(exc))
        report.stopped = True
        raise _Stopped from None


def _until_decided_campaign(matrix: Matrix, spec: CampaignSpec, campaign: Campaign, opts: BenchOptions,
                            report: BenchReport, environment: dict[str, Scalar]) -> None:
    """All of a campaign's servers at once (so that the configs can
    alternate), then the sequential sweep, then every server stopped."""
    targets: dict[str, _Target] = {}
    try:
        for cname in spec.configs:
            targets[cname] = _connect_or_stop(matrix.configs[cname], spec, opts, report)
            _check_store(targets[cname], opts)
        workloads = [matrix.workloads[w] for w in spec.workloads]
        for target in targets.values():
            _check_vocab(target, workloads)
            _preflight(target, campaign, workloads, spec.sweep, opts)
        eventloop.run(_sweep_until_decided(targets, campaign, spec, workloads, opts, report, environment,
                                         _bands(opts)))
    finally:
        for target in targets.values():
            target.control.close()
            if target.server is not None:
                target.server.stop()


def _bands(opts: BenchOptions) -> Callable[[Workload, int, bool], float]:
    """The band the document would use at (workload, C): the noise floor or the
    baseline's drift across the store's campaigns (its steps left out)."""
    from findings.derive import regressions
    from findings.derive.analysis import Rules, analysis_workload, cells

    until = opts.until_decided
    assert until is not None
    rules = Rules(baseline=until.baseline, noise_floor=until.noise_floor, confidence=until.confidence)
    data = store.merge(store.load_runs(opts.store))
    tables = regressions.tables(data, rules, cells(data, rules)) if data.points else {}

    def band(w: Workload, c: int, simulated: bool) -> float:
        table = tables.get(analysis_workload(w.name, simulated))
        return max(until.noise_floor, table.drift.get(c, 0.0) if table is not None else 0.0)
    return band


def bench_file(path: str, opts: BenchOptions) -> BenchReport:
    from findings.bench.matrix import parse
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise FindingsError(f"{path}: cannot read: {exc.strerror or exc}") from None
    return run_matrix(parse(path, text), replace(opts, matrix=Path(path)))


def bench_attach(url: str, config: str, campaign: str, workload: Workload, sweep: Sweep,
                 opts: BenchOptions) -> BenchReport:
    from findings.store.schema import valid_name
    for label, value in (("--config", config), ("--campaign", campaign), ("--workload", workload.name)):
        if not valid_name(value):
            raise FindingsError(f"{label}: invalid name {value!r}")
    if not url.startswith(("http://", "https://")):
        raise FindingsError(f"--url: expected an http(s) URL, got {url!r}")
    from findings.bench.matrix import api_problem, attach_matrix_toml, split
    parts = split(workload)
    for w in parts:
        problem = api_problem(w, sweep.api)
        if problem:
            raise FindingsError(f"--api {sweep.api}: {problem}")
    matrix = Matrix(path=f"attach:{url}", configs={config: ConfigSpec(name=config, url=url)},
                    workloads={w.name: w for w in parts},
                    campaigns=(CampaignSpec(name=campaign, configs=(config,), workloads=tuple(w.name for w in parts),
                                            sweep=sweep),))
    return run_matrix(matrix, replace(opts, recorded_matrix=attach_matrix_toml(url, config, campaign, workload, sweep)))


def options(settings: Settings, *, date: str | None, campaign_suffix: str, log_dir: str | None,
            api_key: str | None, progress: bool, until_decided: bool = False, max_repeats: int = 10,
            max_minutes: float | None = None, append: bool = False,
            allow_workload_change: bool = False, create: bool = False) -> BenchOptions:
    """Runner options from the settings and the command line."""
    from findings.store.schema import valid_date
    day = date or dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d")
    if not valid_date(day):
        raise FindingsError(f"--date: expected YYYY-MM-DD, got {day!r}")
    return BenchOptions(store=settings.store, home_store=settings.home_store,
                        home_simulated=settings.simulated_store,
                        log_dir=Path(log_dir) if log_dir else settings.root / "build" / "logs",
                        date=day, campaign_suffix=campaign_suffix, api_key=api_key, progress=progress,
                        root=settings.root, baseline=settings.rules.baseline, append=append,
                        allow_workload_change=allow_workload_change, create=create,
                        gates=settings.rules.gates,
                        until_decided=UntilDecided(settings.rules.baseline, settings.rules.noise_floor,
                                                   settings.rules.confidence, max_repeats, max_minutes)
                        if until_decided else None)
