"""`distbench results list|show|export`, `distbench report` and `distbench compare`: reading the store back.

The commands only parse options and call distbench.analysis / report / compare.
"""

from __future__ import annotations

import json
import sys

import click
from rich.console import Console

from distbench import analysis, report as report_mod
from distbench.compare import compare_sweeps, comparison_table, gate, parse_threshold, summary_lines
from distbench.errors import BadInput
from distbench.store import DEFAULT_PATH


def results_option(fn):
    return click.option(
        "--results",
        type=click.Path(dir_okay=False),
        default=str(DEFAULT_PATH),
        show_default=True,
        help="SQLite results store to read.",
    )(fn)


def format_option(fn):
    return click.option(
        "--format",
        "fmt",
        type=click.Choice(["table", "json"]),
        default="table",
        show_default=True,
        help="table for people, json for scripts (one JSON document on stdout).",
    )(fn)


def _console() -> Console:
    return Console(highlight=False, width=None if sys.stdout.isatty() else 160)


def _err(text: str) -> None:
    click.echo(text, err=True)


@click.group()
def results():
    """Browse, show and export the sweeps in a results store.

    Example: distbench results show latest
    """


@results.command("list")
@results_option
@click.option("--limit", type=click.IntRange(min=1), default=20, show_default=True, help="How many sweeps to list.")
@format_option
def list_cmd(results, limit, fmt):
    """List recent sweeps: id, start time, status, command and how many points succeeded.

    Example: distbench results list --limit 5
    """
    with analysis.open_store(results) as store:
        rows = analysis.list_sweeps(store, limit)
    if fmt == "json":
        click.echo(json.dumps(rows, indent=2))
    elif not rows:
        _err(f"{results} has no sweeps yet (run `distbench scale` first)")
    else:
        _console().print(report_mod.sweeps_table(rows, results))


@results.command()
@click.argument("sweep", default="latest")
@results_option
@format_option
def show(sweep, results, fmt):
    """Show one sweep's points (SWEEP is a sweep id or 'latest'), with 95% CIs when recorded.

    Example: distbench results show 20250101-120000-ab12
    """
    with analysis.open_store(results) as store:
        data = analysis.load_sweep(store, sweep)
    if fmt == "json":
        click.echo(json.dumps(analysis.sweep_document(data), indent=2, sort_keys=True, default=str))
        return
    out = _console()
    for line in report_mod.sweep_header(data):
        out.print(line, markup=False)
    out.print(report_mod.points_table(data))
    for line in report_mod.wrapper_lines(data):
        out.print(f"1-device wrapper cost: {line}", markup=False)


@results.command()
@click.argument("sweep", default="latest")
@results_option
@click.option("--csv", "csv_path", metavar="PATH", help="Write one row per point as CSV ('-' for stdout).")
@click.option("--parquet", "parquet_path", metavar="PATH", help="Write one row per point as Parquet (needs pyarrow).")
@click.option(
    "--json",
    "json_path",
    metavar="PATH",
    help="Write the sweep and every full record with its step times as JSON ('-' for stdout).",
)
def export(sweep, results, csv_path, parquet_path, json_path):
    """Export a sweep (an id or 'latest') for pandas, spreadsheets or other tools.

    Example: distbench results export latest --csv points.csv
    """
    if not (csv_path or parquet_path or json_path):
        raise BadInput("nothing to export: give --csv PATH, --parquet PATH or --json PATH")
    with analysis.open_store(results) as store:
        data = analysis.load_sweep(store, sweep)
    for path in report_mod.export(data, csv=csv_path, parquet=parquet_path, json_path=json_path):
        _err(f"wrote {path}")


@click.command()
@click.argument("sweep", default="latest")
@results_option
@click.option(
    "--out",
    type=click.Path(dir_okay=False),
    default="report.html",
    show_default=True,
    help="The HTML file to write; the Markdown (same name, .md), the points CSV and the plot PNGs go next to it.",
)
@click.option(
    "--target-throughput",
    type=click.FloatRange(min=0, min_open=True),
    default=None,
    help="Capacity planning: the samples/s you need; the report gives the smallest measured N "
    "reaching it per strategy.",
)
@click.option(
    "--epoch-samples",
    type=click.IntRange(min=1),
    default=None,
    help="Capacity planning: samples in one epoch; the report gives the time per epoch at each N.",
)
@click.option(
    "--epoch-time",
    type=click.FloatRange(min=0, min_open=True),
    default=None,
    help="Capacity planning: target seconds per epoch (with --epoch-samples).",
)
def report(sweep, results, out, target_throughput, epoch_samples, epoch_time):
    """Write a self-contained HTML report of a sweep (an id or 'latest', the default), plus a Markdown
    twin with PNG plots for a PR or wiki, and a CSV of the points.

    Example: distbench report latest --out report.html --target-throughput 2000
    """
    with analysis.open_store(results) as store:
        data = analysis.load_sweep(store, sweep)
    files = report_mod.write_report(
        data, out, target_throughput=target_throughput, epoch_samples=epoch_samples, epoch_time=epoch_time
    )
    _err(f"wrote {files.html}, {files.markdown}, {files.csv} and {len(files.images)} plot(s)")


@click.command()
@click.argument("sweep_a")
@click.argument("sweep_b")
@results_option
@click.option(
    "--results-b",
    type=click.Path(dir_okay=False),
    default=None,
    help="Store holding SWEEP_B when it is another file (e.g. from another machine). Default: --results.",
)
@click.option(
    "--threshold",
    default="5%",
    show_default=True,
    help="Smallest throughput change to flag, as a percentage (5%) or a fraction (0.05).",
)
@click.option("--seed", type=int, default=0, show_default=True, help="Seed of the bootstrap resampling.")
@format_option
def compare(sweep_a, sweep_b, results, results_b, threshold, seed, fmt):
    """Compare sweep B against sweep A (ids or 'latest'): throughput ratio B/A per matching point with a
    95% CI. Exits 1 when a point regressed beyond the noise and the threshold (or failed in B), else 0,
    so it works as a CI gate.

    Example: distbench compare 20250101-120000-ab12 latest --threshold 5%
    """
    limit = parse_threshold(threshold)
    with analysis.open_store(results) as store:
        a = analysis.load_sweep(store, sweep_a)
        if results_b is None:
            b = analysis.load_sweep(store, sweep_b)
    if results_b is not None:
        with analysis.open_store(results_b) as store_b:
            b = analysis.load_sweep(store_b, sweep_b)
    result = compare_sweeps(a, b, threshold=limit, seed=seed)
    if fmt == "json":
        click.echo(json.dumps(result.to_json(), indent=2, default=str))
    else:
        out = _console()
        out.print(comparison_table(result))
        for line in summary_lines(result):
            out.print(line, markup=False)
    if not result.points:
        raise BadInput(result.no_match_message())
    gate(result)
