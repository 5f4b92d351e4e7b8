"""Strategy `dp`: torch.nn.DataParallel over N CUDA devices in one process.

The global batch lives on device 0 and DataParallel scatters it, replicates the model and gathers
the outputs every step. DataParallel only parallelizes over CUDA devices; with CPU workers the
parent reports the point as skipped instead of running it.
"""
from __future__ import annotations

import sys

from distbench.launchers import common

STRATEGY, FRAMEWORK = "dp", "torch"


def body(cfg, out_path):
    import torch

    from distbench.launchers import torch_common as tc

    if cfg.device != "cuda":
        common.emit(cfg, out_path, strategy=STRATEGY, framework=FRAMEWORK, status="skipped",
                    reason="DataParallel needs CUDA devices; it cannot split work across CPU workers")
        return
    if torch.cuda.device_count() < cfg.world_size:
        raise RuntimeError(f"DataParallel over {cfg.world_size} GPUs, but torch sees {torch.cuda.device_count()}")
    device = tc.device_for(cfg, 0)
    model, optimizer, x, y = tc.build(cfg, device, batch=cfg.global_batch)
    dp_model = torch.nn.DataParallel(model, device_ids=list(range(cfg.world_size)))
    times, loss = common.timed_steps(tc.make_step(dp_model, optimizer, x, y), tc.make_sync(device),
                                     cfg.warmup, cfg.steps)
    loss = float(loss)
    common.check_loss(loss)
    common.emit(cfg, out_path, strategy=STRATEGY, framework=FRAMEWORK, status="ok", step_times=times,
                final_loss=loss, params=tc.param_count(model), runtime=tc.runtime_info(cfg, device))


if __name__ == "__main__":
    sys.exit(common.run_worker(STRATEGY, FRAMEWORK, body))
