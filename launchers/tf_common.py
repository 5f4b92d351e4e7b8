"""The TensorFlow workload every TF strategy runs: same model, data, loss, optimizer and step.

Import order matters: thread pools and logical devices must be configured before TensorFlow
creates its runtime, so call `configure()` first.
"""
from __future__ import annotations

import os

from distbench.config import PointConfig

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("KERAS_BACKEND", "tensorflow")


def configure(cfg: PointConfig, *, logical_cpus: int = 1, visible_gpu: int | None = None):
    """Thread pools, logical CPU devices (MirroredStrategy on CPU workers) and GPU visibility."""
    import tensorflow as tf

    if cfg.device == "cpu":
        tf.config.set_visible_devices([], "GPU")
        # One process hosts all logical CPU devices: its intra-op pool gets every worker's share,
        # and the inter-op pool lets the replicas' steps run concurrently.
        tf.config.threading.set_intra_op_parallelism_threads(cfg.threads_per_worker * logical_cpus)
        tf.config.threading.set_inter_op_parallelism_threads(max(2, logical_cpus))
        if logical_cpus > 1:
            cpu = tf.config.list_physical_devices("CPU")[0]
            tf.config.set_logical_device_configuration(
                cpu, [tf.config.LogicalDeviceConfiguration() for _ in range(logical_cpus)])
    else:
        gpus = tf.config.list_physical_devices("GPU")
        if not gpus:
            raise RuntimeError("--device cuda was requested but TensorFlow sees no GPU")
        if visible_gpu is not None:
            tf.config.set_visible_devices(gpus[visible_gpu], "GPU")
            gpus = [gpus[visible_gpu]]
        for g in gpus:
            tf.config.experimental.set_memory_growth(g, True)
    return tf


def device_names(cfg: PointConfig, n: int) -> list[str]:
    kind = "GPU" if cfg.device == "cuda" else "CPU"
    return [f"/{kind}:{i}" for i in range(n)]


def build_model(cfg: PointConfig):
    import keras

    from distbench.models.keras_models import build_model as build

    keras.utils.set_random_seed(cfg.seed)
    return build(cfg.model, num_classes=cfg.num_classes, image_size=cfg.image_size)


def make_batch(cfg: PointConfig, rank: int, batch: int):
    """Synthetic batch, made once on the current device (NHWC)."""
    import tensorflow as tf

    gen = tf.random.Generator.from_seed(cfg.seed + 1000 * (rank + 1))
    x = gen.normal((batch, cfg.image_size, cfg.image_size, 3))
    y = gen.uniform((batch,), minval=0, maxval=cfg.num_classes, dtype=tf.int64)
    return x, y


def make_optimizer(cfg: PointConfig):
    import keras

    return keras.optimizers.SGD(learning_rate=cfg.lr, momentum=cfg.momentum)


def sync(out) -> None:
    """Wait for the step: reading the loss value blocks until the step's graph has run."""
    if out is not None:
        out.numpy()


def runtime_info() -> dict:
    import keras
    import tensorflow as tf

    return {"tensorflow": tf.__version__, "keras": keras.__version__,
            "intra_op_threads": tf.config.threading.get_intra_op_parallelism_threads(),
            "inter_op_threads": tf.config.threading.get_inter_op_parallelism_threads(),
            "logical_devices": [d.name for d in tf.config.list_logical_devices()]}


def param_count(model) -> int:
    return int(sum(int(w.numpy().size) for w in model.trainable_weights))
