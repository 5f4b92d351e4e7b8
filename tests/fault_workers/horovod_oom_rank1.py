"""A horovod-torch worker whose rank 1 alone runs out of memory mid-measurement, for real: it caps its
own address space and then asks torch's CPU allocator for more than fits. Rank 0 is left waiting in
the next all-reduce: the point must end as `oom` on rank 1 within seconds, not at the timeout."""

import resource

from distbench.workers import horovod_torch

FRAMEWORK = "torch"


def body(cfg, out_path):
    from distbench.workers import torch_common as tc

    make_step = tc.make_step

    def exhausting_make_step(*args, **kwargs):
        step = make_step(*args, **kwargs)
        calls = {"n": 0}

        def wrapped():
            calls["n"] += 1
            import horovod.torch as hvd
            import torch

            if hvd.rank() == 1 and calls["n"] == cfg.warmup + 2:
                _, hard = resource.getrlimit(resource.RLIMIT_AS)
                with open("/proc/self/statm") as fh:
                    vm_bytes = int(fh.read().split()[0]) * resource.getpagesize()
                resource.setrlimit(resource.RLIMIT_AS, (vm_bytes + (256 << 20), hard))
                torch.empty(8 << 30, dtype=torch.uint8)  # 8 GiB: the allocator cannot get it
            return step()

        return wrapped

    tc.make_step = exhausting_make_step
    tc.run(cfg, out_path, horovod_torch.make_distribution())
