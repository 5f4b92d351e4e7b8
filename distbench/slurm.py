"""Sweeps as Slurm jobs: plan the points, render one sbatch script, submit it, and merge the records.

A point is (strategy, total GPUs, nodes). `distbench slurm` writes ONE sbatch script holding every
point (a `case` on the array task id) and submits it as job arrays, one array per resource shape
(nodes x GPUs per node x tasks per node), because the tasks of an array share one resource request.
So every point is its own Slurm job, in a fresh allocation, launched with the cluster's engines:

  one node      the launcher `distbench scale` uses (one process, torchrun --standalone, horovodrun)
  several       srun + torchrun c10d rendezvous, horovodrun -H host1:G,host2:G, or srun + the TF
                MultiWorkerMirroredStrategy worker (distbench.multinode builds the commands)

Each job writes one result record (distbench.record schema) into the records folder on shared
storage, also when the point fails, times out or the job is cancelled (the script traps it and runs
`python -m distbench.slurm finish`, which writes a failed record with the log tail). `distbench
collect DIR` merges the records into the SQLite store; collecting twice adds nothing twice.

Job-side helpers (called by the generated script and the slurm/ templates, not by users):
    python -m distbench.slurm prepare --config-json JSON --local-workers G --out config.json
    python -m distbench.slurm config --strategy ddp --gpus 16 --nodes 2 [--model ...] --out config.json
    python -m distbench.slurm finish --config-json JSON --result R --log L --record OUT --rc RC ... -- ARGV
"""
from __future__ import annotations

import argparse
import dataclasses
import datetime as _dt
import hashlib
import json
import os
import re
import shlex
import shutil
import socket
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

from distbench import __version__
from distbench.config import PointConfig
from distbench.errors import BadInput, DistbenchError
from distbench.engines import PROCESS, Launcher, build_env, devices_per_node, shell_join
from distbench.launch import STDERR_TAIL_CHARS, outcome_record
from distbench.plan import SweepOptions, make_plan
from distbench.record import read_record, write_record
from distbench.strategies import Strategy, get_strategy

NAME_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")
TIME_PATTERN = re.compile(r"^(\d+-)?\d+(:\d{1,2}){0,2}$")
CONSTRAINT_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.&|,:*()\[\]!-]*$")
MANIFEST_KIND = "distbench-slurm-manifest"
SIGNAL_LEAD_S = 60
"""Slurm sends USR1 this long before --time runs out; the script then writes a 'timeout' record."""
LOG_TAIL_LINES = 15


# -- validation ------------------------------------------------------------------------------------
def check_name(option: str, value: str) -> str:
    """Names that end up in job scripts: letters, digits, '_', '.', '-' only, first a letter or digit."""
    if not isinstance(value, str) or not NAME_PATTERN.fullmatch(value):
        raise BadInput(f"{option} {value!r} is not a valid name: use letters, digits, '_', '.' and '-', "
                       "starting with a letter or digit")
    return value


def check_time(value: str) -> str:
    if not TIME_PATTERN.fullmatch(value or ""):
        raise BadInput(f"--time {value!r} is not a Slurm time limit: use MINUTES, HH:MM:SS or D-HH:MM:SS")
    return value


def time_seconds(value: str) -> int:
    """Slurm's time formats -> seconds (MM, MM:SS, HH:MM:SS, D-HH, D-HH:MM, D-HH:MM:SS)."""
    days = 0
    if "-" in value:
        d, value = value.split("-", 1)
        days = int(d)
        parts = [int(p) for p in value.split(":")] + [0] * (3 - len(value.split(":")))
        h, m, s = parts[:3]
    else:
        parts = [int(p) for p in value.split(":")]
        if len(parts) == 1:
            h, m, s = 0, parts[0], 0
        elif len(parts) == 2:
            h, m, s = 0, parts[0], parts[1]
        else:
            h, m, s = parts
    return ((days * 24 + h) * 60 + m) * 60 + s


def check_constraint(value: str) -> str:
    if not CONSTRAINT_PATTERN.fullmatch(value):
        raise BadInput(f"--constraint {value!r} is not a valid feature expression: use feature names with "
                       "&, |, [ ], *, ( ) and digits only")
    return value


def parse_counts(option: str, text: str) -> list[int]:
    """'1,2' -> [1, 2] for --nodes (and the like): positive, whole, no duplicates."""
    values: list[int] = []
    for part in (text or "").split(","):
        raw = part.strip()
        if not raw:
            raise BadInput(f"{option} {text!r} has an empty entry: give a comma list such as 1,2")
        if not raw.isdigit() or int(raw) < 1:
            raise BadInput(f"{option} value {raw!r} must be a positive whole number")
        if int(raw) in values:
            raise BadInput(f"{option} value {raw!r} is duplicated")
        values.append(int(raw))
    return sorted(values)


def sbatch_value(value: str) -> str:
    """A value for an `#SBATCH` line. sbatch parses those lines itself (double quotes and
    backslashes, '#' starts a comment), not the shell; validated values never need quoting."""
    if re.fullmatch(r"[A-Za-z0-9_.&|,:*()\[\]!%@=+/-]+", value):
        return value
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


# -- planning --------------------------------------------------------------------------------------
@dataclass(frozen=True)
class SlurmPoint:
    index: int
    strategy: Strategy
    config: PointConfig

    @property
    def nodes(self) -> int:
        return self.config.nodes

    @property
    def key(self) -> str:
        return f"{self.strategy.name}-g{self.config.world_size}-n{self.nodes}"

    @property
    def launcher(self) -> Launcher:
        return self.strategy.launcher_for(self.nodes)

    @property
    def per_node(self) -> int:
        """Devices (GPUs, or CPU workers) on each node."""
        return devices_per_node(self.config)

    @property
    def tasks_per_node(self) -> int:
        """Slurm tasks per node: torchrun agents / TF workers; 1 for everything else."""
        return self.launcher.tasks_per_node(self.config)

    @property
    def shape(self) -> tuple[int, int, int]:
        """What the job asks Slurm for: (nodes, GPUs per node, tasks per node)."""
        gpus = self.per_node if self.config.device == "cuda" else 0
        return (self.nodes, gpus, self.tasks_per_node)


@dataclass
class SlurmPlan:
    points: list[SlurmPoint]
    notes: list[str] = field(default_factory=list)

    def shapes(self) -> dict[tuple[int, int, int], list[SlurmPoint]]:
        groups: dict[tuple[int, int, int], list[SlurmPoint]] = {}
        for p in self.points:
            groups.setdefault(p.shape, []).append(p)
        return groups


def plan_sweep(opts: SweepOptions, nodes: list[int], gpus_per_node: int | None = None) -> SlurmPlan:
    """The points of a Slurm sweep: every (strategy, N, nodes) with N divisible by nodes and at most
    `gpus_per_node` devices per node, plus the frameworks' single-device baselines (N=1, 1 node).

    The workload (batch, image size, steps, baselines) is planned exactly as `distbench scale` plans
    it; the device is what the compute nodes have, not what this (login) node sees.
    """
    check_name("--model", opts.model)
    if opts.device not in ("cuda", "cpu"):
        raise BadInput(f"--device must be cuda or cpu for Slurm jobs, got {opts.device!r}")
    if gpus_per_node is not None and gpus_per_node < 1:
        raise BadInput(f"--gpus-per-node must be >= 1, got {gpus_per_node}")
    plan = make_plan(opts, visible_gpus=max(opts.gpus) if opts.device == "cuda" else 0)
    notes = [n for n in plan.notes if n != plan.device.note]
    notes.insert(0, "each job runs on CUDA GPUs of the compute nodes" if opts.device == "cuda" else
                 "CPU workers: each 'GPU' is a CPU worker process on the compute nodes (no GPUs requested)")
    points: list[SlurmPoint] = []
    for planned in plan.points:
        s, cfg = planned.strategy, planned.config
        if cfg.baseline_threads is not None:  # its thread count follows this machine's cores, not the nodes'
            continue
        if planned.skip_reason:
            notes.append(f"no job for {s.name} N={cfg.world_size}: {planned.skip_reason}")
            continue
        for k in ([1] if s.baseline else nodes):
            n = cfg.world_size
            if n % k:
                continue
            if gpus_per_node is not None and n // k > gpus_per_node:
                continue
            if k > 1 and s.cluster_launcher is None:
                continue
            points.append(SlurmPoint(len(points), s, dataclasses.replace(cfg, nodes=k)))
    spanning = {p.strategy.name for p in points if p.nodes > 1}
    single = sorted({p.strategy.name for p in points if not p.strategy.baseline} - spanning)
    if max(nodes) > 1 and single:
        notes.append(f"{', '.join(single)}: single-node only here (one process, or no N divisible by the "
                     "node counts within --gpus-per-node)")
    if not any(not p.strategy.baseline for p in points):
        raise BadInput("no points to run: every N must be divisible by a node count, with at most "
                       "--gpus-per-node devices per node")
    return SlurmPlan(points=points, notes=notes)


# -- rendering -------------------------------------------------------------------------------------
@dataclass(frozen=True, kw_only=True)
class SlurmSettings:
    """Cluster-side knobs of a generated sweep (the workload is in each point's PointConfig)."""

    script: Path
    """Absolute path of the sbatch script."""
    records_dir: Path
    """Absolute path of the results folder on shared storage (records, logs/, work/)."""
    python: str = sys.executable
    partition: str | None = None
    account: str | None = None
    constraint: str | None = None
    time: str = "01:00:00"
    exclusive: bool = True
    """A benchmark must not share its nodes with other jobs."""
    port: int = 29500
    point_timeout_s: float = 900.0
    job_name: str = "distbench"
    command: str = ""
    """The distbench command line that generated the script (for its header)."""

    def __post_init__(self):
        for option, value in (("--partition", self.partition), ("--account", self.account)):
            if value is not None:
                check_name(option, value)
        if self.constraint is not None:
            check_constraint(self.constraint)
        check_time(self.time)
        check_name("job name", self.job_name)
        for option, value in (("--out", str(self.script)), ("--records-dir", str(self.records_dir)),
                              ("--python", self.python)):
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


def _launch_argv(point: SlurmPoint, settings: SlurmSettings) -> list[str]:
    """The point's launch command as script text pieces (Shell = evaluated by the job)."""
    return point.launcher.sbatch_step(point.strategy, point.config)


def _env_lines(point: SlurmPoint) -> list[str]:
    """The point's environment (distbench.engines.build_env), threads from this node's CPUs."""
    lines = ['export DISTBENCH_TF_PORT="$MASTER_PORT"']  # the TF workers' first port
    for key, value in sorted(build_env(point.config, base={}).items()):
        if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", key):
            continue
        if key in ("OMP_NUM_THREADS", "MKL_NUM_THREADS"):
            lines.append(f'export {key}="$threads"')
        else:
            lines.append(f"export {key}={shlex.quote(value)}")
    return lines


def sbatch_argv(points: list[SlurmPoint], settings: SlurmSettings) -> list[str]:
    """The sbatch command submitting `points` (one resource shape) as one job array."""
    nodes, gpus, tasks = points[0].shape
    assert all(p.shape == (nodes, gpus, tasks) for p in points)
    argv = ["sbatch", "--parsable", f"--array={','.join(str(p.index) for p in points)}", f"--nodes={nodes}",
            f"--ntasks-per-node={tasks}"]
    if gpus:
        argv.append(f"--gres=gpu:{gpus}")
    argv += [f"--job-name={settings.job_name}-n{nodes}" + (f"g{gpus}" if gpus else ""),
             f"--output={settings.records_dir / 'logs' / 'slurm-%A_%a.out'}", str(settings.script)]
    return argv


def _comment(text: str) -> str:
    """Text for a `#` comment line: control characters escaped, so nothing can end the comment."""
    return "".join(c if ord(c) >= 32 and ord(c) != 127 else repr(c)[1:-1] for c in text)


def render_script(plan: SlurmPlan, settings: SlurmSettings) -> str:
    """The sbatch script of the whole sweep (one point per array task)."""
    q = shlex.quote
    shapes = plan.shapes()
    first = plan.points[0].config
    L: list[str] = [
        "#!/bin/bash",
        f"# distbench sweep: {first.model}, {len(plan.points)} points on {first.device}, "
        f"generated {_dt.datetime.now().astimezone().isoformat(timespec='seconds')}",
    ]
    if settings.command:
        L.append(f"#   by: {_comment(settings.command)}")
    L += [
        "#",
        "# One script, one Slurm job per point: the points are the tasks of job arrays, one array per",
        "# resource shape (an array shares one resource request). Submit them all with",
        f"#   bash {q(str(settings.submit_script))}",
        "# or one point, e.g. point 0, with the sbatch line of its shape and --array=0.",
        f"# Results: one record per job in {settings.records_dir}; merge them with",
        f"#   distbench collect {q(str(settings.records_dir))}",
        "#",
        "# point  key                          launcher         nodes  per node  sbatch",
    ]
    resources = {}
    for pts in shapes.values():
        argv = sbatch_argv(pts, settings)
        for p in pts:
            resources[p.index] = " ".join(a for a in argv if a.startswith(("--nodes", "--ntasks", "--gres")))
    for p in plan.points:
        L.append(f"# {p.index:<6} {p.key:<28} {p.launcher.name:<16} {p.nodes:<6} {p.per_node:<9} "
                 f"--array={p.index} {resources[p.index]}")
    L += [
        "#",
        f"#SBATCH --job-name={sbatch_value(settings.job_name)}",
        f"#SBATCH --time={sbatch_value(settings.time)}",
        (f"#SBATCH --partition={sbatch_value(settings.partition)}" if settings.partition
         else "##SBATCH --partition=gpu            # your GPU partition"),
        (f"#SBATCH --account={sbatch_value(settings.account)}" if settings.account
         else "##SBATCH --account=my-project       # the account to charge"),
        (f"#SBATCH --constraint={sbatch_value(settings.constraint)}" if settings.constraint
         else "##SBATCH --constraint=a100          # node features, e.g. one GPU model per sweep"),
        ("#SBATCH --exclusive                   # a benchmark must not share its nodes" if settings.exclusive
         else "##SBATCH --exclusive                # (off: --shared) a benchmark should not share its nodes"),
        f"#SBATCH --signal=B:USR1@{SIGNAL_LEAD_S}            # before the time limit: record the point as 'interrupted'",
        "##SBATCH --qos=normal",
        "",
        "set -uo pipefail",
        "",
        "# ---- knobs: override any of them at submission (sbatch --export=ALL,NAME=value) -------------",
        f"PY=${{DISTBENCH_PYTHON:-{q(settings.python)}}}",
        'TORCHRUN=${TORCHRUN:-$(dirname "$PY")/torchrun}',
        'HOROVODRUN=${HOROVODRUN:-$(dirname "$PY")/horovodrun}',
        f"RECORDS=${{DISTBENCH_RECORDS_DIR:-{q(str(settings.records_dir))}}}",
        f"MASTER_PORT=${{MASTER_PORT:-{settings.port}}}          # torchrun c10d rendezvous; TF workers use it as port base",
        f"POINT_TIMEOUT=${{DISTBENCH_POINT_TIMEOUT:-{settings.point_timeout_s:g}}}   # seconds, then the point is 'timeout'",
        "# Network between nodes (uncomment what your cluster needs):",
        "# export NCCL_SOCKET_IFNAME=ib0        # NCCL's bootstrap/socket interface (e.g. ib0, eth0; ^lo,docker)",
        "# export NCCL_IB_HCA=mlx5              # InfiniBand adapters NCCL may use",
        "# export NCCL_IB_DISABLE=1             # no InfiniBand: TCP sockets only",
        "# export NCCL_DEBUG=INFO               # NCCL prints its transport choices into the log",
        "# export GLOO_SOCKET_IFNAME=eth0       # gloo (CPU workers, Horovod) interface",
        "# export HOROVOD_NETWORK_INTERFACE=ib0 # horovodrun --network-interface",
        'export PATH="$(dirname "$PY"):$PATH"',
        "",
        "point=${DISTBENCH_POINT:-${SLURM_ARRAY_TASK_ID:-}}",
        'if [[ -z $point ]]; then',
        f"    echo \"distbench: submit this script as a job array:\" bash {q(str(settings.submit_script))} >&2",
        "    exit 2",
        "fi",
        "job_tag=${SLURM_ARRAY_JOB_ID:+${SLURM_ARRAY_JOB_ID}_${SLURM_ARRAY_TASK_ID}}",
        "job_tag=${job_tag:-${SLURM_JOB_ID:-local-$$}}",
        "job_hosts() {",
        '    if [[ -n ${SLURM_JOB_NODELIST:-} ]]; then scontrol show hostnames "$SLURM_JOB_NODELIST"; else hostname -s; fi',
        "}",
        "horovod_hosts() {  # host1:G,host2:G over the job's nodes",
        '    job_hosts | sed "s/\\$/:$1/" | paste -sd, -',
        "}",
        "head_node=$(job_hosts | head -n 1)   # the c10d rendezvous runs on the first node",
        'work=$RECORDS/work/$job_tag',
        'config=$work/config.json',
        'result=$work/result.json',
        "",
        'case "$point" in',
    ]
    for p in plan.points:
        L += [
            f"    {p.index})  # {p.strategy.name}: {p.config.world_size} "
            f"{'GPU' if p.config.device == 'cuda' else 'CPU worker'}(s) on {p.nodes} node(s), "
            f"{p.launcher.name}",
            f"        key={q(p.key)}; nodes={p.nodes}; per_node={p.per_node}; launcher={q(p.launcher.name)}",
            f"        config_json={q(p.config.to_json())}",
            f"        launch=({shell_join(_launch_argv(p, settings))})",
            "        ;;",
        ]
    L += [
        "    *)",
        f'        echo "distbench: no point $point in this sweep (0-{len(plan.points) - 1})" >&2',
        "        exit 2",
        "        ;;",
        "esac",
        "",
        'mkdir -p "$work" "$RECORDS/logs"',
        'log=$RECORDS/logs/$key-$job_tag.log',
        'record=$RECORDS/$key-$job_tag.json',
        "start=$(date +%s)",
        "pid=",
        "finish() {  # finish RC [--status S --reason R]: publish the point's record (a failed one if need be)",
        '    "$PY" -m distbench.slurm finish --config-json "$config_json" --result "$result" --log "$log" \\',
        '        --record "$record" --launcher "$launcher" --rc "$1" --wall "$(( $(date +%s) - start ))" \\',
        '        --timeout "$POINT_TIMEOUT" "${@:2}" -- "${launch[@]}"',
        "}",
        "on_signal() {",
        "    trap - USR1 TERM",
        '    echo "distbench: got SIG$1 (time limit or scancel): stopping point $key" >&2',
        '    if [[ -n $pid ]]; then kill -TERM "$pid" 2>/dev/null; wait "$pid" 2>/dev/null; fi',
        '    finish 143 --status interrupted --reason "the Slurm job was stopped by SIG$1 (its --time limit, or scancel)"',
        "    exit 143",
        "}",
        "trap 'on_signal USR1' USR1",
        "trap 'on_signal TERM' TERM",
        "",
        'if [[ ${SLURM_JOB_NUM_NODES:-1} != "$nodes" ]]; then',
        '    echo "distbench: point $key needs $nodes node(s), the job has ${SLURM_JOB_NUM_NODES:-1}" >&2',
        '    : > "$log"',
        '    finish 2 --status failed --reason "submitted with ${SLURM_JOB_NUM_NODES:-1} node(s); point $key needs $nodes (use its sbatch line)"',
        "    exit 2",
        "fi",
        '# CPU threads per worker from this node\'s CPUs; writes the point\'s config for the workers.',
        'if ! threads=$("$PY" -m distbench.slurm prepare --config-json "$config_json" --local-workers "$per_node" --out "$config" 2> "$log"); then',
        '    finish 1 --status failed --reason "could not prepare the point (see its log)"',
        "    exit 1",
        "fi",
    ]
    env = {p.index: _env_lines(p) for p in plan.points}
    if len({tuple(v) for v in env.values()}) == 1:
        L += next(iter(env.values()))
    else:
        L.append('case "$point" in')
        L += [f"    {i}) " + "; ".join(lines) + " ;;" for i, lines in env.items()]
        L.append("esac")
    L += [
        "",
        'echo "distbench: point $point ($key) on $(job_hosts | paste -sd, -), log: $log"',
        'timeout --kill-after=30 "$POINT_TIMEOUT" "${launch[@]}" >> "$log" 2>&1 &',
        "pid=$!",
        'wait "$pid"',
        "rc=$?",
        "pid=",
        'finish "$rc"',
        'echo "distbench: point $key exit status $rc, record: $record"',
        'exit "$rc"',
        "",
    ]
    return "\n".join(L)


def render_submit(plan: SlurmPlan, settings: SlurmSettings) -> str:
    q = shlex.quote
    lines = ["#!/bin/bash",
             f"# Submit the distbench sweep {q(str(settings.script))}: one job array per resource shape.",
             "# Prints one job id per array.",
             "set -euo pipefail",
             f"mkdir -p {q(str(settings.records_dir / 'logs'))}"]
    for pts in plan.shapes().values():
        lines.append(f"# points {', '.join(p.key for p in pts)}")
        lines.append(shlex.join(sbatch_argv(pts, settings)))
    return "\n".join(lines) + "\n"


def manifest(plan: SlurmPlan, settings: SlurmSettings) -> dict:
    return {"kind": MANIFEST_KIND, "version": __version__, "script": str(settings.script),
            "generated": _dt.datetime.now().astimezone().isoformat(timespec="seconds"),
            "command": settings.command,
            "points": [{"index": p.index, "key": p.key, "strategy": p.strategy.name,
                        "world_size": p.config.world_size, "nodes": p.nodes, "launcher": p.launcher.name}
                       for p in plan.points]}


def write_sweep(plan: SlurmPlan, settings: SlurmSettings) -> list[Path]:
    """Write the sbatch script, its submit script and the manifest; create the records folders."""
    try:
        for sub in ("logs", "work"):
            (settings.records_dir / sub).mkdir(parents=True, exist_ok=True)
        settings.script.parent.mkdir(parents=True, exist_ok=True)
        settings.script.write_text(render_script(plan, settings))
        settings.submit_script.write_text(render_submit(plan, settings))
        settings.submit_script.chmod(0o755)
        settings.manifest.write_text(json.dumps(manifest(plan, settings), indent=1) + "\n")
    except OSError as exc:
        raise BadInput(f"cannot write the sweep: {exc.strerror}: {exc.filename}") from None
    return [settings.script, settings.submit_script, settings.manifest]


def submit(plan: SlurmPlan, settings: SlurmSettings) -> list[tuple[str, list[SlurmPoint]]]:
    """Submit every job array with sbatch; returns (job id, its points) per array."""
    if shutil.which("sbatch") is None:
        raise DistbenchError(f"sbatch not found: run on a Slurm login node, or submit later with "
                             f"bash {shlex.quote(str(settings.submit_script))}")
    out = []
    for pts in plan.shapes().values():
        argv = sbatch_argv(pts, settings)
        proc = subprocess.run(argv, capture_output=True, text=True, stdin=subprocess.DEVNULL, timeout=120)
        if proc.returncode != 0:
            msg = (proc.stderr or proc.stdout or "").strip().splitlines()
            raise DistbenchError(f"sbatch failed (exit {proc.returncode}): {msg[-1] if msg else 'no output'}"
                                 + (f" ({len(out)} array(s) were submitted: {', '.join(j for j, _ in out)})"
                                    if out else ""))
        out.append((proc.stdout.strip().split(";")[0], pts))
    return out


# -- job side --------------------------------------------------------------------------------------
def node_cpus() -> int:
    if hasattr(os, "sched_getaffinity"):
        return max(1, len(os.sched_getaffinity(0)))
    return max(1, os.cpu_count() or 1)


def prepare(config_json: str, local_workers: int, out: str | os.PathLike) -> int:
    """Write the point's config with this node's CPUs divided among its workers; return the threads."""
    cfg = PointConfig.from_json(config_json)
    threads = max(1, node_cpus() // max(1, local_workers))
    write_text_atomic(out, dataclasses.replace(cfg, threads_per_worker=threads).to_json())
    return threads


def write_text_atomic(path: str | os.PathLike, text: str) -> None:
    """Write a small file atomically (other nodes may read it as soon as it exists)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def point_config(*, strategy: str, gpus: int, nodes: int, device: str = "cuda", model: str = "resnet50",
                 **workload) -> tuple[SlurmPoint, PointConfig]:
    """One point's config, planned as `distbench slurm` plans it (for hand-written job scripts),
    with this node's CPUs divided among its workers."""
    from distbench.strategies import parse_strategies

    check_name("--strategy", strategy)
    get_strategy(strategy).launcher_for(nodes)
    opts = SweepOptions(model=model, gpus=[gpus], strategies=parse_strategies([strategy]), device=device,
                        add_baselines=False, **{k: v for k, v in workload.items() if v is not None})
    plan = plan_sweep(opts, [nodes])
    found = [p for p in plan.points if p.strategy.name == strategy and p.nodes == nodes]
    if not found:
        why = "; ".join(n for n in plan.notes if strategy in n) or "not a valid combination"
        raise BadInput(f"no {strategy} point with {gpus} device(s) on {nodes} node(s): {why}")
    point = found[0]
    threads = max(1, node_cpus() // point.per_node)
    return point, dataclasses.replace(point.config, threads_per_worker=threads)


def log_tail(path: str | os.PathLike, limit: int = STDERR_TAIL_CHARS) -> str:
    try:
        with open(path, "rb") as fh:
            fh.seek(0, os.SEEK_END)
            fh.seek(max(0, fh.tell() - limit))
            return fh.read().decode("utf-8", "replace")
    except OSError:
        return ""


def slurm_info(environ: dict | None = None) -> dict:
    env = os.environ if environ is None else environ
    keys = ("SLURM_JOB_ID", "SLURM_ARRAY_JOB_ID", "SLURM_ARRAY_TASK_ID", "SLURM_JOB_NODELIST",
            "SLURM_JOB_NUM_NODES", "SLURM_JOB_PARTITION", "SLURM_JOB_ACCOUNT", "SLURM_CLUSTER_NAME",
            "SLURM_CPUS_ON_NODE", "SLURM_JOB_GPUS")
    return {k[6:].lower(): env[k] for k in keys if k in env}


def finish_point(*, config_json: str, result: str, log: str, record_path: str, returncode: int,
                 wall_s: float, launcher: str, argv: list[str], timeout_s: float | None = None,
                 status: str | None = None, reason: str | None = None, environ: dict | None = None) -> dict:
    """Turn whatever the job's launch left behind into the point's published record (as
    distbench.launch.run_point does for local points), and write it to `record_path`."""
    cfg = PointConfig.from_json(config_json)
    strategy = get_strategy(cfg.strategy)
    tail = log_tail(log)
    if status is None and not Path(result).exists() and returncode in (124, 137) and timeout_s \
            and wall_s >= timeout_s - 1:
        status, reason = "timeout", f"timed out after {timeout_s:g}s (--timeout)"
    record = outcome_record(cfg, strategy, result, returncode, tail, status=status, reason=reason)
    record["launch"] = {"argv": list(argv), "returncode": returncode, "wall_s": wall_s, "launcher": launcher,
                        "workdir": str(Path(result).parent), "log": str(log)}
    record["slurm"] = slurm_info(environ)
    if "environment" not in record:
        try:
            from distbench import envinfo

            record["environment"] = envinfo.capture_environment()
        except Exception as exc:  # noqa: BLE001 - the record matters more than its environment
            record["environment"] = {"error": f"{type(exc).__name__}: {exc}"}
    write_record(record_path, record)
    return record


# -- collect ---------------------------------------------------------------------------------------
@dataclass
class CollectReport:
    sweep_id: str | None
    added: list[dict] = field(default_factory=list)
    present: list[dict] = field(default_factory=list)
    ignored: list[tuple[str, str]] = field(default_factory=list)
    failed: list[tuple[str, dict]] = field(default_factory=list)
    """(file name, record) of every record in the folder whose status is not ok or skipped."""
    missing: list[dict] = field(default_factory=list)
    """Manifest points with no record in the folder yet."""


def stable_record_id(data: bytes) -> str:
    """The id of a record that has none: from its file's content, so collecting twice finds it."""
    return "sha256-" + hashlib.sha256(data).hexdigest()[:32]


def _baseline_for(record: dict, records: list[dict]) -> dict | None:
    from distbench.strategies import FRAMEWORK_BASELINE

    base = FRAMEWORK_BASELINE.get(record.get("framework"))
    same = [r for r in records if r.get("strategy") == base and r.get("status") == "ok"
            and r.get("model") == record.get("model") and r.get("device") == record.get("device")]
    return same[-1] if same else None


def collect(directory: str | os.PathLike, store, *, command: str | None = None) -> CollectReport:
    """Merge every record JSON file directly in `directory` into `store` (a distbench.store.Store).

    A record already in the store (same record_id; records without one get a stable id from their
    file's content hash) is not added again. The new records go into one new sweep.
    """
    from distbench.measure import combine_repeats
    from distbench.sweep import derive

    folder = Path(directory)
    if not folder.is_dir():
        raise BadInput(f"{directory} is not a folder of result records")
    entries: list[tuple[str, dict]] = []
    report = CollectReport(sweep_id=None)
    manifests = []
    for path in sorted(folder.glob("*.json")):
        try:
            data = path.read_bytes()
            doc = json.loads(data)
        except (OSError, ValueError) as exc:
            report.ignored.append((path.name, f"unreadable: {exc}"))
            continue
        if isinstance(doc, dict) and doc.get("kind") == MANIFEST_KIND:
            manifests.append(doc)
            continue
        try:
            record = read_record(path)
        except (ValueError, OSError) as exc:
            report.ignored.append((path.name, str(exc).replace(f"{path}: ", "")))
            continue
        if not record.get("record_id"):
            record["record_id"] = stable_record_id(data)
        entries.append((path.name, record))
    records = [r for _, r in entries]
    new: list[tuple[str, dict]] = []
    seen: set[str] = set()
    for name, record in entries:
        rid = record["record_id"]
        if rid in seen or store.has_record(rid):
            report.present.append(record)
        else:
            new.append((name, record))
        seen.add(rid)
        if record.get("status") not in ("ok", "skipped"):
            report.failed.append((name, record))
    if new:
        env = next((r.get("environment") for _, r in new if isinstance(r.get("environment"), dict)), {}) or {}
        from distbench import envinfo

        report.sweep_id = store.start_sweep(
            command=command or f"distbench collect {shlex.quote(str(directory))}", version=__version__,
            git_sha=env.get("distbench_git_sha") or envinfo.git_sha(), env=env,
            options={"collect": str(folder.resolve()), "files": [n for n, _ in new]},
            notes=[f"collected {len(new)} record(s) from {folder.resolve()} on {socket.gethostname()}"])
        status = "interrupted"
        try:
            for name, record in sorted(new, key=lambda e: (not get_strategy_safe(e[1]).baseline, e[0])):
                if record.get("status") == "ok" and record.get("step_times_s"):
                    record = combine_repeats([record])
                    record.pop("repeats", None)
                base = _baseline_for(record, records)
                record = derive(record, {record.get("framework"): base} if base else {})
                record["sweep_id"] = report.sweep_id
                record["collected_from"] = name
                record["point_id"] = store.add_point(report.sweep_id, record)
                report.added.append(record)
            status = "complete"
        finally:
            store.finish_sweep(report.sweep_id, status)
    have = {(r.get("strategy"), r.get("world_size"), r.get("nodes", 1)) for r in records}
    for doc in manifests:
        for p in doc.get("points", []):
            if (p.get("strategy"), p.get("world_size"), p.get("nodes")) not in have:
                report.missing.append(p)
    return report


def get_strategy_safe(record: dict) -> Strategy:
    try:
        return get_strategy(record.get("strategy"))
    except BadInput:
        return Strategy(name=str(record.get("strategy")), framework=str(record.get("framework")),
                        module="", launcher=PROCESS)


def tail_lines(text: str | None, n: int = LOG_TAIL_LINES) -> list[str]:
    lines = [ln for ln in (text or "").splitlines() if ln.strip()]
    return lines[-n:]


# -- job-side entry point --------------------------------------------------------------------------
def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m distbench.slurm",
                                     description="distbench's helpers inside generated Slurm jobs")
    sub = parser.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("prepare", help="write the point's config for this node; print threads per worker")
    p.add_argument("--config-json", required=True)
    p.add_argument("--local-workers", type=int, required=True)
    p.add_argument("--out", required=True)
    c = sub.add_parser("config", help="write one point's config (hand-written job scripts); print threads per worker")
    c.add_argument("--strategy", required=True)
    c.add_argument("--gpus", type=int, required=True, help="devices over all nodes")
    c.add_argument("--nodes", type=int, default=1)
    c.add_argument("--device", choices=["cuda", "cpu"], default="cuda")
    c.add_argument("--model", default="resnet50")
    c.add_argument("--batch-size", type=int)
    c.add_argument("--scaling", choices=["weak", "strong"])
    c.add_argument("--image-size", type=int)
    c.add_argument("--steps", type=int)
    c.add_argument("--warmup", type=int)
    c.add_argument("--target-ci", type=float, help="a fraction, e.g. 0.02; 0 = fixed --steps")
    c.add_argument("--out", required=True)
    f = sub.add_parser("finish", help="publish the point's record (a failed one if the launch failed)")
    f.add_argument("--config-json", required=True)
    f.add_argument("--result", required=True, help="where rank 0 wrote its record")
    f.add_argument("--log", required=True)
    f.add_argument("--record", required=True, help="the published record")
    f.add_argument("--launcher", required=True)
    f.add_argument("--rc", type=int, required=True)
    f.add_argument("--wall", type=float, default=0.0)
    f.add_argument("--timeout", type=float, default=None)
    f.add_argument("--status", choices=["failed", "timeout", "oom", "interrupted"], default=None)
    f.add_argument("--reason", default=None)
    f.add_argument("argv", nargs=argparse.REMAINDER)
    args = parser.parse_args(argv)
    if args.cmd == "prepare":
        print(prepare(args.config_json, args.local_workers, args.out))
        return 0
    if args.cmd == "config":
        try:
            _, cfg = point_config(strategy=args.strategy, gpus=args.gpus, nodes=args.nodes, device=args.device,
                                  model=args.model, batch_size=args.batch_size, scaling=args.scaling,
                                  image_size=args.image_size, steps=args.steps, warmup=args.warmup,
                                  target_ci=args.target_ci)
        except BadInput as exc:
            print(f"distbench: error: {exc}", file=sys.stderr)
            return 2
        write_text_atomic(args.out, cfg.to_json())
        print(cfg.threads_per_worker)
        return 0
    launch = args.argv[1:] if args.argv[:1] == ["--"] else args.argv
    record = finish_point(config_json=args.config_json, result=args.result, log=args.log,
                          record_path=args.record, returncode=args.rc, wall_s=args.wall, launcher=args.launcher,
                          argv=launch, timeout_s=args.timeout, status=args.status, reason=args.reason)
    print(f"distbench: {record['strategy']} N={record['world_size']} nodes={record.get('nodes')}: "
          f"{record['status']}" + (f" ({record['reason']})" if record.get("reason") else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
