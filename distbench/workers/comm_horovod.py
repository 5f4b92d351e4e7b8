"""`distbench comm` worker for Horovod (torch tensors), launched by horovodrun.

On GPUs each rank's tensors live on its local GPU (hvd.local_rank()) and the device is
synchronized before every clock read, so NCCL (when Horovod was built with it) is what is timed.
"""

from __future__ import annotations

FRAMEWORK = "torch"


def body(cfg, out_path):
    import horovod.torch as hvd
    import torch

    from distbench.workers.comm_common import emit_comm, horovod_backend, sweep_sizes
    from distbench.workers.torch_common import device_for, make_sync

    hvd.init()
    try:
        torch.set_num_threads(cfg.threads_per_worker)
        device = device_for(cfg, hvd.local_rank())
        sync = make_sync(device)
        rank, world = hvd.rank(), hvd.size()
        expected = world * (world + 1) / 2

        def allreduce(t):
            hvd.allreduce_(t, op=hvd.Sum)
            sync(None)

        result = sweep_sizes(
            cfg,
            make=lambda n: torch.empty(n, dtype=torch.float32, device=device),
            fill=lambda t: (t.fill_(rank + 1), sync(None)),
            allreduce=allreduce,
            check=lambda t: bool(torch.all(t == expected)),
            barrier=hvd.barrier,
            gather=hvd.allgather_object,
        )
        if rank == 0:
            emit_comm(cfg, out_path, "comm-horovod", FRAMEWORK, result, horovod_backend(hvd, cfg.device))
    finally:
        hvd.shutdown()
