"""`distbench comm`: the all-reduce microbenchmark."""

from __future__ import annotations

import click

from distbench.analysis import output
from distbench.analysis.output import json_document
from distbench.commands import options as opt
from distbench.core.errors import BadInput
from distbench.kinds.commbench import BACKENDS
from distbench.kinds.plans import CommOptions, plan_comm
from distbench.results.kind import RecordKind
from distbench.run import runner
from distbench.run.devices import parse_gpus

SERIES = ("sizes_bytes", "time_median_s", "time_p95_s", "algbw_gbps", "busbw_gbps", "correct")
"""A comm record's per-size lists."""


@click.command()
@opt.option(
    "--gpus", "gpus_text", default="2", help="Comma list of rank counts, e.g. 2,4 (at least 2: one rank moves no data)."
)
@click.option(
    "--backend",
    help=f"Communication library: {', '.join(BACKENDS)}. Default: nccl on CUDA GPUs (gloo would measure "
    "copies through host memory), gloo on CPU workers.",
)
@click.option(
    "--sizes",
    help="Message sizes: LOW:HIGH (grows by --factor) or a comma list, K/M/G = powers of 1024. "
    "Default 1K:1G on GPUs, 1K:64M on CPU workers.",
)
@opt.option(
    "--factor", type=click.Choice(["2", "4"]), default="2", help="Growth factor between sizes of a LOW:HIGH range."
)
@opt.option(
    "--iters",
    type=click.IntRange(3, 100_000),
    default=20,
    help="Timed iterations per size (fewer for big messages, see --max-time-per-size; at least 3).",
)
@opt.option("--warmup", type=opt.WARMUP, default=3, help="Untimed iterations per size.")
@opt.option(
    "--max-time-per-size",
    type=opt.FiniteFloatRange(0, 3600, min_open=True),
    default=2.0,
    help="Cap on timed seconds per size: big messages get fewer iterations (at least 3).",
)
@opt.option(
    "--nodes",
    type=click.IntRange(1, 1024),
    default=1,
    help="Spread the ranks over this many nodes (inside a Slurm allocation, or the one-machine cluster of "
    "scripts/cluster-local.sh); every --gpus value must divide evenly.",
)
@opt.workload_option("device", help="auto uses CUDA GPUs when enough are visible, otherwise CPU workers.")
@opt.workload_option("timeout", help="Seconds before a rank count's run is killed and recorded as 'timeout'.")
@opt.results_option()
@opt.format_option("json prints one JSON document (a list of points) to stdout.")
def comm(gpus_text, backend, sizes, factor, iters, warmup, max_time_per_size, nodes, device, timeout, results, fmt):
    """All-reduce bandwidth over message sizes, for one communication backend.

    For each size S: the median and p95 time t over iterations (each after a barrier, warmup
    excluded, the slowest rank's time), algbw = S / t and busbw = algbw * 2(n-1)/n, the
    nccl-tests definitions (busbw is comparable across rank counts), and a check that every
    element of the result equals the expected sum. GB/s are 1e9 bytes per second.

    Example: distbench comm --gpus 2,4 --backend gloo --sizes 1K:64M
    """
    gpus = parse_gpus(gpus_text)
    if 1 in gpus:  # an all-reduce over one rank moves no bytes: any "bandwidth" would be size / a no-op's time
        raise BadInput(
            f"--gpus {gpus_text}: an all-reduce over 1 rank moves no data, so it has no bandwidth; give 2 or more ranks"
        )
    opts = CommOptions(
        gpus=tuple(gpus),
        backend=backend,
        sizes=sizes,
        factor=int(factor),
        iters=iters,
        warmup=warmup,
        max_time_per_size=max_time_per_size,
        device=device,
        nodes=nodes,
    )
    plan = plan_comm(opts)
    strategy = plan.points[0].strategy
    section = plan.points[0].config.comm_bench
    size_list = list(section.sizes)
    err = opt.err_console()
    notes = plan.notes
    opt.print_notes(err, notes)
    options = {"kind": "comm", "backend": section.backend, "gpus": list(opts.gpus), "sizes": size_list}
    if nodes > 1:
        options["nodes"] = nodes
    points = plan.points

    def progress(phase, i, total, point, record):
        if phase == "start":
            err.print(f"{strategy.name} N={point.config.world_size}: {len(size_list)} sizes ...")

    with runner.new_sweep(results, "comm", options, notes) as sweep:
        sweep.run(points, runner.Kind(runner.single_run(timeout), record_kind=RecordKind.COMM), progress)
    records = sweep.records
    if fmt == "json":
        click.echo(json_document(records, extra_fields=("backend", *SERIES, "iterations")))
        return
    out = opt.out_console()
    for r in records:
        if r["status"] != "ok" and not r.get("sizes_bytes"):
            out.print(f"{r['strategy']} N={r['world_size']}: {r['status']}: {r.get('reason')}", markup=False)
            continue
        cols = ("size", "time median (us)", "time p95 (us)", "algbw (GB/s)", "busbw (GB/s)", "correct")
        title = f"{r['strategy']} all-reduce, N={r['world_size']} ({r.get('backend')}, {r['device']})"
        table = output.table(title, cols, right=cols)
        for size, median, p95, algbw, busbw, correct in zip(*(r[k] for k in SERIES)):
            table.add_row(
                _human(size),
                f"{median * 1e6:.1f}",
                f"{p95 * 1e6:.1f}",
                f"{algbw:.3f}",
                f"{busbw:.3f}",
                "yes" if correct else "[red]NO[/]",
            )
        output.print_table(out, table)
    out.print("algbw = S / t; busbw = algbw * 2(n-1)/n (nccl-tests definitions); GB/s = 1e9 B/s", style="dim")
    out.print(f"results stored in {results} (sweep {sweep.id})")
    if any(r["status"] not in ("ok", "skipped") for r in records):
        raise click.exceptions.Exit(1)


def _human(size: int) -> str:
    for unit, scale in (("G", 1024**3), ("M", 1024**2), ("K", 1024)):
        if size >= scale and size % scale == 0:
            return f"{size // scale}{unit}"
    return f"{size}B"
