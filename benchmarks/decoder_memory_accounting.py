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

MIB = 2**20


# -- inside each rank (torchrun) ------------------------------------------------------------------------------
def _rss(field: str = "VmRSS") -> int:
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024
    return 0


def resident_bytes(ptr: int, nbytes: int) -> int:
    """How many bytes of [ptr, ptr + nbytes) are resident now (mincore(2) over the pages it spans): memory
    allocated but never written (torch.empty) takes address space, not RSS."""
    import ctypes
    import mmap

    libc = ctypes.CDLL(None, use_errno=True)
    page = mmap.PAGESIZE
    start = ptr - ptr % page
    pages = (ptr + nbytes - start + page - 1) // page
    vec = (ctypes.c_ubyte * pages)()
    if libc.mincore(ctypes.c_void_p(start), ctypes.c_size_t(pages * page), vec) != 0:
        return nbytes  # not a mapping of its own (a heap block): counted whole
    resident = sum(b & 1 for b in vec)
    return min(nbytes, resident * page)


def _storage(t):
    """(data pointer, bytes) of a tensor's storage (a DTensor's local shard), or None."""
    import torch

    local = getattr(t, "_local_tensor", None)
    if local is not None:
        t = local
    if not isinstance(t, torch.Tensor) or t.device.type == "meta":
        return None
    try:
        s = t.untyped_storage()
    except (RuntimeError, NotImplementedError):
        return None
    return (s.data_ptr(), s.nbytes()) if s.nbytes() else None


def name_storages(roots: dict, depth: int = 7) -> dict[int, tuple[str, int]]:
    """{storage pointer: (the shortest attribute path that reaches it, bytes)} over the objects under `roots`
    (breadth first: a parameter is named as a parameter before any flat buffer it is a view of... unless the
    buffer is closer to a root, which is how DeepSpeed's flat groups get their own name)."""
    import torch

    named: dict[int, tuple[str, int]] = {}
    seen: set[int] = set()
    frontier = list(roots.items())
    for _ in range(depth):
        nxt = []
        for path, obj in frontier:
            if id(obj) in seen or obj is None or isinstance(obj, (str, bytes, int, float, bool, type)):
                continue
            seen.add(id(obj))
            if isinstance(obj, torch.Tensor):
                st = _storage(obj)
                if st and st[0] not in named:
                    named[st[0]] = (path, st[1])
                grad = obj.grad if isinstance(obj, torch.nn.Parameter) or obj.requires_grad else None
                if grad is not None:
                    nxt.append((path + ".grad", grad))
                local = getattr(obj, "_local_tensor", None)
                if local is not None:
                    nxt.append((path, local))
                continue
            if isinstance(obj, dict):
                items = [
                    (f"{path}[{k!r}]" if not isinstance(k, torch.Tensor) else f"{path}[param]", v)
                    for k, v in obj.items()
                ]
            elif isinstance(obj, (list, tuple, set)):
                items = [(f"{path}[{i}]", v) for i, v in enumerate(obj)]
            elif callable(obj) and not hasattr(obj, "__dict__"):
                continue
            elif hasattr(obj, "__dict__") and not isinstance(obj, type(sys)):
                items = [(f"{path}.{k}", v) for k, v in vars(obj).items()]
            else:
                continue
            nxt.extend(items)
        frontier = nxt
    return named


def component(path: str | None, category: str | None, strategy: str) -> str:
    """The row of the accounting a live tensor belongs to."""
    if path is None:
        return {
            "GRADIENT": "gradients (autograd's, before the wrapper takes them)",
            "ACTIVATION": "activations (saved for backward), logits and loss",
            "TEMPORARY": "temporaries of one operation",
            "AUTOGRAD_DETAIL": "temporaries of one operation",
            "INPUT": "input batch and other step inputs",
        }.get(category or "", "tensors no Python object holds (C++: reducer buckets, collectives, autograd)")
    if path.startswith("batches"):
        return "input batch and other step inputs"
    if ".grad" in path:
        return "gradients"
    if path.startswith("optimizer.state") or path.startswith("client_optimizer.state"):
        return "optimizer state (momentum)"
    if path.startswith("model") and ("._parameters" in path or "._buffers" in path):
        return "parameters"
    return "wrapper: " + _short(path)


def _short(path: str) -> str:
    """A wrapper buffer's path with its indices folded (one row per kind of buffer, not per layer)."""
    import re

    path = re.sub(r"__composable_api_state_key_[0-9a-f-]+\[<function [^>]*>\]", "{fully_shard state}", path)
    return re.sub(r"\[\d+\]", "[i]", re.sub(r"\['[^']*'\]", "[k]", path))


def _events(prof):
    """(allocation events in time order, [(phase name, start ns, end ns)]) of a profile."""
    from torch._C._profiler import _EventType

    allocs, phases = [], []
    stack = list(prof.profiler.kineto_results.experimental_event_tree())
    while stack:
        e = stack.pop()
        stack.extend(e.children)
        if e.typed[0] == _EventType.Allocation and e.typed[1].device.type == "cpu":
            allocs.append(e)
        elif e.name.startswith("accounting:"):
            phases.append((e.name.removeprefix("accounting:"), e.start_time_ns, e.end_time_ns))
    allocs.sort(key=lambda e: e.start_time_ns)
    return allocs, sorted(phases, key=lambda p: p[1])


def _op(e) -> str:
    """The innermost named operation an allocation happened in."""
    p = e.parent
    while p is not None and p.name in ("aten::empty", "aten::empty_strided", "aten::empty_like", "aten::zeros"):
        p = p.parent
    return p.name if p is not None else "outside any operation"


def _phased(method, name, at_end=None):
    """`method` inside a profiler range named `name`; at_end: also called when autograd's pass over the graph
    ends (queued from the loss's gradient hook), before the wrapper's own epilogue frees its buckets."""
    import torch
    from torch.profiler import record_function

    def run(*a, **k):
        if at_end is not None and a and isinstance(a[0], torch.Tensor) and a[0].requires_grad:
            queue = torch.autograd.Variable._execution_engine.queue_callback
            a[0].register_hook(lambda g: (queue(at_end), g)[1])
        with record_function("accounting:" + name):
            return method(*a, **k)

    return run


def gloo_copies(prof) -> dict[str, int]:
    """The biggest all-gather output and reduce-scatter input per c10d operation the profile recorded (with its
    shapes): gloo makes a full-size copy of each on its own worker thread (measured standalone:
    all_gather_into_tensor and reduce_scatter_tensor of 104 MiB raised the RSS by 106 MiB, all_reduce by 2),
    an allocation the profiler, which logs the threads it was started on, does not see."""
    from torch._C._profiler import _EventType

    def nbytes(x) -> int:
        if isinstance(x, (list, tuple)):
            return sum(nbytes(t) for t in x)
        sizes, dtype = getattr(x, "sizes", None), getattr(x, "dtype", None)
        if sizes is None or dtype is None:
            return 0
        count = 1
        for d in sizes:
            count *= d
        return count * dtype.itemsize

    largest: dict[str, int] = {}
    stack = list(prof.profiler.kineto_results.experimental_event_tree())
    while stack:
        e = stack.pop()
        stack.extend(e.children)
        name = e.name
        if e.typed[0] != _EventType.TorchOp or not name.startswith("c10d::"):
            continue
        if "allgather" in name or "all_gather" in name:
            which = 0  # (outputs, inputs, ...)
        elif "reduce_scatter" in name:
            which = 1
        else:
            continue
        inputs = e.typed[1].inputs
        if len(inputs) > which:
            largest[name] = max(largest.get(name, 0), nbytes(inputs[which]))
    return largest


class Snapshots:
    """The storages the wrapper holds at the end of each backward pass, by name, with their resident bytes
    then: a bucket allocated with torch.empty and freed before the step ends is only partly written, and this
    is where its written part is seen."""

    def __init__(self, roots: dict):
        self.roots = roots
        self.named: dict[int, str] = {}
        self.resident: dict[int, int] = {}

    def __call__(self):
        for ptr, (path, size) in name_storages(self.roots).items():
            if size >= MIB:
                self.named.setdefault(ptr, path)
                self.resident[ptr] = max(self.resident.get(ptr, 0), resident_bytes(ptr, size))


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
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from mdsection import write_section

    load = f"load average {os.getloadavg()[0]:.1f} before"
    if args.ds_buckets == "block":
        args.ds_buckets = json.dumps(block_buckets(args.model, args.model_size))
    env = dict(os.environ, MALLOC_MMAP_THRESHOLD_=str(args.mmap_threshold), OMP_NUM_THREADS="1")
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
