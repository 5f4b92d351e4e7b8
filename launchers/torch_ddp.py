"""Strategy `ddp`: DistributedDataParallel, one process per device, launched by torchrun.

Reads RANK / WORLD_SIZE / LOCAL_RANK from torchrun (or srun + torchrun on Slurm). Backend: NCCL on
CUDA, gloo on CPU workers. Every rank's per-step times are gathered; a step counts as long as its
slowest rank took.
"""
from __future__ import annotations

import os
import sys

from distbench.launchers import common

STRATEGY, FRAMEWORK = "ddp", "torch"


def body(cfg, out_path):
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    from distbench import stats
    from distbench.launchers import torch_common as tc

    rank = int(os.environ["RANK"])
    local_rank = int(os.environ.get("LOCAL_RANK", 0))
    world = int(os.environ["WORLD_SIZE"])
    if world != cfg.world_size:
        raise RuntimeError(f"launched with WORLD_SIZE={world} but the point asks for {cfg.world_size}")
    tc.configure_threads(cfg)
    device = tc.device_for(cfg, local_rank)
    backend = "nccl" if device.type == "cuda" else "gloo"
    dist.init_process_group(backend=backend, device_id=device if device.type == "cuda" else None)
    try:
        model, optimizer, x, y = tc.build(cfg, device, rank=rank)
        ddp_model = DDP(model, device_ids=[local_rank] if device.type == "cuda" else None)
        times, loss = common.timed_steps(tc.make_step(ddp_model, optimizer, x, y), tc.make_sync(device),
                                         cfg.warmup, cfg.steps)
        loss = float(loss)
        common.check_loss(loss)
        gathered: list = [None] * world
        dist.all_gather_object(gathered, times)
        if rank == 0:
            common.emit(cfg, out_path, strategy=STRATEGY, framework=FRAMEWORK, status="ok",
                        step_times=stats.merge_rank_step_times(gathered), per_rank_step_times_s=gathered,
                        final_loss=loss, params=tc.param_count(model), backend=backend,
                        runtime=tc.runtime_info(cfg, device))
    finally:
        dist.destroy_process_group()


if __name__ == "__main__":
    sys.exit(common.run_worker(STRATEGY, FRAMEWORK, body))
