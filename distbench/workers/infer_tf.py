"""`distbench infer` worker, TensorFlow: model(x, training=False) in a tf.function."""

from __future__ import annotations

FRAMEWORK = "tf"


def body(cfg, out_path):
    from distbench.models import keras_models
    from distbench.workers import tf_common as tfc
    from distbench.workers.infer_common import is_oom_text, sweep_and_emit

    tf = tfc.configure(cfg)
    tfc.set_precision(cfg)
    model = tfc.build_model(cfg, cfg.seed)
    forward_fn = tf.function(lambda x: model(x, training=False), jit_compile=cfg.xla)

    def run_batch(bs):
        x, _ = keras_models.synthetic_batch(
            cfg.model,
            bs,
            image_size=cfg.image_size,
            seq_len=cfg.seq_len,
            num_classes=cfg.num_classes,
            seed=cfg.seed,
            model_size=cfg.model_size,
        )
        return lambda: forward_fn(x)

    def sync(out):
        out.numpy()

    params, runtime = tfc.param_count(model), tfc.runtime_info()
    sweep_and_emit(cfg, out_path, FRAMEWORK, run_batch, sync, is_oom_text, params=params, runtime=runtime)
