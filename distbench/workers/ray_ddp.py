"""Strategy `ray-ddp`: ddp's workload under Ray Train, the way Ray users run it.

This module is the Ray *driver*: it joins the cluster at --ray-address (PointConfig.ray.address),
else the sweep's local head (DISTBENCH_RAY_HEAD: one per sweep, distbench.run.raycluster), else starts a local
head for the point (its temp dir and logs in a folder this module removes), and runs Ray Train's
`TorchTrainer` with `ScalingConfig(num_workers=N, use_gpu=<cuda>, resources_per_worker, placement_strategy)`
and the workers' environment (threads, NCCL_*, CUDA_DEVICE_ORDER) as the job's runtime_env, as torchrun's
ranks get it. Ray starts the N training workers as actors and sets up the torch process group (gloo on CPU
workers, NCCL on GPUs); each worker runs the same torch workload, step, timing and in-process no-sync variant
as `ddp` (distbench/workers/torch_common.py and torch_ddp's Distribution; only how ranks start differs).
Rank 0's record comes back through Ray Train itself, from any node: the training function's return value
(`Result.return_value`, rank 0's, in Train v2, whose `Result.metrics` holds only metrics reported with a
checkpoint) and its `ray.train.report` metrics (`Result.metrics`, Train v1).

Ray's fixed cost is recorded split (engine): head_start_s (the sweep's head, paid once per sweep, or this
point's own head), connect_s (ray.init), fit_start_s (fit() called until rank 0 runs the training function:
the Train controller and worker group), teardown_s (rank 0 done until fit() returns) and shutdown_s.

Ray's ranks are actors, not processes a launcher starts under a rank guard: when training fails, the driver
names the rank from Ray Train's per-rank failures (a rank whose process died, else one that raised an error
of its own; a peer's "connection closed" is a consequence) and writes the failed record itself.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import sys
import tempfile
import time
from pathlib import Path

from distbench.core import failures, rankguard
from distbench.workers import common

FRAMEWORK = "torch"
TEMP_PREFIX = "dbray-"
"""Local heads' temp folders: /tmp/dbray-<driver pid>-<its start ticks>-XXXX (Ray's unix sockets live in it,
and their paths must stay under 108 bytes, so never under a long TMPDIR)."""
TEARDOWN = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)
DIED_MARKERS = ("actor died unexpectedly", "worker process has died", "health check failed")


def make_distribution():
    import ray.train
    import ray.train.torch
    import torch
    import torch.distributed as dist

    from distbench.workers import torch_ddp

    class RayDDPDistribution(type(torch_ddp.make_distribution())):
        name = "ray-ddp"

        def start(self, cfg):
            # Ray Train has already initialised the process group (TorchConfig) and set RANK etc.
            ctx = ray.train.get_context()
            self.rank, self.world = ctx.get_world_rank(), ctx.get_world_size()
            self.local_rank = ctx.get_local_rank()
            if cfg.device == "cuda":  # the GPU Ray assigned this worker, as an index among the visible ones
                self.local_rank = ray.train.torch.get_device().index or 0
                torch.cuda.set_device(self.local_rank)
            self.backend = dist.get_backend()

        def stop(self):
            pass  # Ray Train destroys the process group when it shuts the worker group down

    return RayDDPDistribution()


def train_loop(config: dict) -> dict:
    """Each Ray Train worker: the torch workload; every rank reports (ray.train.report is a barrier) and
    returns, rank 0 its record, its start and end times and every rank's pid and host."""
    import ray.train
    import torch.distributed as dist

    from distbench.core.config import PointConfig
    from distbench.workers import torch_common as tc

    began = time.time()
    cfg = PointConfig.from_dict(config["cfg"])
    ctx = ray.train.get_context()
    rank = ctx.get_world_rank()
    node_id = ray.get_runtime_context().get_node_id()
    address = ray.util.get_node_ip_address()
    me = {"rank": rank, "pid": os.getpid(), "host": os.uname().nodename, "address": address, "node_id": node_id}
    note_worker(config.get("rank_dir"), me)
    net_before = rankguard.net_bytes()
    if rank == 0 and config.get("starts"):  # one more start of the worker group (a restart after the first)
        with contextlib.suppress(ValueError):  # the counter is gone: counting must not fail the point
            ray.get(ray.get_actor(config["starts"]).add.remote())
    workers = [None] * ctx.get_world_size()
    dist.all_gather_object(workers, me)
    with tempfile.TemporaryDirectory(prefix="distbench-ray-rank-") as tmp:
        out = os.path.join(tmp, "result.json")
        tc.run(cfg, out, make_distribution())
        # what every interface of the worker's node carried while it trained (the rank guards' `net` of the
        # other launchers: launch.placement names the interface from these)
        nets = [None] * ctx.get_world_size()
        dist.all_gather_object(nets, rankguard.net_delta(net_before, rankguard.net_bytes()))
        for worker, net in zip(workers, nets):
            worker["net"] = net
        metrics = {}
        if rank == 0:
            metrics = {"record": Path(out).read_text(), "workers": workers, "began": began, "done": time.time()}
        ray.train.report(metrics)
        return metrics


def note_worker(rank_dir: str | None, me: dict) -> None:
    """ray-worker-<rank>.json in the point's rank folder (where it is on this node): which pid runs the rank."""
    if not rank_dir or not os.path.isdir(rank_dir):
        return
    path = os.path.join(rank_dir, f"ray-worker-{me['rank']}.json")
    with open(f"{path}.tmp", "w") as fh:
        json.dump(me, fh)
    os.replace(f"{path}.tmp", path)


WORKER_ENV = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "CUDA_DEVICE_ORDER", "PYTHONUNBUFFERED", "TF_CPP_MIN_LOG_LEVEL")
WORKER_ENV_PREFIXES = ("NCCL_", "GLOO_", "UCX_", "TORCH_NCCL_", "TORCH_DISTRIBUTED_")


def worker_env(environ) -> dict:
    """What the launcher set for the ranks (launchers.build_env: threads, CUDA_DEVICE_ORDER) and the fabric's
    settings (NCCL_*, GLOO_*, UCX_*): the job's runtime_env, so that workers on other nodes get them too."""
    return {k: v for k, v in environ.items() if k in WORKER_ENV or k.startswith(WORKER_ENV_PREFIXES)}


def scaling(cfg, scaling_config, *, on_cluster: bool):
    """ScalingConfig as a torchrun point's ranks are placed: N workers, one GPU each on CUDA. On a cluster,
    as planned per node (distbench.run.raycluster.place): within one node (STRICT_PACK), one worker per node
    (STRICT_SPREAD), or D per node, each holding 1/D of its node's CPUs (PACK); on a local head, PACK with
    one CPU each (the head has N+1)."""
    placement = (cfg.ray.placement if cfg.ray else None) if on_cluster else None
    cpus = placement["cpus"] if placement else cfg.threads_per_worker if on_cluster else 1
    return scaling_config(
        num_workers=cfg.world_size,
        use_gpu=cfg.device == "cuda",
        resources_per_worker={"CPU": cpus, **({"GPU": 1} if cfg.device == "cuda" else {})},
        placement_strategy=placement["strategy"] if placement else "PACK",
    )


def sweep_head_text(address: str) -> str:
    """The record's engine.address for a head the sweep started: on this machine, or on the one-machine
    cluster's nodes (distbench.run.raycluster.nodes_ray: a head on node1 at its address)."""
    if address.startswith("127.0.0.1:"):
        return "the sweep's local head (one per sweep)"
    return f"the sweep's head on the nodes at {address} (one per sweep)"


def failure_config(failure_config_class):
    """No retry of any kind: a failed worker group, a preempted node and a failed controller each end the
    point (Train v2 leaves max_preemption_failures and controller_failure_limit unlimited by default)."""
    import inspect

    accepted = inspect.signature(failure_config_class).parameters
    limits = {"max_failures": 0, "max_preemption_failures": 0, "controller_failure_limit": 0}
    return failure_config_class(**{k: v for k, v in limits.items() if k in accepted})


def placed_fields(cfg, workers: list[dict], engine: dict) -> dict:
    """The nodes the workers ran on (engine["node_ids"], the record's `nodes`), and a refusal when they are
    not the planned ones (a point measured on other nodes than it claims)."""
    ids = sorted({w["node_id"] for w in workers if w.get("node_id")})
    engine["node_ids"] = ids
    placement = cfg.ray.placement if cfg.ray else None
    out = {"nodes": len(ids)} if ids else {}
    if placement and ids and len(ids) != placement["nodes"]:
        out.update(
            status="failed",
            reason=f"refused: planned on {placement['nodes']} node(s) ({placement['strategy']}), its workers ran "
            f"on {len(ids)}",
        )
    return out


def starts_counter():
    """A named actor the worker group's rank 0 counts its starts on (Ray Train restarts the group in place)."""
    import ray

    @ray.remote(num_cpus=0)
    class Starts:
        def __init__(self):
            self.count = 0

        def add(self):
            self.count += 1

        def get(self):
            return self.count

    name = f"distbench-starts-{os.getpid()}-{time.time_ns()}"
    return name, Starts.options(name=name).remote()


def noted_workers(rank_dir: str | None) -> dict[int, dict]:
    """The ranks' own notes (note_worker) of a failed fit: which pid ran which rank, where readable here."""
    out = {}
    for path in Path(rank_dir).glob("ray-worker-*.json") if rank_dir and os.path.isdir(rank_dir) else []:
        with contextlib.suppress(OSError, ValueError):
            me = json.loads(path.read_text())
            out[int(me["rank"])] = me
    return out


def temp_root() -> str:
    base = tempfile.gettempdir()
    return base if len(base) <= 24 else "/tmp"


def remove_stale_temp_dirs(root: str) -> list[str]:
    """Local-head folders whose driver is gone (it was SIGKILLed before it could remove its own)."""
    removed = []
    for entry in sorted(os.listdir(root)) if os.path.isdir(root) else []:
        m = re.match(rf"^{TEMP_PREFIX}(\d+)-(\d+)-", entry)
        if m and not rankguard.alive(int(m.group(1)), m.group(2)):
            shutil.rmtree(os.path.join(root, entry), ignore_errors=True)
            removed.append(entry)
    return removed


def failure_of(worker_failures: dict, pids: dict[int, int]) -> tuple[int, str, bool]:
    """(rank, reason, died) of the root cause among Ray Train's per-rank failures ({rank: exception or
    text}): a rank whose worker process died comes first, then one that raised an error of its own; errors
    a rank prints because a peer went away (failures.SECONDARY_MARKERS) are consequences."""
    from distbench.core.failures import failure_summary

    def key(item):
        rank, text = item
        died = any(m in text for m in DIED_MARKERS)
        return (0 if died else 1 if not failures.is_secondary(failure_summary(text) or text) else 2, rank)

    texts = {int(r): str(e) for r, e in worker_failures.items()}
    rank, text = min(texts.items(), key=key)
    if any(m in text for m in DIED_MARKERS):
        exit_type = re.search(r"Worker exit type: (\w+)", text)
        pid = pids.get(rank)
        return (
            rank,
            f"rank {rank} died: its Ray worker process{f' (pid {pid})' if pid else ''} ended without an error "
            f"of its own (Ray: {exit_type.group(1) if exit_type else 'actor died'}; Ray does not report the signal)",
            True,
        )
    line = failure_summary(text) or (text.strip().splitlines() or ["no message"])[-1][:300]
    return rank, f"rank {rank} raised {line}", False


def remove_on_signal(folder: str) -> None:
    """Remove `folder` the moment a teardown signal arrives, from a thread woken by the signal's wakeup fd:
    distbench stops the point's whole tree (Ray's processes too) and SIGKILLs what is left after a short
    grace, while the main thread may still be blocked inside Ray and only reach its cleanup later."""
    import threading

    read_end, write_end = os.pipe()
    os.set_blocking(write_end, False)
    signal.set_wakeup_fd(write_end)

    def remove() -> None:
        while number := os.read(read_end, 1):  # every handled signal's number arrives here
            if number[0] in TEARDOWN:
                shutil.rmtree(folder, ignore_errors=True)
                return

    threading.Thread(target=remove, name="distbench-ray-temp", daemon=True).start()


class Stopped(BaseException):
    """A teardown signal (forwarded by the rank guard) while Ray runs: unwind so the head is stopped."""


def body(cfg, out_path):
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")  # also where the launcher's env is not used (sbatch)
    import ray
    from ray.train import FailureConfig, RunConfig, ScalingConfig
    from ray.train.torch import TorchConfig, TorchTrainer

    def stop(signum, _frame):
        raise Stopped(signal.Signals(signum).name)

    def handle(how) -> None:
        for sig in TEARDOWN:
            signal.signal(sig, how)

    handle(stop)

    published: list[dict] = []
    address = cfg.ray.address if cfg.ray else None
    sweep_head = None if address else os.environ.get("DISTBENCH_RAY_HEAD")
    temp = None
    started = time.time()
    engine = {
        "engine": "ray-train",
        "ray": ray.__version__,
        "address": address or (sweep_head_text(sweep_head) if sweep_head else "local head started for this point"),
        "num_workers": cfg.world_size,
        "use_gpu": cfg.device == "cuda",
        "train_api": "v2" if os.environ.get("RAY_TRAIN_V2_ENABLED", "1") != "0" else "v1",
    }
    runtime_env = {"env_vars": worker_env(os.environ)}
    try:
        if address or sweep_head:
            ray.init(address=address or sweep_head, log_to_driver=True, runtime_env=runtime_env)
            engine["connect_s"] = time.time() - started
            if sweep_head:
                engine["head_start_s"] = float(os.environ.get("DISTBENCH_RAY_HEAD_START_S") or "nan")
                engine["head_shared_by_sweep"] = True
        else:
            root = temp_root()
            remove_stale_temp_dirs(root)
            ticks = rankguard.start_ticks(os.getpid()) or "0"
            temp = tempfile.mkdtemp(prefix=f"{TEMP_PREFIX}{os.getpid()}-{ticks}-", dir=root)
            remove_on_signal(temp)
            ray.init(
                num_cpus=cfg.world_size + 1,  # its workers and Train's controller; Ray prestarts one process per CPU
                include_dashboard=False,
                _temp_dir=temp,
                log_to_driver=True,
                runtime_env=runtime_env,
            )
            engine["head_start_s"] = time.time() - started
        handle(stop)  # again: ray.init may install handlers of its own

        starts_name, starts = starts_counter()
        trainer = TorchTrainer(
            train_loop,
            train_loop_config={
                "cfg": cfg.to_dict(),
                "rank_dir": os.environ.get("DISTBENCH_RANK_DIR"),
                "starts": starts_name,
            },
            scaling_config=scaling(cfg, ScalingConfig, on_cluster=bool(address or (cfg.ray and cfg.ray.placement))),
            torch_config=TorchConfig(backend="nccl" if cfg.device == "cuda" else "gloo"),
            run_config=RunConfig(
                name=f"distbench-{cfg.strategy}-{cfg.world_size}",
                storage_path=os.path.join(temp, "results") if temp else None,
                failure_config=failure_config(FailureConfig),
            ),
        )
        oom_before = failures.oom_kills()
        fit_start = time.time()
        error = metrics = None
        try:
            result = trainer.fit()
            metrics = getattr(result, "return_value", None) or result.metrics or {}
        except ray.train.TrainingFailedError as exc:
            error = exc
        fit_end = time.time()
        engine["fit_s"] = fit_end - fit_start
        with contextlib.suppress(Exception):  # Ray Train restarts the worker group in place: count its starts
            engine["worker_group_starts"] = ray.get(starts.get.remote(), timeout=30)
            engine["restarts"] = max(0, engine["worker_group_starts"] - 1)
        if placement := (cfg.ray.placement if cfg.ray else None):
            engine["placement"] = placement
        if metrics and metrics.get("record"):
            engine["workers"] = metrics["workers"]
            engine["fit_start_s"] = metrics["began"] - fit_start
            engine["teardown_s"] = fit_end - metrics["done"]
            record = json.loads(metrics["record"])
            record.update(placed_fields(cfg, metrics["workers"], engine))
            if engine.get("restarts"):
                record["launch_note"] = (
                    f"Ray Train restarted the worker group {engine['restarts']} time(s) although its FailureConfig "
                    "allows none: the measurement is the last start's"
                )
            record["engine"] = engine
            published.append(record)
            return
        workers = noted_workers(os.environ.get("DISTBENCH_RANK_DIR"))
        engine["workers"] = [workers[r] for r in sorted(workers)]
        pids = {r: w["pid"] for r, w in workers.items()}
        per_rank = getattr(error, "worker_failures", None) or {}
        if per_rank:
            rank, reason, died = failure_of(per_rank, pids)
            root_text = str(per_rank.get(rank, per_rank.get(str(rank), "")))
        else:
            died, root_text = False, str(error or "")
            reason = f"Ray Train failed: {(root_text.strip().splitlines() or ['no result from rank 0'])[0][:300]}"
        status, note = "failed", None
        oom_after = failures.oom_kills()
        if failures.is_oom_text(root_text):
            status = "oom"
        elif died and oom_before is not None and oom_after is not None and oom_after > oom_before:
            status, note = (
                "oom",
                f"possibly the kernel OOM killer: this cgroup's oom_kill count rose from {oom_before} to {oom_after}",
            )
        print(f"distbench ray driver: {reason}\n{root_text[-3000:]}", file=sys.stderr, flush=True)
        if temp:  # a failed point keeps its folder: keep Ray's logs in it
            logs = os.path.join(temp, "session_latest", "logs")
            with contextlib.suppress(OSError):
                shutil.copytree(logs, Path(out_path).parent / "ray-logs", symlinks=True, dirs_exist_ok=True)
        common.emit(
            cfg,
            out_path,
            framework=FRAMEWORK,
            status=status,
            reason=f"{reason} ({note})" if note else reason,
            engine=engine,
        )
    except Stopped:
        # distbench is tearing the point's whole process tree down (Ray's processes too) and kills what is
        # left after a grace period: remove the head's folder first, then stop Ray.
        if temp:
            shutil.rmtree(temp, ignore_errors=True)
        raise
    finally:
        handle(signal.SIG_IGN)  # the head is being stopped: a second signal must not cut it short
        shutdown = time.time()
        try:
            ray.shutdown()
        finally:
            if temp:
                shutil.rmtree(temp, ignore_errors=True)
        engine["shutdown_s"] = time.time() - shutdown
        if published:  # written after Ray is down, so the record holds the shutdown's cost too
            from distbench.results.record import write_record

            write_record(out_path, published[0])
