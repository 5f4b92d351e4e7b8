"""Launching one point: pure builders of (argv, env), and a small executor with a timeout.

The builders say exactly what would run, so they are unit-tested without running anything; the
executor runs it in a fresh process tree (its own session, so a timeout kills the whole tree),
and turns whatever happened into a result record.
"""

from __future__ import annotations

import os
import select
import shutil
import signal
import subprocess
import time
from pathlib import Path

from distbench.core import failures, phases, rankguard
from distbench.core.config import PointConfig
from distbench.core.failures import failure_summary
from distbench.core.strategies import Strategy
from distbench.results.record import base_record, build_record, read_record
from distbench.run import signals
from distbench.run.hosts import check_allocation, local_cluster, placement
from distbench.run.launchers import launcher_for, nodes_launcher

STDERR_TAIL_CHARS = 8000
FAILURE_GRACE_S = 10.0
"""After a rank fails, the launcher gets this long to tear the others down before distbench does."""
POLL_S = 1.0
"""How often distbench looks, while a point runs, for a failed rank, a written record and the timeout. The
launcher's exit wakes it at once where Linux gives a pidfd (ExitWaiter); between looks it sleeps in the
kernel, so that a 2-core machine's measured workers are not woken away (Popen.wait with a timeout polls
every 0.5-50 ms: about 45 wakeups a second)."""


def build_command(
    strategy: Strategy, cfg: PointConfig, config_path: str, out_path: str, base_env: dict | None = None
) -> tuple[list[str], dict]:
    """The argv and environment that run `cfg` the way users launch this strategy: on one node, or
    on the first cfg.nodes nodes of the current Slurm allocation (distbench scale --nodes)."""
    launcher = point_launcher(strategy, cfg.nodes)
    if cfg.nodes > 1:
        hosts = check_allocation(cfg.nodes)
        if (cluster := local_cluster()) is not None:
            return launcher.on_cluster(
                strategy, cfg, str(config_path), str(out_path), hosts=hosts, nic=cluster.nic, base_env=base_env
            )
        return launcher.allocation(strategy, cfg, str(config_path), str(out_path), hosts=hosts, base_env=base_env)
    return launcher.local(strategy, cfg, str(config_path), str(out_path), base_env=base_env)


def point_launcher(strategy: Strategy, nodes: int):
    """The Launcher of a point on `nodes` nodes: across the one-machine cluster's nodes when it is up (Ray
    Train's driver included), else launcher_for's."""
    if nodes > 1 and local_cluster() is not None:
        return nodes_launcher(strategy)
    return launcher_for(strategy, nodes)


def gpu_indices(cfg: PointConfig, env: dict) -> list[int] | None:
    """NVML indices of the GPUs this point's workers on this node use (None: unknown -> all)."""
    if cfg.device != "cuda":
        return None
    per_node = cfg.world_size // max(1, cfg.nodes)
    visible = env.get("CUDA_VISIBLE_DEVICES")
    if visible:
        ids = [v.strip() for v in visible.split(",") if v.strip()]
        if not all(v.isdigit() for v in ids):  # UUIDs / MIG ids: cannot map to NVML indices here
            return None
        return [int(v) for v in ids[:per_node]]
    return list(range(per_node))


def log_tail(path: Path, limit: int = STDERR_TAIL_CHARS) -> str:
    try:
        with open(path, "rb") as fh:
            fh.seek(0, os.SEEK_END)
            size = fh.tell()
            fh.seek(max(0, size - limit))
            return fh.read().decode("utf-8", "replace")
    except OSError:
        return ""


def _kill_tree(proc: subprocess.Popen, grace_s: float = 5.0) -> None:
    """Stop the launcher and every process under it. torchrun and horovodrun start their workers
    in sessions of their own, so the launcher's process group alone does not reach them: collect
    the descendants first, then terminate, wait, and kill what is left."""
    import psutil

    try:
        family = psutil.Process(proc.pid).children(recursive=True)
    except psutil.NoSuchProcess:
        family = []
    try:
        os.killpg(proc.pid, signal.SIGTERM)
    except ProcessLookupError:
        pass
    for p in family:
        try:
            p.terminate()
        except psutil.NoSuchProcess:
            pass
    try:
        proc.wait(timeout=grace_s)
    except subprocess.TimeoutExpired:
        pass
    _, alive = psutil.wait_procs(family, timeout=grace_s)
    for p in alive:
        try:
            p.kill()
        except psutil.NoSuchProcess:
            pass
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait()


def _tail_summary(tail: str) -> str | None:
    """The worker's exception line from a stderr tail, else its last non-empty line."""
    last = [ln for ln in tail.strip().splitlines() if ln.strip()]
    return failure_summary(tail) or (last[-1][:300] if last else None)


def _failure(
    returncode: int | None,
    tail: str,
    ranks: list[dict],
    oom_counts: tuple,
    world_size: int = 1,
    launcher_tail: str = "",
) -> tuple[str, str]:
    """(status, reason) of a point whose worker wrote no record: the root-cause rank when the ranks
    left reports, "cause unknown" naming the silent ranks when only consequences are on record,
    else the launcher's exit status and the worker's exception line from stderr."""
    cause = failures.root_cause(ranks)
    silent = failures.silent_ranks(ranks, world_size)
    if cause is not None and silent and failures.only_consequences(ranks, f"{tail}\n{launcher_tail}"):
        reason, sig = failures.unknown_cause(ranks, silent, f"{tail}\n{launcher_tail}")
        status, note = failures.classify(
            {"signal": sig, "error": None}, oom_before=oom_counts[0], oom_after=oom_counts[1]
        )
        return status, f"{reason} ({note})" if note else reason
    if cause is not None:
        if not cause.get("error") and not cause.get("signal"):
            # It failed before run_worker could report (e.g. an import error): the worker's own
            # exception line from stderr, unless it only says that a peer went away.
            summary = _tail_summary(tail)
            cause = dict(cause, error=None if failures.is_secondary(summary) else summary)
        status, note = failures.classify(cause, oom_before=oom_counts[0], oom_after=oom_counts[1])
        reason = failures.describe(cause)
        return status, f"{reason} ({note})" if note else reason
    status, note = failures.classify(
        None, stderr_tail=tail, returncode=returncode, oom_before=oom_counts[0], oom_after=oom_counts[1]
    )
    if returncode == 0:
        return status, "worker exited without writing a result"
    summary = _tail_summary(tail) or "no output"
    how = (
        f"killed ({rankguard.signal_name(returncode)})"
        if returncode is not None and returncode < 0
        else f"exit status {returncode}"
    )
    return status, f"{how}: {summary}" + (f" ({note})" if note else "")


def outcome_record(
    cfg: PointConfig,
    strategy: Strategy,
    result_path,
    returncode: int | None,
    tail: str,
    *,
    status: str | None = None,
    reason: str | None = None,
    rank_dir=None,
    oom_counts: tuple = (None, None),
    launcher_tail: str = "",
) -> dict:
    """The point's record from whatever its launch left behind: the worker's own record when rank 0
    wrote one (the first build stage, written by the worker itself), else base_record as a failed/oom/timeout
    record naming the rank and the signal or exception that broke it; then its launch fields (outcome_fields)
    merged by distbench.results.record.build_record. Shared by local runs and Slurm jobs. launcher_tail: the launcher's
    stdout (horovodrun prints its exit lines there)."""
    record = None
    ranks = failures.rank_reports(rank_dir)
    if status is None and Path(result_path).exists():
        try:
            record = read_record(result_path)
        except (ValueError, OSError) as exc:
            tail += f"\n[distbench] unreadable result record: {exc}"
    if record is None:
        if status is None:
            status, reason = _failure(returncode, tail, ranks, oom_counts, cfg.world_size, launcher_tail)
        record = base_record(
            cfg.to_dict(), strategy=strategy.name, framework=strategy.framework, status=status, reason=reason
        )
    fields = outcome_fields(record["status"], returncode, tail, ranks, oom_counts, cfg.world_size, launcher_tail)
    return build_record(record, launch=fields)


def outcome_fields(
    status: str,
    returncode: int | None,
    tail: str,
    ranks: list[dict],
    oom_counts: tuple = (None, None),
    world_size: int = 1,
    launcher_tail: str = "",
) -> dict:
    """The launch fields of how the process tree ended, for a record of `status`: the stderr tail and the
    ranks' reports of a point that is not ok; for an ok record whose launcher still exited non-zero, a
    launch_note saying what broke after the work (and that tail)."""
    out: dict = {}
    if status == "ok" and returncode != 0:
        # Rank 0 writes the record after gathering every rank's measurements: whatever broke came after
        # the work (a destructor, a thread at interpreter exit). The measurement is complete; keep it, as
        # for ranks hung in teardown, and say what happened.
        _, why = _failure(returncode, tail, ranks, oom_counts, world_size, launcher_tail)
        out["launch_note"] = (
            f"a rank failed in teardown, after rank 0 wrote the record (the measurement was complete): {why}"
        )
        out["teardown_tail"] = tail
    if status != "ok":
        out["stderr_tail"] = tail
        if ranks:
            out["ranks"] = ranks
    return out


class ExitWaiter:
    """wait(seconds) -> the launcher's return code, or None if it still runs after that long: asleep in the
    kernel on a pidfd (Linux 5.3+), else Popen.wait (which polls every 0.5-50 ms)."""

    def __init__(self, proc: subprocess.Popen):
        self.proc, self.poller, self.fd = proc, None, None
        try:
            self.fd = os.pidfd_open(proc.pid)
        except (AttributeError, OSError):  # not Linux, an old kernel, or the launcher already reaped
            return
        self.poller = select.poll()
        self.poller.register(self.fd, select.POLLIN)

    def wait(self, seconds: float) -> int | None:
        if self.poller is None:
            try:
                return self.proc.wait(timeout=seconds)
            except subprocess.TimeoutExpired:
                return None
        if self.proc.returncode is None and not self.poller.poll(max(0, round(seconds * 1000))):
            return None
        code = self.proc.poll()  # readable: the launcher has exited; poll() reaps it
        if code is None:  # not yet reapable (its last threads still ending): wait for it the polling way
            try:
                return self.proc.wait(timeout=seconds)
            except subprocess.TimeoutExpired:
                return None
        return code

    def close(self) -> None:
        if self.fd is not None:
            os.close(self.fd)
            self.fd = self.poller = None


def _wait(
    proc: subprocess.Popen, timeout_s: float, rank_dir: Path, result_path: Path | None = None
) -> tuple[int | None, str | None]:
    """Wait for the launcher; (returncode, None), or (None, why) when distbench had to stop it: the
    timeout, or a rank that failed while the launcher left the others running (a rank blocked in a
    collective with a dead peer would otherwise hold the point until the timeout), or ranks still
    running FAILURE_GRACE_S after rank 0 wrote the point's record (hung in teardown: the work is done)."""
    deadline = time.monotonic() + timeout_s
    waiter = ExitWaiter(proc)
    try:
        return _watch(waiter, deadline, rank_dir, result_path)
    finally:
        waiter.close()


def _watch(
    waiter: ExitWaiter, deadline: float, rank_dir: Path, result_path: Path | None
) -> tuple[int | None, str | None]:
    failed_at = done_at = None
    while True:
        code = waiter.wait(min(POLL_S, max(0.0, deadline - time.monotonic())))
        if code is not None:
            return code, None
        signals.check()  # a signal lost while the launcher was being forked (signals.check) stops it here
        now = time.monotonic()
        if now >= deadline:
            return None, "timeout"
        if failed_at is None:
            if failures.first_failure(rank_dir) is not None:
                failed_at = now
        elif now - failed_at > FAILURE_GRACE_S:
            return None, "rank failed"
        if result_path is not None and failed_at is None:
            if done_at is None:
                done_at = now if result_path.exists() else None
            elif now - done_at > FAILURE_GRACE_S:
                return None, "teardown"


def run_point(
    strategy: Strategy,
    cfg: PointConfig,
    workdir: str | os.PathLike,
    timeout_s: float,
    telemetry_interval_s: float = 0.0,
) -> dict:
    """Run one point in a fresh process tree; always returns a result record (never raises for the
    point's own failures). With telemetry_interval_s > 0 a sampler runs beside it (distbench.run.telemetry).

    The launcher starts in a session of its own with a parent-death signal, and every rank runs under
    distbench.core.rankguard, so no worker outlives distbench, even when distbench itself is killed."""
    signals.check()  # never start workers after a termination signal (one lost in a finalizer included)
    workdir = Path(workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    config_path = workdir / "config.json"
    out_path = workdir / "result.json"
    stderr_path = workdir / "stderr.log"
    stdout_path = workdir / "stdout.log"
    rank_dir = workdir / "ranks"
    shutil.rmtree(rank_dir, ignore_errors=True)
    rank_dir.mkdir()
    config_path.write_text(cfg.to_json())
    if out_path.exists():
        out_path.unlink()
    argv, env = build_command(strategy, cfg, str(config_path), str(out_path))
    env.update(rankguard.parent_env(), DISTBENCH_RANK_DIR=str(rank_dir))
    oom_before = failures.oom_kills()
    started = time.time()
    with open(stdout_path, "wb") as out, open(stderr_path, "wb") as err:
        proc = subprocess.Popen(
            argv,
            env=env,
            stdout=out,
            stderr=err,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
            preexec_fn=rankguard.die_with_parent,
        )
        sampler = None
        if telemetry_interval_s > 0:
            from distbench.run.telemetry import Sampler

            sampler = Sampler(
                proc.pid,
                interval_s=telemetry_interval_s,
                gpus=cfg.device == "cuda",
                gpu_indices=gpu_indices(cfg, env),
                cuda_env=env,
            ).start()
        try:
            returncode, stopped = _wait(proc, timeout_s, rank_dir, out_path)
            if stopped:
                _kill_tree(proc)
        except BaseException as exc:  # Ctrl-C, SIGTERM, SIGHUP: no worker may outlive the sweep
            exc.distbench_phase = phases.during(rank_dir, started)  # the runner names it in the reason
            _kill_tree(proc, grace_s=2.0)
            raise
        finally:
            samples = sampler.stop() if sampler else None
    wall = time.time() - started
    tail = log_tail(stderr_path)
    out_tail = log_tail(stdout_path)
    oom_counts = (oom_before, failures.oom_kills())
    if stopped == "timeout":
        phase, where = phases.during(rank_dir, started, started + wall)
        record = outcome_record(
            cfg,
            strategy,
            out_path,
            None,
            tail,
            status="timeout",
            reason=f"timed out after {timeout_s:g}s (--timeout) {where}",
            rank_dir=rank_dir,
        )
        record["stopped_phase"] = phase
    elif stopped == "teardown":  # every rank did its work and rank 0 wrote the record: keep it
        record = outcome_record(cfg, strategy, out_path, 0, tail, rank_dir=rank_dir, oom_counts=oom_counts)
    else:
        record = outcome_record(
            cfg, strategy, out_path, returncode, tail, rank_dir=rank_dir, oom_counts=oom_counts, launcher_tail=out_tail
        )
    launch = {
        "argv": argv,
        "returncode": returncode,
        "started": started,
        "wall_s": wall,
        "launcher": point_launcher(strategy, cfg.nodes).name,
        "workdir": str(workdir),
    }
    reports = failures.rank_reports(rank_dir)
    if pinned := {str(r["rank"]): r["cores"] for r in sorted(reports, key=lambda r: r["rank"]) if r.get("cores")}:
        launch["pinned_cores"] = pinned  # each rank's cores (DISTBENCH_PIN_CORES)
    if cfg.nodes > 1:  # where the ranks ran and what carried their traffic
        cluster = local_cluster()
        # Ray's workers are actors, not guarded ranks: each reports its host and its node's interface bytes
        ranks = [w for w in (record.get("engine") or {}).get("workers") or [] if "net" in w]
        ranks = ranks or reports
        launch["placement"] = placement(ranks, cluster.link_settings() if cluster else None)
        if cluster is not None and record["status"] != "ok":
            from distbench.cluster.netns import link_faults
            from distbench.cluster.sshd import faults as daemon_faults

            if faults := link_faults(cluster):  # the network, not the rank that noticed it, is the cause
                launch["placement"]["link_faults"] = faults
                record["reason"] = f"network: {'; '.join(faults)} ({record.get('reason')})"
            elif faults := daemon_faults(cluster):  # a node's daemon died under the point
                launch["placement"]["daemon_faults"] = faults
                record["reason"] = f"node: {'; '.join(faults)} ({record.get('reason')})"
    fields = launch_fields(record, launch, stopped=stopped, samples=samples, sampler=sampler, cfg=cfg)
    return build_record(record, launch=fields)


def launch_fields(record: dict, launch: dict, *, stopped: str | None, samples, sampler, cfg: PointConfig) -> dict:
    """The launch fields run_point adds to the outcome's record (read, not changed): the teardown note of
    ranks distbench stopped after the record was written, the telemetry summary over the measured window
    and its samples, the launch facts, and the work folder of a point that is not ok."""
    out: dict = {}
    if stopped == "teardown":
        out["launch_note"] = (
            f"ranks still running {FAILURE_GRACE_S:g}s after the record was written (hung "
            "in teardown) were stopped by distbench; the measurement was complete"
        )
    if samples is not None:
        from distbench.run.telemetry import summarize

        window = (record.get("stopping") or {}).get("window")
        steps = len(record.get("step_times_s") or [])
        out["telemetry"] = summarize(
            samples,
            tuple(window) if window else None,
            steps * record["global_batch"] if steps else None,
            world_size=cfg.world_size,
            nodes=cfg.nodes,
        )
        if sampler.gpu_note:
            out["telemetry"]["note"] = sampler.gpu_note
        out["telemetry"]["sampler_nice"] = sampler.nice  # the sampling thread's priority (telemetry.lowest_priority)
        out["telemetry_samples"] = samples
    out["launch"] = launch
    if record["status"] != "ok":
        out["workdir"] = launch["workdir"]
    return out
