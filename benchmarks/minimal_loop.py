"""A minimal hand-written PyTorch training loop: the reference distbench's harness is compared with.

Same workload as distbench's torch/ddp points (same model definition, synthetic batch, loss, SGD),
none of distbench's worker plumbing. One clock read before and after the measured steps.

    python benchmarks/minimal_loop.py --image-size 64 --batch-size 8 --steps 10 --warmup 3
    torchrun --standalone --nproc_per_node=2 benchmarks/minimal_loop.py --ddp ...
"""
import argparse
import json
import time

import torch
import torch.distributed as dist

from distbench.models.torch_models import build_model

p = argparse.ArgumentParser()
p.add_argument("--model", default="resnet50")
p.add_argument("--image-size", type=int, default=64)
p.add_argument("--batch-size", type=int, default=8)
p.add_argument("--steps", type=int, default=10)
p.add_argument("--warmup", type=int, default=3)
p.add_argument("--threads", type=int, default=1)
p.add_argument("--ddp", action="store_true")
a = p.parse_args()

torch.set_num_threads(a.threads)
world, rank = 1, 0
if a.ddp:
    dist.init_process_group("gloo")
    world, rank = dist.get_world_size(), dist.get_rank()
torch.manual_seed(0)
model = build_model(a.model)
if a.ddp:
    model = torch.nn.parallel.DistributedDataParallel(model)
x = torch.randn(a.batch_size, 3, a.image_size, a.image_size)
y = torch.randint(0, 1000, (a.batch_size,))
opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
loss_fn = torch.nn.CrossEntropyLoss()


def step():
    opt.zero_grad()
    loss_fn(model(x), y).backward()
    opt.step()


for _ in range(a.warmup):
    step()
if a.ddp:
    dist.barrier()
t0 = time.perf_counter()
for _ in range(a.steps):
    step()
if a.ddp:
    dist.barrier()
elapsed = time.perf_counter() - t0
if rank == 0:
    print(json.dumps({"throughput": a.steps * a.batch_size * world / elapsed, "elapsed_s": elapsed}))
if a.ddp:
    dist.destroy_process_group()
