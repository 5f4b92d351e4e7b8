"""A stand-in kubectl whose TrainJobs run: `create` starts each pod's command as a local process
(tests/k8s_pods.py), and `get` reproduces what the operators at their release tags do when a pod fails:
the Job fails at backoffLimit 0 and terminates its other running pods (SIGTERM); JobSet, at maxRestarts 0,
fails and deletes the remaining jobs (their pods, and with them their logs); the TrainJob takes the
JobSet's Failed condition. A reader Pod (`kubectl create -f` of a kind Pod) runs too.

Used as `kubectl` on PATH: `python -m tests.fake_kubectl_pods ARGS`. State in $FAKE_KUBECTL_STATE, the
results volume at $FAKE_KUBECTL_VOLUME; $FAKE_KUBECTL_LAUNCH, a JSON object {"<job>/<node rank>": argv},
replaces those pods' launch commands (what follows `--` in the wrapper's argv); other pods get a stand-in that writes an
'ok' record (node rank 0) or does nothing."""

from __future__ import annotations

import json
import os
import socket
import sys
from pathlib import Path

import yaml

from tests import k8s_pods

WRITER = (
    "import json,sys; from distbench.results.record import base_record, write_record; "
    "cfg=json.load(open(sys.argv[1])); s=cfg['strategy']; "
    "r=base_record(cfg, strategy=s, framework='torch', status='ok'); "
    "r.update(throughput=100.0, step_times_s=[0.1, 0.1, 0.1]); write_record(sys.argv[2], r)"
)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def option(argv: list[str], name: str) -> str:
    return argv[argv.index(name) + 1]


def launch_for(job: str, rank: int, wrapper: list[str], volume: Path) -> list[str]:
    override = json.loads(os.environ.get("FAKE_KUBECTL_LAUNCH", "{}")).get(f"{job}/{rank}")
    if override:
        return override
    if rank != 0:
        return [sys.executable, "-c", "pass"]
    work = Path(option(wrapper, "--records")) / "work" / job
    return [sys.executable, "-c", WRITER, str(work / "config.json"), str(work / "result.json")]


def create(state: Path, volume: Path, path: str) -> None:
    names = []
    for doc in yaml.safe_load_all(open(path)):
        name, kind = doc["metadata"]["name"], doc["kind"]
        if kind == "Pod":
            container = doc["spec"]["containers"][0]
            env = k8s_pods.pod_env(container.get("env", []), name, "kind-worker-9", {})
            k8s_pods.start_pod(state, name, k8s_pods.local_argv(container["command"], env, volume), env)
            names.append(f"pod/{name}")
            continue
        group = "trainer.kubeflow.org" if kind in ("TrainJob", "TrainingRuntime") else "kubeflow.org"
        names.append(f"{kind.lower()}.{group}/{name}")
        if kind not in ("TrainJob", "PyTorchJob"):
            continue
        pods = k8s_pods.torch_pods(doc, free_port())
        for rank, (pod, node, extra, container) in enumerate(pods):
            env = k8s_pods.pod_env(container["env"], pod, node, extra)
            wrapper = k8s_pods.local_argv(container["command"], env, volume)
            cut = wrapper.index("--")
            argv = [*wrapper[: cut + 1], *launch_for(name, rank, wrapper, volume)]
            k8s_pods.start_pod(state, pod, argv, env)
        (state / f"{name}.pods").write_text("\n".join(p[0] for p in pods))
        (state / f"{name}.kind").write_text(kind)
    print("\n".join(names))


def job_pods(state: Path, name: str) -> list[str]:
    return (state / f"{name}.pods").read_text().split()


def get(state: Path, ref: str) -> None:
    kind, name = ref.split("/", 1)
    if kind == "pod":
        rc = k8s_pods.exit_status(state, name)
        print("Running" if rc is None else "Succeeded" if rc == 0 else "Failed")
        return
    if not kind.startswith(("trainjob", "pytorchjob")):
        print("")
        return
    pods = job_pods(state, name)
    codes = [k8s_pods.exit_status(state, p) for p in pods]
    if any(rc not in (None, 0) for rc in codes) or (state / f"{name}.failed").exists():
        # Trainer: at backoffLimit 0 the Job fails and terminates its running pods, and JobSet (maxRestarts 0)
        # fails and deletes its jobs; PyTorchJob: a failed replica (restartPolicy Never) fails the job and
        # cleanPodPolicy Running deletes its running pods
        (state / f"{name}.failed").write_text("Failed")
        for pod in pods:
            k8s_pods.terminate(state, pod)
        print("Created Failed")
    elif all(rc == 0 for rc in codes):
        print("Created Complete")
    else:
        print("Created")


def logs(state: Path, args: list[str]) -> None:
    if args[0].startswith("pod/"):
        sys.stdout.write((state / f"{args[0][4:]}.out").read_text(errors="replace"))
        return
    point = option(args, "-l").split("distbench.io/point=")[1]
    for jobfile in sorted(state.glob("*.pods")):
        name = jobfile.name[: -len(".pods")]
        if not name.endswith("-" + point):
            continue
        failed, trainer = (state / f"{name}.failed").exists(), (state / f"{name}.kind").read_text() == "TrainJob"
        for pod in job_pods(state, name):
            if failed and (trainer or (state / f"{pod}.terminated").exists()):
                continue  # a deleted pod (JobSet deletes a failed one's jobs), and its log with it
            for line in (state / f"{pod}.out").read_text(errors="replace").splitlines():
                print(f"[pod/{pod}/node] {line}")


def main(argv: list[str]) -> int:
    state, volume = Path(os.environ["FAKE_KUBECTL_STATE"]), Path(os.environ["FAKE_KUBECTL_VOLUME"])
    args = argv[2:] if argv[:1] == ["-n"] else argv
    with open(state / "calls.log", "a") as fh:
        fh.write(json.dumps(args) + "\n")
    if args[0] == "create":
        create(state, volume, args[2])
    elif args[0] == "get":
        get(state, args[1])
    elif args[0] == "logs":
        logs(state, args[1:])
    elif args[0] != "delete":
        sys.stderr.write(f"error: unknown command {args[0]!r}\n")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
