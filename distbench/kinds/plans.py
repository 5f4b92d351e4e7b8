"""The single-run kinds' planners: verify, comm, infer and converge, each its options in and a Plan out.

Every point is made by distbench.run.plan.planned (the one place a PointConfig is built), with the same skip
rule (plan.point_skip) and device resolution (plan.resolve_device) as a sweep (scale, run, fit, slurm and k8s
plan with plan.make_plan)."""

from __future__ import annotations

from dataclasses import dataclass, replace

from distbench.core.errors import BadInput
from distbench.core.sections import CommSection, ConvergeSection, InferSection
from distbench.core.strategies import FRAMEWORK_BASELINE, STRATEGIES, Strategy, check_shard_group
from distbench.core.workload import Workload, device_default
from distbench.hints import did_you_mean
from distbench.models.specs import get_spec
from distbench.run.devices import DeviceChoice, cpu_cores, resolve_device
from distbench.run.plan import Plan, PlannedPoint, check_model_input, check_model_size, cpu_image_size, planned


def _spec(model: str):
    try:
        return get_spec(model)
    except ValueError as exc:
        raise BadInput(str(exc)) from None


@dataclass(frozen=True, kw_only=True)
class VerifyOptions(Workload):
    """`distbench verify`: one device count, the strategies to check, a GLOBAL batch and k compared steps."""

    gpus: int
    strategies: tuple[Strategy, ...]
    global_batch: int
    steps: int
    threads: int | None = None
    """Intra-op threads of a single-device run (divided among N workers); None: this machine's cores."""


def plan_verify(opts: VerifyOptions, visible_gpus: int | None = None) -> Plan:
    """Each framework's single-device baseline at the global batch before the first of its strategies, then
    each strategy at N with its shard of the batch; no warmup, the worker's verify path."""
    n = opts.gpus
    check_shard_group(opts.shard_group, [s.name for s in opts.strategies])
    if opts.global_batch % n:
        raise BadInput(f"--batch-size {opts.global_batch} (global) is not divisible by --gpus {n}")
    spec = _spec(opts.model)
    choice = resolve_device(opts.device, [n], visible_gpus)
    if choice.unfit(n):
        raise BadInput(f"--gpus {n}: {choice.unfit(n)} (use --device cpu for CPU workers)")
    size = opts.image_size
    if spec.kind != "tokens" and size is None:
        size = spec.default_image_size if choice.device == "cuda" else cpu_image_size(spec, 32)
    model_size = (opts.model_size or device_default("model_size", choice.device)) if spec.sizes else opts.model_size
    spec = check_model_size(spec, model_size, opts.activation_checkpointing)
    check_model_input(spec, size, opts.seq_len)
    threads = opts.threads or cpu_cores()
    same = dict(image_size=size, steps=opts.steps, warmup=0, verify=True, model_size=model_size)
    points: list[PlannedPoint] = []
    for s in opts.strategies:
        base = STRATEGIES[FRAMEWORK_BASELINE[s.framework]]
        if not any(p.strategy is base for p in points):
            points.append(
                planned(
                    base,
                    choice,
                    opts.workload,
                    world_size=1,
                    per_device_batch=opts.global_batch,
                    threads_per_worker=threads,
                    **same,
                )
            )
        if not s.baseline:
            points.append(
                planned(
                    s,
                    choice,
                    opts.workload,
                    world_size=n,
                    per_device_batch=opts.global_batch // n,
                    threads_per_worker=max(1, threads // n),
                    skip=s.group_skip(n, opts.shard_group or n),
                    **same,
                )
            )
    return Plan(points, choice, [choice.note])


@dataclass(frozen=True, kw_only=True)
class CommOptions:
    """`distbench comm`: rank counts, the backend (None: the device's), message sizes and iterations."""

    gpus: tuple[int, ...]
    backend: str | None = None
    sizes: str | None = None
    factor: int = 2
    iters: int = 20
    warmup: int = 3
    max_time_per_size: float = 2.0
    device: str = "auto"
    nodes: int = 1


def plan_comm(opts: CommOptions, visible_gpus: int | None = None) -> Plan:
    """One point per rank count: the backend's all-reduce over every message size."""
    from distbench.kinds.commbench import default_backend, get_backend, parse_sizes

    choice = resolve_device(opts.device, list(opts.gpus), visible_gpus)
    backend, backend_note = default_backend(opts.backend, choice.device)
    strategy = get_backend(backend)
    if backend == "nccl" and choice.device != "cuda":
        raise BadInput("--backend nccl needs CUDA GPUs; none are in use (try --backend gloo)")
    sizes = parse_sizes(opts.sizes or ("1K:1G" if choice.device == "cuda" else "1K:64M"), opts.factor)
    section = CommSection(
        backend=backend,
        sizes=tuple(sizes),
        iters=opts.iters,
        warmup=opts.warmup,
        max_time_per_size=opts.max_time_per_size,
    )
    workload = Workload(model="none")
    notes = [choice.note, *([backend_note] if backend_note else [])]
    if opts.nodes > 1:
        from distbench.run.hosts import check_allocation

        if bad := [n for n in opts.gpus if n % opts.nodes]:
            raise BadInput(f"--gpus {bad[0]} cannot be split evenly over --nodes {opts.nodes}")
        notes.append(f"ranks spread over {opts.nodes} nodes: {', '.join(check_allocation(opts.nodes)[: opts.nodes])}")
    points = [
        planned(
            strategy,
            choice,
            workload,
            image_size=224,
            world_size=n,
            per_device_batch=1,
            steps=1,
            warmup=0,
            threads_per_worker=max(1, cpu_cores() // n),
            nodes=opts.nodes,
            comm_bench=section,
        )
        for n in opts.gpus
    ]
    return Plan(points, choice, notes)


@dataclass(frozen=True, kw_only=True)
class InferOptions(Workload):
    """`distbench infer`: the frameworks, the batch sizes (one worker per framework runs them all), passes."""

    frameworks: tuple[str, ...]
    batch_sizes: tuple[int, ...]
    steps: int = 20
    warmup: int = 3


def plan_infer(opts: InferOptions, visible_gpus: int | None = None) -> Plan:
    """One point per framework on one device, every batch size in its worker (infer.expand splits them)."""
    from distbench.kinds.infer import INFER

    spec = _spec(opts.model)
    bad = [f for f in opts.frameworks if f not in INFER]
    if bad or not opts.frameworks:
        hint = did_you_mean(bad[0], INFER) if bad else ""
        raise BadInput(
            f"--framework: unknown framework {', '.join(map(repr, bad)) or repr(','.join(opts.frameworks))}{hint}; "
            "valid frameworks: torch, tf"
        )
    choice = resolve_device(opts.device, [1], visible_gpus)
    check_model_input(spec, opts.image_size, opts.seq_len)
    image = None if spec.kind == "tokens" else opts.image_size or spec.default_image_size
    notes = [f"running on the CPU ({cpu_cores()} cores): no CUDA GPU is in use"] if choice.device == "cpu" else []
    points = [
        planned(
            INFER[fw],
            choice,
            opts.workload,
            world_size=1,
            per_device_batch=opts.batch_sizes[0],
            image_size=image,
            steps=opts.steps,
            warmup=opts.warmup,
            threads_per_worker=cpu_cores(),
            num_classes=spec.num_classes,
            infer=InferSection(batch_sizes=tuple(opts.batch_sizes)),
        )
        for fw in opts.frameworks
    ]
    return Plan(points, choice, notes)


def plan_converge(opts, choice: DeviceChoice, *, cores: int, cache: str, image_size: int, num_classes: int) -> Plan:
    """Every (strategy, N, seed) point of a converge.plan.ConvergeOptions, seeds outermost: each seed runs every
    (strategy, N) before the next seed, so a drift of the machine's load over the sweep falls on every strategy
    alike rather than on the ones that happen to run first; baselines at N=1 only. Each runs its framework's
    converge worker (Strategy.converge_module) driving the strategy's own Distribution."""
    from distbench.converge import lr as lr_rules

    workload = replace(opts.workload, tf32=False, num_classes=num_classes)
    points = []
    for seed in range(opts.seed, opts.seed + opts.seeds):
        for s in opts.strategies:
            for n in opts.gpus:
                if s.baseline and n != 1:
                    continue
                lr = lr_rules.plan(opts.lr_scaling, opts.lr, opts.batch_size, opts.batch_size * n, opts.warmup_epochs)
                settings = ConvergeSection(
                    target_accuracy=opts.target_accuracy,
                    max_epochs=opts.max_epochs,
                    max_steps=opts.max_steps,
                    max_time_s=opts.max_time_s,
                    eval_every_epochs=opts.eval_every_epochs,
                    stop_at_target=opts.stop_at_target,
                    lr=lr,
                    cache=cache,
                    distribution=None if s.baseline else s.module,
                )
                threads = (opts.threads or max(1, cores // n)) if choice.device == "cpu" else 1
                runs = replace(s, module=s.converge_module)
                points.append(
                    planned(
                        runs,
                        choice,
                        replace(workload, seed=seed, lr=lr["base_lr"]),
                        world_size=n,
                        per_device_batch=opts.batch_size,
                        image_size=image_size,
                        threads_per_worker=threads,
                        converge=settings,
                    )
                )
    return Plan(points, choice, [choice.note])
