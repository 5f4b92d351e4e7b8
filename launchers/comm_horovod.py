"""`distbench comm` worker for Horovod (torch tensors), launched by horovodrun."""
from __future__ import annotations

import sys

from distbench.launchers import common

FRAMEWORK = "torch"


def body(cfg, out_path):
    import horovod.torch as hvd
    import torch

    from distbench.launchers.comm_common import emit_comm, sweep_sizes

    hvd.init()
    try:
        torch.set_num_threads(cfg.threads_per_worker)
        rank, world = hvd.rank(), hvd.size()
        expected = world * (world + 1) / 2
        result = sweep_sizes(
            cfg, make=lambda n: torch.empty(n, dtype=torch.float32),
            fill=lambda t: t.fill_(rank + 1), allreduce=lambda t: hvd.allreduce_(t, op=hvd.Sum),
            check=lambda t: bool(torch.all(t == expected)), barrier=hvd.barrier, gather=hvd.allgather_object)
        if rank == 0:
            emit_comm(cfg, out_path, "comm-horovod", FRAMEWORK, result, "gloo" if hvd.gloo_enabled() else "mpi")
    finally:
        hvd.shutdown()


if __name__ == "__main__":
    sys.exit(common.run_worker("comm-horovod", FRAMEWORK, body))
