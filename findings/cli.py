"""The command line: parse, call one library function, map errors to one line.

The only module that imports click. Documented in docs/cli.md (a test keeps
the two in step).
"""

from __future__ import annotations

import sys
from typing import Any

import click

from findings import __version__, document
from findings import ingest as ingest_lib
from findings.errors import FindingsError
from findings.settings import Settings, load


class Context:
    def __init__(self, store: str | None, settings_file: str | None, baseline: str | None,
                 noise_floor: float | None) -> None:
        self.store, self.settings_file = store, settings_file
        self.baseline, self.noise_floor = baseline, noise_floor

    def settings(self) -> Settings:
        return load(self.settings_file).with_overrides(
            store=self.store, baseline=self.baseline, noise_floor=self.noise_floor)


def _run(fn: Any, *args: Any, **kwargs: Any) -> Any:
    try:
        return fn(*args, **kwargs)
    except FindingsError as exc:
        raise click.ClickException(str(exc)) from None


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


@main.group()
def ingest() -> None:
    """Import results written by other tools into the store."""


@ingest.command("table")
@click.argument("file")
@click.option("--configs", metavar="CONFIGS.csv", default=None, help="Config facts, one row per config.")
@click.option("--environment", metavar="ENV.toml", default=None, help="Hardware/software facts (flat TOML).")
@click.option("--skip-existing", is_flag=True, help="Ingest only rows not already in the store.")
@click.pass_obj
def ingest_table(obj: Context, file: str, configs: str | None, environment: str | None,
                 skip_existing: bool) -> None:
    """Import a long CSV table (campaign, workload, config, concurrency, output_throughput_tok_s)."""
    s = _run(obj.settings)
    click.echo(_run(ingest_lib.ingest_table, s.store, file, configs, environment, skip_existing).summary())


@ingest.command("sglang-bench")
@click.argument("file")
@click.option("--config", required=True, help="Name of the server config these lines measured.")
@click.option("--campaign", required=True, help="Campaign name (measurements taken together).")
@click.option("--workload", required=True, help="Workload name (never pooled with other workloads).")
@click.option("--date", required=True, metavar="YYYY-MM-DD", help="When the campaign was measured.")
@click.option("--order", type=int, default=None, help="Tie-break among campaigns of the same date.")
@click.option("--concurrency", type=click.IntRange(min=1), default=None,
              help="C for lines without max_concurrency (sglang 0.3.x).")
@click.option("--environment", metavar="ENV.toml", default=None, help="Hardware/software facts (flat TOML).")
@click.option("--skip-existing", is_flag=True, help="Ingest only lines not already in the store.")
@click.pass_obj
def ingest_sglang(obj: Context, file: str, config: str, campaign: str, workload: str, date: str,
                  order: int | None, concurrency: int | None, environment: str | None,
                  skip_existing: bool) -> None:
    """Import `python -m sglang.bench_serving --output-file` JSONL (one line = one point)."""
    s = _run(obj.settings)
    result = _run(ingest_lib.ingest_sglang_bench, s.store, file, config=config, campaign=campaign,
                  workload=workload, date=date, order=order, concurrency=concurrency,
                  environment=environment, skip_existing=skip_existing)
    click.echo(result.summary())


@main.command()
@click.option("--json", "as_json", is_flag=True, help="Print the stable JSON shape (docs/conclusions.md).")
@click.pass_obj
def conclusions(obj: Context, as_json: bool) -> None:
    """Print the conclusions derived from the store."""
    s = _run(obj.settings)
    click.echo(_run(document.conclusions_json if as_json else document.conclusions_text, s))


@main.command()
@click.option("--output", metavar="PATH", default=None, help="Write here instead of the document path.")
@click.option("--check", is_flag=True, help="Exit 1 with a short diff if the file on disk is stale.")
@click.pass_obj
def render(obj: Context, output: str | None, check: bool) -> None:
    """Regenerate the findings document from the store and templates."""
    s = _run(obj.settings)
    result = _run(document.render_document, s, output, check)
    if check:
        if result.changed:
            click.echo(result.diff, err=True)
            click.echo(f"Error: {result.path} is stale; run 'make render' (findings render) and commit",
                       err=True)
            sys.exit(1)
        click.echo(f"{result.path} is up to date")
    else:
        click.echo(f"{'wrote' if result.changed else 'unchanged'} {result.path}")
