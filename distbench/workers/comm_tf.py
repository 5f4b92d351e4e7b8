"""`distbench comm` worker for TensorFlow: MirroredStrategy all-reduce across N devices (logical CPU
devices on CPU workers), one process."""

from __future__ import annotations

FRAMEWORK = "tf"


def body(cfg, out_path):
    from distbench.workers import tf_common as tfc
    from distbench.workers.comm_common import emit_comm, sweep_sizes
    from distbench.workers.tf_device import device_names

    tf = tfc.configure(cfg, logical_cpus=cfg.world_size if cfg.device == "cpu" else 1, gpu_count=cfg.world_size)
    n = cfg.world_size
    strategy = tf.distribute.MirroredStrategy(devices=device_names(cfg, n))
    expected = n * (n + 1) / 2
    holder = {}

    def make(elems):
        # Per-replica inputs made up front, on each replica's device, outside the timed region.
        holder["x"] = strategy.experimental_distribute_values_from_function(
            lambda ctx: tf.fill([elems], tf.cast(ctx.replica_id_in_sync_group + 1, tf.float32))
        )

        @tf.function
        def allreduce():
            return strategy.run(
                lambda v: tf.distribute.get_replica_context().all_reduce(tf.distribute.ReduceOp.SUM, v),
                args=(holder["x"],),
            )

        holder["fn"] = allreduce
        return holder

    def run_allreduce(h):
        h["out"] = strategy.experimental_local_results(h["fn"]())
        for v in h["out"]:  # wait for every replica's result (one element each, not a full copy)
            v[:1].numpy()

    def check(h):
        return all(bool((v.numpy() == expected).all()) for v in h.get("out", []))

    ops = getattr(strategy.extended, "_cross_device_ops", None)
    result = sweep_sizes(
        cfg,
        make=make,
        fill=lambda h: None,
        allreduce=run_allreduce,
        check=check,
        barrier=lambda: None,
        gather=lambda obj: [obj],
    )
    emit_comm(cfg, out_path, "comm-tf", FRAMEWORK, result, type(ops).__name__ if ops is not None else "mirrored")
