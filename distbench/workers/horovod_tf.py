"""Strategy `horovod-tf`: horovod.tensorflow with a custom step, launched by horovodrun.

Gradients are averaged with hvd.grouped_allreduce and the initial variables broadcast from rank 0.
horovod.tensorflow.keras and DistributedGradientTape are not used: with Keras 3 they fail or, worse,
let Keras' train_step bypass Horovod so gradients would silently not be averaged.
"""

from __future__ import annotations

from distbench.workers import common

FRAMEWORK = "tf"


def make_distribution():
    import horovod.tensorflow as hvd

    from distbench.workers import tf_common as tfc
    from distbench.workers.comm_common import horovod_backend, horovod_init

    class HorovodTFDistribution(tfc.Distribution):
        nosync_variant = (
            "the same custom step with hvd.grouped_allreduce (dense conversion, fusion buffer, "
            "background thread, the 1/N scaling of the average) over a process set of this rank alone: "
            "only the exchange between ranks removed"
        )

        def start(self, cfg):
            self.process_sets = horovod_init(hvd, cfg)
            self.rank, self.world = hvd.rank(), hvd.size()
            self.backend = horovod_backend(hvd, cfg.device)
            if hvd.cross_size() != cfg.nodes:
                raise RuntimeError(f"launched over {hvd.cross_size()} node(s) but the point asks for {cfg.nodes}")
            self.tf = tfc.configure(cfg, visible_gpu=hvd.local_rank() if cfg.device == "cuda" else None)
            return self.tf

        def _step(self, cfg, model, optimizer, reduce_grads):
            # rank 0's weights and optimizer slots (momentum), also after a no-sync run in this process
            hvd.broadcast_variables([v.value for v in [*model.variables, *optimizer.variables]], root_rank=0)
            source = self.source(cfg)
            fn = self.tf.function(tfc.local_step(cfg, model, optimizer, reduce_grads=reduce_grads))
            return lambda: fn(*source.next())

        def make_train_step(self, cfg, model, optimizer):
            """Synchronized over every rank, or (the no-sync variant) over this rank's own process set. The
            average's 1/N is a post-scale pass in Horovod, skipped when the factor is 1 (a one-rank set):
            the variant sums and post-scales by 1/N itself, so it keeps that pass."""
            tf, process_set = self.tf, self.process_sets[cfg.sync]
            op = dict(op=hvd.Average) if cfg.sync else dict(op=hvd.Sum, postscale_factor=1.0 / self.world)

            tiny = common.is_tiny(cfg)
            if tiny:  # counts the tiny collective's runs in the traced step (evidence, like ddp's hook count)
                self.tiny_count = tf.Variable(0, dtype=tf.int64, trainable=False)

            def reduce(grads):
                # Embedding gradients arrive as IndexedSlices; all-reduce them dense, like DDP does.
                dense = [tf.convert_to_tensor(g) if isinstance(g, tf.IndexedSlices) else g for g in grads]
                out = hvd.grouped_allreduce(dense, process_set=process_set, **op)
                if not tiny:
                    return out
                # the tiny variant: a few floats (common.tiny_elements) over every rank (the global set)
                few = tf.ones([common.tiny_elements(sum(g.shape.num_elements() for g in dense))])
                done = hvd.allreduce(few, op=hvd.Sum, name="distbench_tiny", process_set=self.process_sets[True])
                with tf.control_dependencies([done]):
                    counted = self.tiny_count.assign_add(1)
                return tfc.after(tf, counted, out)

            return self._step(cfg, model, optimizer, reduce)

        def tiny_calls(self):
            count = getattr(self, "tiny_count", None)
            return None if count is None else int(count.numpy())

        make_independent_step = make_train_step
        make_tiny_step = make_train_step  # over this rank's own set, plus the tiny collective (common.is_tiny)

        def gather(self, obj):
            return hvd.allgather_object(obj)

        def mean(self, value):
            return float(hvd.allreduce(self.tf.constant(value, dtype=self.tf.float64), op=hvd.Average).numpy())

        def allreduce_seconds(self, cfg, model):
            tf = self.tf
            tensors = [tf.ones_like(w) for w in model.trainable_weights]

            @tf.function
            def allreduce(ts):  # tensors as arguments: Horovod names ops after graph tensors
                return hvd.grouped_allreduce(ts, op=hvd.Average)[0]

            barrier = lambda: hvd.allreduce(tf.constant(0.0), op=hvd.Sum).numpy()  # noqa: E731
            return common.time_collective(lambda: allreduce(tensors).numpy(), barrier)

        def stop(self):
            hvd.shutdown()

    return HorovodTFDistribution()


def body(cfg, out_path):
    from distbench.workers import tf_common as tfc

    tfc.run(cfg, out_path, make_distribution())
