"""Strategy `mirrored`: tf.distribute.MirroredStrategy over N devices in one process.

On CPU workers the N devices are logical CPU devices of one physical CPU. Each replica computes
its per-example loss scaled by the global batch (tf.nn.compute_average_loss); Keras 3's optimizer
sums the replicas' gradients (an all-reduce in replica context), which makes the update the
global-batch mean. The step, the data feeding and the no-sync variant (the same strategy.run step,
each replica applying its own gradients) are tf_common.StrategyDistribution's.
"""

from __future__ import annotations

FRAMEWORK = "tf"


def make_distribution():
    from distbench.workers import tf_common as tfc
    from distbench.workers.tf_device import device_names

    class MirroredDistribution(tfc.StrategyDistribution):
        def start(self, cfg):
            tf = tfc.configure(cfg, logical_cpus=cfg.world_size if cfg.device == "cpu" else 1, gpu_count=cfg.world_size)
            self.tf = tf
            self.strategy = tf.distribute.MirroredStrategy(devices=device_names(cfg, cfg.world_size))
            self.world = self.strategy.num_replicas_in_sync
            ops = getattr(self.strategy.extended, "_cross_device_ops", None)
            self.backend = type(ops).__name__ if ops is not None else None
            return tf

    return MirroredDistribution()


def body(cfg, out_path):
    from distbench.workers import tf_common as tfc

    tfc.run(cfg, out_path, make_distribution())
