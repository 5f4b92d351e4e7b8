"""The TensorFlow workload every TF strategy runs, and the driver that measures it.

A strategy module supplies a `Distribution` (devices, how the step is distributed, collectives); model,
loss, optimizer, the step, timing, verify mode and the record are here, once, with the batches of
tf_data.py and the device setup of tf_device.py (its `configure()` runs first, before TensorFlow creates its
runtime).
"""

from __future__ import annotations

import contextlib
import time
from typing import Any

from distbench.core import datasets, mfu, phases
from distbench.core.config import PointConfig
from distbench.profile import hooks as profile_hooks
from distbench.workers import common
from distbench.workers.tf_data import Source, disk_dataset, make_batch
from distbench.workers.tf_device import (
    configure,
    gpu_name,
    make_sync,
    math_mode,
    runtime_info,
    set_precision,
    verify_determinism,
)


def build_model(cfg: PointConfig, seed: int):
    phases.mark("model build")
    import keras

    from distbench.models import keras_models

    keras.utils.set_random_seed(seed)
    return keras_models.build_model(
        cfg.model,
        num_classes=cfg.num_classes,
        image_size=cfg.image_size,
        seq_len=cfg.seq_len,
        model_size=cfg.model_size,
    )


def make_optimizer(cfg: PointConfig):
    import keras

    opt = keras.optimizers.SGD(learning_rate=cfg.lr, momentum=cfg.momentum)
    if cfg.precision == "amp":  # float16 needs loss scaling; bfloat16 does not
        opt = keras.optimizers.LossScaleOptimizer(opt)
    return opt


def agree_on_finite(tf, grads):
    """Make the loss-scaling verdict the same on every replica of a tf.distribute strategy.

    Keras 3's LossScaleOptimizer checks each replica's *local* gradients, keeps replica 0's
    verdict and then sums the gradients across replicas: an overflow on another replica would
    put inf into every replica's weights. The number of replicas with non-finite gradients is
    all-reduced; if it is not zero every replica's gradients are made NaN, so every replica
    (replica 0 included) skips the update and lowers the loss scale. Otherwise grads + 0.
    """
    ctx = tf.distribute.get_replica_context()
    if ctx is None or ctx.num_replicas_in_sync == 1:
        return grads
    values = [g.values if isinstance(g, tf.IndexedSlices) else g for g in grads]
    finite = tf.reduce_all(tf.stack([tf.reduce_all(tf.math.is_finite(v)) for v in values if v is not None]))
    bad = ctx.all_reduce(tf.distribute.ReduceOp.SUM, 1.0 - tf.cast(finite, tf.float32))
    poison = tf.where(bad > 0, float("nan"), 0.0)

    def poisoned(g):
        if g is None:
            return None
        if isinstance(g, tf.IndexedSlices):
            return tf.IndexedSlices(g.values + tf.cast(poison, g.values.dtype), g.indices, g.dense_shape)
        return g + tf.cast(poison, g.dtype)

    return [poisoned(g) for g in grads]


def param_count(model) -> int:
    return int(sum(int(w.numpy().size) for w in model.trainable_weights))


def grad_bytes(model) -> int:
    return int(
        sum(
            int(w.numpy().size) * w.dtype.size if hasattr(w.dtype, "size") else int(w.numpy().nbytes)
            for w in model.trainable_weights
        )
    )


def local_step(
    cfg: PointConfig, model, optimizer, reduce_grads=None, global_batch: int | None = None, aggregate: bool = True
):
    """(x, y) -> loss: forward, backward, optional gradient reduction, update. Not yet a tf.function.
    aggregate=False (a strategy's no-sync variant): no cross-replica loss-scaling verdict either."""
    import tensorflow as tf

    from distbench.models import keras_models

    per_example = keras_models.per_example_loss_fn(cfg.model)
    training = not cfg.verify  # verify: BatchNorm/dropout in inference mode (shard-independent forward)

    scale = getattr(optimizer, "scale_loss", None) if cfg.precision == "amp" else None

    def loss_and_grads(x, y):
        with tf.GradientTape() as tape:
            loss = tf.nn.compute_average_loss(
                per_example(model(x, training=training), y), global_batch_size=global_batch or cfg.per_device_batch
            )
            scaled = scale(loss) if scale else loss
        return loss, tape.gradient(scaled, model.trainable_variables)

    if cfg.xla:
        # XLA compiles the forward and backward pass (the bulk of the work); gradient reduction and
        # the optimizer update stay outside, so every strategy's collectives still work.
        loss_and_grads = tf.function(loss_and_grads, jit_compile=True)

    def step(x, y):
        loss, grads = loss_and_grads(x, y)
        if reduce_grads is not None:
            grads = reduce_grads(grads)  # every process then holds the same (reduced) gradients
        elif scale and aggregate:
            grads = agree_on_finite(tf, grads)
        optimizer.apply_gradients(zip(grads, model.trainable_variables))
        return loss

    return step


class Distribution:
    """One process, one device (the `tf` baseline); strategies override what differs."""

    backend: str | None = None
    rank = 0
    world = 1
    nosync_variant: str | None = None
    """What the no-sync ("independent") variant of this strategy removes (recorded in every record)."""

    def start(self, cfg: PointConfig):
        return configure(cfg)

    def scope(self):
        return contextlib.nullcontext()

    def source(self, cfg: PointConfig) -> Source:
        """This process's batches: synthetic (made once on the device) or the disk pipeline."""
        if cfg.data == "disk":
            shard = (self.rank, self.world) if self.world > 1 else None
            self.data = Source(iterator=iter(disk_dataset(cfg, cfg.per_device_batch, shard)))
        else:
            self.data = Source(fixed=make_batch(cfg, self.rank, cfg.per_device_batch))
        return self.data

    def make_train_step(self, cfg: PointConfig, model, optimizer):
        """Return a no-argument callable running one synchronized step and returning the loss."""
        import tensorflow as tf

        source = self.source(cfg)
        fn = tf.function(local_step(cfg, model, optimizer))
        return lambda: fn(*source.next())

    def make_independent_step(self, cfg: PointConfig, model, optimizer):
        return self.make_train_step(cfg, model, optimizer)

    def make_tiny_step(self, cfg: PointConfig, model, optimizer):
        """The tiny variant (common.is_tiny): the no-sync step plus one float all-reduced over every replica
        where the gradient reduction was. Strategies with an in-process variant implement it."""
        raise NotImplementedError(f"{type(self).__name__}: no tiny-collective variant")

    def tiny_calls(self) -> int | None:
        """How often the tiny variant's collective ran in the last tiny run (None: not counted)."""
        return None

    def gather(self, obj: Any) -> list:
        return [obj]

    def mean(self, value: float) -> float:
        return value

    def allreduce_seconds(self, cfg: PointConfig, model) -> list[float] | None:
        return None

    def replica_checksums(self, model, start) -> list:
        return [_update_checksums(model, start)]

    def stop(self) -> None:
        pass


def replica_local_updates(optimizer, on: bool = True) -> bool:
    """No-sync variant under a tf.distribute strategy: the optimizer applies each replica's own
    gradients to that replica's copy of the variables, through the same merge_call and per-replica
    extended.update as a synchronized step, instead of summing them across replicas first. Keras 3's
    apply_gradients has no switch for this (no experimental_aggregate_gradients), so the one method
    that all-reduces is replaced on this optimizer instance (the inner one under loss scaling); on=False
    restores it. It is read when a step is traced: a step traced after the switch keeps its setting.
    Returns whether the variant's update was on before."""
    inner = getattr(optimizer, "inner_optimizer", optimizer)
    was_on = "_all_reduce_sum_gradients" in inner.__dict__
    if not on:
        inner.__dict__.pop("_all_reduce_sum_gradients", None)
        return was_on
    if not callable(getattr(type(inner), "_all_reduce_sum_gradients", None)):
        # A Keras without it would silently run the synchronized step as the variant.
        raise RuntimeError(
            f"{type(inner).__name__} has no _all_reduce_sum_gradients (Keras changed): cannot make the no-sync variant"
        )
    inner._all_reduce_sum_gradients = lambda grads_and_vars: list(grads_and_vars)
    return was_on


class StrategyDistribution(Distribution):
    """A tf.distribute strategy (MirroredStrategy, MultiWorkerMirroredStrategy; subclasses create
    self.strategy in start()). Both variants build the model in the strategy's scope, feed it the
    same way and run the same strategy.run step; the no-sync variant skips only the cross-replica
    gradient sum (replica_local_updates). The timed step returns this process's replicas' mean
    loss: no cross-worker reduce of the loss."""

    nosync_variant = (
        "the same strategy.run step and optimizer update (merge_call, per-replica extended.update), "
        "each replica applying its own gradients: only the cross-replica gradient all-reduce "
        "(and amp's cross-replica finite check) removed"
    )
    strategy: Any = None
    tf: Any = None

    def scope(self):
        return self.strategy.scope()

    def barrier(self) -> None:
        pass

    def local_replicas(self) -> int:
        return len(self.strategy.extended.worker_devices)

    def source(self, cfg: PointConfig) -> Source:
        """Synthetic: each replica's batch made once on its device (global replica ids). Disk: one
        tf.data pipeline per worker (its shard of the files), per-replica batches."""
        strategy = self.strategy
        if cfg.data == "disk":

            def pipeline(ctx):
                shard = (ctx.input_pipeline_id, ctx.num_input_pipelines) if ctx.num_input_pipelines > 1 else None
                return disk_dataset(cfg, ctx.get_per_replica_batch_size(cfg.global_batch), shard)

            self.data = Source(iterator=iter(strategy.distribute_datasets_from_function(pipeline)))
        else:
            self.data = Source(
                fixed=strategy.experimental_distribute_values_from_function(
                    lambda ctx: make_batch(cfg, ctx.replica_id_in_sync_group, cfg.per_device_batch)
                )
            )
        return self.data

    def _step(self, cfg: PointConfig, model, optimizer, aggregate: bool, reduce_grads=None):
        tf, strategy = self.tf, self.strategy
        source = self.source(cfg)
        replica_step = local_step(
            cfg, model, optimizer, reduce_grads=reduce_grads, global_batch=cfg.global_batch, aggregate=aggregate
        )
        per_sample = self.world / self.local_replicas()  # each replica's loss is scaled by the global batch

        @tf.function
        def train_step(x, y):
            per_replica = strategy.run(replica_step, args=(x, y))
            return tf.add_n(strategy.experimental_local_results(per_replica)) * per_sample

        return lambda: train_step(*source.next())

    def make_train_step(self, cfg: PointConfig, model, optimizer):
        if replica_local_updates(optimizer, on=False):
            # A no-sync run came first in this process (nosync_order BA): its replicas drifted apart. The
            # first replica's values on all of this worker's replicas (across workers: not re-synchronized).
            for v in [*model.variables, *optimizer.variables]:
                if len(getattr(v.value, "values", ())) > 1:
                    v.value.assign(v.value.values[0].read_value())
        return self._step(cfg, model, optimizer, aggregate=True)

    def make_independent_step(self, cfg: PointConfig, model, optimizer):
        replica_local_updates(optimizer)
        return self._step(cfg, model, optimizer, aggregate=False)

    def make_tiny_step(self, cfg: PointConfig, model, optimizer):
        replica_local_updates(optimizer)
        tf = self.tf

        few = tf.ones([common.tiny_elements(sum(int(w.shape.num_elements()) for w in model.trainable_weights))])

        def tiny(grads):  # in replica context, before the update: a few floats summed over every replica
            done = tf.distribute.get_replica_context().all_reduce(tf.distribute.ReduceOp.SUM, few)
            return after(tf, done, grads)

        return self._step(cfg, model, optimizer, aggregate=False, reduce_grads=tiny)

    def allreduce_seconds(self, cfg: PointConfig, model) -> list[float] | None:
        return strategy_allreduce_seconds(self.tf, self.strategy, model, self.barrier)

    def replica_checksums(self, model, start) -> list:
        """This process's replicas (run() gathers them from every process)."""
        return strategy_replica_checksums(self.strategy, model, start, self.local_replicas())


def after(tf, op, tensors: list) -> list:
    """`tensors`, made to wait for `op` (the tiny variant's collective: nothing reads its value)."""
    with tf.control_dependencies([op]):
        return [t if t is None else tf.identity(t) for t in tensors]


def strategy_allreduce_seconds(tf, strategy, model, barrier) -> list[float]:
    """Standalone all-reduce of tensors shaped like the gradients, through a tf.distribute
    strategy's own cross-device ops (what its optimizer step uses)."""
    shapes = [w.shape for w in model.trainable_weights]
    # Gradient-shaped tensors made once per replica, outside the timed calls.
    values = strategy.experimental_distribute_values_from_function(lambda ctx: [tf.ones(s) for s in shapes])

    def replica_fn(vs):
        return tf.distribute.get_replica_context().all_reduce(tf.distribute.ReduceOp.SUM, vs)

    @tf.function
    def allreduce(vs):
        out = strategy.run(replica_fn, args=(vs,))
        return strategy.experimental_local_results(out[0])[0][..., :1]

    return common.time_collective(lambda: allreduce(values).numpy(), barrier)


def strategy_replica_checksums(strategy, model, start, replicas: int) -> list:
    """Per local replica of a tf.distribute strategy: every tensor's [update L2 norm, update sum]."""
    import numpy as np

    per_replica = []
    for r in range(replicas):
        sums = []
        for w, w0 in zip(model.trainable_weights, start):
            local = strategy.experimental_local_results(w.value if hasattr(w, "value") else w)
            d = np.asarray(local[r].numpy(), dtype=np.float64) - w0
            sums.append([float(np.linalg.norm(d)), float(d.sum())])
        per_replica.append(sums)
    return per_replica


def _update_checksums(model, start) -> list[list[float]]:
    import numpy as np

    out = []
    for w, w0 in zip(model.trainable_weights, start):
        d = np.asarray(w.numpy(), dtype=np.float64) - w0
        out.append([float(np.linalg.norm(d)), float(d.sum())])
    return out


def run(cfg: PointConfig, out_path: str, dist: Distribution) -> None:
    import numpy as np

    tf = dist.start(cfg)
    set_precision(cfg)
    determinism = verify_determinism(tf) if cfg.verify else None
    try:
        if dist.world != cfg.world_size:
            raise RuntimeError(f"launched with {dist.world} replicas but the point asks for {cfg.world_size}")
        data_cache = (
            datasets.page_cache_status(cfg.data_dir)  # before anything reads it
            if cfg.data == "disk" and dist.rank == 0
            else None
        )
        with dist.scope():
            model = build_model(cfg, common.verify_seed(cfg, dist.rank))
            optimizer = make_optimizer(cfg)
            optimizer.build(model.trainable_variables)
        extra: dict = {
            "params": param_count(model),
            "grad_bytes": grad_bytes(model),
            "backend": dist.backend,
            "runtime": runtime_info(),
            "sync": cfg.sync,
            "data_cache": data_cache,
            "math_mode": math_mode(cfg, tf),
            "gpu_name": gpu_name(tf) if cfg.device == "cuda" else None,
            "nosync_variant": dist.nosync_variant,
            "probe": {
                "activation_dtype": model.dtype_policy.compute_dtype,
                "variable_dtype": model.dtype_policy.variable_dtype,
            },
        }
        times: list[float] = []
        segments = []
        for letter, seg_cfg in common.segment_configs(cfg):
            started = time.time()
            seg_cfg = common.fixed_steps(seg_cfg, times)
            # A fresh traced step per run: the real one, the tiny variant's or the no-sync variant's.
            make = dist.make_train_step if seg_cfg.sync else dist.make_independent_step
            step = (dist.make_tiny_step if common.is_tiny(seg_cfg) else make)(seg_cfg, model, optimizer)
            if cfg.verify:
                break
            data = getattr(dist, "data", None)
            seg_times, seg_loss, fields = common.measured_run(
                step,
                make_sync(cfg, tf),
                seg_cfg,
                dist.gather,
                data.waits if data else [],
                lambda: dist.allreduce_seconds(seg_cfg, model),
            )
            if letter == "A" and not times:  # the point itself
                times, loss = seg_times, seg_loss
                extra.update(fields)
            else:
                segments.append(common.segment_record(letter, seg_times, seg_loss, fields, started))
                if letter == "T":
                    segments[-1]["tiny_collective_calls"] = dist.tiny_calls()
        common.lift_allreduce(extra, segments)
        if segments:
            extra["segments"] = segments
        if profile_hooks.request(cfg):  # a few steps after the timed window, under tf.profiler
            extra.update(profile_hooks.profile_tf(cfg, step, make_sync(cfg, tf), dist.rank, times))
        if cfg.verify:
            extra["determinism"] = determinism
            start = [np.asarray(w.numpy(), dtype=np.float64) for w in model.trainable_weights]
            losses = [dist.mean(float(step())) for _ in range(cfg.steps)]
            replicas = dist.gather(dist.replica_checksums(model, start))
            replicas = [r for per_process in replicas for r in per_process]
            extra.update(
                verify_losses=losses, update_checksums=replicas[0], replica_max_rel_diff=common.max_rel_diff(replicas)
            )
            times, loss = [], losses[-1]
        elif cfg.device == "cpu" and cfg.sync:  # MFU's peak on CPU workers, after the timed loop
            extra["cpu_gemm_peak"] = mfu.measure_cpu_gemm(cfg.threads_per_worker, dist.gather)
        common.check_loss(loss)
        if dist.rank == 0:
            common.emit(
                cfg,
                out_path,
                framework="tf",
                status="ok",
                step_times=times,
                final_loss=loss,
                **extra,
            )
    finally:
        dist.stop()
