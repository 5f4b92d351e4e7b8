"""Strategy `fsdp`: FSDP2 (`torch.distributed.fsdp.fully_shard`), one process per device, torchrun.

Each block of the model's repeated stacks becomes one FSDP unit (`shard_units`: ResNet bottlenecks,
transformer layers), then the root; units reshard after forward (FSDP2's default, ZeRO-3-like: parameters are all-gathered again in backward),
recorded as `fsdp.reshard_after_forward`. fully_shard does not synchronize initial weights, so rank
0's parameters and buffers are broadcast first, as DDP does. Gradients are reduce-scattered (mean)
and SGD steps each rank's shard. Backend: NCCL on CUDA, gloo on CPU workers.
"""

from __future__ import annotations

FRAMEWORK = "torch"
RESHARD_AFTER_FORWARD = True


def make_distribution():
    import torch.distributed as dist

    from distbench.workers import torch_common as tc
    from distbench.workers import torch_ddp

    class FSDPDistribution(type(torch_ddp.make_distribution())):
        name = "fsdp"
        nosync_variant = None
        units: list[str] = []
        optimizer_over: list[str] = []
        optimizer_after_wrap = True

        def wrap(self, cfg, model, optimizer, device):
            from torch.distributed.device_mesh import init_device_mesh
            from torch.distributed.fsdp import fully_shard

            for t in [*model.parameters(), *model.buffers()]:
                dist.broadcast(t.data, src=0)
            mesh = init_device_mesh(device.type, (self.world,))
            self.units = shard_units(model)
            for name in self.units:  # bottom-up: FSDP2 shards children before their parents
                fully_shard(model.get_submodule(name), mesh=mesh, reshard_after_forward=RESHARD_AFTER_FORWARD)
            fully_shard(model, mesh=mesh, reshard_after_forward=RESHARD_AFTER_FORWARD)
            # The optimizer built only now, over the sharded (DTensor) parameters fully_shard put in place: none
            # holds the unsharded parameters, so peak memory and `distbench fit` are FSDP's own.
            optimizer = tc.make_optimizer(cfg, model)
            self.optimizer_over = sorted({type(p).__name__ for g in optimizer.param_groups for p in g["params"]})
            return model, optimizer

        def full_parameters(self, model):
            return [p.detach().full_tensor().double() for p in model.parameters()]

        def allreduce_seconds(self, cfg, model, wrapped):
            return None

        def record_fields(self):
            return {
                "fsdp": {
                    "api": "FSDP2 fully_shard",
                    "reshard_after_forward": RESHARD_AFTER_FORWARD,
                    "units": self.units,
                    "optimizer_built": "after sharding, over parameters of type " + "/".join(self.optimizer_over),
                    "root": "every parameter outside the units (FSDP2 keeps the root unsharded after forward)",
                }
            }

    return FSDPDistribution()


def shard_units(model) -> list[str]:
    """The FSDP units, as FSDP users wrap them: each block of the model's repeated stacks (the elements of an
    nn.Sequential / nn.ModuleList that hold parameters and are not stacks themselves: ResNet bottlenecks,
    transformer layers, VGG layers), the outermost such level only, in post-order; the model's direct
    children when it has no stacks. Parameters outside every unit belong to the root."""
    import torch.nn as nn

    stacks = (nn.Sequential, nn.ModuleList)
    units: list[str] = []

    def visit(prefix, module, inside):
        for name, child in module.named_children():
            full = f"{prefix}.{name}" if prefix else name
            unit = (
                not inside
                and isinstance(module, stacks)
                and not isinstance(child, stacks)
                and any(True for _ in child.parameters())
            )
            visit(full, child, inside or unit)
            if unit:
                units.append(full)

    visit("", model, False)
    return units or [name for name, child in model.named_children() if any(True for _ in child.parameters())]


def body(cfg, out_path):
    from distbench.workers import torch_common as tc

    tc.run(cfg, out_path, make_distribution())
