"""Strategy `mirrored` across nodes: tf.distribute.MultiWorkerMirroredStrategy, one worker per node.

The multi-node form of `mirrored` (distbench/workers/tf_mirrored.py): the same model, data, loss and step
(distbench/workers/tf_common.py, StrategyDistribution: also the no-sync variant and `--data disk`, one
tf.data pipeline per worker reading its shard), replicated over every worker's devices, gradients
all-reduced across workers (NCCL on GPUs, gRPC ring on CPU workers). Each worker replicates over its node's GPUs; on
CPU workers MultiWorkerMirroredStrategy uses one CPU device per worker, so there is one worker per
CPU "device" there. Worker 0 (the chief) writes the record.

The cluster comes from TF_CONFIG when it is set, else from DISTBENCH_TF_WORKERS and DISTBENCH_NODE_RANK (the
one-machine cluster's nsrun, one worker per node), otherwise from the Slurm step it runs in (srun):
a TF_CONFIG is derived from SLURM_STEP_NODELIST / SLURM_STEP_TASKS_PER_NODE / SLURM_NODEID /
SLURM_LOCALID, ports from DISTBENCH_TF_PORT (default 8888) upwards (distbench.core.multinode).

    # two machines a and b, one worker each:
    TF_CONFIG='{"cluster": {"worker": ["a:8888", "b:8888"]}, "task": {"type": "worker", "index": 0}}' \\
        python -m distbench.workers.tf_multiworker --config cfg.json --out rec.json    # on a (index 1 on b)
    # in a Slurm allocation of two nodes:
    srun --ntasks-per-node=1 python -m distbench.workers.tf_multiworker --config cfg.json --out rec.json
"""

from __future__ import annotations

import json
import os
import sys

FRAMEWORK = "tf"
TF_STRATEGY = "MultiWorkerMirroredStrategy"


def resolve_cluster(environ=os.environ) -> dict:
    """TF_CONFIG as a dict: the one given, or one derived from the Slurm step (then also set in
    `environ`, before TensorFlow reads it)."""
    from distbench.core import multinode
    from distbench.workers.runtime import tf_config

    text = environ.get("TF_CONFIG")
    if not text and "DISTBENCH_TF_WORKERS" in environ and "DISTBENCH_NODE_RANK" in environ:
        # the one-machine cluster (distbench.cluster.nsrun): one worker per node, in node order
        workers = environ["DISTBENCH_TF_WORKERS"].split(",")
        text = environ["TF_CONFIG"] = tf_config(workers, int(environ["DISTBENCH_NODE_RANK"]))
    if not text and "SLURM_PROCID" in environ and "SLURM_STEP_NODELIST" in environ:
        workers, index = multinode.slurm_tf_workers(environ, int(environ.get("DISTBENCH_TF_PORT", "8888")))
        text = environ["TF_CONFIG"] = tf_config(workers, index)
    if not text:
        raise RuntimeError("no cluster: set TF_CONFIG, or run inside a Slurm step (srun)")
    return json.loads(text)


def task_rank(tf_config: dict) -> int:
    """This process's rank among all tasks, 0 for the chief (worker 0 when there is no chief)."""
    task = tf_config.get("task", {})
    chiefs = len(tf_config.get("cluster", {}).get("chief", []))
    if task.get("type") == "chief":
        return 0
    return chiefs + int(task.get("index", 0))


def cluster_hosts(tf_config: dict) -> list[str]:
    addresses = [a for job in ("chief", "worker") for a in tf_config.get("cluster", {}).get(job, [])]
    return sorted({a.rsplit(":", 1)[0] for a in addresses})


def worker_gpus(tf_config: dict, world_size: int) -> int:
    """GPUs each worker replicates over: the point's N divided among the cluster's tasks (TF would
    otherwise take every GPU of the node, e.g. 16 replicas on two 8-GPU nodes for N=8)."""
    tasks = sum(len(tf_config.get("cluster", {}).get(job, [])) for job in ("chief", "worker"))
    if not tasks or world_size % tasks:
        raise RuntimeError(f"{world_size} replicas cannot be divided among {tasks} worker(s)")
    return world_size // tasks


def make_distribution(tf_config: dict):
    import numpy as np

    from distbench.workers import tf_common as tfc

    class MultiWorkerDistribution(tfc.StrategyDistribution):
        def start(self, cfg):
            hosts = cluster_hosts(tf_config)
            if len(hosts) != cfg.nodes:
                raise RuntimeError(
                    f"the cluster spans {len(hosts)} host(s) ({', '.join(hosts)}) but the point "
                    f"asks for {cfg.nodes} node(s)"
                )
            # MultiWorkerMirroredStrategy must exist before TensorFlow runs anything; configure()
            # only sets thread pools and device visibility, which must come first.
            tf = tfc.configure(
                cfg, logical_cpus=1, gpu_count=worker_gpus(tf_config, cfg.world_size) if cfg.device == "cuda" else 1
            )
            self.tf = tf
            impl = tf.distribute.experimental.CommunicationImplementation
            self.backend = "NCCL" if cfg.device == "cuda" else "RING"
            self.strategy = tf.distribute.MultiWorkerMirroredStrategy(
                cluster_resolver=tf.distribute.cluster_resolver.TFConfigClusterResolver(),
                communication_options=tf.distribute.experimental.CommunicationOptions(
                    implementation=impl.NCCL if cfg.device == "cuda" else impl.RING
                ),
            )
            self.rank = task_rank(tf_config)
            self.world = self.strategy.num_replicas_in_sync
            self.local = self.local_replicas()
            return tf

        def _replicas(self, fn, value):
            """fn(replica_context, value) on every replica (a collective); this worker's first result."""
            tf, strategy = self.tf, self.strategy
            out = strategy.run(lambda v: fn(tf.distribute.get_replica_context(), v), args=(tf.constant(value),))
            return strategy.experimental_local_results(out)[0].numpy()

        def gather(self, obj):
            """Every worker's `obj` (JSON-able), in worker order, on every worker."""
            data = np.frombuffer(json.dumps(obj).encode(), dtype=np.uint8)
            lengths = self._replicas(lambda ctx, v: ctx.all_gather(v, axis=0), np.array([data.size], np.int64))
            buf = np.zeros((1, int(lengths.max())), np.int32)  # collectives take no uint8
            buf[0, : data.size] = data
            rows = self._replicas(lambda ctx, v: ctx.all_gather(v, axis=0), buf)
            return [
                json.loads(row[:n].astype(np.uint8).tobytes().decode())
                for row, n in zip(rows[:: self.local], lengths[:: self.local])
            ]

        def mean(self, value):
            tf = self.tf
            return float(
                self._replicas(
                    lambda ctx, v: ctx.all_reduce(tf.distribute.ReduceOp.MEAN, v), np.array([value], np.float64)
                )[0]
            )

        def barrier(self):
            self._replicas(lambda ctx, v: ctx.all_reduce(self.tf.distribute.ReduceOp.SUM, v), np.zeros(1, np.float32))

        def stop(self):
            # Leave together (the chief hosts the cluster's coordination service), but never wait
            # for workers that may be gone: only when the run is not failing.
            if getattr(self, "strategy", None) is not None and sys.exc_info()[0] is None:
                self.barrier()

    return MultiWorkerDistribution()


def body(cfg, out_path):
    from distbench.results.record import read_record, write_record
    from distbench.workers import tf_common as tfc

    tf_config = resolve_cluster()
    dist = make_distribution(tf_config)
    tfc.run(cfg, out_path, dist)
    if dist.rank == 0 and os.path.exists(out_path):
        record = read_record(out_path)
        record["tf_strategy"] = TF_STRATEGY
        record["cluster"] = {
            "workers": tf_config["cluster"].get("worker", []),
            "hosts": cluster_hosts(tf_config),
            "replicas_per_worker": dist.local,
        }
        write_record(out_path, record)


def prepare() -> None:
    """Before run_worker (distbench.workers.__main__): it lets only rank 0 write 'skipped'/'oom' records, and
    reads RANK, which a TF cluster gives as its task index."""
    try:
        os.environ.setdefault("RANK", str(task_rank(resolve_cluster())))
    except (RuntimeError, ValueError, KeyError):
        pass
