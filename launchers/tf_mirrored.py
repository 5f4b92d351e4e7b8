"""Strategy `mirrored`: tf.distribute.MirroredStrategy over N devices in one process.

On CPU workers the N devices are logical CPU devices of one physical CPU. Each replica computes
its per-example loss scaled by the global batch (tf.nn.compute_average_loss); Keras 3's optimizer
sums the replicas' gradients (an all-reduce in replica context), which makes the update the
global-batch mean. The independent variant runs N separate model copies, one per device, in one
tf.function with no reduction between them.
"""
from __future__ import annotations

import contextlib
import sys

from distbench.launchers import common

STRATEGY, FRAMEWORK = "mirrored", "tf"


def make_distribution():
    from distbench.launchers import tf_common as tfc

    class MirroredDistribution(tfc.Distribution):
        def start(self, cfg):
            self.cfg = cfg
            tf = tfc.configure(cfg, logical_cpus=cfg.world_size if cfg.device == "cpu" else 1,
                               gpu_count=cfg.world_size)
            self.tf = tf
            self.devices = tfc.device_names(cfg, cfg.world_size)
            self.strategy = tf.distribute.MirroredStrategy(devices=self.devices)
            self.world = self.strategy.num_replicas_in_sync
            ops = getattr(self.strategy.extended, "_cross_device_ops", None)
            self.backend = type(ops).__name__ if ops is not None else None
            return tf

        def scope(self):
            return self.strategy.scope() if self.cfg.sync else contextlib.nullcontext()

        def source(self, cfg):
            strategy = self.strategy
            if cfg.data == "disk":
                # One pipeline of global batches, split across the replicas by the strategy.
                ds = strategy.experimental_distribute_dataset(tfc.disk_dataset(cfg, cfg.global_batch))
                self.data = tfc.Source(iterator=iter(ds))
            else:
                # Each replica's batch is made once, on that replica's device.
                self.data = tfc.Source(fixed=strategy.experimental_distribute_values_from_function(
                    lambda ctx: tfc.make_batch(cfg, ctx.replica_id_in_sync_group, cfg.per_device_batch)))
            return self.data

        def make_train_step(self, cfg, model, optimizer):
            tf, strategy = self.tf, self.strategy
            source = self.source(cfg)
            replica_step = tfc.local_step(cfg, model, optimizer, global_batch=cfg.global_batch)

            @tf.function
            def train_step(x, y):
                per_replica = strategy.run(replica_step, args=(x, y))
                return strategy.reduce(tf.distribute.ReduceOp.SUM, per_replica, axis=None)

            return lambda: train_step(*source.next())

        def make_independent_step(self, cfg, model, optimizer):
            tf = self.tf
            steps, fixed = [], []
            for i, dev in enumerate(self.devices):
                with tf.device(dev):
                    m = model if i == 0 else tfc.build_model(cfg, cfg.seed)
                    opt = optimizer if i == 0 else tfc.make_optimizer(cfg)
                    if i:
                        opt.build(m.trainable_variables)
                    if cfg.data == "synthetic":
                        fixed.append(tfc.make_batch(cfg, i, cfg.per_device_batch))
                    steps.append(tfc.local_step(cfg, m, opt))

            @tf.function
            def independent_step(xs, ys):
                losses = []
                for dev, fn, x, y in zip(self.devices, steps, xs, ys):
                    with tf.device(dev):
                        losses.append(fn(x, y))
                return tf.add_n(losses) / len(losses)

            if cfg.data == "synthetic":
                xs, ys = [b[0] for b in fixed], [b[1] for b in fixed]
                return lambda: independent_step(xs, ys)
            source = self.source(cfg)  # the same disk pipeline, each replica taking its shard

            def step():
                x, y = source.next()
                local = self.strategy.experimental_local_results
                return independent_step(list(local(x)), list(local(y)))

            return step

        def allreduce_seconds(self, cfg, model):
            return tfc.strategy_allreduce_seconds(self.tf, self.strategy, model, lambda: None)

        def replica_checksums(self, model, start):
            return tfc.strategy_replica_checksums(self.strategy, model, start, self.world)

    return MirroredDistribution()


def body(cfg, out_path):
    from distbench.launchers import tf_common as tfc

    tfc.run(cfg, out_path, STRATEGY, make_distribution())


if __name__ == "__main__":
    sys.exit(common.run_worker(STRATEGY, FRAMEWORK, body))
