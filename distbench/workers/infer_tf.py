"""`distbench infer` worker, TensorFlow: model(x, training=False) in a tf.function."""

from __future__ import annotations

import sys

from distbench.workers import common

FRAMEWORK = "tf"


def body(cfg, out_path):
    from distbench.workers import tf_common as tfc
    from distbench.workers.infer_common import is_oom_text, sweep_batches
    from distbench.models import keras_models

    tf = tfc.configure(cfg)
    tfc.set_precision(cfg)
    model = tfc.build_model(cfg, cfg.seed)
    forward_fn = tf.function(lambda x: model(x, training=False), jit_compile=cfg.xla)

    def run_batch(bs):
        x, _ = keras_models.synthetic_batch(
            cfg.model, bs, image_size=cfg.image_size, seq_len=cfg.seq_len, num_classes=cfg.num_classes, seed=cfg.seed
        )
        return lambda: forward_fn(x)

    def sync(out):
        out.numpy()

    entries = sweep_batches(cfg, run_batch, sync, is_oom_text)
    common.emit(
        cfg,
        out_path,
        framework=FRAMEWORK,
        status="ok",
        per_batch=entries,
        params=tfc.param_count(model),
        runtime=tfc.runtime_info(),
    )


if __name__ == "__main__":
    sys.exit(common.run_worker(FRAMEWORK, body))
