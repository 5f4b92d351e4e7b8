"""Strategy `ddp`: DistributedDataParallel, one process per device, launched by torchrun.

Reads RANK / WORLD_SIZE / LOCAL_RANK from torchrun (or srun + torchrun on Slurm). Backend: NCCL on
CUDA, gloo on CPU workers. Every rank's per-step times are gathered; a step counts as long as its
slowest rank took.
"""

from __future__ import annotations

import os

from distbench.workers import common

FRAMEWORK = "torch"


def silence(dist, ddp, tiny: bool = False) -> None:
    """The no-sync variant of a DDP module (ddp's own, or the one a wrapper built: Fabric's, Lightning's,
    whose strategies register comm hooks on CUDA only): DDP's no-op communication hook, its calls counted in
    `dist.hook_calls`, and no buffer broadcast (rank 0's buffers before every forward, DDP's other per-step
    collective). Before the first step. tiny: the tiny variant (common.is_tiny): the hook of the step's
    last bucket all-reduces a few floats (common.tiny_elements) over every rank instead, asynchronously like the real bucket's
    all-reduce, and DDP's reducer waits for it at the end of backward as for the real one (calls counted in
    `dist.tiny_calls`)."""
    import torch
    import torch.distributed as tdist
    from torch.distributed.algorithms.ddp_comm_hooks.debugging_hooks import noop_hook

    params = [p for p in ddp.parameters() if p.requires_grad]
    one = torch.zeros(common.tiny_elements(sum(p.numel() for p in params)), device=params[0].device)

    def counted_noop(state, bucket):
        dist.hook_calls += 1
        if tiny and bucket.is_last():
            dist.tiny_calls += 1
            fut = tdist.all_reduce(one, async_op=True).get_future()
            return fut.then(lambda _: bucket.buffer())
        return noop_hook(state, bucket)

    ddp.register_comm_hook(None, counted_noop)
    ddp.broadcast_buffers = False
    dist.buffer_sync = ddp.will_sync_module_buffers()


def make_distribution():
    import torch
    import torch.distributed as dist

    from distbench.workers import torch_common as tc

    class DDPDistribution(tc.Distribution):
        name = "ddp"
        nosync_variant = (
            "DDP with a no-op communication hook (ddp_comm_hooks noop_hook): reducer, gradient "
            "buckets and their copies, autograd hooks kept; only the gradient all-reduce (the real step's "
            "division by N rides on the bucket copy, kept as a plain copy) and the broadcast of module "
            "buffers (BatchNorm statistics) before every forward removed"
        )
        hook_calls = 0

        def start(self, cfg):
            self.rank = int(os.environ["RANK"])
            self.world = int(os.environ["WORLD_SIZE"])
            self.local_rank = int(os.environ.get("LOCAL_RANK", 0))
            self.backend = "nccl" if cfg.device == "cuda" else "gloo"
            if cfg.device == "cuda":
                torch.cuda.set_device(self.local_rank)
            dist.init_process_group(backend=self.backend)

        def wrap(self, cfg, model, optimizer, device):
            from torch.nn.parallel import DistributedDataParallel as DDP

            return DDP(model, device_ids=[self.local_rank] if device.type == "cuda" else None), optimizer

        def wrap_independent(self, cfg, model, optimizer, device):
            wrapped, optimizer = self.wrap(cfg, model, optimizer, device)
            self.hook_calls = 0  # per variant run
            silence(self, wrapped, tiny=common.is_tiny(cfg))
            return wrapped, optimizer

        def tiny_collective(self):
            pass  # in the last bucket's communication hook (silence), where the gradient all-reduce was

        def rewrap(self, cfg, model, optimizer, wrapped_optimizer, device):
            wrapped = super().rewrap(cfg, model, optimizer, wrapped_optimizer, device)
            if cfg.sync:  # after the variant: DDP's constructor syncs parameters and buffers, not the momentum
                # In parameter order, every rank the same collectives even where a rank has no buffer yet.
                for group in optimizer.param_groups:
                    for p in group["params"] if group["momentum"] else ():
                        state = optimizer.state[p]
                        dist.broadcast(state.setdefault("momentum_buffer", torch.zeros_like(p)), src=0)
            return wrapped

        def nosync_fields(self):
            return {"nosync_hook_calls": self.hook_calls, "nosync_buffer_sync": self.buffer_sync}

        def gather(self, obj):
            out = [None] * self.world
            dist.all_gather_object(out, obj)
            return out

        def barrier(self):
            dist.barrier()

        def mean(self, value):
            t = torch.tensor([value], dtype=torch.float64)
            if self.backend == "nccl":
                t = t.cuda()
            dist.all_reduce(t)
            return float(t.item()) / self.world

        def allreduce_seconds(self, cfg, model, wrapped):
            # The same buckets DDP all-reduces (its default caps), with the same backend.
            device = next(model.parameters()).device
            dtype = next(model.parameters()).dtype
            buckets = [torch.zeros(n, dtype=dtype, device=device) for n in tc.bucket_sizes(model)]
            sync = tc.make_sync(device)

            def op():
                works = [dist.all_reduce(b, async_op=True) for b in buckets]
                for w in works:
                    w.wait()
                sync(None)

            return common.time_collective(op, self.barrier)

        def stop(self):
            if dist.is_initialized():
                dist.destroy_process_group()

    return DDPDistribution()


def body(cfg, out_path):
    from distbench.workers import torch_common as tc

    tc.run(cfg, out_path, make_distribution())
