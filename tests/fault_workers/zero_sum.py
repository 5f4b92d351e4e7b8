"""A deliberately broken DeepSpeed ZeRO-2 worker: gradients are summed over the ranks instead of
averaged (DeepSpeed's own "gradient_allreduce_op": "sum")."""

from distbench.workers import deepspeed_zero

FRAMEWORK = "torch"


def body(cfg, out_path):
    from distbench.workers import torch_common as tc

    base = deepspeed_zero.make_distribution(2)
    config = deepspeed_zero.ds_config

    def summing_config(cfg, stage):
        return dict(config(cfg, stage), gradient_allreduce_op="sum")

    deepspeed_zero.ds_config = summing_config
    tc.run(cfg, out_path, base)
