"""Strategy `fabric`: Lightning Fabric around the same loop, `Fabric(strategy="ddp")`, launched by
torchrun (Fabric's documented way besides its own `fabric run`; it reads torchrun's environment).
Fabric does what its users get from it: `setup` (DDP wrap at N > 1, and its precision plugin's
autocast around forward), `fabric.backward` (its loss scaling for amp) and the optimizer wrapper's step.
At N=1 Fabric runs with its single-device default (`strategy="auto"`: no DDP, no process group), what a
user of Fabric on one device gets, so its 1-device cost is Fabric's own, not DDP's (issue 20).
"""

from __future__ import annotations

FRAMEWORK = "torch"


def make_distribution():
    from distbench.workers.torch_ddp import silence
    from distbench.workers.wrapper_loop import lightning_distribution, lightning_settings

    class FabricDistribution(lightning_distribution()):
        name = "fabric"
        wrapper_precision = True
        nosync_variant = (
            "the DDP module Fabric built, given DDP's no-op communication hook and no buffer broadcast "
            "(as ddp's variant): Fabric's module and optimizer wrappers, reducer, buckets and "
            "autograd hooks kept; only the gradient all-reduce and the buffer broadcast removed"
        )

        def start(self, cfg):
            from lightning.fabric import Fabric

            self.fabric = Fabric(**lightning_settings(cfg))  # DDP; at N=1 Fabric's own single-device default
            self.fabric.launch()  # under torchrun: sets up the process group, starts nothing
            self.rank, self.world, self.local_rank = (
                self.fabric.global_rank,
                self.fabric.world_size,
                self.fabric.local_rank,
            )
            self.note_backend()

        def wrap(self, cfg, model, optimizer, device):
            return self.fabric.setup(model, optimizer)

        def wrap_independent(self, cfg, model, optimizer, device):
            wrapped, optimizer = self.wrap(cfg, model, optimizer, device)
            silence(self, wrapped._forward_module)  # Fabric's DDP
            return wrapped, optimizer

        def backward(self, loss):
            self.fabric.backward(loss)

        def record_fields(self):
            import lightning

            return {
                "wrapper": {
                    "lightning": lightning.__version__,
                    "strategy": type(self.fabric.strategy).__name__,
                    "precision": type(self.fabric._precision).__name__,
                }
            }

    return FabricDistribution()


def body(cfg, out_path):
    from distbench.workers import torch_common as tc

    tc.run(cfg, out_path, make_distribution())
