"""Strategy `mirrored`: tf.distribute.MirroredStrategy over N devices in one process.

On CPU workers the N devices are logical CPU devices of one physical CPU. Each replica computes
its per-example loss scaled by the global batch (tf.nn.compute_average_loss); Keras 3's optimizer
sums the replicas' gradients, which makes the update the global-batch mean.
"""
from __future__ import annotations

import sys

from distbench.launchers import common

STRATEGY, FRAMEWORK = "mirrored", "tf"


def body(cfg, out_path):
    from distbench.launchers import tf_common as tfc

    tf = tfc.configure(cfg, logical_cpus=cfg.world_size if cfg.device == "cpu" else 1)
    import keras

    devices = tfc.device_names(cfg, cfg.world_size)
    strategy = tf.distribute.MirroredStrategy(devices=devices)
    if strategy.num_replicas_in_sync != cfg.world_size:
        raise RuntimeError(f"MirroredStrategy has {strategy.num_replicas_in_sync} replicas, expected {cfg.world_size}")
    with strategy.scope():
        model = tfc.build_model(cfg)
        optimizer = tfc.make_optimizer(cfg)
        optimizer.build(model.trainable_variables)
    loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True, reduction=None)
    global_batch = cfg.global_batch

    def value_fn(ctx):
        return tfc.make_batch(cfg, ctx.replica_id_in_sync_group, cfg.per_device_batch)

    # Each replica's batch is created once, on that replica's device.
    batch = strategy.experimental_distribute_values_from_function(value_fn)

    def replica_step(x, y):
        with tf.GradientTape() as tape:
            per_example = loss_fn(y, model(x, training=True))
            loss = tf.nn.compute_average_loss(per_example, global_batch_size=global_batch)
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables))
        return loss

    @tf.function
    def train_step(batch):
        per_replica = strategy.run(replica_step, args=batch)
        return strategy.reduce(tf.distribute.ReduceOp.SUM, per_replica, axis=None)

    times, loss = common.timed_steps(lambda: train_step(batch), tfc.sync, cfg.warmup, cfg.steps)
    loss = float(loss)
    common.check_loss(loss)
    cross_ops = getattr(strategy.extended, "_cross_device_ops", None)
    common.emit(cfg, out_path, strategy=STRATEGY, framework=FRAMEWORK, status="ok", step_times=times,
                final_loss=loss, params=tfc.param_count(model),
                backend=type(cross_ops).__name__ if cross_ops is not None else None,
                runtime=dict(tfc.runtime_info(), replica_devices=list(devices)))


if __name__ == "__main__":
    sys.exit(common.run_worker(STRATEGY, FRAMEWORK, body))
