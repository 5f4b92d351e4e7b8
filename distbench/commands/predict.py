"""`distbench predict`: the capacity-planning prediction (the model lives in distbench/predict/)."""

from __future__ import annotations

import json
import socket

import click

from distbench import analysis as an
from distbench import predict as pr
from distbench.analysis.output import print_table, table
from distbench.commands import options as opt
from distbench.commands.results import format_option
from distbench.core import mfu
from distbench.core.errors import BadInput
from distbench.core.strategies import STRATEGIES
from distbench.predict import whatif
from distbench.run.devices import parse_counts
from distbench.run.runner import command_line


@click.command()
@click.argument("sweep", default="latest")
@opt.results_option("SQLite results store holding SWEEP (and --comm sweeps); the prediction is saved there.")
@click.option(
    "--csv",
    "csv_path",
    type=click.Path(dir_okay=False),
    help="Predict from a points CSV instead of a stored sweep (columns: strategy, world_size, "
    "per_device_batch, throughput; optional model, nodes, scaling, global_batch, grad_bytes, "
    "overlap, throughput_ci_low/high).",
)
@click.option(
    "--gpus",
    "gpus_text",
    help="Device counts to predict, e.g. 8,16,64 (default: 2x to 16x the largest measured N).",
)
@click.option(
    "--gpus-per-node",
    type=click.IntRange(1, 1024),
    help="Devices per node; larger N span several nodes (default: the most measured on one node).",
)
@click.option("--strategy", "strategy_text", help="Comma list of strategies to predict (default: all).")
@click.option(
    "--comm",
    "comm_sweeps",
    multiple=True,
    metavar="SWEEP",
    help="A stored `distbench comm` sweep to fit link bandwidth and latency from (repeatable; 'latest': the "
    "newest comm sweep).",
)
@click.option(
    "--link",
    "links",
    multiple=True,
    metavar="[TIER=]PROFILE",
    help="A named link profile, e.g. nvlink4, pcie4, ib-ndr, 100gbe (tier intra or inter; bare names "
    "go to their own tier). Repeatable.",
)
@click.option(
    "--link-bw",
    "link_bws",
    multiple=True,
    metavar="TIER=GBPS|RATE",
    help="Link bandwidth per tier: GB/s of payload, or a line rate in kbit, mbit, gbit or tbit (bits/s, e.g. "
    "inter=100mbit), which counts whole frames (Ethernet framing unless --link-framing says otherwise).",
)
@click.option(
    "--link-framing",
    "link_framings",
    multiple=True,
    metavar="TIER=KIND[:MTU]",
    help="What a tier's rate counts beyond the payload: ethernet (a wire), tbf (a Linux token bucket) or none "
    "(the rate is the payload), MTU default 1500, e.g. inter=tbf or inter=ethernet:9000.",
)
@click.option("--link-latency", "link_lats", multiple=True, metavar="TIER=US", help="Link latency in us per tier.")
@opt.option(
    "--nics-per-node",
    type=click.IntRange(1, 64),
    default=1,
    help="Network ports per node for an inter-node --link profile.",
)
@opt.option(
    "--algorithm",
    type=click.Choice(pr.ALGORITHMS),
    default="auto",
    help="All-reduce cost model: auto = ring on one node, hierarchical across nodes.",
)
@click.option(
    "--bucket-mb",
    type=opt.FiniteFloatRange(0, 1e6, min_open=True),
    help="Bucket / fusion size in MiB (default: DDP 25, Horovod 64, others one message).",
)
@click.option(
    "--grad-bytes",
    type=opt.FiniteFloatRange(0, 1e15, min_open=True),
    help="Gradient bytes per step when the points do not record them.",
)
@click.option("--epoch-samples", type=click.IntRange(min=1), help="Samples in one epoch.")
@click.option(
    "--epoch-time",
    type=opt.FiniteFloatRange(0, 1e9, min_open=True),
    help="Target seconds per epoch (with --epoch-samples): devices needed.",
)
@click.option(
    "--target-throughput",
    type=opt.FiniteFloatRange(0, 1e12, min_open=True),
    help="Samples/s you need: devices needed.",
)
@click.option(
    "--gpu-hour-price",
    type=opt.FiniteFloatRange(0, 1e6),
    help="Price of one device-hour: cost per epoch (with --epoch-samples).",
)
@click.option(
    "--what-if",
    "what_if_text",
    metavar="STRATEGY|link=[TIER=]PROFILE[,...]",
    help="Also predict each fitted workload under another strategy's traffic, e.g. fsdp,deepspeed-zero3 "
    "(ZeRO-3/FSDP move 1.5x the bytes of DDP's all-reduce), or onto another network: link=[TIER=]PROFILE, "
    "e.g. link=inter=25gbe.",
)
@click.option(
    "--epochs-to-target",
    "converge_sweep",
    metavar="SWEEP",
    help="A stored `distbench converge` sweep: predicted time (and cost) to train from its epochs to target per "
    "global batch (with --epoch-samples; default: its training samples; 'latest': the newest converge sweep).",
)
@click.option(
    "--profile",
    "profile_sweep",
    metavar="SWEEP",
    help="A stored one-device `distbench profile` sweep of the same model: from one device, the bucket ready "
    "times and backward share come from its trace (default: the model's per-layer FLOPs; 'latest': the newest "
    "profile sweep).",
)
@click.option("--no-store", is_flag=True, help="Do not save the prediction in the store.")
@format_option
def predict(
    sweep,
    results,
    csv_path,
    gpus_text,
    gpus_per_node,
    strategy_text,
    comm_sweeps,
    links,
    link_bws,
    link_framings,
    link_lats,
    nics_per_node,
    algorithm,
    bucket_mb,
    grad_bytes,
    epoch_samples,
    epoch_time,
    target_throughput,
    gpu_hour_price,
    what_if_text,
    converge_sweep,
    profile_sweep,
    no_store,
    fmt,
):
    """Predict throughput, speedup, efficiency, epoch time and cost at device and node counts that were not
    measured, with 95% prediction intervals, from a sweep's measured points and an interconnect model.

    Example: distbench predict latest --gpus 16,32,64 --gpus-per-node 8 --link nvlink4 --link ib-ndr
    """
    for flag, value, why in (
        ("--epoch-time", epoch_time, "how many samples one epoch has"),
        ("--gpu-hour-price", gpu_hour_price, "the cost is per epoch"),
    ):
        if value is not None and not epoch_samples:
            raise BadInput(f"{flag} needs --epoch-samples ({why})")
    gpus = parse_counts(gpus_text, "--gpus", "device count", 1 << 20) if gpus_text else None
    strategies = [s.strip() for s in strategy_text.split(",") if s.strip()] if strategy_text else None
    what_if = [w.strip() for w in what_if_text.split(",") if w.strip()] if what_if_text is not None else []
    if what_if_text is not None and not what_if:
        raise BadInput("--what-if: name at least one strategy, e.g. --what-if fsdp")
    what_if, what_if_links = whatif.parse(what_if, nics_per_node)
    unknown = [w for w in what_if if w not in STRATEGIES]
    if unknown:
        raise BadInput(f"--what-if: unknown strategy {unknown[0]!r}; known: {', '.join(STRATEGIES)}")
    link_map = pr.explicit_links(links, link_bws, link_lats, nics_per_node, link_framings)
    records, sweep_id, store_path, cores = [], None, None, None
    if csv_path:
        records = pr.read_csv(csv_path)
    profile_records = None
    if not csv_path or comm_sweeps or profile_sweep:
        with an.open_store(results) as store:
            if not csv_path:
                if sweep == "latest":  # the newest sweep with training throughput points, named on stderr
                    sweep, line = an.pick_latest(store, "scaling")
                    opt.echo_err(line)
                data = an.load_sweep(store, sweep)
                records, sweep_id, store_path = data.points, data.id, results
                cores = sweep_cores(data.info)
            if profile_sweep:
                profile_records = latest_or_named(store, profile_sweep, "profile", "--profile").points
            for cid in comm_sweeps:
                cdata = latest_or_named(store, cid, "comm", "--comm")
                if not cdata.comm_points:
                    raise BadInput(f"--comm {cid}: that sweep has no successful `distbench comm` points")
                for tier, link in pr.links_from_comm(cdata.comm_points, cdata.id).items():
                    link_map.setdefault(tier, link)  # explicit figures win
    series = pr.series_from_records(records, from_csv=bool(csv_path), strategies=strategies, per_node=gpus_per_node)
    if strategies:
        unknown = set(strategies) - {s.strategy for s in series}
        if unknown:
            raise BadInput(f"--strategy: no successful points for {', '.join(sorted(unknown))}")
    for s in series:
        s.grad_bytes = grad_bytes or s.grad_bytes
    doc = pr.predict(
        series,
        link_map,
        lambda s: pr.link_from_allreduce(records, s.strategy),
        gpus=gpus,
        algorithm=algorithm,
        bucket_bytes=bucket_mb * 2**20 if bucket_mb else None,
        epoch_samples=epoch_samples,
        target_throughput=target_throughput,
        epoch_time=epoch_time,
        gpu_hour_price=gpu_hour_price,
        what_if=what_if,
        what_if_links=what_if_links,
        profile_records=profile_records,
        cores=cores,
    )
    doc["source"] = {"sweep": sweep_id, "store": store_path, "csv": csv_path, "comm_sweeps": list(comm_sweeps)}
    if converge_sweep:  # issue 23: predicted time to train (distbench/converge/capacity.py)
        doc["time_to_train"] = time_to_train_doc(results, converge_sweep, doc, epoch_samples, gpu_hour_price)
    if sweep_id and not no_store:
        with an.open_store(results) as store:
            doc["prediction_id"] = pr.save(store, sweep_id, command_line(), doc)
    if fmt == "json":
        click.echo(json.dumps(doc, indent=2, default=str))
        return
    out = opt.out_console()
    predicted = pr.table_rows(doc)
    for title, (headers, rows), right in (
        ("PREDICTED (not measured)", predicted, [h for h in predicted[0] if h not in ("workload", "strategy")]),
        ("leave-largest-N-out on the measured points (model vs the naive guess)", pr.validation_rows(doc), ()),
    ):
        if rows:
            shown = table(title, headers, right)
            for row in rows:
                shown.add_row(*row)
            print_table(out, shown)
    for line in pr.summary_lines(doc):
        out.print(line, markup=False)
    if "time_to_train" in doc:
        print_time_to_train(out, doc["time_to_train"])
    if "prediction_id" in doc:
        out.print(
            f"prediction saved in {results} (sweep {sweep_id}); `distbench report {sweep_id}` shows it", markup=False
        )


def latest_or_named(store, sweep: str, use: str, flag: str) -> an.Sweep:
    """The sweep `flag` names; 'latest' is the newest sweep of the kind it reads (an.LATEST_USES[use]), named
    on stderr."""
    if sweep == "latest":
        try:
            sweep, line = an.pick_latest(store, use)
        except BadInput as exc:
            raise BadInput(f"{flag} latest: {exc}") from None
        opt.echo_err(line)
    return an.load_sweep(store, sweep)


def time_to_train_doc(results, converge_sweep, doc, epoch_samples, gpu_hour_price) -> dict:
    from distbench.converge.capacity import time_to_train

    with an.open_store(results) as store:
        data = latest_or_named(store, converge_sweep, "converge", "--epochs-to-target")
    records = [r for r in data.points if r.get("converge")]
    if not records:
        raise BadInput(f"--epochs-to-target {converge_sweep}: that sweep has no `distbench converge` runs")
    samples = epoch_samples or records[0]["converge"]["train_samples"]
    return {"sweep": data.id, **time_to_train(doc, records, samples, gpu_hour_price)}


def print_time_to_train(out, ttt: dict) -> None:
    headers = ["strategy", "N", "global batch", "epochs to target", "epochs from", "time to train s [95%]"]
    shown = table(f"PREDICTED time to train (epochs from converge sweep {ttt['sweep']})", headers)
    for r in ttt["rows"]:
        interval = f"{r['time_to_train_s']:.4g} [{r['time_to_train_low_s']:.4g}, {r['time_to_train_high_s']:.4g}]"
        shown.add_row(
            r["strategy"],
            str(r["n"]),
            str(r["global_batch"]),
            f"{r['epochs_to_target']:.3g}",
            r["epochs_source"],
            interval,
        )
    print_table(out, shown)
    out.print(f"{ttt['note']}; measured global batches: {ttt['measured_global_batches']}", markup=False)


def sweep_cores(info: dict) -> int | None:
    """Physical cores of the machine that ran the sweep, None when not recorded. The stored environment records
    logical CPUs (`cpu_affinity`, `cpu_count`: os.cpu_count counts hyperthreads); they are turned into cores with
    this machine's threads per core when the sweep ran here (same hostname), else kept as they are."""
    env = info.get("env") if isinstance(info.get("env"), dict) else {}
    for key in ("physical_cores", "cpu_physical_cores"):
        if value := an.num(env.get(key)):
            return int(value)
    logical = an.num(env.get("cpu_affinity")) or an.num(env.get("cpu_count"))
    if not logical:
        return None
    if env.get("hostname") == socket.gethostname():
        return mfu.physical_cores(int(logical))
    return int(logical)
