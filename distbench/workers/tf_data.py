"""Where a TensorFlow worker's batches come from: one synthetic batch made once on the device (`--data
synthetic`), or a tf.data pipeline over a distbench.core.datasets folder (`--data disk`), with the time each step
waited for its batch."""

from __future__ import annotations

from distbench.core import datasets
from distbench.core.config import PointConfig
from distbench.workers import common


def make_batch(cfg: PointConfig, rank: int, batch: int):
    """Synthetic batch made once on the current device; in verify mode this rank's shard of the
    one global batch every process makes identically."""
    from distbench.models import keras_models

    kw = dict(image_size=cfg.image_size, seq_len=cfg.seq_len, num_classes=cfg.num_classes, model_size=cfg.model_size)
    if cfg.verify:
        x, y = keras_models.synthetic_batch(cfg.model, cfg.global_batch, seed=cfg.seed, **kw)
        sl = common.rank_slice(cfg, rank)
        return x[sl], y[sl]
    return keras_models.synthetic_batch(cfg.model, batch, seed=cfg.seed + 1000 * (rank + 1), **kw)


def disk_dataset(cfg: PointConfig, batch: int, shard: tuple[int, int] | None = None):
    """tf.data over a distbench.core.datasets folder: shuffle, (shard), parallel read + decode, batch,
    prefetch. Decoding uint8 images to normalized float32 happens in the parallel map."""
    import tensorflow as tf

    meta = datasets.load_meta(cfg.data_dir)
    targets = datasets.load_targets(cfg.data_dir)
    ds = tf.data.Dataset.from_tensor_slices((datasets.sample_paths(cfg.data_dir), targets))
    if shard:
        ds = ds.shard(shard[1], shard[0])
    ds = ds.shuffle(len(targets), seed=cfg.seed, reshuffle_each_iteration=True).repeat()
    x_dtype = tf.uint8 if meta["x_dtype"] == "uint8" else tf.int32

    def load(path, y):
        x = tf.reshape(tf.io.decode_raw(tf.io.read_file(path), x_dtype), meta["x_shape"])
        if meta["x_dtype"] == "uint8":
            x = (tf.cast(x, tf.float32) / 255.0 - 0.5) / 0.25
        y = tf.cast(y, tf.float32) if meta["y_dtype"] == "float16" else y
        return x, y

    return (
        ds.map(load, num_parallel_calls=cfg.loader_workers or None)
        .batch(batch, drop_remainder=True)
        .prefetch(cfg.prefetch)
    )


class Source:
    """Where each step's batch comes from; records the time spent waiting for it."""

    def __init__(self, fixed=None, iterator=None):
        self.fixed, self.iterator = fixed, iterator
        self.waits: list[float] = []

    def next(self):
        if self.fixed is not None:
            return self.fixed
        import time

        t0 = time.perf_counter()
        batch = next(self.iterator)
        self.waits.append(time.perf_counter() - t0)
        return batch
