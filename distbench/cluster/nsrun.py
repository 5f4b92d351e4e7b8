"""`python -m distbench.cluster.nsrun --nodes K -- CMD...`: the one-machine cluster's srun. It starts CMD once
on each of nodes 1..K (inside the node's network and UTS namespaces), with GLOO_SOCKET_IFNAME (and TP_ and
NCCL_) naming the node's NIC and DISTBENCH_NODE_RANK its index, waits for all, and as srun
--kill-on-bad-exit does, stops the others when one fails. Its exit status is the first failure's (128+S for
a signal), else 0. Every child dies with it (parent-death signal), so nothing outlives the launch."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time

from distbench.cluster import netns, spec

FORWARDED = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)
GRACE_S = 10.0


def node_env(state: spec.ClusterState, i: int, base: dict) -> dict:
    env = dict(base)
    for var in ("GLOO_SOCKET_IFNAME", "TP_SOCKET_IFNAME", "NCCL_SOCKET_IFNAME"):
        env.setdefault(var, state.nic)
    env["DISTBENCH_NODE_RANK"] = str(i)
    env["DISTBENCH_NODE_HOST"] = state.node(i)["hostname"]
    if state.ssh:  # the cluster's ssh client (its key, the nodes' host keys) before any other
        env["PATH"] = os.pathsep.join([state.ssh["bin"], *filter(None, [env.get("PATH")])])
    if state.slurm:  # sbatch, srun, sinfo on a node talk to the nodes' slurmctld
        env["SLURM_CONF"] = state.slurm["conf"]
    return env


def commands(state: spec.ClusterState, k: int, argv: list[str], base: dict) -> list[tuple[list[str], dict]]:
    if k > len(state.nodes):
        raise ValueError(f"{k} nodes asked for, the cluster has {len(state.nodes)}")
    return [([*netns.node_prefix(state, i), *argv], node_env(state, i, base)) for i in range(k)]


def _die_with_parent() -> None:
    import ctypes

    ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


def main(args: list[str]) -> int:
    if len(args) < 4 or args[0] != "--nodes" or not args[1].isdigit() or args[2] != "--":
        print("usage: python -m distbench.cluster.nsrun --nodes K -- CMD [ARGS...]", file=sys.stderr)
        return 2
    state = netns.require_state()
    procs = [
        subprocess.Popen(argv, env=env, preexec_fn=_die_with_parent)
        for argv, env in commands(state, int(args[1]), args[3:], dict(os.environ))
    ]

    def forward(signum, _frame):
        for p in procs:
            with contextlib.suppress(ProcessLookupError):
                p.send_signal(signum)

    for sig in FORWARDED:
        signal.signal(sig, forward)
    codes: dict[int, int] = {}
    by_pid = {p.pid: i for i, p in enumerate(procs)}
    first_bad = None
    while len(codes) < len(procs) and first_bad is None:  # asleep in the kernel until a node's command ends
        try:
            pid, status = os.wait()
        except ChildProcessError:
            break
        if pid in by_pid:
            code = os.waitstatus_to_exitcode(status)
            codes[by_pid[pid]] = code
            procs[by_pid[pid]].returncode = code
            if code != 0:
                first_bad = code
                print(f"nsrun: node{by_pid[pid] + 1} exited with {code}: stopping the other nodes", file=sys.stderr)
                forward(signal.SIGTERM, None)
    deadline = time.monotonic() + GRACE_S
    for p in procs:
        try:
            p.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()
    first_bad = first_bad if first_bad is not None else next((p.returncode for p in procs if p.returncode), 0)
    return 128 - first_bad if first_bad < 0 else first_bad


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
