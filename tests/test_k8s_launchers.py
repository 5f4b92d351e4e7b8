"""The launchers' Kubernetes contract (distbench.run.launcher.Launcher.k8s_job / pod_command): distbench k8s
asks each point's launcher which job its pods run in and what they run, and refuses, in one line, a launcher
that does not say."""

from __future__ import annotations

import sys
import typing

from distbench.cli import main
from distbench.k8s.manifests import JobPods
from distbench.k8s.settings import K8sSettings
from distbench.run.commandline import PodJob, build_env
from distbench.run.launcher import Launcher
from distbench.run.launchers import HOROVODRUN, LAUNCHERS, TORCHRUN
from distbench.run.plan import SweepOptions
from distbench.slurm.plan import plan_sweep


class Bare(Launcher):
    """A new launcher that starts its ranks locally and says nothing about Kubernetes."""

    def local(self, strategy, cfg, config, out, *, python=sys.executable, tool=None, base_env=None):
        return self.worker(strategy, config, out, python), build_env(cfg, base_env)


def _cli(capsys, args):
    code = main(args)
    out = capsys.readouterr()
    return code, out.out, out.err


def test_a_launcher_without_k8s_job_is_refused_in_one_line(capsys, tmp_path, monkeypatch):
    monkeypatch.setitem(LAUNCHERS, "torchrun", Bare("bare", spans_nodes=True))
    out_dir = tmp_path / "k8s"
    args = ["k8s", "--out", str(out_dir), "--device", "cpu", "--strategy", "ddp", "--nodes", "2", "--gpus", "4"]
    code, _, err = _cli(capsys, args)
    assert code == 2
    assert (
        "no points to run on Kubernetes: no job for ddp-g4-n2: its launcher bare over several nodes has no "
        "Kubernetes job here" in err
    )
    assert len(err.strip().splitlines()) == 1
    assert not out_dir.exists()


def test_every_launcher_names_a_known_job_or_none():
    jobs = set(typing.get_args(PodJob))
    table = {name: (launcher.k8s_job(1), launcher.k8s_job(2)) for name, launcher in LAUNCHERS.items()}
    for name, (one, several) in table.items():
        assert one in jobs | {None} and several in jobs | {None}, name
    assert table["horovodrun"] == ("torch", "mpi") and table["torchrun"] == ("torch", "torch")
    assert table["tf-multiworker"][1] is None and Bare("bare").k8s_job(1) is None


class Asked(JobPods):
    """JobPods that records what a pod command asked for."""

    asked: list

    def hosts(self):
        self.asked.append("hosts")
        return super().hosts()

    def network_interface(self):
        self.asked.append("network_interface")
        return super().network_interface()


def test_a_pod_command_reads_only_what_its_job_needs():
    """A torch job never reads horovodrun's --network-interface, so an NCCL exclusion list (which horovodrun
    refuses) does not stop a ddp point; a Horovod point over nodes reads the pods' names and the interface."""
    settings = K8sSettings(nccl_env=(("NCCL_SOCKET_IFNAME", "^lo"),))
    opts = SweepOptions(gpus="4", strategies=("ddp",), device="cpu", add_baselines=False)
    (point,) = plan_sweep(opts, [2]).points
    pods = Asked(settings, "job", 2)
    object.__setattr__(pods, "asked", [])
    argv = TORCHRUN.pod_command(point.strategy, point.config, "c.json", "r.json", pods=pods, python="/py")
    assert pods.asked == [] and "--node_rank" in argv and "$(PET_NODE_RANK)" in argv
    pods = Asked(K8sSettings(nccl_env=(("NCCL_SOCKET_IFNAME", "eth1"),)), "job", 2)
    object.__setattr__(pods, "asked", [])
    argv = HOROVODRUN.pod_command(point.strategy, point.config, "c.json", "r.json", pods=pods, python="/py")
    assert pods.asked == ["hosts", "network_interface"]
    assert argv[argv.index("--network-interface") + 1] == "eth1"
    assert argv[argv.index("--ssh-identity-file") + 1] == pods.ssh_identity
