"""`distbench comm` worker for torch.distributed backends (gloo, nccl, mpi), launched by torchrun."""

from __future__ import annotations

import os

FRAMEWORK = "torch"


def body(cfg, out_path):
    import torch
    import torch.distributed as dist

    from distbench.workers.comm_common import emit_comm, sweep_sizes

    backend = cfg.comm_bench.backend
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    local = int(os.environ.get("LOCAL_RANK", 0))
    device = torch.device("cuda", local) if backend == "nccl" else torch.device("cpu")
    if device.type == "cuda":
        torch.cuda.set_device(device)
    else:
        torch.set_num_threads(cfg.threads_per_worker)
    dist.init_process_group(backend=backend)
    try:
        expected = world * (world + 1) / 2

        def sync():
            if device.type == "cuda":
                torch.cuda.synchronize(device)

        def allreduce(t):
            dist.all_reduce(t)
            sync()

        def gather(obj):
            out = [None] * world
            dist.all_gather_object(out, obj)
            return out

        result = sweep_sizes(
            cfg,
            make=lambda n: torch.empty(n, dtype=torch.float32, device=device),
            fill=lambda t: (t.fill_(rank + 1), sync()),
            allreduce=allreduce,
            check=lambda t: bool(torch.all(t == expected)),
            barrier=dist.barrier,
            gather=gather,
        )
        if rank == 0:
            emit_comm(cfg, out_path, f"comm-{backend}", FRAMEWORK, result, backend)
    finally:
        dist.destroy_process_group()
