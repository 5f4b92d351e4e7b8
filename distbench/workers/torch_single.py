"""Strategy `torch`: the plain single-device PyTorch training loop (the PyTorch baseline)."""

from __future__ import annotations

FRAMEWORK = "torch"


def body(cfg, out_path):
    from distbench.workers import torch_common as tc

    tc.run(cfg, out_path, tc.Distribution())
