"""Strategy `fsdp-hybrid`: FSDP2 hybrid sharding (HSDP), one process per device, torchrun.

The same units and root as `fsdp` (torch_fsdp.shard_units), each `fully_shard` over a 2-D device mesh
(replicate, shard) of shape (N/G, G), G = --shard-group (default: the ranks per node, N / nodes). Within a
group of G ranks, parameters, gradients and optimizer state are sharded (all-gather in forward and backward,
reduce-scatter of the gradients, as FSDP's full shard); across the N/G groups each shard is replicated and its
gradient all-reduced. Backend: NCCL on CUDA, gloo on CPU workers.
"""

from __future__ import annotations

FRAMEWORK = "torch"


def shard_group(cfg) -> int:
    """G: the ranks that shard one copy of the model states (--shard-group, else the ranks per node)."""
    return cfg.shard_group or max(1, cfg.world_size // (cfg.nodes or 1))


def make_distribution():
    import torch.distributed as dist

    from distbench.workers import torch_common as tc
    from distbench.workers import torch_fsdp

    class HybridDistribution(type(torch_fsdp.make_distribution())):
        name = "fsdp-hybrid"
        mesh_shape: tuple[int, int] = (1, 1)

        def wrap(self, cfg, model, optimizer, device):
            from torch.distributed.device_mesh import init_device_mesh
            from torch.distributed.fsdp import fully_shard

            group = shard_group(cfg)
            if self.world % group:
                raise ValueError(f"--shard-group {group} does not divide N={self.world}")
            for t in [*model.parameters(), *model.buffers()]:
                dist.broadcast(t.data, src=0)
            self.mesh_shape = (self.world // group, group)
            mesh = init_device_mesh(device.type, self.mesh_shape, mesh_dim_names=("replicate", "shard"))
            self.units = torch_fsdp.shard_units(model)
            reshard = torch_fsdp.RESHARD_AFTER_FORWARD
            for name in self.units:  # bottom-up: FSDP2 shards children before their parents
                fully_shard(model.get_submodule(name), mesh=mesh, reshard_after_forward=reshard)
            fully_shard(model, mesh=mesh, reshard_after_forward=reshard)
            optimizer = tc.make_optimizer(cfg, model)  # over the sharded (DTensor) parameters, as fsdp's
            self.optimizer_over = sorted({type(p).__name__ for g in optimizer.param_groups for p in g["params"]})
            self.placements = sorted({str(p.placements) for p in model.parameters()})
            return model, optimizer

        def record_fields(self):
            fields = super().record_fields()
            replicas, group = self.mesh_shape
            fields["fsdp"].update(
                api="FSDP2 fully_shard over a 2-D mesh (hybrid shard)",
                mesh={"replicate": replicas, "shard": group},
                parameter_placements=self.placements,
            )
            return fields

    return HybridDistribution()


def body(cfg, out_path):
    from distbench.workers import torch_common as tc

    tc.run(cfg, out_path, make_distribution())
