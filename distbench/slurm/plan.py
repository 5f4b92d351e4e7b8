"""Which Slurm jobs a sweep is (points and their resource shapes), and the checks on every name that
ends up in a script."""

from __future__ import annotations

import dataclasses
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path

from distbench.core.config import PointConfig
from distbench.core.errors import BadInput
from distbench.core.strategies import Strategy, get_strategy
from distbench.kinds.measure import NOISY_CV
from distbench.run.commandline import devices_per_node
from distbench.run.launcher import Launcher
from distbench.run.launchers import cluster_launcher, launcher_for
from distbench.run.plan import SweepOptions, make_plan

NAME_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")
TIME_PATTERN = re.compile(r"^(\d+-)?\d+(:\d{1,2}){0,2}$")
CONSTRAINT_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.&|,:*()\[\]!-]*$")


DEVICE_WHY = (
    "cuda (default): the jobs ask for GPUs; cpu: each 'GPU' is a CPU worker process. No `auto` (scale's "
    "default): auto looks at the GPUs of the machine it runs on, and a cluster sweep describes the compute nodes"
)
"""Why the cluster commands declare --device themselves (cuda or cpu, default cuda) instead of scale's."""
GPUS_WHY = "Default 1,2,4,8 (scale's is 1,2,4): up to one 8-GPU node, the common cluster node."
NOT_IN_JOBS = {
    "data": "--data disk reads a dataset that `distbench scale` builds in a cache on the machine it runs on "
    "before the sweep; a cluster job has no step that builds it on the compute nodes",
    "loader_workers": "an input-pipeline setting of --data disk (not taken, see --data)",
    "prefetch": "an input-pipeline setting of --data disk (not taken, see --data)",
    "pin_memory": "an input-pipeline setting of --data disk (not taken, see --data)",
    "telemetry_interval": "the telemetry sampler runs inside distbench's own launcher, beside the process tree it "
    "starts on one machine; a cluster job's ranks are started by srun / torchrun / horovodrun / the operator on "
    "the compute nodes, so its records carry no telemetry",
    "profile": "the profiler's trace files go beside the local results store, which a cluster job does not have",
}
"""The Workload and Measurement knobs of `distbench scale` that `distbench slurm` and `distbench k8s` do not
take (Knob.jobs is False), and why; every other one they take, with scale's meaning and default."""


def jobs_epilog() -> str:
    """The --help epilog of the cluster commands: the scale options they do not take, and why."""
    from distbench.core.workload import flag

    lines = [f"{flag(name)}: {why}." for name, why in NOT_IN_JOBS.items()]
    return (
        "Every other Workload and Measurement option of `distbench scale` is taken here with scale's meaning "
        "and default, except --device (see its help) and --gpus (1,2,4,8). With --comm the jobs measure the "
        "standalone all-reduce but not the no-sync variant, so their records carry no exposed communication "
        "or overlap.\n\n\b\nOptions of `distbench scale` not taken here:\n" + "\n".join(f"  {line}" for line in lines)
    )


def check_name(option: str, value: str) -> str:
    if not isinstance(value, str) or not NAME_PATTERN.fullmatch(value):
        raise BadInput(
            f"{option} {value!r} is not a valid name: use letters, digits, '_', '.' and '-', "
            "starting with a letter or digit"
        )
    return value


def check_time(value: str) -> str:
    if not TIME_PATTERN.fullmatch(value or ""):
        raise BadInput(f"--time {value!r} is not a Slurm time limit: use MINUTES, HH:MM:SS or D-HH:MM:SS")
    return value


def time_seconds(value: str) -> int:
    """Slurm's time formats -> seconds (MM, MM:SS, HH:MM:SS, D-HH, D-HH:MM, D-HH:MM:SS)."""
    days, _, rest = value.rpartition("-")
    parts = [int(p) for p in rest.split(":")]
    if days:
        h, m, s = (parts + [0, 0])[:3]
    else:
        h, m, s = ([0, parts[0], 0], [0, *parts], parts)[len(parts) - 1]
    return ((int(days or 0) * 24 + h) * 60 + m) * 60 + s


def check_constraint(value: str) -> str:
    if not CONSTRAINT_PATTERN.fullmatch(value):
        raise BadInput(
            f"--constraint {value!r} is not a valid feature expression: use feature names with "
            "&, |, [ ], *, ( ) and digits only"
        )
    return value


@dataclass(frozen=True)
class SlurmPoint:
    index: int
    strategy: Strategy
    config: PointConfig
    repeats: int = 1
    """--repeats: the job launches the point this many times, one after the other, and combines them as
    `distbench scale` does (measure.combine_repeats: a run-to-run CI over R > 1)."""
    noisy_cv: float = NOISY_CV

    @property
    def nodes(self) -> int:
        return self.config.nodes

    @property
    def key(self) -> str:
        return f"{self.strategy.name}-g{self.config.world_size}-n{self.nodes}"

    @property
    def launcher(self) -> Launcher:
        return launcher_for(self.strategy, self.nodes)

    @property
    def per_node(self) -> int:
        return devices_per_node(self.config)

    @property
    def shape(self) -> tuple[int, int, int]:
        """What the job asks Slurm for: (nodes, GPUs per node, tasks per node)."""
        gpus = self.per_node if self.config.device == "cuda" else 0
        return (self.nodes, gpus, self.launcher.tasks_per_node(self.config))


@dataclass
class SlurmPlan:
    points: list[SlurmPoint]
    notes: list[str] = field(default_factory=list)

    def shapes(self) -> dict[tuple[int, int, int], list[SlurmPoint]]:
        groups: dict = {}
        for p in self.points:
            groups.setdefault(p.shape, []).append(p)
        return groups


def plan_sweep(opts: SweepOptions, nodes: list[int], gpus_per_node: int | None = None) -> SlurmPlan:
    """Every (strategy, N, nodes) with N divisible by nodes and at most `gpus_per_node` devices per node,
    plus the baselines; the workload planned as `distbench scale` plans it, for the compute nodes' device."""
    check_name("--model", opts.model)
    if opts.device not in ("cuda", "cpu"):
        raise BadInput(f"--device must be cuda or cpu for Slurm jobs, got {opts.device!r}")
    if gpus_per_node is not None and gpus_per_node < 1:
        raise BadInput(f"--gpus-per-node must be >= 1, got {gpus_per_node}")
    plan = make_plan(opts, visible_gpus=max(opts.gpus) if opts.device == "cuda" else 0, runs_here=False)
    notes = [n for n in plan.notes if n != plan.device.note]
    notes.insert(
        0,
        "each job runs on CUDA GPUs of the compute nodes"
        if opts.device == "cuda"
        else "CPU workers: each 'GPU' is a CPU worker process on the compute nodes (no GPUs requested)",
    )
    points: list[SlurmPoint] = []
    for planned in plan.points:
        s, cfg = planned.strategy, planned.config
        if cfg.baseline_threads is not None:  # its thread count follows this machine's cores, not the nodes'
            continue
        if planned.skip_reason:
            notes.append(f"no job for {s.name} N={cfg.world_size}: {planned.skip_reason}")
            continue
        n = cfg.world_size
        for k in [1] if s.baseline else nodes:
            fits = gpus_per_node is None or n // k <= gpus_per_node
            if n % k == 0 and fits and (k == 1 or cluster_launcher(s) is not None):
                cfg_k = dataclasses.replace(cfg, nodes=k)
                points.append(SlurmPoint(len(points), s, cfg_k, repeats=opts.repeats, noisy_cv=opts.noisy_cv))
    spanning = {p.strategy.name for p in points if p.nodes > 1}
    single = sorted({p.strategy.name for p in points if not p.strategy.baseline} - spanning)
    if max(nodes) > 1 and single:
        notes.append(
            f"{', '.join(single)}: single-node only here (one process, or no N divisible by the "
            "node counts within --gpus-per-node)"
        )
    if not any(not p.strategy.baseline for p in points):
        raise BadInput(
            "no points to run: every N must be divisible by a node count, with at most --gpus-per-node devices per node"
        )
    return SlurmPlan(points=points, notes=notes)


def plan_point(*, strategies: tuple[str, ...], gpus: int, nodes: int, **workload) -> SlurmPoint:
    """The one point an example script asks for, planned as `distbench slurm` plans it."""
    names = [check_name("--strategy", n.strip()) for value in strategies for n in value.split(",") if n.strip()]
    if len(names) != 1:
        raise BadInput(f"--strategy: an example job runs one strategy, got {', '.join(names) or 'none'}")
    strategy = names[0]
    launcher_for(get_strategy(strategy), nodes)
    plan = plan_sweep(SweepOptions(gpus=[gpus], strategies=[strategy], add_baselines=False, **workload), [nodes])
    found = [p for p in plan.points if p.strategy.name == strategy and p.nodes == nodes]
    if not found:
        why = "; ".join(n for n in plan.notes if strategy in n) or "not a valid combination"
        raise BadInput(f"no {strategy} point with {gpus} device(s) on {nodes} node(s): {why}")
    return found[0]


@dataclass(frozen=True, kw_only=True)
class SlurmSettings:
    """Cluster-side knobs of a generated sweep (the workload is in each point's PointConfig)."""

    script: Path
    records_dir: Path
    """The results folder on shared storage (records, logs/, work/)."""
    python: str = sys.executable
    partition: str | None = None
    account: str | None = None
    constraint: str | None = None
    time: str = "01:00:00"
    exclusive: bool = True
    port: int = 29500
    point_timeout_s: float = 900.0
    job_name: str = "distbench"
    command: str = ""
    """The distbench command line that generated the script."""

    def __post_init__(self):
        for option, value in (("--partition", self.partition), ("--account", self.account)):
            if value is not None:
                check_name(option, value)
        if self.constraint is not None:
            check_constraint(self.constraint)
        check_time(self.time)
        check_name("job name", self.job_name)
        for option, value in (
            ("--out", str(self.script)),
            ("--records-dir", str(self.records_dir)),
            ("--python", self.python),
        ):
            if any(ord(c) < 32 or ord(c) == 127 for c in value):
                raise BadInput(f"{option} {value!r} contains a control character (a newline?); choose another path")
        if not 1 <= self.port <= 65535:
            raise BadInput(f"--port must be a TCP port (1-65535), got {self.port}")

    @property
    def submit_script(self) -> Path:
        return self.script.with_name(self.script.stem + ".submit.sh")

    @property
    def manifest(self) -> Path:
        return self.records_dir / f"{self.script.stem}.manifest.json"
