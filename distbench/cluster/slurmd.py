"""Slurm across the one-machine cluster's nodes: slurmctld on node1 and one slurmd per node, each inside its
node's namespaces, with their own slurm.conf, state, spool, pid and log files under `<state dir>/slurm`
(never /etc/slurm). `sbatch --nodes=2` then gets two real nodes: node1 and node2, each with its hostname,
address and shaped link. Clients reach slurmctld only from inside a node (`nsrun` sets SLURM_CONF there).

Authentication is auth/none (no munged): the daemons listen only on the nodes' addresses, which exist only
inside namespaces that only root can enter. slurmd (22.05) will not start without the cgroup hierarchies
under /sys/fs/cgroup, which `ip netns exec` hides by mounting a fresh sysfs: each slurmd first mounts them
again in its own mount namespace (the same hierarchies as the machine's; proctrack/linuxproc and task/none
create no cgroup in them)."""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from pathlib import Path

from distbench.cluster.spec import stop_pids
from distbench.core.errors import DistbenchError

DAEMONS = ("slurmctld", "slurmd", "sbatch", "srun", "sinfo")
CGROUP_V1 = ("cpu", "cpuacct", "cpuset", "memory", "devices", "freezer", "blkio", "pids")
PARTITION = "dbc"
WAIT_S = 60.0


def slurm_dir(state_dir: str | Path) -> Path:
    return Path(state_dir) / "slurm"


def unavailable() -> str | None:
    """Why Slurm cannot run on the nodes (None: it can), after trying to install Debian's slurm-wlm."""
    if all(shutil.which(t) for t in DAEMONS):
        return None
    if shutil.which("apt-get") is None:
        return "Slurm on the nodes needs slurm-wlm (no apt-get here to install it)"
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    argv = ["apt-get", "install", "-y", "-qq", "--no-install-recommends", "slurm-wlm"]
    done = subprocess.run(argv, capture_output=True, text=True, env=env, stdin=subprocess.DEVNULL)
    if done.returncode != 0 or not all(shutil.which(t) for t in DAEMONS):
        tail = (done.stderr or done.stdout).strip().splitlines()[-1:] or ["no output"]
        return f"Slurm on the nodes needs slurm-wlm, and `apt-get install slurm-wlm` failed: {tail[0]}"
    return None


def slurm_conf(nodes: list[dict], d: Path, cpus: int) -> str:
    k = len(nodes)
    head = nodes[0]
    return "\n".join(
        [
            "# written by distbench.cluster (the one-machine cluster's Slurm)",
            "ClusterName=distbench-nodes",
            f"SlurmctldHost={head['hostname']}({head['address']})",
            "SlurmUser=root",
            "AuthType=auth/none",
            "CredType=cred/none",
            "MpiDefault=none",
            "ProctrackType=proctrack/linuxproc",
            "TaskPlugin=task/none",
            "SelectType=select/cons_tres",
            "SelectTypeParameters=CR_Core",
            "JobAcctGatherType=jobacct_gather/none",
            "AccountingStorageType=accounting_storage/none",
            "JobCompType=jobcomp/none",
            "ReturnToService=2",
            "SlurmdParameters=config_overrides",
            f"StateSaveLocation={d / 'ctld'}",
            f"SlurmdSpoolDir={d / 'spool'}/%n",
            f"SlurmctldPidFile={d / 'slurmctld.pid'}",
            f"SlurmdPidFile={d}/slurmd-%n.pid",
            f"SlurmctldLogFile={d / 'slurmctld.log'}",
            f"SlurmdLogFile={d}/slurmd-%n.log",
            "SlurmctldTimeout=30",
            "SlurmdTimeout=60",
            "KillWait=10",
            # the nodes share this machine's cores: each gets its share
            f"NodeName=node[1-{k}] NodeAddr={head['address'].rsplit('.', 1)[0]}.[1-{k}] CPUs={cpus} State=UNKNOWN",
            f"PartitionName={PARTITION} Nodes=node[1-{k}] Default=YES MaxTime=INFINITE State=UP",
            "",
        ]
    )


def _cgroup_mounts() -> str:
    """Shell text that mounts the machine's cgroup hierarchies under /sys/fs/cgroup (v1 and the v2 'unified'
    one where the machine has them, else cgroup2 alone)."""
    if not Path("/sys/fs/cgroup/memory").is_dir():
        return "mount -t cgroup2 none /sys/fs/cgroup"
    steps = ["mount -t tmpfs -o mode=755 tmpfs /sys/fs/cgroup"]
    for c in CGROUP_V1:
        if Path(f"/sys/fs/cgroup/{c}").is_dir():
            steps.append(f"mkdir -p /sys/fs/cgroup/{c} && mount -t cgroup -o {c} cgroup /sys/fs/cgroup/{c}")
    if Path("/sys/fs/cgroup/systemd").is_dir():
        steps.append(
            "mkdir -p /sys/fs/cgroup/systemd && mount -t cgroup -o none,name=systemd cgroup /sys/fs/cgroup/systemd"
        )
    if Path("/sys/fs/cgroup/unified").is_dir():
        steps.append("mkdir -p /sys/fs/cgroup/unified && mount -t cgroup2 none /sys/fs/cgroup/unified")
    return " && ".join(steps)


def _run(argv: list[str], env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(argv, capture_output=True, text=True, stdin=subprocess.DEVNULL, env=env)


def _log_tail(path: Path) -> str:
    lines = [x for x in (path.read_text().splitlines() if path.exists() else []) if "error" in x]
    return lines[-1] if lines else f"see {path}"


def start(nodes: list[dict], prefix, state_dir: str | Path) -> dict:
    """Start slurmctld on node 1 and a slurmd on every node (`prefix(i)`: the argv prefix that runs a
    command on node i, 0-based); wait until every node is idle. Returns the state file's `slurm` entry."""
    d = slurm_dir(state_dir)
    for sub in ("ctld", "spool"):
        (d / sub).mkdir(parents=True, exist_ok=True)
    conf = d / "slurm.conf"
    conf.write_text(slurm_conf(nodes, d, max(1, (os.cpu_count() or 1) // len(nodes))))
    env = dict(os.environ, SLURM_CONF=str(conf))
    entry: dict = {"conf": str(conf), "partition": PARTITION, "pids": {}}
    done = _run([*prefix(0), "slurmctld", "-f", str(conf)], env)
    if done.returncode != 0:
        raise DistbenchError(f"slurmctld did not start on node1: {_log_tail(d / 'slurmctld.log')}")
    entry["pids"]["slurmctld"] = _wait_pid(d / "slurmctld.pid", d / "slurmctld.log")
    for i, node in enumerate(nodes):
        name = node["hostname"]
        script = f"{_cgroup_mounts()} && exec slurmd -f {conf}"
        done = _run([*prefix(i), "sh", "-c", script], env)
        if done.returncode != 0:
            why = done.stderr.strip() or _log_tail(d / f"slurmd-{name}.log")
            raise DistbenchError(f"slurmd did not start on {name}: {why}")
        entry["pids"][name] = _wait_pid(d / f"slurmd-{name}.pid", d / f"slurmd-{name}.log")
    deadline = time.monotonic() + WAIT_S
    states: list[str] = []
    while time.monotonic() < deadline:
        out = _run([*prefix(0), "sinfo", "-h", "-N", "-o", "%N %T"], env).stdout.split()
        states = out[1::2]
        if len(states) == len(nodes) and all(s.rstrip("*~#") == "idle" for s in states):
            return entry
        time.sleep(0.5)
    raise DistbenchError(f"the nodes' slurmd are not idle after {WAIT_S:g}s (sinfo: {' '.join(states) or 'nothing'})")


def _wait_pid(pidfile: Path, log: Path, timeout_s: float = 15.0) -> int:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            return int(pidfile.read_text().split()[0])
        except (OSError, ValueError, IndexError):
            time.sleep(0.1)
    raise DistbenchError(f"no pid file {pidfile} after {timeout_s:g}s: {_log_tail(log)}")


def alive(pid: int, conf: str | None = None) -> bool:
    """pid is a running slurmctld or slurmd (started with `conf`, when given)."""
    try:
        comm = Path(f"/proc/{pid}/comm").read_text().strip()
        cmd = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False
    return comm in ("slurmctld", "slurmd") and (conf is None or conf.encode() in cmd)


def stop(entry: dict | None, state_dir: str | Path, grace_s: float = 10.0) -> list[str]:
    """Stop every daemon `start` recorded (TERM, then KILL; only those pids, checked to be ours) and remove
    the slurm directory. Returns what it removed."""
    d = slurm_dir(state_dir)
    conf = str(d / "slurm.conf")
    pids = {name: pid for name, pid in ((entry or {}).get("pids") or {}).items() if alive(pid, conf)}
    stop_pids(pids.values(), alive, grace_s)
    removed = [f"{'slurmctld' if n == 'slurmctld' else 'slurmd on ' + n} (pid {p})" for n, p in pids.items()]
    if d.exists():
        shutil.rmtree(d, ignore_errors=True)
        removed.append(f"slurm directory {d}")
    return removed


def running(state_dir: str | Path) -> list[int]:
    """Every slurmctld or slurmd on this machine started with the cluster's slurm.conf."""
    conf = str(slurm_dir(state_dir) / "slurm.conf")
    return [int(p.name) for p in Path("/proc").iterdir() if p.name.isdigit() and alive(int(p.name), conf)]


def faults(state) -> list[str]:
    """A node whose slurmd (or node1's slurmctld) is gone, one phrase each."""
    entry = getattr(state, "slurm", None) or {}
    return [
        f"{'node1' if name == 'slurmctld' else name}'s {'slurmctld' if name == 'slurmctld' else 'slurmd'} "
        f"(pid {pid}) is not running"
        for name, pid in (entry.get("pids") or {}).items()
        if not alive(pid, entry.get("conf"))
    ]
