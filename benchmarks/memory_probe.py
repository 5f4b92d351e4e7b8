"""What benchmarks/decoder_memory_accounting.py runs inside each rank to take a process's memory apart: RSS
readings, the resident part of a buffer (mincore), naming tensors by the Python objects that hold them, the
profiler's allocation events, gloo's copies of collectives, and the probe that measures those copies."""

from __future__ import annotations

import datetime
import json
import os
import subprocess
import sys

MIB = 2**20


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


def probe_main(args) -> None:
    """Each collective once on 104 MiB fp32 (the gathered or reduced size) over gloo; rank 0 writes how far
    each raised the peak RSS above the RSS before it (VmHWM reset first)."""
    import torch
    import torch.distributed as tdist

    tdist.init_process_group("gloo")
    n, w = 26 * 2**20, tdist.get_world_size()
    out, shard_in, whole, shard_out = torch.zeros(n), torch.ones(n // w), torch.ones(n), torch.zeros(n // w)
    calls = {
        "all_gather_into_tensor": lambda: tdist.all_gather_into_tensor(out, shard_in),
        "reduce_scatter_tensor": lambda: tdist.reduce_scatter_tensor(shard_out, whole),
        "all_reduce": lambda: tdist.all_reduce(whole),
    }
    raised = {}
    for name, call in calls.items():
        tdist.barrier()
        with open("/proc/self/clear_refs", "w") as fh:
            fh.write("5")
        before = _rss()
        call()
        raised[name] = _rss("VmHWM") - before
    if tdist.get_rank() == 0:
        with open(args.out, "w") as fh:
            json.dump({"bytes": n * 4, "raised": raised}, fh)
    tdist.destroy_process_group()


def gloo_probe(args, env: dict, tmp: str, script: str) -> str:
    """The section the probe's numbers go in (`script` runs probe_main under torchrun with --probe-worker)."""
    path = os.path.join(tmp, "probe.json")
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", str(args.n), "--master-port"]
    cmd += [str(args.port), script, "--probe-worker", "--out", path]
    res = subprocess.run(cmd, env=env, capture_output=True, text=True)
    if res.returncode:
        sys.exit(f"gloo probe: torchrun exited {res.returncode}:\n{res.stderr[:3000]}")
    with open(path) as fh:
        probe = json.load(fh)
    rows = "\n".join(f"| {k} | {v / MIB:.1f} |" for k, v in probe["raised"].items())
    return (
        "## gloo's own copies of a collective's tensors on CPU workers\n\n"
        f"`benchmarks/decoder_memory_accounting.py --gloo-probe`, {datetime.date.today()}: one call of each "
        f"collective over {args.n} CPU workers (gloo) on {probe['bytes'] / MIB:.0f} MiB of fp32 (the gathered "
        "output, the reduce-scatter's input, the all-reduced tensor), glibc's mmap threshold pinned at "
        f"{args.mmap_threshold} bytes; rank 0's peak RSS above its RSS before the call. gloo runs the "
        "collective on its own worker thread, where torch's profiler logs no allocation, so the decoder "
        "memory accounting adds this copy for the largest all-gather or reduce-scatter it recorded.\n\n"
        "| collective | peak RSS above before (MiB) |\n|---|---:|\n" + rows + "\n"
    )
