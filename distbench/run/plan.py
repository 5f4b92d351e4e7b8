"""Sweep planning: validate options, resolve the device, and list the points to run."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field, replace

from distbench.core import horovod_nccl
from distbench.core import strategies as registry
from distbench.core.config import PointConfig
from distbench.core.errors import BadInput
from distbench.core.sections import RaySection
from distbench.core.strategies import FRAMEWORK_BASELINE, STRATEGIES, Strategy, parse_strategies, strategy_names
from distbench.core.workload import MAX_BATCH, Measurement, Workload, check, knob, knobs
from distbench.core.workload import flag as knob_flag
from distbench.models.specs import check_input, get_spec, sized_spec
from distbench.run import raycluster
from distbench.run.devices import DeviceChoice, cpu_cores, parse_gpus, resolve_device
from distbench.run.launchers import RAY_TRAIN, check_ray_address, cluster_launcher

CPU_MAX_SEQ_LEN = 64


def cpu_image_size(spec, side: int) -> int:
    """The CPU workers' default input side for an image model: `side`, at least the model's smallest, at most its
    own input (a model defined on small inputs, such as mlp's 8x8 digits, keeps them)."""
    return min(spec.default_image_size, max(side, spec.min_image_size))


def check_model_input(spec, image_size: int | None, seq_len: int | None, channels_last: bool = False) -> None:
    """THE input rule of every kind (BadInput naming the flag): a token model takes --seq-len, an image model
    --image-size (and --channels-last), each within the model's range."""
    if isinstance(seq_len, (tuple, list)):
        if len(seq_len) > 1:
            raise BadInput(f"--seq-len {','.join(map(str, seq_len))}: this command takes one sequence length")
        seq_len = seq_len[0] if seq_len else None
    if spec.kind == "tokens":
        if image_size is not None:
            raise BadInput(f"--image-size does not apply to {spec.name} (a token model): use --seq-len")
        if channels_last:
            raise BadInput(f"--channels-last applies to image models, not {spec.name}")
    elif seq_len is not None:
        raise BadInput(f"--seq-len does not apply to {spec.name} (an image model): use --image-size")
    try:
        check_input(spec, image_size=image_size, seq_len=seq_len)
    except ValueError as exc:
        raise BadInput(str(exc)) from None


def check_model_size(spec, model_size: str | None, checkpointing: bool = False):
    """The spec at --model-size (BadInput naming the flag for an unknown or malformed size, or a size of a
    model without sizes); --activation-checkpointing only where there are decoder blocks to recompute."""
    if checkpointing and not spec.sizes:
        raise BadInput(f"--activation-checkpointing applies to the decoder models (gpt2, llama), not {spec.name}")
    try:
        return sized_spec(spec, model_size)
    except ValueError as exc:
        raise BadInput(str(exc)) from None


FRAMEWORK_ONLY = {  # option -> the framework it applies to, and why it does not apply to the other
    "compile": ("torch", "torch.compile is PyTorch-only"),
    "channels_last": ("torch", "a PyTorch memory format"),
    "xla": ("tf", "XLA is TensorFlow's compiler"),
    "activation_checkpointing": ("torch", "recomputation is built into the torch decoders"),
}


@dataclass(frozen=True, kw_only=True)
class SweepOptions(Workload, Measurement):
    """What `distbench scale` / `run` / `slurm` / `k8s` is asked to measure: the sweep's axes (below) plus the
    Workload and Measurement knobs (distbench.core.workload, where each is declared once with its flag, help, range
    and device default). From flag (commands/options.py generates one click option per knob) to plan; checked
    once here (BadInput naming the flag), stored whole by the sweep so `--resume` replays it. Checks needing
    the resolved device are make_plan's."""

    gpus: tuple[int, ...] = knob(identity=False, command_only=True)
    """Device counts; a comma list such as '1,2,4' is parsed (so are nodes)."""
    nodes: tuple[int, ...] = knob((1,), identity=False, command_only=True)
    """> 1 runs multi-node points inside the current Slurm allocation."""
    strategies: tuple[str, ...] = knob(
        (),
        flag="--strategy",
        jobs=True,
        identity=False,
        cli={"multiple": True, "metavar": "NAME[,NAME]", "show_default": False},
        help=f"Strategies to run (repeatable or comma list): {', '.join(strategy_names())}, or a group: "
        "core, wrappers, sharded, engines, all; deepspeed = its three ZeRO stages. Default: core (the wrapper, "
        "sharded and engine strategies run when named).",
    )
    """Strategy names in registry order (comma lists and Strategy objects accepted); empty = the core group."""
    add_baselines: bool = knob(True, identity=False, command_only=True)
    """Add each framework's single-device baseline for speedup (`scale`; not `run`)."""
    batch_size: tuple[int, ...] | None = knob(
        None,
        jobs=True,
        identity=False,
        parse="counts",
        by_device={"cuda": 32, "cpu": 8},
        cli={"metavar": "B[,B]"},
        help="Per-device batch (weak scaling) or global batch (strong); a comma list sweeps them "
        "(an 'oom' batch skips the larger ones). Default: 32 on GPUs, 8 on CPU workers.",
    )
    """Per-device (weak scaling) or global (strong) batch sizes to sweep; None = device default."""
    dataset_size: int = knob(
        512,
        low=1,
        high=10_000_000,
        identity=False,
        help="Samples in the --data disk dataset (written once to ~/.cache/distbench/data).",
    )
    ray_address: str | None = knob(
        None,
        identity=False,
        cli={"metavar": "auto|ray://HOST:PORT|HOST:PORT"},
        help="Ray strategies (ray-ddp) only: run on this existing Ray cluster. Default: a local Ray head "
        "started for each point and stopped after it.",
    )
    """Ray strategies: join this Ray cluster ('auto', ray://HOST:PORT, HOST:PORT); None = a local head per point."""

    def __post_init__(self):
        put = lambda name, value: object.__setattr__(self, name, value)  # noqa: E731 (frozen)
        put("gpus", tuple(parse_gpus(self.gpus) if isinstance(self.gpus, str) else self.gpus))
        put("nodes", tuple(parse_gpus(self.nodes, "--nodes", "node") if isinstance(self.nodes, str) else self.nodes))
        put("strategies", tuple(s.name for s in parse_strategies([getattr(s, "name", s) for s in self.strategies])))
        batches = (self.batch_size,) if isinstance(self.batch_size, int) else tuple(self.batch_size or ())
        put("batch_size", batches or None)
        lengths = (self.seq_len,) if isinstance(self.seq_len, int) else tuple(self.seq_len or ())
        put("seq_len", lengths or None)
        self._check()

    def _check(self) -> None:
        try:
            spec = get_spec(self.model)
        except ValueError as exc:
            raise BadInput(str(exc)) from None
        for b in self.batch_size or ():
            if not 0 < b <= MAX_BATCH:
                raise BadInput(f"--batch-size value {b} is not in the range 1..{MAX_BATCH}")
        if self.batch_size and len(set(self.batch_size)) != len(self.batch_size):
            raise BadInput(f"--batch-size {','.join(map(str, self.batch_size))} has a duplicated value")
        check(self)  # every knob's declared range or choices
        if self.max_time is not None and self.max_time == 0 and self.target_ci > 0:
            raise BadInput(
                f"--max-time must be positive while --target-ci is on, got {self.max_time:g} "
                "(use --target-ci 0 for a fixed number of steps)"
            )
        if any(k < 1 for k in self.nodes):
            raise BadInput("--nodes values must be positive")
        if max(self.nodes) > 1 and not any(n % k == 0 and k > 1 for n in self.gpus for k in self.nodes):
            raise BadInput(f"no --gpus value splits evenly over --nodes {','.join(map(str, self.nodes))}")
        spec = check_model_size(spec, self.model_size, self.activation_checkpointing)
        if self.seq_len and len(set(self.seq_len)) != len(self.seq_len):
            raise BadInput(f"--seq-len {','.join(map(str, self.seq_len))} has a duplicated value")
        for length in self.seq_len or (None,):
            check_model_input(spec, self.image_size, length, self.channels_last)
        registry.check_shard_group(self.shard_group, self.strategies)
        if self.ray_address is not None:
            object.__setattr__(self, "ray_address", check_ray_address(self.ray_address))
            if not any(STRATEGIES[s].launcher == RAY_TRAIN.name for s in self.strategies):
                ray = ", ".join(s.name for s in STRATEGIES.values() if s.launcher == RAY_TRAIN.name)
                raise BadInput(f"--ray-address applies only to Ray strategies ({ray}), none of which is selected")
        frameworks = {STRATEGIES[s].framework for s in self.strategies}
        for name, (framework, why) in FRAMEWORK_ONLY.items():
            if getattr(self, name) and framework not in frameworks:
                raise BadInput(
                    f"{flag(name)} does not apply to the selected strategies ({', '.join(self.strategies)}): {why}"
                )

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> "SweepOptions":
        """The options a sweep stored (keys that are not fields, e.g. notes beside them, left out)."""
        return cls(**{f.name: data[f.name] for f in dataclasses.fields(cls) if f.name in data})


def device_defaults(opts: SweepOptions, device: str) -> dict:
    """The knobs that have a default per device (workload.Knob.by_device): the value given, else `device`'s."""
    return {
        name: k.by_device[device] if getattr(opts, name) is None else getattr(opts, name)
        for name, (_, k) in knobs(opts).items()
        if k.by_device
    }


def flag(name: str) -> str:
    """The command-line flag of a SweepOptions field (workload.flag)."""
    return knob_flag(name, SweepOptions)


@dataclass(frozen=True)
class PlannedPoint:
    strategy: Strategy
    config: PointConfig
    skip_reason: str | None = None
    auto_added: bool = False


@dataclass
class Plan:
    """What every planner returns: the points in run order (each with the plan's skip reason), the device
    they run on and the notes the command prints."""

    points: list[PlannedPoint]
    device: DeviceChoice
    notes: list[str] = field(default_factory=list)


AMP_NEEDS_CUDA = "--precision amp (float16 with loss scaling) needs a CUDA GPU; use --precision bf16 on CPU"
DP_NEEDS_CUDA = "DataParallel needs CUDA devices; it cannot split work across CPU workers (use ddp for CPU workers)"


def point_skip(s: Strategy, cfg: PointConfig, choice: DeviceChoice, runs_here: bool = True) -> str | None:
    """THE plan's skip rules of every kind, first that applies: a module the strategy needs is missing,
    --precision amp without CUDA, too few GPUs, Horovod without NCCL on GPUs (`runs_here`: this machine's
    build is the one asked), DataParallel on CPU workers."""
    if missing := registry.not_installed(s):
        return missing
    if cfg.precision == "amp" and choice.device != "cuda":
        return AMP_NEEDS_CUDA
    if unfit := choice.unfit(cfg.world_size, cfg.nodes):
        return unfit
    if runs_here and (hvd_skip := horovod_nccl.skip_reason(s.requires, choice.device)):
        return hvd_skip
    if s.needs_cuda_for_multi and choice.device == "cpu":
        return DP_NEEDS_CUDA
    return None


def planned(
    s: Strategy,
    choice: DeviceChoice,
    workload: Workload,
    *,
    skip: str | None = None,
    auto_added: bool = False,
    runs_here: bool = True,
    **resolved,
) -> PlannedPoint:
    """THE one way a point is made, by every kind's planner: its PointConfig (the Workload, the settings the
    planner resolved, the strategy and the resolved device) and its skip reason (`skip`, the kind's own,
    else point_skip's)."""
    fields = {**dataclasses.asdict(workload), **resolved, "strategy": s.name, "device": choice.device}
    cfg = PointConfig(**fields)
    return PlannedPoint(s, cfg, skip or point_skip(s, cfg, choice, runs_here), auto_added)


def make_plan(opts: SweepOptions, visible_gpus: int | None = None, *, runs_here: bool = True) -> Plan:
    """The points of a sweep: the checked options with the device's defaults filled in. `runs_here` False:
    the points run on other machines (Slurm, Kubernetes), so this machine's Horovod build is not asked
    whether it has NCCL (each rank checks its own, distbench/workers/comm_common.horovod_init)."""
    spec = get_spec(opts.model)
    if visible_gpus is None and opts.ray_address:  # a Ray-only sweep's GPUs are the cluster's (issue 31)
        visible_gpus = raycluster.visible_gpus(opts.ray_address, [STRATEGIES[n] for n in opts.strategies])
    choice = resolve_device(opts.device, list(opts.gpus), visible_gpus, opts.nodes)
    defaults = device_defaults(opts, choice.device)
    model_size = defaults["model_size"] if spec.sizes else None
    spec = check_model_size(spec, model_size)
    notes = [choice.note]
    batches = sorted(defaults["batch_size"] if isinstance(defaults["batch_size"], tuple) else [defaults["batch_size"]])
    batch_text = ",".join(map(str, batches))
    steps, warmup = defaults["steps"], defaults["warmup"]
    tokens = spec.kind == "tokens"
    if tokens:
        image = None
        lengths = sorted(opts.seq_len or ()) or [
            spec.default_seq_len if choice.device == "cuda" else min(spec.default_seq_len, CPU_MAX_SEQ_LEN)
        ]
    else:
        image = defaults["image_size"] and cpu_image_size(spec, defaults["image_size"])
        image = (image if opts.image_size is None else opts.image_size) or spec.default_image_size
        lengths = [None]
    seq_text = ",".join(map(str, lengths))
    for length in lengths if opts.seq_len else ():  # the size the device resolved may have fewer positions
        check_model_input(spec, None, length)
    if opts.scaling == "strong":
        for n in opts.gpus:
            for batch in batches:
                if batch % n:
                    raise BadInput(f"--scaling strong: the global batch {batch} is not divisible by N={n}")
    if choice.device == "cpu" and (opts.image_size is None or opts.batch_size is None):
        size = f"sequence {seq_text}" if tokens else f"image {image}px"
        size += f", size {model_size}" if model_size else ""
        notes.append(
            f"CPU-sized defaults: {size}, batch {batch_text} "
            f"({'per device' if opts.scaling == 'weak' else 'global'}), {steps} measured steps "
            f"after {warmup} warmup"
            + (
                f", measuring up to {defaults['max_time']:g} s a point unless the CI target is met first"
                if opts.target_ci > 0
                else ""
            )
            + "; pass --image-size/--batch-size/--steps/--max-time to change"
        )
    if opts.steps is not None and opts.target_ci == 0:
        notes.append(
            f"--steps {opts.steps}: each point measures exactly {opts.steps} steps after warmup (adaptive "
            "stopping off; add --target-ci, e.g. 2%, to keep measuring past --steps until the CI target)"
        )
    notes.append(
        f"weak scaling: the per-device batch is fixed at {batch_text}, the global batch grows with N"
        if opts.scaling == "weak"
        else f"strong scaling: the global batch is fixed at {batch_text} and divided among N devices"
    )
    if len(batches) > 1:
        notes.append(
            f"batch sizes {batch_text}: each strategy and N runs every batch, smallest first; after an "
            "'oom' the larger batches of that strategy and N are skipped"
        )

    strategies = [STRATEGIES[name] for name in opts.strategies]
    selected = set(opts.strategies)
    if opts.add_baselines:
        for s in list(strategies):
            base = STRATEGIES[FRAMEWORK_BASELINE[s.framework]]
            if base.name not in selected:
                strategies.append(base)
                selected.add(base.name)
                notes.append(f"added the {base.name!r} baseline so {s.framework} speedups can be computed")
    # Baselines first: speedups can then be computed (and stored) as each point finishes.
    strategies.sort(key=lambda s: (not s.baseline, list(STRATEGIES).index(s.name)))
    for name, (framework, why) in FRAMEWORK_ONLY.items():
        skipped = [s.name for s in strategies if getattr(opts, name) and s.framework != framework]
        if skipped:
            notes.append(
                f"{flag(name)} does not apply to {', '.join(skipped)} ({why}): recorded there as not applicable"
            )
    if len(lengths) > 1:
        notes.append(
            f"sequence lengths {seq_text}: each strategy and N runs every sequence length (and every batch), "
            "shortest first; tokens per sample = the sequence length"
        )
    data_dirs: dict[int | None, str | None] = dict.fromkeys(lengths)
    if opts.data == "disk":
        from distbench.core import datasets

        for length in lengths:
            data_dirs[length] = str(
                datasets.DEFAULT_ROOT
                / datasets.dataset_key(spec.name, image, length, opts.num_classes, opts.dataset_size)
            )
        notes.append(
            f"--data disk: {opts.dataset_size} samples cached in {', '.join(map(str, data_dirs.values()))}, read "
            f"every step by DataLoader / tf.data ({opts.loader_workers} workers, prefetch {opts.prefetch})"
        )
    if opts.precision != "fp32":
        notes.append(
            f"precision {opts.precision}: "
            + (
                "bfloat16 autocast (torch) / mixed_bfloat16 policy (Keras)"
                if opts.precision == "bf16"
                else "float16 autocast + GradScaler (torch) / mixed_float16 + LossScaleOptimizer (Keras)"
            )
        )
    cores = node_cores = cpu_cores()
    on_nodes = None  # the one-machine cluster, where the multi-node points run across its nodes
    if max(opts.nodes) > 1:
        from distbench.run.hosts import check_allocation, local_cluster

        hosts = check_allocation(max(opts.nodes))
        where = "inside this Slurm allocation"
        if on_nodes := local_cluster():  # the nodes share this machine's cores: a rank gets its share of all of them
            where, node_cores = "across the one-machine cluster (its nodes share this machine's cores)", None
        notes.append(f"multi-node points run {where} ({', '.join(hosts)}); N is the total device count over the nodes")
    points: list[PlannedPoint] = []
    shapes = [(n, k) for n in opts.gpus for k in opts.nodes if n % k == 0]
    for s in strategies:
        not_applicable = [
            name for name, (framework, _) in FRAMEWORK_ONLY.items() if getattr(opts, name) and s.framework != framework
        ]
        grid = ((q, b, nk) for nk in ([(1, 1)] if s.baseline else shapes) for q in lengths for b in batches)
        for seq_len, batch, (n, k) in grid:
            # Ray Train places its workers itself: across the one-machine cluster's nodes, on the Ray cluster
            # the sweep starts on them (distbench.run.raycluster.nodes_ray), unless the sweep names its own --ray-address
            ray_on_nodes = on_nodes is not None and s.launcher == RAY_TRAIN.name and not opts.ray_address
            if k > 1 and cluster_launcher(s) is None and not ray_on_nodes:
                continue
            per_device = batch if opts.scaling == "weak" else batch // n
            resolved = dict(
                world_size=n,
                per_device_batch=per_device,
                image_size=image,
                seq_len=seq_len,
                model_size=model_size,
                steps=steps,
                warmup=warmup,
                nodes=k,
                threads_per_worker=max(1, node_cores // (n // k) if node_cores else cores // n),
                measure_comm=opts.comm and n > 1 and not s.baseline and s.no_comm_reason is None,
                max_time_s=defaults["max_time"],
                data_dir=data_dirs[seq_len],
                not_applicable=tuple(flag(name) for name in not_applicable),
                ray=RaySection(address=opts.ray_address) if opts.ray_address and s.launcher == RAY_TRAIN.name else None,
            )
            resolved.update(target_ci=opts.target_ci, **dict.fromkeys(not_applicable, False))
            auto = s.name not in opts.strategies
            skip = s.group_skip(n, opts.shard_group or n // k)
            points.append(
                planned(s, choice, opts.workload, skip=skip, runs_here=runs_here, auto_added=auto, **resolved)
            )
    if opts.ray_address:  # Ray points: planned per node from ray.nodes(), not this machine
        points = raycluster.plan_on_cluster(points, opts.ray_address, notes)
    elif on_nodes is not None:  # Ray points across the nodes: planned per node from what Ray will be given there
        points = _ray_on_nodes(points, on_nodes, notes)
    if choice.device == "cpu":
        points = _with_per_core_baselines(points, notes)
    else:
        notes.append(
            f"math mode, the same in both frameworks: TF32 {'on' if opts.tf32 else 'off'} for float32 "
            "matmuls and convolutions (--tf32/--no-tf32), cuDNN autotuning on; recorded per point"
        )
    return Plan(points=points, device=choice, notes=notes)


def _ray_on_nodes(points: list[PlannedPoint], state, notes: list[str]) -> list[PlannedPoint]:
    """Ray points at K > 1 nodes of the one-machine cluster: N/K workers on each of the K nodes the sweep
    starts Ray on (one per node: STRICT_SPREAD; D per node: PACK, each worker holding 1/D of its node's
    CPUs, so no node takes more than D), as raycluster.place spreads a point over several nodes."""
    from distbench.run.raycluster import node_cpus

    out = []
    for p in points:
        cfg = p.config
        if p.strategy.launcher == RAY_TRAIN.name and cfg.nodes > 1:
            per_node = cfg.world_size // cfg.nodes
            cpus = raycluster.worker_cpus(node_cpus(state), per_node)
            why = None
            if cfg.device == "cuda":
                why = "the one-machine cluster's nodes have no GPUs (CPU workers only)"
            elif cpus is None:
                why = f"{per_node} workers per node do not fit a node's {node_cpus(state)} CPU(s)"
            placement = raycluster.Placement(
                cfg.nodes, per_node, "STRICT_SPREAD" if per_node == 1 else "PACK", cpus or 1, 0
            )
            ray = replace(cfg.ray or RaySection(), placement=placement.to_dict())
            cfg = replace(cfg, threads_per_worker=max(1, int(cpus or 1)), ray=ray)
            p = replace(p, config=cfg, skip_reason=p.skip_reason or why)
            note = (
                f"{p.strategy.name} across the nodes: a Ray head on node1 and a raylet on each other node "
                f"({node_cpus(state)} CPU(s) each), started for the sweep and stopped after it"
            )
            if note not in notes:
                notes.append(note)
        out.append(p)
    return out


def _with_per_core_baselines(points: list[PlannedPoint], notes: list[str]) -> list[PlannedPoint]:
    """CPU workers divide the cores, so against a baseline on every core perfect data parallelism reads
    1/N. After each baseline, the same baseline at every other threads-per-worker count its N-worker
    points use (per batch size): their per-core efficiency compares with it."""
    out: list[PlannedPoint] = []
    for p in points:
        out.append(p)
        if not p.strategy.baseline:
            continue
        cfg = p.config
        counts = sorted(
            {
                q.config.threads_per_worker
                for q in points
                if not q.strategy.baseline
                and not q.skip_reason
                and q.strategy.framework == p.strategy.framework
                and q.config.swept_batch == cfg.swept_batch
            }
            - {cfg.threads_per_worker},
            reverse=True,
        )
        for t in counts:
            out.append(
                PlannedPoint(
                    p.strategy, replace(cfg, threads_per_worker=t, baseline_threads=t), p.skip_reason, auto_added=True
                )
            )
            note = (
                f"added {p.strategy.name!r} at {t} thread(s) (the threads of each worker at the larger N): "
                "efficiency per core compares with it, efficiency (whole machine) with the baseline on all "
                f"{cfg.threads_per_worker} threads"
            )
            if note not in notes:
                notes.append(note)
    return out
