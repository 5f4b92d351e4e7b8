"""Strategy `horovod-tf`: horovod.tensorflow with a custom step, launched by horovodrun.

Gradients are averaged with hvd.grouped_allreduce and the initial variables broadcast from rank 0.
horovod.tensorflow.keras and DistributedGradientTape are not used: with Keras 3 they fail or, worse,
let Keras' train_step bypass Horovod so gradients would silently not be averaged.
"""
from __future__ import annotations

import sys

from distbench.launchers import common

STRATEGY, FRAMEWORK = "horovod-tf", "tf"


def body(cfg, out_path):
    from distbench.launchers import tf_common as tfc

    import horovod.tensorflow as hvd

    hvd.init()
    try:
        if hvd.size() != cfg.world_size:
            raise RuntimeError(f"launched with {hvd.size()} ranks but the point asks for {cfg.world_size}")
        tf = tfc.configure(cfg, visible_gpu=hvd.local_rank() if cfg.device == "cuda" else None)
        import keras

        with tf.device(tfc.device_names(cfg, 1)[0]):
            model = tfc.build_model(cfg)
            optimizer = tfc.make_optimizer(cfg)
            optimizer.build(model.trainable_variables)
            hvd.broadcast_variables([v.value for v in model.variables], root_rank=0)
            x, y = tfc.make_batch(cfg, hvd.rank(), cfg.per_device_batch)
            loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True)

            @tf.function
            def train_step(x, y):
                with tf.GradientTape() as tape:
                    loss = loss_fn(y, model(x, training=True))
                grads = tape.gradient(loss, model.trainable_variables)
                grads = hvd.grouped_allreduce(grads, op=hvd.Average)
                optimizer.apply_gradients(zip(grads, model.trainable_variables))
                return loss

            times, loss = common.timed_steps(lambda: train_step(x, y), tfc.sync, cfg.warmup, cfg.steps)
        loss = float(loss)
        common.check_loss(loss)
        gathered = hvd.allgather_object(times)
        if hvd.rank() == 0:
            from distbench import stats

            common.emit(cfg, out_path, strategy=STRATEGY, framework=FRAMEWORK, status="ok",
                        step_times=stats.merge_rank_step_times(gathered), per_rank_step_times_s=gathered,
                        final_loss=loss, params=tfc.param_count(model),
                        backend="gloo" if hvd.gloo_enabled() else "mpi", runtime=tfc.runtime_info())
    finally:
        hvd.shutdown()


if __name__ == "__main__":
    sys.exit(common.run_worker(STRATEGY, FRAMEWORK, body))
