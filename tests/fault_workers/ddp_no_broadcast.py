"""A deliberately broken data-parallel worker: gradients are averaged by hand, but the initial
weights are never broadcast, so replicas start (and stay) different."""

import torch.distributed as dist

from distbench.workers import torch_ddp

FRAMEWORK = "torch"


def body(cfg, out_path):
    from distbench.workers import torch_common as tc

    base = torch_ddp.make_distribution()

    class AveragingOptimizer:
        def __init__(self, model, optimizer, world):
            self.model, self.optimizer, self.world = model, optimizer, world

        def zero_grad(self, set_to_none=True):
            self.optimizer.zero_grad(set_to_none=set_to_none)

        def step(self):
            for p in self.model.parameters():
                if p.grad is not None:
                    dist.all_reduce(p.grad)
                    p.grad /= self.world
            self.optimizer.step()

    base.wrap = lambda cfg, model, optimizer, device: (model, AveragingOptimizer(model, optimizer, base.world))
    tc.run(cfg, out_path, base)
