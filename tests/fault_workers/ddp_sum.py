"""A deliberately broken DDP worker: gradients are summed across ranks instead of averaged."""

import torch.distributed as dist

from distbench.workers import torch_ddp

FRAMEWORK = "torch"


def sum_hook(state, bucket):
    fut = dist.all_reduce(bucket.buffer(), async_op=True).get_future()
    return fut.then(lambda f: f.value()[0])  # no division by the world size


def body(cfg, out_path):
    from distbench.workers import torch_common as tc

    base = torch_ddp.make_distribution()
    wrap = base.wrap

    def broken_wrap(cfg, model, optimizer, device):
        ddp_model, optimizer = wrap(cfg, model, optimizer, device)
        ddp_model.register_comm_hook(None, sum_hook)
        return ddp_model, optimizer

    base.wrap = broken_wrap
    tc.run(cfg, out_path, base)
