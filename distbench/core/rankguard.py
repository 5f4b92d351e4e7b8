"""The guard every worker rank runs under: `python -m distbench.core.rankguard PYTHON -m WORKER ...`.

The guard starts the real worker as its only child, forwards the launcher's teardown signals to it,
kills it when the guard dies or the distbench process that started the sweep is gone
(DISTBENCH_PARENT_PID / DISTBENCH_PARENT_START, watched on a pidfd: no wakeups while the rank works), and
writes how the rank ended to DISTBENCH_RANK_DIR/exit-<rank>.json, so the parent names the rank and signal
that broke a point rather than whatever a surviving rank printed afterwards. It imports nothing heavy (tens
of milliseconds) and is outside the measured window.
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import signal
import subprocess
import sys
import threading
import time

FORWARDED = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGUSR1)
POLL_S = 0.5
RANK_VARS = ("RANK", "HOROVOD_RANK", "OMPI_COMM_WORLD_RANK", "PMI_RANK", "SLURM_PROCID", "DISTBENCH_NODE_RANK")
"""Where each launcher puts the global rank; DISTBENCH_NODE_RANK last (the one-machine cluster's nsrun: the
node's index, the rank of a one-process-per-node launch such as MultiWorkerMirroredStrategy's)."""
PR_SET_PDEATHSIG = 1
PIN_VAR = "DISTBENCH_PIN_CORES"
"""'1': every rank runs on cores of its own (pinned_cores), the same cores whether its node is this machine or
a node of the one-machine cluster (benchmarks/cluster_predict.py sets it); unset: the kernel places ranks."""


def pinned_cores(env: dict, rank: int, allowed: set[int] | None = None) -> list[int] | None:
    """With DISTBENCH_PIN_CORES=1, rank r's cores: its T threads (OMP_NUM_THREADS) on the allowed cores
    r*T .. r*T+T-1 in order, wrapping around (None: not pinned). Two single-thread ranks on 2 cores get
    core 0 and core 1, on one node or on two."""
    if env.get(PIN_VAR) != "1":
        return None
    cores = sorted(os.sched_getaffinity(0) if allowed is None else allowed)
    threads = int(env["OMP_NUM_THREADS"]) if env.get("OMP_NUM_THREADS", "").isdigit() else 1
    return sorted({cores[(rank * threads + j) % len(cores)] for j in range(max(1, min(threads, len(cores))))})


def rank_of(env: dict) -> int:
    """This process's global rank from whichever launcher started it (0 when none says)."""
    return next((int(env[n]) for n in RANK_VARS if env.get(n, "").isdigit()), 0)


def _stat(pid: int) -> list[str] | None:
    """/proc/PID/stat from field 3 (state) on, or None where /proc has no such process."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            stat = fh.read().decode("ascii", "replace")
    except OSError:
        return None
    # The command name (field 2) may hold spaces and parentheses: split after its closing one.
    return stat.rsplit(")", 1)[1].split()


def start_ticks(pid: int) -> str | None:
    """Start time in clock ticks since boot (field 22): with the pid it names one process for good."""
    fields = _stat(pid)
    return fields[19] if fields else None


def alive(pid: int, ticks: str | None) -> bool:
    """Whether the process `pid` that started at `ticks` still runs (a zombie counts as gone)."""
    fields = _stat(pid)
    if fields is None:
        if os.path.isdir("/proc"):
            return False
        try:  # no /proc (not Linux): existence only
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            pass
        return True
    return fields[0] != "Z" and (ticks is None or fields[19] == ticks)


def parent_env(pid: int | None = None) -> dict:
    """What a launching process puts in its workers' environment so they die with it."""
    pid = os.getpid() if pid is None else pid
    env = {"DISTBENCH_PARENT_PID": str(pid)}
    ticks = start_ticks(pid)
    if ticks is not None:
        env["DISTBENCH_PARENT_START"] = ticks
    return env


def wait_until_gone(pid: int, ticks: str | None) -> None:
    """Return once the process `pid` that started at `ticks` is gone. Asleep in the kernel on a pidfd where
    Linux has one (Linux 5.3+): a rank's guard then never wakes while the rank works, where polling /proc
    woke it every POLL_S on cores the measured workers use. Elsewhere, /proc (or kill 0) every POLL_S."""
    fd = None
    with contextlib.suppress(AttributeError, OSError):
        fd = os.pidfd_open(pid)
    try:
        # opened before the start time is checked: the pidfd then names the process started at `ticks`
        if fd is not None and alive(pid, ticks):
            select.select([fd], [], [])  # readable when it has exited
        while alive(pid, ticks):
            time.sleep(POLL_S)
    finally:
        if fd is not None:
            os.close(fd)


def die_with_parent() -> None:
    """preexec_fn for a child: the kernel sends it SIGKILL when the process that started it exits."""
    if sys.platform.startswith("linux"):
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)


def signal_name(returncode: int) -> str | None:
    """'SIGKILL' for a returncode of -9 (Popen's 'killed by signal 9')."""
    if returncode >= 0:
        return None
    try:
        return signal.Signals(-returncode).name
    except ValueError:
        return f"signal {-returncode}"


def net_bytes(root: str = "/sys/class/net") -> dict[str, tuple[int, int]]:
    """{interface: (tx_bytes, rx_bytes)} of the network namespace this process sees (the rank's node)."""
    out = {}
    with contextlib.suppress(OSError):
        for name in os.listdir(root):
            try:
                with open(f"{root}/{name}/statistics/tx_bytes") as tx, open(f"{root}/{name}/statistics/rx_bytes") as rx:
                    out[name] = (int(tx.read()), int(rx.read()))
            except (OSError, ValueError):
                continue
    return out


def net_delta(before: dict, after: dict) -> dict[str, dict[str, int]]:
    """The bytes each interface sent and received between two net_bytes readings (interfaces that moved any)."""
    out = {}
    for name, (tx, rx) in after.items():
        tx0, rx0 = before.get(name, (tx, rx))
        if tx - tx0 or rx - rx0:
            out[name] = {"tx_bytes": tx - tx0, "rx_bytes": rx - rx0}
    return out


def write_exit(
    rank_dir: str,
    rank: int,
    pid: int,
    returncode: int,
    started: float,
    net: dict | None = None,
    cores: list[int] | None = None,
) -> None:
    record = {
        "rank": rank,
        "pid": pid,
        "returncode": returncode,
        "signal": signal_name(returncode),
        "started": started,
        "ended": time.time(),
        "host": os.uname().nodename,
    }
    if net is not None:
        record["net"] = net  # what every interface of the rank's node carried while the rank ran
    if cores is not None:
        record["cores"] = cores  # the cores the rank was pinned to (DISTBENCH_PIN_CORES)
    path = os.path.join(rank_dir, f"exit-{rank}.json")
    tmp = f"{path}.{os.getpid()}.tmp"
    with open(tmp, "w") as fh:
        json.dump(record, fh)
    os.replace(tmp, path)


def main(argv: list[str]) -> int:
    if not argv:
        print("usage: python -m distbench.core.rankguard PROGRAM [ARGS...]", file=sys.stderr)
        return 2
    env = os.environ
    rank = rank_of(env)
    rank_dir = env.get("DISTBENCH_RANK_DIR")
    parent = env.get("DISTBENCH_PARENT_PID")
    parent_ticks = env.get("DISTBENCH_PARENT_START")
    started = time.time()
    net_before = net_bytes()
    cores = pinned_cores(env, rank)

    def start_child() -> None:
        die_with_parent()
        if cores is not None:  # before the worker starts any thread: every thread it makes inherits it
            os.sched_setaffinity(0, cores)

    child = subprocess.Popen(argv, preexec_fn=start_child)

    def forward(signum, _frame):
        with contextlib.suppress(ProcessLookupError):
            child.send_signal(signum)

    for sig in FORWARDED:
        signal.signal(sig, forward)

    if parent and parent.isdigit():

        def watch() -> None:
            wait_until_gone(int(parent), parent_ticks)
            if child.poll() is None:
                print(
                    f"distbench rankguard: rank {rank}: the distbench process {parent} is gone; killing the worker",
                    file=sys.stderr,
                    flush=True,
                )
                child.kill()

        threading.Thread(target=watch, name="distbench-parent-watch", daemon=True).start()

    returncode = child.wait()
    if rank_dir:
        try:
            write_exit(rank_dir, rank, child.pid, returncode, started, net_delta(net_before, net_bytes()), cores)
        except OSError as exc:  # a full disk must not change the rank's exit status
            print(f"distbench rankguard: could not record rank {rank}'s exit: {exc}", file=sys.stderr)
    # A rank killed by signal S exits 128+S, as a shell would report it to the launcher.
    return 128 - returncode if returncode < 0 else returncode


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
