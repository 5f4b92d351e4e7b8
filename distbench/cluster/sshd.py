"""sshd on every node of the one-machine cluster, for the launchers that reach other hosts over ssh
(horovodrun). One sshd per node namespace, listening only on the node's address, with its own host key,
config, pid file and log under `<state dir>/ssh`; root logs in with a key the cluster creates (no password).
The cluster's ssh client is `<state dir>/ssh/bin/ssh`: /usr/bin/ssh with the cluster's config (that key, the
nodes' host keys as the only known hosts, keep-alives that notice a dead link), so nothing under ~/.ssh
is read or written. `nsrun` puts it first on PATH.

Every remote command runs under `sshwatch.py` (sshd's ForceCommand): it stops the command's whole process
group when its ssh session ends, so a launcher killed on the other node leaves no rank behind."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

from distbench.cluster.spec import stop_pids
from distbench.core.errors import DistbenchError

SSHD = "/usr/sbin/sshd"
SSH = "/usr/bin/ssh"
KEYGEN = "/usr/bin/ssh-keygen"
PRIVSEP_DIR = Path("/run/sshd")
"""sshd's privilege-separation directory (Debian's init script makes it; here `start` does when absent)."""
WATCH = Path(__file__).with_name("sshwatch.py")


def ssh_dir(state_dir: str | Path) -> Path:
    return Path(state_dir) / "ssh"


def unavailable() -> str | None:
    """Why sshd cannot run on the nodes (None: it can), after trying to install Debian's openssh-server."""
    if all(Path(p).exists() for p in (SSHD, SSH, KEYGEN)):
        return None
    if shutil.which("apt-get") is None:
        return "sshd on the nodes needs openssh-server (no apt-get here to install it)"
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    argv = ["apt-get", "install", "-y", "-qq", "--no-install-recommends", "openssh-server"]
    done = subprocess.run(argv, capture_output=True, text=True, env=env, stdin=subprocess.DEVNULL)
    if done.returncode != 0 or not Path(SSHD).exists():
        tail = (done.stderr or done.stdout).strip().splitlines()[-1:] or ["no output"]
        return f"sshd on the nodes needs openssh-server, and `apt-get install openssh-server` failed: {tail[0]}"
    return None


def _run(argv: list[str]) -> None:
    done = subprocess.run(argv, capture_output=True, text=True, stdin=subprocess.DEVNULL)
    if done.returncode != 0:
        raise DistbenchError(f"`{' '.join(argv)}` failed: {(done.stderr or done.stdout).strip()}")


def sshd_config(node: dict, d: Path) -> str:
    name = node["hostname"]
    return "\n".join(
        [
            f"ListenAddress {node['address']}",
            "Port 22",
            f"HostKey {d / f'host_{name}'}",
            f"PidFile {d / f'{name}.pid'}",
            f"AuthorizedKeysFile {d / 'authorized_keys'}",
            "PermitRootLogin prohibit-password",
            "PubkeyAuthentication yes",
            "PasswordAuthentication no",
            "KbdInteractiveAuthentication no",
            "UsePAM no",
            "StrictModes no",
            "PrintMotd no",
            "X11Forwarding no",
            "MaxStartups 100",
            "MaxSessions 100",
            # a session whose client is gone (link cut, launcher killed) ends within 15 s
            "ClientAliveInterval 5",
            "ClientAliveCountMax 3",
            f"ForceCommand {sys.executable} {WATCH}",
            "",
        ]
    )


def ssh_config(d: Path) -> str:
    return "\n".join(
        [
            "Host *",
            "  User root",
            f"  IdentityFile {d / 'id_ed25519'}",
            "  IdentitiesOnly yes",
            f"  UserKnownHostsFile {d / 'known_hosts'}",
            "  GlobalKnownHostsFile /dev/null",
            "  StrictHostKeyChecking yes",
            "  BatchMode yes",
            "  ConnectTimeout 10",
            "  ServerAliveInterval 5",
            "  ServerAliveCountMax 3",
            "  LogLevel ERROR",
            "",
        ]
    )


def start(nodes: list[dict], prefix, state_dir: str | Path) -> dict:
    """Start one sshd per node (`prefix(i)`: the argv prefix that runs a command on node i, 0-based).
    Returns the state file's `ssh` entry: the client's bin directory and every sshd's pid."""
    d = ssh_dir(state_dir)
    (d / "bin").mkdir(parents=True, exist_ok=True)
    os.chmod(d, 0o700)
    made_privsep = not PRIVSEP_DIR.exists()
    if made_privsep:
        PRIVSEP_DIR.mkdir(mode=0o755, parents=True)
    entry = {"bin": str(d / "bin"), "config": str(d / "ssh_config"), "pids": {}, "made_privsep_dir": made_privsep}
    _run([KEYGEN, "-q", "-t", "ed25519", "-N", "", "-C", "distbench-cluster", "-f", str(d / "id_ed25519")])
    (d / "authorized_keys").write_text((d / "id_ed25519.pub").read_text())
    known = []
    for node in nodes:
        key = d / f"host_{node['hostname']}"
        _run([KEYGEN, "-q", "-t", "ed25519", "-N", "", "-C", node["hostname"], "-f", str(key)])
        pub = " ".join(Path(f"{key}.pub").read_text().split()[:2])
        known.append(f"{node['hostname']},{node['address']} {pub}\n")
    (d / "known_hosts").write_text("".join(known))
    (d / "ssh_config").write_text(ssh_config(d))
    client = d / "bin" / "ssh"
    client.write_text(f'#!/bin/sh\nexec {SSH} -F {d / "ssh_config"} "$@"\n')
    client.chmod(0o755)
    for i, node in enumerate(nodes):
        name = node["hostname"]
        conf = d / f"sshd_{name}.conf"
        conf.write_text(sshd_config(node, d))
        _run([SSHD, "-t", "-f", str(conf)])
        # sshd forks into the background, staying in the node's namespaces
        _run([*prefix(i), SSHD, "-f", str(conf), "-E", str(d / f"sshd_{name}.log")])
        entry["pids"][name] = _wait_pid(d / f"{name}.pid", d / f"sshd_{name}.log")
    return entry


def _wait_pid(pidfile: Path, log: Path, timeout_s: float = 10.0) -> int:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            return int(pidfile.read_text().split()[0])
        except (OSError, ValueError, IndexError):
            time.sleep(0.1)
    text = log.read_text().strip().splitlines()[-1:] if log.exists() else []
    raise DistbenchError(f"sshd wrote no pid file {pidfile} in {timeout_s:g}s: {text[0] if text else 'no log'}")


def alive(pid: int, config: Path | None = None) -> bool:
    """pid is a running sshd (started with `config`, when given)."""
    try:  # sshd rewrites its command line ("sshd: /usr/sbin/sshd -f CONF ... [listener] ...")
        comm = Path(f"/proc/{pid}/comm").read_text().strip()
        cmd = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False
    return comm == "sshd" and (config is None or str(config).encode() in cmd)


def stop(entry: dict | None, state_dir: str | Path, grace_s: float = 3.0) -> list[str]:
    """Stop every sshd `start` recorded (TERM, then KILL; only those pids, checked to be our sshd) and remove
    the ssh directory. Returns what it removed."""
    removed = []
    d = ssh_dir(state_dir)
    pids = {name: pid for name, pid in ((entry or {}).get("pids") or {}).items() if alive(pid, d / f"sshd_{name}.conf")}
    stop_pids(pids.values(), alive, grace_s)
    removed += [f"sshd on {name} (pid {pid})" for name, pid in pids.items()]
    if d.exists():
        shutil.rmtree(d, ignore_errors=True)
        removed.append(f"ssh directory {d}")
    if (entry or {}).get("made_privsep_dir") and PRIVSEP_DIR.exists() and not any(PRIVSEP_DIR.iterdir()):
        PRIVSEP_DIR.rmdir()
    return removed


def running(state_dir: str | Path) -> list[int]:
    """Every sshd on this machine started with one of the cluster's configs (empty after `down`)."""
    marker = str(ssh_dir(state_dir) / "sshd_").encode()
    out = []
    for p in Path("/proc").iterdir():
        if p.name.isdigit():
            try:
                cmd = (p / "cmdline").read_bytes()
            except OSError:
                continue
            if marker in cmd and alive(int(p.name)):
                out.append(int(p.name))
    return out


def faults(state) -> list[str]:
    """A node whose sshd is gone, one phrase per node (empty when every recorded sshd runs)."""
    entry = getattr(state, "ssh", None) or {}
    d = ssh_dir(state.state_dir)
    return [
        f"{name}'s sshd (pid {pid}) is not running"
        for name, pid in (entry.get("pids") or {}).items()
        if not alive(pid, d / f"sshd_{name}.conf")
    ]
