"""Strategy `torch`: the plain single-device PyTorch training loop (the PyTorch baseline)."""

from __future__ import annotations

import sys

from distbench.launchers import common

STRATEGY, FRAMEWORK = "torch", "torch"


def body(cfg, out_path):
    from distbench.launchers import torch_common as tc

    tc.run(cfg, out_path, STRATEGY, tc.Distribution())


if __name__ == "__main__":
    sys.exit(common.run_worker(STRATEGY, FRAMEWORK, body))
