"""A minimal hand-written torch.distributed all_reduce loop: the reference for `distbench comm`.

    torchrun --standalone --nproc_per_node=2 benchmarks/minimal_allreduce.py --sizes 1048576,16777216
Prints one JSON line (rank 0): {size_bytes: busbw in GB/s} from the median iteration time.
"""

import argparse
import json
import statistics
import time

import torch
import torch.distributed as dist

p = argparse.ArgumentParser()
p.add_argument("--sizes", required=True)
p.add_argument("--iters", type=int, default=20)
p.add_argument("--warmup", type=int, default=3)
p.add_argument("--threads", type=int, default=1)
a = p.parse_args()
torch.set_num_threads(a.threads)
dist.init_process_group("gloo")
n = dist.get_world_size()
out = {}
for size in [int(s) for s in a.sizes.split(",")]:
    t = torch.ones(size // 4)
    for _ in range(a.warmup):
        dist.all_reduce(t)
    times = []
    for _ in range(a.iters):
        dist.barrier()
        t0 = time.perf_counter()
        dist.all_reduce(t)
        times.append(time.perf_counter() - t0)
    worst = [None] * n
    dist.all_gather_object(worst, times)
    med = statistics.median(max(ts[i] for ts in worst) for i in range(a.iters))
    out[size] = size / med * 2 * (n - 1) / n / 1e9
if dist.get_rank() == 0:
    print(json.dumps(out))
dist.destroy_process_group()
