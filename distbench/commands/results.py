"""`distbench results list|show|export`, `distbench report` and `distbench compare`: reading the store back
(the commands parse options and call distbench.analysis / report / compare)."""

from __future__ import annotations

import json

import click

from distbench import analysis
from distbench import report as report_mod
from distbench.analysis import output
from distbench.analysis.compare import Undecided, compare_sweeps, gate, parse_threshold, summary_lines
from distbench.analysis.compare_table import comparison_table
from distbench.commands import options as opt
from distbench.commands.profile import print_profiles
from distbench.core.errors import BadInput
from distbench.profile.compare import profiled

results_option = opt.results_option("SQLite results store to read.")
format_option = opt.format_option("table for people, json for scripts (one JSON document on stdout).")


def _load(results: str, sweep: str, use: str = "any") -> analysis.Sweep:
    """The sweep `sweep` names; 'latest' is the newest one this command can use (analysis.LATEST_USES[use]),
    named on stderr."""
    with analysis.open_store(results) as store:
        if sweep == "latest":
            sweep, line = analysis.pick_latest(store, use)
            _err(line)
        return analysis.load_sweep(store, sweep)


def _err(text: str) -> None:
    opt.echo_err(text)


@click.group()
def results():
    """Browse, show and export the sweeps in a results store.

    Example: distbench results show latest
    """


@results.command("list")
@results_option
@opt.option("--limit", type=click.IntRange(min=1), default=20, help="How many sweeps to list.")
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
        out = opt.out_console()
        output.print_table(out, report_mod.sweeps_table(rows, results))


@results.command()
@click.argument("sweep", default="latest")
@results_option
@format_option
def show(sweep, results, fmt):
    """Show one sweep's points (SWEEP is a sweep id or 'latest'), with 95% CIs when recorded.

    Example: distbench results show 20250101-120000-ab12
    """
    data = _load(results, sweep)
    if fmt == "json":
        click.echo(json.dumps(analysis.sweep_document(data), indent=2, sort_keys=True, default=str))
        return
    out = opt.out_console()
    for line in report_mod.sweep_header(data):
        out.print(line, markup=False)
    notes = output.Notes()
    output.print_table(out, report_mod.points_table(data, notes), notes)
    for line in analysis.summarize(data).wrapper:
        out.print(f"1-device wrapper cost: {line}", markup=False)
    if profiled(data.points):  # distbench profile / --profile: the breakdowns and their comparison
        print_profiles(out, data.points)


@results.command()
@click.argument("sweep", default="latest")
@results_option
@opt.option("--csv", "csv_path", metavar="PATH", help="Write one row per point as CSV ('-' for stdout).")
@opt.option("--parquet", "parquet_path", metavar="PATH", help="Write one row per point as Parquet (needs pyarrow).")
@opt.option(
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
    data = _load(results, sweep)
    for path in report_mod.export(data, csv=csv_path, parquet=parquet_path, json_path=json_path):
        _err(f"wrote {path}")


@click.command()
@click.argument("sweep", default="latest")
@results_option
@opt.option(
    "--out",
    type=click.Path(dir_okay=False),
    default="report.html",
    help="The HTML file to write; the Markdown (same name, .md), the points CSV and the plot PNGs go next to it.",
)
@opt.option(
    "--target-throughput",
    type=click.FloatRange(min=0, min_open=True),
    help="Capacity planning: the samples/s you need; the report gives the smallest measured N "
    "reaching it per strategy.",
)
@opt.option(
    "--epoch-samples",
    type=click.IntRange(min=1),
    help="Capacity planning: samples in one epoch; the report gives the time per epoch at each N.",
)
@opt.option(
    "--epoch-time",
    type=click.FloatRange(min=0, min_open=True),
    help="Capacity planning: target seconds per epoch (with --epoch-samples).",
)
def report(sweep, results, out, target_throughput, epoch_samples, epoch_time):
    """Write a self-contained HTML report of a sweep (an id or 'latest', the default), plus a Markdown
    twin with PNG plots for a PR or wiki, and a CSV of the points.

    Example: distbench report latest --out report.html --target-throughput 2000
    """
    data = _load(results, sweep, "training")
    files = report_mod.write_report(
        data, out, target_throughput=target_throughput, epoch_samples=epoch_samples, epoch_time=epoch_time
    )
    _err(f"wrote {files.html}, {files.markdown}, {files.csv} and {len(files.images)} plot(s)")


@click.command()
@click.argument("sweep_a")
@click.argument("sweep_b")
@results_option
@opt.option(
    "--results-b",
    type=click.Path(dir_okay=False),
    help="Store holding SWEEP_B when it is another file (e.g. from another machine). Default: --results.",
)
@opt.option(
    "--threshold",
    default="5%",
    help="Smallest throughput change to flag, as a percentage (5%) or a fraction (0.05).",
)
@opt.option(
    "--noise-floor",
    "noise_floor",
    metavar="SWEEP",
    help="A second run of SWEEP_A (an A/A pair, in --results): its differences from A measure the run-to-run "
    "noise for points that ran once (--repeats 1; 'latest': the newest scale, run, slurm or k8s sweep).",
)
@opt.option(
    "--allow-undecided",
    is_flag=True,
    help="Exit 0, not 3, when no point regressed but some could not be judged (one run and no --noise-floor, "
    "skipped or interrupted, unmatched).",
)
@format_option
def compare(sweep_a, sweep_b, results, results_b, threshold, noise_floor, allow_undecided, fmt):
    """Compare sweep B against sweep A (ids or 'latest'): throughput ratio B/A per matching point, judged on
    run-to-run noise (the repeats of both sides, or a --noise-floor A/A sweep): t on log throughput, Holm
    across the points, one-sided for regressions. Exits 1 when a point regressed beyond that noise and the
    threshold (or failed in B); else 3 when some point could not be judged (fewer than 2 successful repeats
    on a side and no floor: "not enough repeats to say";
    skipped or interrupted; unmatched), unless --allow-undecided; else 0. So it works as a CI gate.

    Example: distbench compare 20250101-120000-ab12 latest --threshold 5%
    """
    limit = parse_threshold(threshold)
    a = _load(results, sweep_a, "scaling")
    b = _load(results_b or results, sweep_b, "scaling")
    floor = None
    if noise_floor is not None:
        try:
            floor = _load(results, noise_floor, "scaling")
        except BadInput as exc:
            raise BadInput(f"--noise-floor: {exc}") from None
        if floor.id in (a.id, b.id):
            raise BadInput(f"--noise-floor {noise_floor!r} is a compared sweep: give a second run of SWEEP_A")
    result = compare_sweeps(a, b, threshold=limit, floor=floor)
    if fmt == "json":
        click.echo(json.dumps(result.to_json(), indent=2, default=str))
    else:
        out = opt.out_console()
        if result.points:  # no empty table when nothing matched
            output.print_table(out, comparison_table(result))
        for line in summary_lines(result):
            out.print(line, markup=False)
    if not result.points:  # nothing could be judged: the gate's exit 3, as for any point it could not judge
        if not allow_undecided:
            raise Undecided(result.no_match_message())
        _err(result.no_match_message())
        return
    gate(result, allow_undecided=allow_undecided)
