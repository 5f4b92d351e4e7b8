"""A generated Kubernetes job's pods as local processes, run as the kubelet runs their commands: `$(VAR)`
filled from the container's environment (the operator's PET_* variables, the downward API's names), the
results volume at a local folder, and the image's Python (and its venv's tools) as this interpreter's.

Each pod runs under a small parent that notes the pod's main process id (`<pod>.pid`) and, when it ends,
its exit status (`<pod>.rc`); its output goes to `<pod>.out`. SIGTERM is sent to the main process only,
as the kubelet signals a container's first process."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

REF = re.compile(r"\$\(([A-Za-z_][A-Za-z0-9_]*)\)|\$\$")
IMAGE_PYTHON = "/opt/distbench/venv/bin/python"
RESULTS = "/results"
_PARENT = (
    "import subprocess, sys\n"
    "p = subprocess.Popen(sys.argv[3:])\n"
    "open(sys.argv[2] + '.tmp', 'w').write(str(p.pid))\n"
    "import os; os.replace(sys.argv[2] + '.tmp', sys.argv[2])\n"
    "rc = p.wait()\n"
    "open(sys.argv[1] + '.tmp', 'w').write(str(rc)); os.replace(sys.argv[1] + '.tmp', sys.argv[1])\n"
)


def expand(word: str, env: dict) -> str:
    return REF.sub(lambda m: "$" if m.group(0) == "$$" else env.get(m.group(1), m.group(0)), word)


def local_argv(command: list[str], env: dict, volume: Path) -> list[str]:
    bindir, here = os.path.dirname(IMAGE_PYTHON) + "/", os.path.dirname(sys.executable)
    out = []
    for word in command:
        word = expand(str(word), env)
        if word == IMAGE_PYTHON:
            word = sys.executable
        elif word.startswith(bindir):
            word = os.path.join(here, word[len(bindir) :])
        out.append(word.replace(RESULTS + "/", f"{volume}/"))
    return out


def pod_env(items: list[dict], pod: str, node: str, extra: dict) -> dict:
    """The container's environment: its literal values, the downward API's pod and node names, `extra`."""
    env = dict(os.environ)
    fields = {"metadata.name": pod, "metadata.namespace": "default", "spec.nodeName": node}
    for item in items:
        if "value" in item:
            env[item["name"]] = expand(item["value"], env)
        else:
            env[item["name"]] = fields[item["valueFrom"]["fieldRef"]["fieldPath"]]
    env.update(extra)
    return env


def start_pod(state: Path, pod: str, argv: list[str], env: dict) -> None:
    with open(state / f"{pod}.out", "wb") as out:
        subprocess.Popen(
            [sys.executable, "-c", _PARENT, str(state / f"{pod}.rc"), str(state / f"{pod}.pid"), *argv],
            stdout=out,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,
        )


def main_pid(state: Path, pod: str, wait_s: float = 30.0) -> int:
    path, deadline = state / f"{pod}.pid", time.monotonic() + wait_s
    while not path.exists():
        if time.monotonic() > deadline:
            raise TimeoutError(f"pod {pod} never started")
        time.sleep(0.05)
    return int(path.read_text())


def exit_status(state: Path, pod: str) -> int | None:
    try:
        return int((state / f"{pod}.rc").read_text())
    except (OSError, ValueError):
        return None


def terminate(state: Path, pod: str) -> None:
    """What the kubelet does to a pod being deleted: SIGTERM to its main process (once)."""
    marker = state / f"{pod}.terminated"
    if exit_status(state, pod) is None and not marker.exists():
        marker.write_text("SIGTERM")
        try:
            os.kill(main_pid(state, pod), signal.SIGTERM)
        except ProcessLookupError:
            pass


def wait_pods(state: Path, pods: list[str], timeout_s: float) -> dict:
    deadline = time.monotonic() + timeout_s
    while any(exit_status(state, p) is None for p in pods) and time.monotonic() < deadline:
        time.sleep(0.2)
    return {p: exit_status(state, p) for p in pods}


def torch_pods(job: dict, port: int) -> list[tuple[str, str, dict, dict]]:
    """A torch TrainJob's or PyTorchJob's pods: (pod name, node name, the operator's variables, the
    container: its command and env) per node rank, node rank 0 first."""
    name = job["metadata"]["name"]
    if job["kind"] == "TrainJob":
        nodes, trainer = job["spec"]["trainer"]["numNodes"], job["spec"]["trainer"]
        containers = [(f"{name}-node-0-{i}", trainer) for i in range(nodes)]
        prefix = "PET_"
    else:  # PyTorchJob: a Master, then the Workers
        specs = job["spec"]["pytorchReplicaSpecs"]
        containers = [(f"{name}-master-0", specs["Master"]["template"]["spec"]["containers"][0])]
        workers = specs.get("Worker", {"replicas": 0})
        containers += [
            (f"{name}-worker-{i}", workers["template"]["spec"]["containers"][0]) for i in range(workers["replicas"])
        ]
        nodes, prefix = len(containers), ""
    pods = []
    for i, (pod, container) in enumerate(containers):
        extra = {
            "PET_NODE_RANK": str(i),
            "PET_NNODES": str(nodes),
            f"{prefix}MASTER_ADDR": "127.0.0.1",
            f"{prefix}MASTER_PORT": str(port),
            "JOB_COMPLETION_INDEX": str(i),
        }
        pods.append((pod, f"kind-worker-{i}", extra, container))
    return pods


def record_of(volume: Path, sweep: str, job: str) -> dict:
    return json.loads((volume / sweep / f"{job}.json").read_text())
