"""`distbench converge` worker for the TensorFlow strategies (tf, mirrored, horovod-tf): the strategy's own
Distribution (devices, its step, collectives) and tf_common's step, fed with this process's shard (mirrored:
each replica's) of each global batch in the seeded order the torch worker uses (distbench.converge.data),
evaluated on the whole validation split."""

from __future__ import annotations

from distbench.workers import common

FRAMEWORK = "tf"


def make_distribution(module: str | None):
    from distbench.workers import tf_common as tfc

    return common.strategy_distribution(module, tfc.Distribution)


def body(cfg, out_path):
    import numpy as np

    from distbench.converge import data
    from distbench.models import keras_models
    from distbench.workers import converge_common
    from distbench.workers import tf_common as tfc

    settings = cfg.converge
    dist = make_distribution(settings.distribution)
    tf = dist.start(cfg)
    tfc.set_precision(cfg)
    try:
        if dist.world != cfg.world_size:
            raise RuntimeError(f"launched with {dist.world} replicas but the point asks for {cfg.world_size}")
        cache = data.read_cache(settings.cache)
        x_tr, y_tr, x_va, y_va, _ = cache
        strategy = getattr(dist, "strategy", None)
        b, world = cfg.per_device_batch, dist.world
        current: dict = {}

        class Feed(tfc.Source):
            """This process's batch of the step the loop set (mirrored: one per replica, distributed)."""

            def next(self):
                order, k = current["order"], current["k"]
                if strategy is not None:

                    def replica(ctx):
                        idx = data.rank_batch(order, k, ctx.replica_id_in_sync_group, world, b)
                        return tf.constant(x_tr[idx]), tf.constant(y_tr[idx].astype(np.int32))

                    return strategy.experimental_distribute_values_from_function(replica)
                idx = data.rank_batch(order, k, dist.rank, world, b)
                return tf.constant(x_tr[idx]), tf.constant(y_tr[idx].astype(np.int32))

        feed = Feed()
        dist.source = lambda _cfg: feed  # the strategy's step reads its batches from the converge feed
        with dist.scope():
            model = tfc.build_model(cfg, cfg.seed)
            optimizer = tfc.make_optimizer(cfg)
            optimizer.build(model.trainable_variables)
        params = tfc.param_count(model)
        step = dist.make_train_step(cfg, model, optimizer)
        loss_fn = keras_models.loss_fn(cfg.model)
        xv, yv = tf.constant(x_va), tf.constant(y_va.astype(np.int32))

        @tf.function
        def predict(x):
            return model(x, training=False)

        def train_step(order, k, lr):
            optimizer.learning_rate = lr
            current.update(order=order, k=k)
            return float(step())

        def evaluate():
            out = predict(xv)
            acc = float(np.mean(np.argmax(out.numpy(), axis=1) == y_va))
            return acc, float(loss_fn(out, yv))

        barrier = getattr(dist, "barrier", None) or (lambda: dist.mean(0.0))
        converge_common.run_and_emit(
            cfg,
            out_path,
            framework=FRAMEWORK,
            rank=dist.rank,
            world=world,
            data=cache,
            train_step=train_step,
            evaluate=evaluate,
            barrier=barrier,
            agree=dist.mean,
            distribution=type(dist).__name__,
            record={
                "params": params,
                "backend": dist.backend,
                "runtime": tfc.runtime_info(),
                "math_mode": tfc.math_mode(cfg, tf),
            },
        )
    finally:
        dist.stop()
