"""Where a loop-owning wrapper's 1-device cost goes: ignite's Engine against the plain
torch step, in ONE process, interleaved step block by step block, on distbench's own workload.

Three ways of running the identical step (torch_common.make_step over the same model, optimizer and
synthetic batch), each timed the way stopping.measure times a step (host clock, back to back):

- `torch`:  the step called directly by the measuring (main) thread, as the `torch` strategy does;
- `thread`: the step in a loop of its own thread, handed over per step by wrapper_loop.SteppedLoop
  (the hand-off alone, no wrapper);
- `ignite`: ignite's Engine driving the step, exactly as distbench/workers/ignite_ddp.py does it (its `drive`,
  its events, the same SteppedLoop).

Inside every step the process function itself is timed too ("inner"), so each variant's median step
splits into the step's own compute (inner) and what is around it (outer - inner): the hand-off for
`thread`, the hand-off plus Engine's event firing for `ignite`. Comparing `thread`'s inner with
`torch`'s shows whether running the compute in a second thread costs anything by itself.

Each round runs a block of --block steps of every variant, the order reversed every other round (A B C,
C B A, ...) so a trend of the shared machine hits all alike; every sample is kept, the first --warmup
steps of each variant are run and not kept. Reported: medians per variant, each variant's median/torch's
median, and the per-round ratios' range (no CI: with a handful of rounds, the range is what there is).
The machine's load average is printed before and after.

    .venv/bin/python benchmarks/wrapper_cost.py --model unet --image-size 96 --batch-size 4 --rounds 6
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

VARIANTS = ("torch", "thread", "ignite")


def _cfg(args):
    from distbench.core.config import PointConfig

    return PointConfig(
        strategy="ignite",
        model=args.model,
        world_size=1,
        device="cpu",
        per_device_batch=args.batch_size,
        image_size=args.image_size,
        threads_per_worker=args.threads,
    )


def _minor_faults() -> int:
    """Minor page faults of the calling thread so far (Linux RUSAGE_THREAD; 0 elsewhere)."""
    import resource

    who = getattr(resource, "RUSAGE_THREAD", None)
    return resource.getrusage(who).ru_minflt if who is not None else 0


def _timed(step, inner: list, faults: list | None = None):
    def timed():
        f0 = _minor_faults()
        t0 = time.perf_counter()
        out = step()
        inner.append(time.perf_counter() - t0)
        if faults is not None:
            faults.append(_minor_faults() - f0)
        return out

    return timed


def _plain_thread(step):
    """The hand-off alone: the step in a loop of a second thread, paused at each boundary."""
    from distbench.workers.wrapper_loop import SteppedLoop

    loop = SteppedLoop()

    def run():
        loop.ready()
        while not loop.boundary(step()):
            pass

    loop.start(run)
    return loop


def measure(args) -> dict:
    import torch

    from distbench.workers import ignite_ddp
    from distbench.workers import torch_common as tc

    cfg = _cfg(args)
    tc.configure_threads(cfg)
    device = torch.device("cpu")
    model = tc.build_model(cfg, device, 0)
    optimizer = tc.make_optimizer(cfg, model)
    batches = tc.make_batches(cfg, device, 0, 1, cfg.per_device_batch)
    step = tc.make_step(cfg, model, optimizer, batches, device)
    inner: dict[str, list[float]] = {v: [] for v in VARIANTS}
    faults: dict[str, list[int]] = {v: [] for v in VARIANTS}
    thread_loop = _plain_thread(_timed(step, inner["thread"], faults["thread"]))
    dist = ignite_ddp.make_distribution()
    dist.world = 1
    calls = {
        "torch": _timed(step, inner["torch"], faults["torch"]),
        "thread": thread_loop.step,
        "ignite": dist.drive(cfg, _timed(step, inner["ignite"], faults["ignite"]), batches),
    }
    outer: dict[str, list[float]] = {v: [] for v in VARIANTS}
    per_round: list[dict[str, float]] = []
    for v in VARIANTS:  # warmup, not kept
        for _ in range(args.warmup):
            calls[v]()
        inner[v].clear()
        faults[v].clear()
    for r in range(args.rounds):
        medians = {}
        for v in VARIANTS if r % 2 == 0 else tuple(reversed(VARIANTS)):
            block = []
            t0 = time.perf_counter()
            for _ in range(args.block):
                calls[v]()
                t1 = time.perf_counter()
                block.append(t1 - t0)
                t0 = t1
            outer[v].extend(block)
            medians[v] = statistics.median(block)
        per_round.append(medians)
    thread_loop.finish()
    dist.stop()
    return {"outer": outer, "inner": inner, "per_round": per_round, "faults": faults}


def summarize(result: dict) -> list[dict]:
    """Per variant: median step, median inner (the step itself), outer-inner, ratio to torch, per-round range."""
    outer, inner, per_round = result["outer"], result["inner"], result["per_round"]
    base = statistics.median(outer["torch"])
    rows = []
    for v in VARIANTS:
        med, med_in = statistics.median(outer[v]), statistics.median(inner[v])
        around = statistics.median([o - i for o, i in zip(outer[v], inner[v])])
        ratios = [m[v] / m["torch"] for m in per_round]
        faults = result.get("faults", {}).get(v)
        rows.append(
            dict(
                variant=v,
                steps=len(outer[v]),
                step_ms=1e3 * med,
                inner_ms=1e3 * med_in,
                around_ms=1e3 * around,
                ratio=med / base,
                round_min=min(ratios),
                round_max=max(ratios),
                faults=statistics.median(faults) if faults else None,
            )
        )
    return rows


def table(rows: list[dict]) -> str:
    lines = [
        "| variant | steps kept | median step (ms) | median of the step itself (ms) | median around it (ms) "
        "| / torch | per-round range | minor page faults per step (median) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['variant']} | {r['steps']} | {r['step_ms']:.1f} | {r['inner_ms']:.1f} | {r['around_ms']:.3f} "
            f"| {r['ratio']:.3f} | {r['round_min']:.3f}-{r['round_max']:.3f} "
            f"| {'-' if r.get('faults') is None else format(r['faults'], '.0f')} |"
        )
    return "\n".join(lines)


def _child(local_rank, args):  # under idist.Parallel: the process the ignite strategy trains in
    rows = summarize(measure(args))
    print(table(rows), flush=True)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="unet")
    ap.add_argument("--image-size", type=int, default=96)
    ap.add_argument("--batch-size", type=int, default=4)
    ap.add_argument("--threads", type=int, default=os.cpu_count() or 1, help="intra-op threads (default: cores)")
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--block", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument(
        "--spawned",
        action="store_true",
        help="measure inside a process spawned by idist.Parallel(gloo, nproc_per_node=1), as the ignite strategy runs",
    )
    args = ap.parse_args(argv)
    for name in ("rounds", "block", "threads", "batch_size", "image_size"):
        if getattr(args, name) < 1:
            print(f"wrapper_cost: --{name.replace('_', '-')} must be >= 1, got {getattr(args, name)}", file=sys.stderr)
            return 2
    print(f"load average before: {os.getloadavg()}", flush=True)
    if args.spawned:
        from ignite import distributed as idist

        from distbench.workers.runtime import free_port

        with idist.Parallel(backend="gloo", nproc_per_node=1, master_port=free_port()) as parallel:
            parallel.run(_child, args)
    else:
        print(table(summarize(measure(args))))
    print(f"load average after: {os.getloadavg()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
