"""The command line: parse, call one library function, map errors to one line.

The only module that imports click. Documented in docs/cli.md (a test keeps
the two in step).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import click

from findings import __version__, api as document
from findings.importers import ingest as ingest_lib
from findings.core.diskio import cause
from findings.core.errors import FindingsError
from findings.document.settings import Settings, load


class Context:
    def __init__(self, store: str | None, settings_file: str | None, baseline: str | None,
                 noise_floor: float | None) -> None:
        self.store, self.settings_file = store, settings_file
        self.baseline, self.noise_floor = baseline, noise_floor

    def settings(self) -> Settings:
        return load(self.settings_file).with_overrides(
            store=self.store, baseline=self.baseline, noise_floor=self.noise_floor)


class _NotAStore(click.ClickException):
    """A reader pointed at a path that is not a store: exit 2, so a typo'd
    --store in a CI gate never passes green (errors.NotAStoreError)."""

    exit_code = 2


def _run(fn: Any, *args: Any, **kwargs: Any) -> Any:
    try:
        return fn(*args, **kwargs)
    except FindingsError as exc:
        raise (_NotAStore if exc.exit_code == _NotAStore.exit_code else click.ClickException)(str(exc)) from None
    except OSError as exc:  # a refusal no write site described: still one line, never a traceback
        where = f"{exc.filename}: " if exc.filename else ""
        raise click.ClickException(f"{where}{cause(exc)} (the command stopped there)") from None


_ALLOW_HELP = ("Store a workload name under a new definition (other lengths, prompts, ignore_eos or API): "
               "the workload really changed. Else such a write is refused.")


_CREATE_HELP = ("Make the store if it does not exist yet (a new or empty folder). Else a path that is not a "
                "store is refused, so a mistyped --store never becomes a new store.")


def _checks(s: Settings, allow_workload_change: bool, create: bool = False) -> ingest_lib.Checks:
    home = s.store.resolve() == s.home_store.resolve()
    return ingest_lib.Checks(baseline=s.rules.baseline, allow_workload_change=allow_workload_change, create=create,
                             home_simulated=s.simulated_store if home else None)


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="findings")
@click.option("--store", metavar="DIR", default=None,
              help="Results store folder. Default: $FINDINGS_STORE, else findings.toml's store, "
                   "else benchmarks/results/.")
@click.option("--settings", "settings_file", metavar="FILE", default=None,
              help="Settings file. Default: the nearest findings.toml at or above the current folder.")
@click.option("--baseline", default=None, metavar="NAME",
              help="The config that candidates are compared with. Default: 'baseline'.")
@click.option("--noise-floor", type=float, default=None, metavar="FRACTION",
              help="Smallest noise band, as a fraction (0.04 = 4%).")
@click.pass_context
def main(ctx: click.Context, store: str | None, settings_file: str | None, baseline: str | None,
         noise_floor: float | None) -> None:
    """findings: derive performance conclusions from stored benchmark results."""
    ctx.obj = Context(store, settings_file, baseline, noise_floor)


@main.result_callback()
def _settled(*_: Any, **__: Any) -> None:
    """After any command that succeeded: the render cache's writes aside done."""
    document.settle()


@main.command("init")
@click.argument("folder", required=False, default=".", type=click.Path(file_okay=False))
@click.option("--title", default="Findings", show_default=True, help="The document's title.")
@click.option("--baseline", "init_baseline", metavar="NAME", default=None,
              help="The config candidates are compared with. Default: the global --baseline, else 'baseline'.")
@click.option("--store", "init_store", metavar="DIR", default=None,
              help="The store to create, relative to FOLDER. Default: the global --store, else benchmarks/results.")
@click.option("--document", default="findings.md", show_default=True, metavar="PATH",
              help="The document, relative to FOLDER.")
@click.option("--install", metavar="REQUIREMENT", default=None,
              help="What the CI workflow pip-installs (a version, a wheel, a git URL). Default: findings==VERSION.")
@click.option("--simulated", is_flag=True,
              help="A store for the emulator's simulated results only (to try findings out); else a real store.")
@click.pass_obj
def init_cmd(obj: Context, folder: str, title: str, init_baseline: str | None, init_store: str | None,
             document: str, install: str | None, simulated: bool) -> None:
    """Start findings in a repository: findings.toml, an empty store, a template extending the
    packaged base, a CI workflow and .gitignore lines. Overwrites nothing."""
    from findings import scaffold

    defaults = scaffold.Options()
    options = scaffold.Options(title=title, baseline=init_baseline or obj.baseline or defaults.baseline,
                               store=init_store or obj.store or defaults.store, document=document,
                               install=install or defaults.install, simulated=simulated)
    done = _run(scaffold.init, Path(folder), options)
    click.echo("\n".join(done.lines()))


@main.group()
def ingest() -> None:
    """Import results written by other tools into the store."""


@ingest.command("table")
@click.argument("file")
@click.option("--configs", metavar="CONFIGS.csv", default=None, help="Config facts, one row per config.")
@click.option("--environment", metavar="ENV.toml", default=None, help="Hardware/software facts (flat TOML).")
@click.option("--skip-existing", is_flag=True, help="Ingest only rows not already in the store.")
@click.option("--allow-workload-change", is_flag=True, help=_ALLOW_HELP)
@click.option("--create", is_flag=True, help=_CREATE_HELP)
@click.pass_obj
def ingest_table(obj: Context, file: str, configs: str | None, environment: str | None,
                 skip_existing: bool, allow_workload_change: bool, create: bool) -> None:
    """Import a long CSV table (campaign, workload, config, concurrency, output_throughput_tok_s)."""
    s = _run(obj.settings)
    click.echo(_run(ingest_lib.ingest_table, s.store, file, configs, environment, skip_existing,
                    _checks(s, allow_workload_change, create)).summary())


_SLO_OPTIONS = [
    click.option("--slo-ttft-ms", type=click.FloatRange(min=0, min_open=True), default=None,
                 help="Open-loop points: goodput counts requests with TTFT at or under this (per-request times)."),
    click.option("--slo-tpot-ms", type=click.FloatRange(min=0, min_open=True), default=None,
                 help="Open-loop points: ... and TPOT at or under this."),
    click.option("--slo-attainment", type=click.FloatRange(min=0, max=1, min_open=True), default=None,
                 help="Share of requests that must meet the SLO for a rate to count as sustained (0.9)."),
]


def _settings_slo(given: tuple[float | None, float | None, float | None],
                  s: Settings) -> tuple[float | None, float | None, float | None]:
    """The command line's SLO (TTFT ms, TPOT ms, attainment), each limit not
    given taken from findings.toml (D108)."""
    ttft, tpot, share = (g if g is not None else d for g, d in zip(given, s.request_slo))
    return ttft, tpot, share


def _slo(kw: dict[str, Any], s: Settings) -> ingest_lib.SloOption:
    given = (kw.pop("slo_ttft_ms"), kw.pop("slo_tpot_ms"), kw.pop("slo_attainment"))
    from_settings = given == (None, None, None)  # else the command line decides
    return ingest_lib.SloOption(*_settings_slo(given, s), from_settings=from_settings)


def _labelled_file_options(fn: Any) -> Any:
    """Options of the importers whose files do not name config, campaign, workload or date."""
    for option in reversed([
        click.option("--config", required=True, help="Name of the server config the file measured."),
        click.option("--campaign", required=True, help="Campaign name (measurements taken together)."),
        click.option("--workload", required=True, help="Workload name (never pooled with other workloads)."),
        click.option("--date", required=True, metavar="YYYY-MM-DD", help="When the campaign was measured."),
        click.option("--order", type=int, default=None, help="Tie-break among campaigns of the same date."),
        click.option("--concurrency", type=click.IntRange(min=1), default=None,
                     help="C for closed-loop results that do not record their concurrency (never for rates)."),
        *_SLO_OPTIONS,
        click.option("--environment", metavar="ENV.toml", default=None, help="Hardware/software facts (flat TOML)."),
        click.option("--skip-existing", is_flag=True, help="Ingest only records not already in the store."),
        click.option("--allow-workload-change", is_flag=True, help=_ALLOW_HELP),
        click.option("--create", is_flag=True, help=_CREATE_HELP),
    ]):
        fn = option(fn)
    return fn


def _ingest_labelled(obj: Context, fn: Any, file: str, allow_workload_change: bool, create: bool,
                     **kw: Any) -> None:
    s = _run(obj.settings)
    slo = _slo(kw, s)
    click.echo(_run(fn, s.store, file, checks=_checks(s, allow_workload_change, create), slo=slo, **kw).summary())


@ingest.command("sglang-bench")
@click.argument("file")
@_labelled_file_options
@click.pass_obj
def ingest_sglang(obj: Context, /, file: str, **kw: Any) -> None:
    """Import `python -m sglang.bench_serving --output-file` JSONL (one line = one point)."""
    _ingest_labelled(obj, ingest_lib.ingest_sglang_bench, file, **kw)


@ingest.command("vllm-bench")
@click.argument("file")
@_labelled_file_options
@click.pass_obj
def ingest_vllm(obj: Context, /, file: str, **kw: Any) -> None:
    """Import the JSON of `vllm bench serve --save-result` (one file = one point)."""
    _ingest_labelled(obj, ingest_lib.ingest_vllm_bench, file, **kw)


@ingest.command("aiperf")
@click.argument("file")
@_labelled_file_options
@click.pass_obj
def ingest_aiperf(obj: Context, /, file: str, **kw: Any) -> None:
    """Import AIPerf's profile_export_aiperf.json (or genai-perf's export): one point."""
    _ingest_labelled(obj, ingest_lib.ingest_aiperf, file, **kw)


@ingest.command("recovery")
@click.argument("file")
@click.option("--create", is_flag=True, help=_CREATE_HELP)
@click.pass_obj
def ingest_recovery(obj: Context, file: str, create: bool) -> None:
    """Store the runs of a recovery file that `findings bench` wrote when the store's disk refused them."""
    s = _run(obj.settings)
    click.echo(_run(ingest_lib.ingest_recovery, s.store, file, _checks(s, False, create)).summary())


@ingest.command("auto")
@click.argument("file")
@click.option("--config", default=None, help="Config name (needed by every format but the table).")
@click.option("--campaign", default=None, help="Campaign name (idem).")
@click.option("--workload", default=None, help="Workload name (idem).")
@click.option("--date", default=None, metavar="YYYY-MM-DD", help="Campaign date (idem).")
@click.option("--order", type=int, default=None, help="Tie-break among campaigns of the same date.")
@click.option("--concurrency", type=click.IntRange(min=1), default=None,
              help="C for closed-loop results that do not record their concurrency (never for rates).")
@_SLO_OPTIONS[0]
@_SLO_OPTIONS[1]
@_SLO_OPTIONS[2]
@click.option("--configs", metavar="CONFIGS.csv", default=None, help="Table format: config facts.")
@click.option("--environment", metavar="ENV.toml", default=None, help="Hardware/software facts (flat TOML).")
@click.option("--skip-existing", is_flag=True, help="Ingest only records not already in the store.")
@click.option("--allow-workload-change", is_flag=True, help=_ALLOW_HELP)
@click.option("--create", is_flag=True, help=_CREATE_HELP)
@click.pass_obj
def ingest_auto(obj: Context, /, file: str, allow_workload_change: bool, create: bool, **kw: Any) -> None:
    """Detect the format of FILE (table, sglang-bench, vllm-bench, aiperf), say which, and import it."""
    s = _run(obj.settings)
    slo = _slo(kw, s)
    fmt_name, result = _run(ingest_lib.ingest_auto, s.store, file, checks=_checks(s, allow_workload_change, create),
                            slo=slo, **kw)
    click.echo(f"detected format: {fmt_name} ({result.detected_by})")
    click.echo(result.summary())


def _concurrency(_ctx: click.Context, _param: click.Parameter, value: str | None) -> tuple[int, ...] | None:
    if value is None:
        return None
    try:
        levels = tuple(sorted({int(x) for x in value.split(",") if x.strip()}))
    except ValueError:
        raise click.BadParameter("expected integers separated by commas, e.g. 1,2,5,10") from None
    if not levels or min(levels) < 1:
        raise click.BadParameter("concurrency levels are integers >= 1")
    return levels


@main.command()
@click.argument("matrix", required=False)
@click.option("--url", default=None, help="Attach to a running server at this base URL.")
@click.option("--config", default=None, help="Attach mode: name of the server config.")
@click.option("--campaign", default=None, help="Attach mode: campaign name.")
@click.option("--workload", default=None, help="Attach mode: workload name.")
@click.option("--concurrency", callback=_concurrency, default="1,2,5,10,30,70,100,250", show_default=True,
              help="Attach mode: concurrency levels, comma-separated.")
@click.option("--num-prompts", type=click.IntRange(min=1), default=32, show_default=True,
              help="Attach mode: requests per point (at least C are always sent).")
@click.option("--input-len", type=click.IntRange(min=1), default=256, show_default=True,
              help="Attach mode: prompt length (tokens or words).")
@click.option("--output-len", type=click.IntRange(min=1), default=128, show_default=True,
              help="Attach mode: output tokens per request (ignore_eos).")
@click.option("--prompts", type=click.Choice(["random-ids", "diverse", "fixed", "humaneval", "mmlu-cot"]),
              default=None,
              help="Attach mode: made-up prompts, or a set a package ships: humaneval (the [datasets] extra), "
                   "mmlu-cot (pip install --no-deps lm-eval). Default: --dataset if given, else random-ids for "
                   "native and diverse for OpenAI APIs.")
@click.option("--dataset", default=None, metavar="FILE",
              help="Attach mode: a prompt file (ShareGPT JSON, chat or completion JSONL, MT-Bench "
                   "question.jsonl, SPEED-Bench, or text, one prompt a line); docs/datasets.md.")
@click.option("--split-by", type=click.Choice(["category"]), default=None,
              help="Attach mode: one workload per category of the prompt set (WORKLOAD-CATEGORY).")
@click.option("--max-turns", type=click.IntRange(min=1), default=None,
              help="Attach mode: multi-turn sets send at most this many turns of each conversation.")
@click.option("--vocab-size", type=click.IntRange(min=2), default=None,
              help="Attach mode, random-ids: the model's vocabulary size (default: from the server).")
@click.option("--ignore-eos/--no-ignore-eos", default=None,
              help="Attach mode: generate exactly --output-len tokens (recorded with each point). Default: "
                   "on for made-up prompts, off (natural lengths, --output-len a cap) for prompt sets.")
@click.option("--api", type=click.Choice(["native", "openai-chat", "openai-completions"]), default="native",
              show_default=True, help="Attach mode: which API to drive.")
@click.option("--transport", type=click.Choice(["aiohttp", "httpx", "raw"]), default="aiohttp", show_default=True,
              help="Attach mode: streaming transport.")
@click.option("--repeats", type=click.IntRange(min=1), default=1, show_default=True,
              help="Attach mode: repeats per concurrency.")
@click.option("--warmup", type=click.IntRange(min=0), default=2, show_default=True,
              help="Attach mode: warm-up requests per point (not counted).")
@click.option("--seed", type=click.IntRange(min=0), default=1, show_default=True, help="Attach mode: prompt seed.")
@click.option("--read-timeout", type=click.FloatRange(min=0.1), default=60.0, show_default=True,
              help="Attach mode: seconds without data before a request counts as stalled.")
@click.option("--no-flush-cache", is_flag=True, help="Attach mode: do not POST /flush_cache before each point.")
@click.option("--running-sample", "running_sample_s", type=click.FloatRange(min=0), default=1.0, show_default=True,
              metavar="S", help="Attach mode: read the server's running-batch gauge every S seconds (0: never).")
@click.option("--workers", type=click.IntRange(min=1), default=None, metavar="N",
              help="Attach mode: worker processes per point, each with its own event loop and connections "
                   "(default: from the cores and the load; recorded with each point).")
@click.option("--request-rate", default=None, metavar="R[,R...]",
              help="Attach mode: an open loop at each of these rates (requests/s) instead of --concurrency.")
@click.option("--burstiness", default=None, metavar="B",
              help="Attach mode, open loop: vLLM's gamma shape (1: Poisson, <1 burstier, inf: constant spacing).")
@click.option("--max-concurrency", type=click.IntRange(min=1), default=None,
              help="Attach mode, open loop: cap on requests in flight (a send waits for a free slot).")
@click.option("--duration", "duration_s", type=click.FloatRange(min=0, min_open=True), default=None, metavar="S",
              help="Attach mode, --request-rate: at least rate x S requests per point (and --num-prompts).")
@click.option("--load-profile", default=None, metavar="S:R,S:R,...",
              help="Attach mode: an open loop over phases of S seconds at R requests/s (a day of load).")
@click.option("--trace", default=None, metavar="FILE",
              help="Attach mode: replay a Mooncake-format JSONL trace (timestamp ms, input_length, output_length, "
                   "hash_ids).")
@click.option("--time-scale", type=click.FloatRange(min=0, min_open=True), default=None,
              help="Attach mode, --trace: multiply every gap by this (0.5: twice the rate).")
@click.option("--block-size", type=click.IntRange(min=1), default=None,
              help="Attach mode, --trace: prompt tokens per hash id (Mooncake: 512).")
@click.option("--slo-ttft-ms", type=click.FloatRange(min=0, min_open=True), default=None,
              help="Attach mode, open loop: a request meets the SLO only with TTFT at or under this.")
@click.option("--slo-tpot-ms", type=click.FloatRange(min=0, min_open=True), default=None,
              help="Attach mode, open loop: ... and TPOT at or under this.")
@click.option("--slo-attainment", type=click.FloatRange(min=0, max=1, min_open=True), default=None,
              help="Attach mode, open loop: share of requests meeting the SLO for a rate to be sustained (0.9).")
@click.option("--rate-search", type=click.IntRange(min=0), default=None, metavar="N",
              help="Attach mode, --request-rate with an SLO: then N more points bisecting the max sustainable rate.")
@click.option("--date", default=None, metavar="YYYY-MM-DD", help="Campaign date (default: today, UTC).")
@click.option("--campaign-suffix", default="", help="Appended to every campaign name (e.g. a timestamp).")
@click.option("--append", is_flag=True,
              help="Add points to a campaign already in the store (else a campaign that exists is refused).")
@click.option("--allow-workload-change", is_flag=True, help=_ALLOW_HELP)
@click.option("--create", is_flag=True, help=_CREATE_HELP)
@click.option("--log-dir", default=None, metavar="DIR", help="Server logs (launch mode). Default: build/logs.")
@click.option("--api-key", envvar="FINDINGS_API_KEY", default=None,
              help="Bearer token for the server (or $FINDINGS_API_KEY). Never stored.")
@click.option("--no-progress", is_flag=True, help="No progress bar, only one line per point.")
@click.option("--until-decided", is_flag=True,
              help="Matrix mode: launch a campaign's servers together and repeat each point, candidate and "
                   "baseline in turn, until the comparison is decided (docs/plan.md).")
@click.option("--max-repeats", type=click.IntRange(min=2), default=10, show_default=True,
              help="--until-decided: repeats per config and C at most.")
@click.option("--max-minutes", type=click.FloatRange(min=0), default=None, metavar="M",
              help="--until-decided: stop repeating after M minutes.")
@click.pass_obj
def bench(obj: Context, matrix: str | None, url: str | None, config: str | None, campaign: str | None,
          workload: str | None, concurrency: tuple[int, ...], num_prompts: int, input_len: int,
          output_len: int, prompts: str | None, dataset: str | None, split_by: str | None, max_turns: int | None,
          vocab_size: int | None, ignore_eos: bool | None, api: str, transport: str, repeats: int, warmup: int,
          seed: int, read_timeout: float, no_flush_cache: bool, running_sample_s: float, workers: int | None,
          request_rate: str | None, burstiness: str | None, max_concurrency: int | None, duration_s: float | None,
          load_profile: str | None, trace: str | None, time_scale: float | None, block_size: int | None,
          slo_ttft_ms: float | None, slo_tpot_ms: float | None, slo_attainment: float | None,
          rate_search: int | None, date: str | None,
          campaign_suffix: str, append: bool, allow_workload_change: bool, create: bool,
          log_dir: str | None, api_key: str | None, no_progress: bool, until_decided: bool, max_repeats: int,
          max_minutes: float | None) -> None:
    """Run a benchmark matrix (MATRIX.toml), or attach to a server with --url."""
    from findings.bench import runner
    from findings.bench.matrix import Sweep, attach_load, attach_workload

    s = _run(obj.settings)
    if until_decided and matrix is None:
        raise click.UsageError("--until-decided needs a MATRIX (a campaign with the baseline and candidates)")
    opts = _run(runner.options, s, date=date, campaign_suffix=campaign_suffix, log_dir=log_dir,
                api_key=api_key, progress=not no_progress, until_decided=until_decided, max_repeats=max_repeats,
                max_minutes=max_minutes, append=append, allow_workload_change=allow_workload_change,
                create=create)
    if matrix is not None:
        if url is not None:
            raise click.UsageError("give either MATRIX or --url, not both")
        report = _run(runner.bench_file, matrix, opts)
    else:
        missing = [n for n, v in (("--url", url), ("--config", config), ("--campaign", campaign),
                                  ("--workload", workload)) if v is None]
        if missing:
            raise click.UsageError(f"attach mode needs {', '.join(missing)} (or give a MATRIX file)")
        assert url and config and campaign and workload
        if request_rate is not None or load_profile is not None or trace is not None:  # open loop: D108
            slo_ttft_ms, slo_tpot_ms, slo_attainment = _settings_slo((slo_ttft_ms, slo_tpot_ms, slo_attainment), s)
        load = _run(attach_load, request_rate=request_rate, burstiness=burstiness, max_concurrency=max_concurrency,
                    duration_s=duration_s, load_profile=load_profile, trace=trace, time_scale=time_scale,
                    block_size=block_size, slo_ttft_ms=slo_ttft_ms, slo_tpot_ms=slo_tpot_ms,
                    slo_attainment=slo_attainment, rate_search=rate_search)
        w = _run(attach_workload, workload, api=api, prompts=prompts, dataset=dataset, input_len=input_len,
                 output_len=output_len, num_prompts=num_prompts, seed=seed, ignore_eos=ignore_eos,
                 split_by=split_by, max_turns=max_turns, vocab_size=vocab_size, load=load)
        sweep = Sweep(api=api, transport=transport, concurrency=concurrency, repeats=repeats, warmup=warmup,
                      read_timeout_s=read_timeout, flush_cache=not no_flush_cache, running_sample_s=running_sample_s,
                      workers=workers)
        report = _run(runner.bench_attach, url, config, campaign, w, sweep, opts)
    click.echo(report.summary())
    if report.interrupted:
        sys.exit(128 + int(report.signal))  # 130 for Ctrl-C, 143 for SIGTERM, 129 for SIGHUP
    if report.problems:
        sys.exit(1)


@main.command()
@click.option("--port", type=click.IntRange(min=0, max=65535), default=30000, show_default=True,
              help="Port to listen on (0: any free port, printed on start).")
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to bind.")
@click.option("--profile", default="baseline", show_default=True,
              help="Performance profile: baseline, eagle3-topk4-v1, eagle3-topk1-v2, firehose.")
@click.option("--seed", type=int, default=0, show_default=True, help="Random seed (tokens, acceptance, faults).")
@click.option("--speed", type=click.FloatRange(min=0.001), default=1.0, show_default=True,
              help="Run the model this many times faster (ratios are preserved; absolute figures are not).")
@click.option("--ground-truth", is_flag=True, help="Put the emulator's own timestamps in meta_info.")
@click.option("--ground-truth-log", type=click.Path(dir_okay=False), default=None,
              help="Append one JSON line per finished request (arrival, every write) to this file.")
@click.option("--startup-delay", type=click.FloatRange(min=0), default=0.0, show_default=True,
              help="Seconds during which /health answers 503.")
@click.option("--max-running", type=click.IntRange(min=1), default=None, help="Cap on running requests.")
@click.option("--error-rate", type=click.FloatRange(0, 1), default=0.0, show_default=True,
              help="Fraction of requests that fail (HTTP 500 or an error event).")
@click.option("--drop-rate", type=click.FloatRange(0, 1), default=0.0, show_default=True,
              help="Fraction of streams whose connection is dropped mid-stream.")
@click.option("--stall-rate", type=click.FloatRange(0, 1), default=0.0, show_default=True,
              help="Fraction of streams that stall mid-stream.")
@click.option("--stall-s", type=click.FloatRange(min=0), default=30.0, show_default=True,
              help="How long a stalled stream stops sending.")
@click.option("--die-after", type=click.IntRange(min=1), default=None,
              help="Exit abruptly after this many completed requests.")
@click.option("--fail-share", type=click.FloatRange(0, 1), default=0.0, show_default=True,
              help="Exactly this share of requests fails, in the ways --fail-how lists.")
@click.option("--fail-how", default="http:500", show_default=True, metavar="KINDS",
              help="Comma-separated, taken in turn: http:<status> (an error response), drop (connection "
                   "closed mid-stream), error-event (an error event mid-stream).")
@click.option("--fail-skip", type=click.IntRange(min=0), default=0, show_default=True,
              help="The first N requests never fail by --fail-share (a client's test or warm-up request).")
@click.option("--vocab-size", type=click.IntRange(min=2), default=32000, show_default=True,
              help="Token ids at or past this are refused (HTTP 400); /model_info reports it.")
@click.option("--model-path", type=click.Path(file_okay=False), default=None, metavar="DIR",
              help="A model folder: its config.json's vocab_size is the vocabulary, and /model_info names "
                   "the folder (as SGLang does) instead of reporting the size.")
@click.option("--prefix-page-size", type=click.IntRange(min=1), default=16, show_default=True, metavar="N",
              help="Tokens per page of the prefix cache: prompts share cached tokens in whole pages.")
@click.option("--speculative-algorithm", default=None, metavar="NAME",
              help="SGLang's flag (EAGLE, EAGLE3): build the profile from the --speculative-* flags "
                   "(the flags model, docs/emulator.md) instead of --profile; refused as SGLang refuses.")
@click.option("--speculative-num-steps", type=int, default=None, metavar="N", help="SGLang's flag.")
@click.option("--speculative-eagle-topk", type=int, default=None, metavar="N", help="SGLang's flag.")
@click.option("--speculative-num-draft-tokens", type=int, default=None, metavar="N", help="SGLang's flag.")
@click.option("--disable-overlap-schedule", is_flag=True, help="SGLang's flag: the draft no longer hides behind the verify.")
@click.option("--max-running-requests", type=click.IntRange(min=1), default=None, metavar="N",
              help="SGLang's name for --max-running.")
def emulate(port: int, host: str, profile: str, seed: int, speed: float, ground_truth: bool,
            ground_truth_log: str | None, startup_delay: float, max_running: int | None, error_rate: float, drop_rate: float,
            stall_rate: float, stall_s: float, die_after: int | None, fail_share: float, fail_how: str,
            fail_skip: int, vocab_size: int, model_path: str | None, prefix_page_size: int,
            speculative_algorithm: str | None, speculative_num_steps: int | None, speculative_eagle_topk: int | None,
            speculative_num_draft_tokens: int | None, disable_overlap_schedule: bool,
            max_running_requests: int | None) -> None:
    """Serve SGLang's API from a calibrated emulator. Everything it produces is simulated."""
    from findings.emulator import model as emodel
    from findings.emulator import server as eserver

    if profile not in emodel.PROFILES:
        raise click.BadParameter(f"unknown profile {profile!r}; choose one of {', '.join(sorted(emodel.PROFILES))}",
                                 param_hint="--profile")
    from findings.emulator.faults import parse_how

    try:
        how = parse_how(fail_how)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--fail-how") from None
    faults = eserver.Faults(error_rate=error_rate, drop_rate=drop_rate, stall_rate=stall_rate, stall_s=stall_s,
                            die_after=die_after, fail_share=fail_share, fail_how=how, fail_skip=fail_skip)
    from findings.core import engine_rules

    if max_running is not None and max_running_requests is not None and max_running != max_running_requests:
        raise click.BadParameter("--max-running and --max-running-requests differ", param_hint="--max-running-requests")
    max_running = max_running if max_running is not None else max_running_requests
    spec = None
    if speculative_algorithm is not None:
        try:
            spec, _ = engine_rules.sglang_normalize(engine_rules.SglangSpec(
                speculative_algorithm, speculative_num_steps, speculative_eagle_topk, speculative_num_draft_tokens,
                not disable_overlap_schedule, max_running))
        except ValueError as exc:
            raise click.BadParameter(str(exc), param_hint="--speculative-*") from None
        max_running = spec.max_running_requests
    elif (speculative_num_steps, speculative_eagle_topk, speculative_num_draft_tokens) != (None, None, None) \
            or disable_overlap_schedule:
        raise click.BadParameter("needs --speculative-algorithm", param_hint="--speculative-*")
    _run(eserver.serve, eserver.EmulatorOptions(host=host, port=port, profile=profile, seed=seed, speed=speed,
                                                ground_truth=ground_truth, ground_truth_log=ground_truth_log,
                                                startup_delay_s=startup_delay,
                                                max_running_requests=max_running, faults=faults,
                                                vocab_size=vocab_size, model_path=model_path,
                                                prefix_page_size=prefix_page_size, spec=spec))


@main.command()
@click.option("--json", "as_json", is_flag=True, help="Print the stable JSON shape (docs/conclusions.md).")
@click.pass_obj
def conclusions(obj: Context, as_json: bool) -> None:
    """Print the conclusions derived from the store."""
    s = _run(obj.settings)
    click.echo(_run(document.conclusions_json if as_json else document.conclusions_text, s))


@main.command("deploy")
@click.option("--workload", default=None, help="Only this workload.")
@click.option("--config", default=None, help="Only this candidate config.")
@click.option("--engine", type=click.Choice(["sglang", "vllm", "all"]), default="all", show_default=True,
              help="Which engine's settings to emit.")
@click.option("--out", "out", default="build/deploy", show_default=True, metavar="DIR",
              help="Where to write the SGLang adaptive config files the flags name.")
@click.option("--json", "as_json", is_flag=True, help="Print the stable JSON shape (docs/deploy.md).")
@click.option("--steps", type=click.IntRange(min=1), default=None, metavar="K",
              help="The step count (draft tokens per step chain), when the config's facts do not record it.")
@click.option("--draft-model", default=None, metavar="PATH", help="The draft model, when its path is not recorded.")
@click.option("--device", type=click.Choice(["cpu", "cuda"]), default=None,
              help="Where the engine will run, when not the device recorded (SGLang's CPU rules: docs/deploy.md).")
@click.pass_obj
def deploy_cmd(obj: Context, workload: str | None, config: str | None, engine: str, out: str, as_json: bool,
               steps: int | None, draft_model: str | None, device: str | None) -> None:
    """Emit the exact SGLang and vLLM settings of each derived speculation policy."""
    s = _run(obj.settings)
    click.echo(_run(document.deploy, s, workload=workload, config=config, engine=engine, out=Path(out),
                    as_json=as_json, steps=steps, draft_model=draft_model, device=device))


@main.command("plan")
@click.option("--workload", default=None, help="Only this workload.")
@click.option("--config", default=None, help="Only this config's questions.")
@click.option("--kind", type=click.Choice(["threshold", "undecided", "missing-pair", "stale"]), default=None,
              help="Only this kind of question.")
@click.option("--budget-minutes", type=click.FloatRange(min=0), default=None, metavar="M",
              help="Fit the estimate into M minutes of measurement: fewer repeats, then fewer questions.")
@click.option("--output", default=None, metavar="MATRIX.toml", help="Write the matrix that answers them here.")
@click.option("--from-matrix", default=None, metavar="FILE",
              help="Take launch lines and workloads from this matrix (default: the one the store records).")
@click.option("--json", "as_json", is_flag=True, help="Print the stable JSON shape (docs/plan.md).")
@click.pass_obj
def plan_cmd(obj: Context, workload: str | None, config: str | None, kind: str | None,
             budget_minutes: float | None, output: str | None, from_matrix: str | None, as_json: bool) -> None:
    """What to measure next: the open questions of the conclusions and the matrix that answers them."""
    s = _run(obj.settings)
    click.echo(_run(document.plan, s, workload=workload, config=config, kind=kind, budget_minutes=budget_minutes,
                    output=output, from_matrix=from_matrix, as_json=as_json))


@main.command("tune")
@click.argument("matrix", type=click.Path(dir_okay=False))
@click.option("--ray", "ray_address", default=None, metavar="ADDRESS",
              help="Run each trial as a Ray task on a node of this cluster (\"auto\": the local one); needs the "
                   "cluster extra. The results come back here and only this process writes the store.")
@click.option("--trials", type=click.IntRange(min=1), default=None, help="Budget in trials (default: the file's).")
@click.option("--minutes", type=click.FloatRange(min=0, min_open=True), default=None,
              help="Budget in wall minutes (default: the file's).")
@click.option("--search", type=click.Choice(["auto", "grid", "optuna"]), default=None,
              help="How to search (default: the file's): every config, or Optuna's TPE sampler.")
@click.option("--seed", type=click.IntRange(min=0), default=None, help="Optuna's seed (default: the file's).")
@click.option("--prune/--no-prune", default=None,
              help="Stop a trial once it cannot beat the best (default: the file's, else on).")
@click.option("--date", default=None, metavar="YYYY-MM-DD", help="The tune campaign's date (default: today, UTC).")
@click.option("--log-dir", default=None, metavar="DIR", help="Server logs. Default: build/logs/tune-NAME.")
@click.pass_obj
def tune_cmd(obj: Context, matrix: str, ray_address: str | None, trials: int | None, minutes: float | None,
             search: str | None, seed: int | None, prune: bool | None, date: str | None,
             log_dir: str | None) -> None:
    """Search the serving configs of MATRIX's [tune] table for the best under findings.toml's [tune] objective."""
    from findings import tune as tune_mod

    s = _run(obj.settings)
    report = _run(tune_mod.tune, s, matrix, ray=ray_address, trials=trials, minutes=minutes, search=search,
                  seed=seed, prune=prune, date=date, log_dir=log_dir, say=lambda line: click.echo(line, err=True))
    click.echo(report.summary())
    if report.interrupted:
        sys.exit(128 + report.signal)  # 130 for Ctrl-C, 143 for SIGTERM


@main.command("export")
@click.option("--format", "fmt", type=click.Choice(["csv", "jsonl", "parquet"]), default="csv", show_default=True,
              help="The file format.")
@click.option("--requests", is_flag=True, help="The per-request records instead of one row per point.")
@click.option("--output", default=None, metavar="PATH", help="Write here (atomically) instead of standard output.")
@click.option("--force", is_flag=True, help="Replace --output if it exists.")
@click.pass_obj
def export_cmd(obj: Context, fmt: str, requests: bool, output: str | None, force: bool) -> None:
    """The store as a table (the columns of findings.frame, docs/frame.md); needs the [pandas] extra."""
    from findings import dataframe

    s = _run(obj.settings)
    text = _run(dataframe.export, s.store, s.rules.gates, fmt, requests, output, force)
    click.echo(text, nl=output is not None)


@main.group("store")
def store_group() -> None:
    """Inspect the results store."""


@store_group.command("check")
@click.pass_obj
def store_check(obj: Context) -> None:
    """Verify every run file and the store as a whole; say how to repair what is wrong."""
    from findings.store import check as storecheck

    s = _run(obj.settings)
    text, healthy = _run(storecheck.report, s.store)
    click.echo(text)
    if not healthy:
        sys.exit(1)


@store_group.command("migrate")
@click.pass_obj
def store_migrate(obj: Context) -> None:
    """Rewrite older run files in the current schema (per-request records to sidecars)."""
    from findings import store as store_lib

    s = _run(obj.settings)
    read, rewritten, before, after = _run(store_lib.migrate, s.store)
    if not rewritten:
        click.echo(f"{s.store}: {read} run files, all in the current schema; nothing to migrate")
    else:
        click.echo(f"{s.store}: migrated {rewritten} of {read} run files: {before:,} bytes before, "
                   f"{after:,} after (run files and sidecars)")


@store_group.command("list")
@click.option("--runs", "show_runs", is_flag=True, help="Also one line per run (its id, source, labels).")
@click.pass_obj
def store_list(obj: Context, show_runs: bool) -> None:
    """Campaigns, configs and workloads with their counts (and, with --runs, the runs)."""
    from findings.store import amend

    s = _run(obj.settings)
    click.echo(_run(amend.listing, s.store, show_runs))


def _selector(run_ids: tuple[str, ...], select: tuple[str, ...], **labels: str | None) -> Any:
    from findings.store import amend

    chosen: dict[str, str] = {k: v for k, v in labels.items() if v is not None}
    for item in select:
        key, eq, value = item.partition("=")
        if not eq or not value.strip():
            raise click.UsageError(f"--select {item!r}: give KEY=NAME (campaign, config or workload)")
        if chosen.get(key.strip(), value.strip()) != value.strip():
            raise click.UsageError(f"--select {item!r}: {key} is selected twice, as {chosen[key.strip()]!r} too")
        chosen[key.strip()] = value.strip()
    return amend.Selector(run_ids=tuple(run_ids), labels=chosen)


_SELECT_HELP = ("Also select every run holding a point with this label: campaign=NAME, config=NAME or "
                "workload=NAME (repeat to narrow; with RUN_IDs, only those of them).")


@store_group.command("retract")
@click.argument("run_ids", nargs=-1, metavar="[RUN_ID]...")
@click.option("--select", "select", multiple=True, metavar="KEY=NAME", help=_SELECT_HELP)
@click.option("--campaign", default=None, metavar="NAME", help="As --select campaign=NAME.")
@click.option("--config", default=None, metavar="NAME", help="As --select config=NAME.")
@click.option("--workload", default=None, metavar="NAME", help="As --select workload=NAME.")
@click.option("--why", required=True, metavar="TEXT", help="Why the runs are removed (recorded in the store).")
@click.pass_obj
def store_retract(obj: Context, run_ids: tuple[str, ...], select: tuple[str, ...], campaign: str | None,
                  config: str | None, workload: str | None, why: str) -> None:
    """Remove runs and their sidecars, recording who, when and why (the methodology lists it):
    the RUN_IDs, or every run a selector names, all under one lock."""
    from findings.store import amend

    s = _run(obj.settings)
    chosen = _selector(run_ids, select, campaign=campaign, config=config, workload=workload)
    done = _run(amend.retract_many, s.store, chosen, why)
    click.echo("\n".join(f"{d.line()} (recorded in {d.path})" for d in done))


@store_group.command("relabel")
@click.argument("run_ids", nargs=-1, metavar="[RUN_ID]...")
@click.option("--select", "select", multiple=True, metavar="KEY=NAME", help=_SELECT_HELP)
@click.option("--config", default=None, metavar="NEW|OLD=NEW", help="Rename the runs' config.")
@click.option("--workload", default=None, metavar="NEW|OLD=NEW", help="Rename the runs' workload.")
@click.option("--campaign", default=None, metavar="NEW|OLD=NEW", help="Move the runs' points to another campaign.")
@click.option("--why", default="", metavar="TEXT", help="Why (recorded in the store).")
@click.option("--allow-workload-change", is_flag=True, help=_ALLOW_HELP)
@click.pass_obj
def store_relabel(obj: Context, run_ids: tuple[str, ...], select: tuple[str, ...], config: str | None,
                  workload: str | None, campaign: str | None, why: str, allow_workload_change: bool) -> None:
    """Rewrite runs' labels, checked as new runs would be: the RUN_IDs, or every run --select names,
    all or nothing, under one lock."""
    from findings.store import amend

    s = _run(obj.settings)
    chosen = _selector(run_ids, select)
    done = _run(amend.relabel_many, s.store, chosen, config=config, workload=workload, campaign=campaign,
                why=why, baseline=s.rules.baseline, allow_workload_change=allow_workload_change)
    click.echo("\n".join(f"{d.line()} (recorded in {d.path})" for d in done))


@main.command()
@click.argument("base_ref", required=False)
@click.argument("head_ref", required=False)
@click.pass_obj
def diff(obj: Context, base_ref: str | None, head_ref: str | None) -> None:
    """Markdown summary of what changed in conclusions since BASE_REF (default: merge base with main),
    in the working tree or, given HEAD_REF too, at that revision."""
    from findings.document import diff as diff_lib

    s = _run(obj.settings)
    click.echo(_run(diff_lib.diff_markdown, s, base_ref, head_ref), nl=False)


@main.command()
@click.option("--output", metavar="PATH", default=None,
              help="Write here instead of the document path; '-' prints it (writes nothing, no plots).")
@click.option("--check", is_flag=True, help="Exit 1 with a short diff if the file on disk is stale.")
@click.pass_obj
def render(obj: Context, output: str | None, check: bool) -> None:
    """Regenerate the findings document from the store and templates."""
    s = _run(obj.settings)
    if check and output == "-":
        raise click.UsageError("--check compares a file; it cannot check '-'")
    result = _run(document.render_document, s, output, check)
    if result.text is not None:
        click.echo(result.text, nl=False)
        return
    if check:
        if result.changed:
            click.echo(result.diff, err=True)
            click.echo(f"Error: {result.path} is stale; run 'findings render' and commit",
                       err=True)
            sys.exit(1)
        click.echo(f"{result.path} is up to date")
    else:
        click.echo(f"{'wrote' if result.changed else 'unchanged'} {result.path}")


# ------------------------------------------------- global options, after the command too

def _set_global(ctx: click.Context, param: click.Parameter, value: Any) -> None:
    if value is not None and param.name is not None:
        setattr(ctx.find_object(Context), param.name, value)


def _global_options() -> list[click.Option]:
    """``findings ingest aiperf F --store X`` works as ``findings --store X
    ingest aiperf F`` does: the global options are also every command's, and
    the one after the command wins."""
    return [
        click.Option(["--store"], metavar="DIR", default=None, expose_value=False, callback=_set_global,
                     help="As the global --store (accepted after the command too)."),
        click.Option(["--settings", "settings_file"], metavar="FILE", default=None, expose_value=False,
                     callback=_set_global, help="As the global --settings."),
        click.Option(["--baseline"], metavar="NAME", default=None, expose_value=False, callback=_set_global,
                     help="As the global --baseline."),
        click.Option(["--noise-floor", "noise_floor"], type=float, metavar="FRACTION", default=None,
                     expose_value=False, callback=_set_global, help="As the global --noise-floor."),
    ]


def _accept_globals(group: click.Group) -> None:
    for cmd in group.commands.values():
        if isinstance(cmd, click.Group):
            _accept_globals(cmd)
        elif cmd not in (emulate, init_cmd):  # they read no store and no settings
            taken = {o for p in cmd.params for o in getattr(p, "opts", [])}
            cmd.params.extend(o for o in _global_options() if not taken & set(o.opts))


_accept_globals(main)
