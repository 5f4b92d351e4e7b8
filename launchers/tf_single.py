"""Strategy `tf`: the plain single-device TensorFlow custom training step (the TF baseline)."""
from __future__ import annotations

import sys

from distbench.launchers import common

STRATEGY, FRAMEWORK = "tf", "tf"


def body(cfg, out_path):
    from distbench.launchers import tf_common as tfc

    tf = tfc.configure(cfg)
    import keras

    with tf.device(tfc.device_names(cfg, 1)[0]):
        model = tfc.build_model(cfg)
        optimizer = tfc.make_optimizer(cfg)
        optimizer.build(model.trainable_variables)
        x, y = tfc.make_batch(cfg, 0, cfg.per_device_batch)
        loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True)

        @tf.function
        def train_step(x, y):
            with tf.GradientTape() as tape:
                loss = loss_fn(y, model(x, training=True))
            grads = tape.gradient(loss, model.trainable_variables)
            optimizer.apply_gradients(zip(grads, model.trainable_variables))
            return loss

        times, loss = common.timed_steps(lambda: train_step(x, y), tfc.sync, cfg.warmup, cfg.steps)
    loss = float(loss)
    common.check_loss(loss)
    common.emit(cfg, out_path, strategy=STRATEGY, framework=FRAMEWORK, status="ok", step_times=times,
                final_loss=loss, params=tfc.param_count(model), runtime=tfc.runtime_info())


if __name__ == "__main__":
    sys.exit(common.run_worker(STRATEGY, FRAMEWORK, body))
