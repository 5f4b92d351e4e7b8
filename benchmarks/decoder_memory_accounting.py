"""Where a decoder point's memory per device goes, component by component, on CPU workers.

`benchmarks/decoder_memory.py` compares the measured peak RSS of each rank (above its RSS before the model was
built) with the ZeRO paper's model-state formula. This script explains that figure. It runs the same worker
code as a `distbench scale` point (the strategy's Distribution from distbench.workers, torch_common's model,
optimizer, batches and step) under torchrun, one strategy at a time, and in each rank:

* reads the RSS (VmRSS) before the model is built, after it is built, after it is wrapped, and the peak
  (VmHWM, reset after wrapping as the worker resets it) over the warmup and the timed steps;
* records every tensor allocation and free of those steps with torch's memory profiler
  (`torch.profiler.profile(profile_memory=True)`, `_memory_profile().timeline`: the CPU allocator has no
  statistics of its own) and finds the moment the live tensors peak and what is live then;
* names each live tensor by walking the Python objects that hold it (the model's parameters and their
  gradients, the optimizer's state, the wrapper's attributes: DeepSpeed's flat partitions and buckets,
  FSDP2's parameter groups), else by the profiler's category (activation, temporary, gradient, ...);
* counts the Python modules the wrapper imported, and in a fresh process the RSS their import costs;
* finds the largest all-gather output and reduce-scatter input among the c10d operations the profile recorded:
  gloo copies each whole on its own worker thread, where the profiler logs no allocation.

What is left between the measured peak and the sum of these is memory the process holds outside torch's
tensors: the allocator's slack (glibc arenas), Python objects, and the profiler's own records (a few MiB).
The live-tensor peak and the gloo copy are each the largest seen, not necessarily at the RSS peak's moment,
so the rows can sum to more than was measured.

    PYTHONPATH=. .venv/bin/python benchmarks/decoder_memory_accounting.py [--strategies fsdp,deepspeed-zero3]
"""

from __future__ import annotations

import argparse
import datetime
import gc
import json
import os
import subprocess
import sys
import tempfile
from collections import defaultdict

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from memory_probe import (  # noqa: E402
    MIB,
    Snapshots,
    _events,
    _op,
    _phased,
    _rss,
    _storage,
    component,
    gloo_copies,
    gloo_probe,
    name_storages,
    probe_main,
    resident_bytes,
)


# -- inside each rank (torchrun) ------------------------------------------------------------------------------
def rank_main(args) -> None:
    import torch.distributed as tdist
    from torch.profiler import ProfilerActivity, profile, record_function

    from distbench.core.config import PointConfig
    from distbench.workers import common
    from distbench.workers import torch_common as tc

    cfg = PointConfig.from_json(open(args.config).read())
    module = __import__(f"distbench.workers.{args.module}", fromlist=["make_distribution"])
    dist = module.make_distribution(*([args.stage] if args.stage else []))
    if args.ds_buckets and args.stage:
        base = module.ds_config

        def sized(c, stage):
            out = base(c, stage)
            out["zero_optimization"].update(json.loads(args.ds_buckets))
            return out

        module.ds_config = sized
    dist.start(cfg)
    tc.configure_threads(cfg)
    device = tc.device_for(cfg, dist.local_rank)
    modules_before = sorted(sys.modules)
    rss = {"before model": _rss()}
    # Every tensor allocation from here on is logged (torch's CPU allocator reports to the profiler only while
    # one runs), so the log's running total is every live tensor byte allocated after this point.
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True, record_shapes=True) as prof:
        model = tc.build_model(cfg, device, common.verify_seed(cfg, dist.rank))
        optimizer = None if dist.optimizer_after_wrap else tc.make_optimizer(cfg, model)
        batches = tc.make_batches(cfg, device, dist.rank, dist.world, cfg.per_device_batch)
        rss["model built"] = _rss()
        params = tc.param_count(model)
        wrapped, opt = dist.wrap(cfg, model, optimizer, device)
        gc.collect()
        common.reset_peak_memory(cfg.device)
        rss["wrapped (peak reset)"] = _rss()
        imported = sorted(set(sys.modules) - set(modules_before))
        snapshots = Snapshots({"wrapped": wrapped, "optimizer": opt, "dist": dist})
        dist.backward = _phased(dist.backward, "backward", snapshots)
        dist.optimizer_step = _phased(dist.optimizer_step, "optimizer step")
        step = tc.make_step(cfg, wrapped, opt, batches, device, {}, dist)
        for i in range(cfg.warmup + cfg.steps):
            with record_function(f"accounting:step {i}"):
                step()
        rss["peak (VmHWM since reset)"] = _rss("VmHWM")
        roots = {"model": model, "wrapped": wrapped, "optimizer": opt, "dist": dist, "batches": batches}
        inner = getattr(opt, "optimizer", None)
        if inner is not None:
            roots["client_optimizer"] = inner
        named = {}
        client = inner if inner is not None else opt
        for pname, p in model.named_parameters():  # the model's own tensors first, by what they are
            for path, t in [(f"model.{pname}._parameters", p), (f"model.{pname}.grad", p.grad)]:
                st = _storage(t) if t is not None else None
                if st:
                    named.setdefault(st[0], (path, st[1]))
        for p, state in getattr(client, "state", {}).items():
            for k, t in state.items():
                st = _storage(t)
                if st:
                    named.setdefault(st[0], (f"optimizer.state[param][{k!r}]", st[1]))
        for ptr, entry in name_storages(roots).items():
            named.setdefault(ptr, entry)
    allocs, phases = _events(prof)
    steps_from = min((s for name, s, _ in phases if name.startswith("step")), default=0)
    # Resident bytes of the big buffers, where they were seen: still held at the end (their pages now) or
    # held at the end of a backward pass (their pages then). Every other allocation counts whole: an
    # operation's output is written through.
    resident = {ptr: resident_bytes(ptr, size) for ptr, (_, size) in named.items() if size >= MIB}
    for ptr, value in snapshots.resident.items():
        resident.setdefault(ptr, value)
    live: dict[int, tuple[int, int, object]] = {}
    total = peak = at_reset = allocated = peak_allocated = unlogged = 0
    peak_live: dict = {}
    for e in allocs:
        f = e.typed[1]
        if f.alloc_size > 0:
            if f.ptr in live:  # its free was not logged: the address is in use again
                size, counted, _ = live.pop(f.ptr)
                total, allocated, unlogged = total - counted, allocated - size, unlogged + 1
            counted = min(f.alloc_size, resident.get(f.ptr, f.alloc_size))
            live[f.ptr] = (f.alloc_size, counted, e)
            total += counted
            allocated += f.alloc_size
        elif f.ptr in live:
            size, counted, _ = live.pop(f.ptr)
            total -= counted
            allocated -= size
        if e.start_time_ns < steps_from:
            at_reset = total
        elif total > peak:
            peak, peak_allocated, peak_live = total, allocated, dict(live)

    def phase_of(e) -> str:
        inside = [name for name, s, t in phases if s <= e.start_time_ns <= t and not name.startswith("step")]
        if e.start_time_ns < steps_from:
            return "before the steps"
        return inside[-1] if inside else "forward"

    rows: dict[str, int] = defaultdict(int)
    ops: dict[str, int] = defaultdict(int)
    for ptr, (size, counted, e) in peak_live.items():
        path = named.get(ptr, (None, 0))[0]
        if path is not None:
            rows[component(path, None, cfg.strategy)] += counted
        elif ptr in snapshots.named:  # freed before the end, seen held at the end of a backward pass
            rows[component(snapshots.named[ptr], None, cfg.strategy) + " (freed in the step)"] += counted
        else:
            where = phase_of(e)
            rows[f"held by no Python object at the end, allocated {where}"] += counted
            ops[f"{where}: {_op(e)}"] += counted
    out = {
        "rank": dist.rank,
        "rss": rss,
        "tensor_bytes_at_reset": at_reset,
        "tensor_peak_bytes": peak,
        "unlogged_frees": unlogged,
        "gloo_copies": gloo_copies(prof),
        "tensor_peak_allocated_bytes": peak_allocated,
        "components": dict(rows),
        "unnamed_by_op": dict(sorted(ops.items(), key=lambda kv: -kv[1])[:12]),
        "imported": imported,
        "params": params,
        "modules_before": modules_before,
    }
    gathered = [None] * dist.world
    tdist.all_gather_object(gathered, out)
    if dist.rank == 0:
        with open(args.out, "w") as fh:
            json.dump(gathered, fh)
    tdist.barrier()
    dist.stop()
    common.exit_now(0)


# -- the driver -----------------------------------------------------------------------------------------------
def import_cost(before: list[str], imported: list[str], env: dict) -> int:
    """RSS a fresh process adds by importing `imported` after the modules `before` (what the rank had loaded
    when its RSS before the model was read)."""
    code = (
        "import importlib, sys\n"
        "def rss():\n"
        "    return [int(l.split()[1]) * 1024 for l in open('/proc/self/status') if l.startswith('VmRSS:')][0]\n"
        "def load(names):\n"
        "    for m in names:\n"
        "        try: importlib.import_module(m)\n"
        "        except BaseException: pass\n"
        f"load({before!r})\na = rss()\nload({imported!r})\n"
        "print(rss() - a)\n"
    )
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    try:
        return int(res.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        return 0


def run_strategy(strategy: str, args, env: dict, tmp: str) -> list[dict]:
    from distbench.core.config import PointConfig
    from distbench.core.strategies import STRATEGIES

    entry = STRATEGIES[strategy]
    cfg = PointConfig(
        strategy=strategy,
        world_size=args.n,
        model=args.model,
        model_size=args.model_size,
        device="cpu",
        per_device_batch=1,
        seq_len=32,
        steps=2,
        warmup=1,
        threads_per_worker=1,
    )
    path = os.path.join(tmp, f"{strategy}.json")
    with open(path + ".cfg", "w") as fh:
        fh.write(cfg.to_json())
    stage = strategy.removeprefix("deepspeed-zero") if strategy.startswith("deepspeed") else ""
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", str(args.n), "--master-port"]
    cmd += [str(args.port), os.path.abspath(__file__), "--rank-worker", "--module", entry.module]
    cmd += ["--config", path + ".cfg", "--out", path] + (["--stage", stage] if stage else [])
    cmd += ["--ds-buckets", args.ds_buckets] if args.ds_buckets and stage else []
    res = subprocess.run(cmd, env=env, capture_output=True, text=True)
    if res.returncode:
        sys.exit(f"{strategy}: torchrun exited {res.returncode}:\n{res.stderr[:3000]}")
    with open(path) as fh:
        return json.load(fh)


def section(results: dict, args, load: str, env: dict) -> str:
    from distbench.core.memory import optimizer_for
    from distbench.core.strategies import STRATEGIES
    from distbench.models import decoders

    lines = []
    for strategy, ranks in results.items():
        r = max(ranks, key=lambda x: x["rss"]["peak (VmHWM since reset)"] - x["rss"]["before model"])
        params = r["params"]
        sharded = STRATEGIES[strategy].sharded_states
        optimizer, precision = optimizer_for(strategy)
        formula = decoders.model_state_bytes(params, args.n, sharded, optimizer, precision)
        measured = r["rss"]["peak (VmHWM since reset)"] - r["rss"]["before model"]
        imports = import_cost(r["modules_before"], r["imported"], env)
        tensors = r["tensor_peak_bytes"]
        gloo = max(r["gloo_copies"].values(), default=0)
        which = max(r["gloo_copies"], key=r["gloo_copies"].get) if gloo else "none"
        other = measured - tensors - imports - gloo
        lines.append(f"### {strategy}, N = {args.n} (rank {r['rank']}, the larger peak)\n")
        lines.append(
            f"Measured peak RSS above the RSS before the model: **{measured / MIB:.1f} MiB**; formula "
            f"({optimizer}, {', '.join(sharded) or 'nothing'} sharded): {formula / MIB:.1f} MiB. RSS before the model "
            f"{r['rss']['before model'] / MIB:.0f} MiB (the interpreter, torch, gloo; not counted), "
            f"{(r['rss']['model built'] - r['rss']['before model']) / MIB:.1f} MiB more once built, "
            f"{(r['rss']['wrapped (peak reset)'] - r['rss']['before model']) / MIB:.1f} MiB more once wrapped.\n"
        )
        lines.append("| component | MiB |\n|---|---:|")
        for name, size in sorted(r["components"].items(), key=lambda kv: -kv[1]):
            if size >= 0.05 * MIB:
                lines.append(f"| {name} | {size / MIB:.1f} |")
        lines.append(f"| **live tensors at their peak, resident** | **{tensors / MIB:.1f}** |")
        lines.append(
            f"| (allocated at that peak, untouched pages included) | ({r['tensor_peak_allocated_bytes'] / MIB:.1f}) |"
        )
        lines.append(
            f"| (live tensors when the peak was reset, after wrapping) | ({r['tensor_bytes_at_reset'] / MIB:.1f}) |"
        )
        lines.append(
            f"| modules imported by the wrapper ({len(r['imported'])}; RSS of importing them) | {imports / MIB:.1f} |"
        )
        lines.append(f"| gloo's copy for the largest all-gather or reduce-scatter ({which}) | {gloo / MIB:.1f} |")
        lines.append(f"| rest: allocator slack, Python objects (measured less the rows above) | {other / MIB:.1f} |")
        lines.append(f"| **measured** | **{measured / MIB:.1f}** |\n")
        if r["unnamed_by_op"]:
            ops = "; ".join(f"{k} {v / MIB:.1f}" for k, v in r["unnamed_by_op"].items() if v >= 0.5 * MIB)
            lines.append(f"Tensors held by no Python object, by the operation that allocated them (MiB): {ops}.\n")
    return "\n".join(lines)


def block_buckets(model: str, size: str) -> dict:
    """DeepSpeed's bucket and live-parameter limits sized to the model: one decoder block's parameters per
    bucket and per prefetch, two blocks live (the one computing and the one prefetched, as FSDP holds), so
    its buffers are what the ZeRO paper's formulas leave out (a few blocks), not DeepSpeed's fixed defaults
    (5e8 elements per reduce bucket, 5e7 per prefetch, 1e9 live), which exceed a small model whole."""
    import dataclasses

    from distbench.models import decoders

    shape = decoders.decoder_shape(model, size)
    block = decoders.parameter_count(shape) - decoders.parameter_count(dataclasses.replace(shape, layers=0))
    block //= shape.layers
    return {
        "reduce_bucket_size": block,
        "allgather_bucket_size": block,
        "stage3_prefetch_bucket_size": block,
        "stage3_max_live_parameters": 2 * block,
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rank-worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--probe-worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--gloo-probe", action="store_true", help="measure gloo's copies of one collective instead")
    ap.add_argument("--module", help=argparse.SUPPRESS)
    ap.add_argument("--config", help=argparse.SUPPRESS)
    ap.add_argument("--stage", type=int, default=0, help=argparse.SUPPRESS)
    ap.add_argument("--model", default="gpt2")
    ap.add_argument("--model-size", default="l8-d512-h8-v512")
    ap.add_argument("--strategies", default="ddp,fsdp,deepspeed-zero1,deepspeed-zero2,deepspeed-zero3")
    ap.add_argument("--n", type=int, default=2)
    ap.add_argument("--port", type=int, default=29631)
    ap.add_argument("--mmap-threshold", type=int, default=65536)
    ap.add_argument(
        "--ds-buckets",
        default="",
        help="JSON merged into DeepSpeed's zero_optimization section, or 'block': buckets of one decoder block",
    )
    ap.add_argument("--out", default="docs/benchmarks.md")
    args = ap.parse_args()
    if args.rank_worker:
        rank_main(args)
        return
    if args.probe_worker:
        probe_main(args)
        return
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from mdsection import write_section

    load = f"load average {os.getloadavg()[0]:.1f} before"
    if args.ds_buckets == "block":
        args.ds_buckets = json.dumps(block_buckets(args.model, args.model_size))
    env = dict(os.environ, MALLOC_MMAP_THRESHOLD_=str(args.mmap_threshold), OMP_NUM_THREADS="1")
    if args.gloo_probe:
        with tempfile.TemporaryDirectory() as tmp:
            text = gloo_probe(args, env, tmp, os.path.abspath(__file__))
        write_section(args.out, text)
        print(text)
        return
    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        for strategy in args.strategies.split(","):
            results[strategy] = run_strategy(strategy, args, env, tmp)
    buckets = f"; DeepSpeed's zero_optimization merged with {args.ds_buckets}" if args.ds_buckets else ""
    text = (
        f"## Decoder memory accounted for, component by component: {args.model} {args.model_size}"
        + (", DeepSpeed's buckets sized to the model" if args.ds_buckets else "")
        + "\n\n"
        f"`benchmarks/decoder_memory_accounting.py`, {datetime.date.today()}: batch 1, sequence 32, fp32, torch "
        f"SGD with momentum, N = {args.n} CPU workers (gloo), one thread each, glibc's mmap threshold pinned at "
        f"{args.mmap_threshold} bytes, 1 warmup and 2 timed steps under torch's memory profiler, on a 2-core "
        f"machine shared with other jobs ({load}){buckets}.\n\n" + section(results, args, load, env)
    )
    write_section(args.out, text)
    print(text)


if __name__ == "__main__":
    main()
