"""Strategy `horovod-torch`: horovod.torch with gradient all-reduce (averaging) and initial broadcast.

Launched by horovodrun (Gloo controller here; MPI where Horovod was built with it).
"""
from __future__ import annotations

import sys

from distbench.launchers import common

STRATEGY, FRAMEWORK = "horovod-torch", "torch"


def body(cfg, out_path):
    import horovod.torch as hvd

    from distbench import stats
    from distbench.launchers import torch_common as tc

    hvd.init()
    try:
        if hvd.size() != cfg.world_size:
            raise RuntimeError(f"launched with {hvd.size()} ranks but the point asks for {cfg.world_size}")
        tc.configure_threads(cfg)
        device = tc.device_for(cfg, hvd.local_rank())
        model, optimizer, x, y = tc.build(cfg, device, rank=hvd.rank())
        optimizer = hvd.DistributedOptimizer(optimizer, named_parameters=model.named_parameters(),
                                             op=hvd.Average)
        hvd.broadcast_parameters(model.state_dict(), root_rank=0)
        hvd.broadcast_optimizer_state(optimizer, root_rank=0)
        times, loss = common.timed_steps(tc.make_step(model, optimizer, x, y), tc.make_sync(device),
                                         cfg.warmup, cfg.steps)
        loss = float(loss)
        common.check_loss(loss)
        gathered = hvd.allgather_object(times)
        if hvd.rank() == 0:
            common.emit(cfg, out_path, strategy=STRATEGY, framework=FRAMEWORK, status="ok",
                        step_times=stats.merge_rank_step_times(gathered), per_rank_step_times_s=gathered,
                        final_loss=loss, params=tc.param_count(model),
                        backend="gloo" if hvd.gloo_enabled() else "mpi",
                        runtime=dict(tc.runtime_info(cfg, device), horovod=hvd.__version__ if hasattr(hvd, "__version__") else None))
    finally:
        hvd.shutdown()


if __name__ == "__main__":
    sys.exit(common.run_worker(STRATEGY, FRAMEWORK, body))
