"""A deliberately broken FSDP2 worker: every gradient shard comes out as the sum over the ranks instead
of their mean (FSDP's own divide-factor knob needs PREMUL_SUM, which gloo lacks, so the reduced
gradients are multiplied back by N after backward)."""

from distbench.workers import torch_fsdp

FRAMEWORK = "torch"


def body(cfg, out_path):
    from distbench.workers import torch_common as tc

    base = torch_fsdp.make_distribution()
    wrap = base.wrap

    def broken_wrap(cfg, model, optimizer, device):
        model, optimizer = wrap(cfg, model, optimizer, device)

        def summed_backward(loss):
            loss.backward()
            for p in model.parameters():
                p.grad.mul_(base.world)

        base.backward = summed_backward
        return model, optimizer

    base.wrap = broken_wrap
    tc.run(cfg, out_path, base)
