"""Strategy `torch`: the plain single-device PyTorch training loop (the PyTorch baseline)."""
from __future__ import annotations

import sys

from distbench.launchers import common

STRATEGY, FRAMEWORK = "torch", "torch"


def body(cfg, out_path):
    from distbench.launchers import torch_common as tc

    tc.configure_threads(cfg)
    device = tc.device_for(cfg)
    model, optimizer, x, y = tc.build(cfg, device)
    times, loss = common.timed_steps(tc.make_step(model, optimizer, x, y), tc.make_sync(device),
                                     cfg.warmup, cfg.steps)
    loss = float(loss)
    common.check_loss(loss)
    common.emit(cfg, out_path, strategy=STRATEGY, framework=FRAMEWORK, status="ok", step_times=times,
                final_loss=loss, params=tc.param_count(model), runtime=tc.runtime_info(cfg, device))


if __name__ == "__main__":
    sys.exit(common.run_worker(STRATEGY, FRAMEWORK, body))
