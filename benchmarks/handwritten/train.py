"""A hand-written PyTorch training loop: the reference distbench's torch, ddp and horovod-torch points
are compared with (benchmarks/harness_overhead.py).

The same work as distbench's points: distbench's model definition, one synthetic batch made once on
the device, cross-entropy, SGD with momentum 0.9, fp32, `--threads` intra-op threads per process.
None of distbench's plumbing: no rank guard, no telemetry, no per-step bookkeeping. Timed like
distbench's measured window: warmup, a barrier, `--steps` steps each ending with a device sync, one
clock read; throughput = steps x global batch / the slowest rank's window. Rank 0 prints one JSON line.

    python benchmarks/handwritten/train.py --threads 2
    torchrun --standalone --nproc_per_node=2 benchmarks/handwritten/train.py --dist ddp --threads 1
    horovodrun -np 2 -H localhost:2 --gloo python benchmarks/handwritten/train.py --dist horovod --threads 1
"""

import argparse
import json
import os
import time

import torch

from distbench.models.torch_models import build_model


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--dist", choices=["none", "ddp", "horovod"], default="none")
    p.add_argument("--model", default="resnet50")
    p.add_argument("--image-size", type=int, default=64)
    p.add_argument("--batch-size", type=int, default=8)
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    a = p.parse_args()

    torch.set_num_threads(a.threads)
    cuda = a.device == "cuda"
    if a.dist == "ddp":
        import torch.distributed as dist

        dist.init_process_group("nccl" if cuda else "gloo")
        rank, world, local = dist.get_rank(), dist.get_world_size(), int(os.environ["LOCAL_RANK"])
    elif a.dist == "horovod":
        import horovod.torch as hvd

        hvd.init()
        rank, world, local = hvd.rank(), hvd.size(), hvd.local_rank()
    else:
        rank, world, local = 0, 1, 0
    device = torch.device("cuda", local) if cuda else torch.device("cpu")
    if cuda:
        torch.cuda.set_device(device)
    sync = (lambda: torch.cuda.synchronize(device)) if cuda else (lambda: None)

    torch.manual_seed(rank)
    model = build_model(a.model, image_size=a.image_size).to(device).train()
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    if a.dist == "ddp":
        model = torch.nn.parallel.DistributedDataParallel(model, device_ids=[local] if cuda else None)
    elif a.dist == "horovod":
        opt = hvd.DistributedOptimizer(opt, named_parameters=model.named_parameters())
        hvd.broadcast_parameters(model.state_dict(), root_rank=0)
        hvd.broadcast_optimizer_state(opt, root_rank=0)
    x = torch.randn(a.batch_size, 3, a.image_size, a.image_size, device=device)
    y = torch.randint(0, 1000, (a.batch_size,), device=device)
    loss_fn = torch.nn.CrossEntropyLoss()

    def step():
        opt.zero_grad()  # set_to_none (torch >= 2.0 default), as distbench
        loss_fn(model(x), y).backward()
        opt.step()

    for _ in range(a.warmup):
        step()
        sync()
    if a.dist == "ddp":
        dist.barrier()
    elif a.dist == "horovod":
        hvd.barrier()
    t0 = time.perf_counter()
    for _ in range(a.steps):
        step()
        sync()
    elapsed = torch.tensor([time.perf_counter() - t0], dtype=torch.float64)
    if a.dist == "ddp":  # the slowest rank's window
        dist.all_reduce(elapsed, op=dist.ReduceOp.MAX)
    elif a.dist == "horovod":
        elapsed = hvd.allreduce(elapsed, op=hvd.Max)
    window = float(elapsed.item())
    if rank == 0:
        print(json.dumps({"throughput": a.steps * a.batch_size * world / window, "window_s": window}), flush=True)
    if a.dist == "ddp":
        dist.destroy_process_group()
    elif a.dist == "horovod":
        hvd.shutdown()


if __name__ == "__main__":
    main()
