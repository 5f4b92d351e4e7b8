"""A deliberately broken DDP worker: every rank trains on rank 0's shard (a sampler bug)."""

from distbench.workers import torch_ddp

FRAMEWORK = "torch"


def body(cfg, out_path):
    from distbench.workers import torch_common as tc
    from distbench.workers import torch_data

    make_batch = torch_data.make_batch
    torch_data.make_batch = lambda cfg, device, rank, batch: make_batch(cfg, device, 0, batch)
    tc.run(cfg, out_path, torch_ddp.make_distribution())
