"""Strategy `ray-ddp`: ddp's workload under Ray Train, the way Ray users run it.

This module is the Ray *driver*: it joins the cluster at --ray-address (PointConfig.extra["ray_address"]),
or starts a local Ray head for the point (its temp dir and logs in a folder this module removes), and runs
Ray Train's `TorchTrainer` with `ScalingConfig(num_workers=N, use_gpu=<cuda>)`. Ray starts the N training
workers as actors and sets up the torch process group (gloo on CPU workers, NCCL on GPUs); each worker runs
the same torch workload, step, timing and in-process no-sync variant as `ddp` (distbench/workers/torch_common.py and
torch_ddp's Distribution; only how ranks start differs). Rank 0's record comes back through a small actor, so
it reaches the driver from any node.

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

from distbench import failures, rankguard
from distbench.workers import common

FRAMEWORK = "torch"
TEMP_PREFIX = "dbray-"
"""Local heads' temp folders: /tmp/dbray-<driver pid>-<its start ticks>-XXXX (Ray's unix sockets live in it,
and their paths must stay under 108 bytes, so never under a long TMPDIR)."""
TEARDOWN = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)
DIED_MARKERS = ("actor died unexpectedly", "worker process has died", "health check failed")


def make_distribution():
    import torch
    import torch.distributed as dist
    import ray.train
    import ray.train.torch

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


def train_loop(config: dict) -> None:
    """Each Ray Train worker: the torch workload; rank 0 sends its record to the driver's sink."""
    import ray
    import ray.train

    from distbench.config import PointConfig
    from distbench.workers import torch_common as tc

    cfg = PointConfig.from_dict(config["cfg"])
    ctx = ray.train.get_context()
    rank = ctx.get_world_rank()
    me = {"rank": rank, "pid": os.getpid(), "host": os.uname().nodename}
    ray.get(config["sink"].started.remote(me))
    note_worker(config.get("rank_dir"), me)
    with tempfile.TemporaryDirectory(prefix="distbench-ray-rank-") as tmp:
        out = os.path.join(tmp, "result.json")
        tc.run(cfg, out, make_distribution())
        if rank == 0:
            ray.get(config["sink"].put.remote(Path(out).read_text()))


def note_worker(rank_dir: str | None, me: dict) -> None:
    """ray-worker-<rank>.json in the point's rank folder (where it is on this node): which pid runs the rank."""
    if not rank_dir or not os.path.isdir(rank_dir):
        return
    path = os.path.join(rank_dir, f"ray-worker-{me['rank']}.json")
    with open(f"{path}.tmp", "w") as fh:
        json.dump(me, fh)
    os.replace(f"{path}.tmp", path)


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
    from distbench.launch import failure_summary

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

    address = (cfg.extra or {}).get("ray_address")
    temp = None
    started = time.time()
    engine = {
        "engine": "ray-train",
        "ray": ray.__version__,
        "address": address or "local head started for this point",
        "num_workers": cfg.world_size,
        "use_gpu": cfg.device == "cuda",
        "train_api": "v2" if os.environ.get("RAY_TRAIN_V2_ENABLED", "1") != "0" else "v1",
    }
    try:
        if address:
            ray.init(address=address, log_to_driver=True)
        else:
            root = temp_root()
            remove_stale_temp_dirs(root)
            ticks = rankguard.start_ticks(os.getpid()) or "0"
            temp = tempfile.mkdtemp(prefix=f"{TEMP_PREFIX}{os.getpid()}-{ticks}-", dir=root)
            remove_on_signal(temp)
            ray.init(
                num_cpus=max(cfg.world_size, os.cpu_count() or 1),
                include_dashboard=False,
                _temp_dir=temp,
                log_to_driver=True,
            )
        handle(stop)  # again: ray.init may install handlers of its own
        engine["head_start_s"] = time.time() - started

        @ray.remote(num_cpus=0)
        class Sink:
            def __init__(self):
                self.record, self.workers = None, {}

            def started(self, me):
                self.workers[me["rank"]] = me

            def put(self, text):
                self.record = text

            def get(self):
                return self.record, self.workers

        sink = Sink.remote()
        trainer = TorchTrainer(
            train_loop,
            train_loop_config={"cfg": cfg.to_dict(), "sink": sink, "rank_dir": os.environ.get("DISTBENCH_RANK_DIR")},
            scaling_config=ScalingConfig(num_workers=cfg.world_size, use_gpu=cfg.device == "cuda"),
            torch_config=TorchConfig(backend="nccl" if cfg.device == "cuda" else "gloo"),
            run_config=RunConfig(
                name=f"distbench-{cfg.strategy}-{cfg.world_size}",
                storage_path=os.path.join(temp, "results") if temp else None,
                failure_config=FailureConfig(max_failures=0),
            ),
        )
        oom_before = failures.oom_kills()
        fit_start = time.time()
        error = None
        try:
            trainer.fit()
        except ray.train.TrainingFailedError as exc:
            error = exc
        engine["fit_s"] = time.time() - fit_start
        text, workers = ray.get(sink.get.remote())
        engine["workers"] = [workers[r] for r in sorted(workers)]
        if error is None and text:
            record = json.loads(text)
            record["engine"] = engine
            from distbench.record import write_record

            write_record(out_path, record)
            return
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
        try:
            ray.shutdown()
        finally:
            if temp:
                shutil.rmtree(temp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(common.run_worker(FRAMEWORK, body))
