"""The strategy registry (names are part of the CLI): what runs, in which framework, launched how."""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass

from distbench.core.errors import INSTALL_HINT, BadInput


@dataclass(frozen=True, kw_only=True)
class Strategy:
    name: str
    framework: str
    """'torch' or 'tf': which single-device baseline its speedup is measured against."""
    module: str
    """Worker module, run as `python -m distbench.workers.<module>`."""
    launcher: str
    """How its ranks start on one node: a key of distbench.run.launchers.LAUNCHERS (a Launcher's name)."""
    multi_node: str | None = None
    """...and on several (a key likewise); default: `launcher` where it can span nodes, else none."""
    baseline: bool = False
    """A plain single-device loop: runs at N=1 only and defines speedup 1.0 for its framework."""
    needs_cuda_for_multi: bool = False
    """Cannot use CPU workers (DataParallel scatters over CUDA devices only)."""
    requires: tuple[str, ...] = ()
    """Modules the worker imports; a missing one makes the point 'skipped'."""
    description: str = ""
    no_comm_reason: str | None = None
    """Why its no-sync variant and communication overhead cannot be measured (the record's comm_note)."""
    no_profiler_reason: str | None = None
    """Why `--profile` cannot profile it (its worker does not run torch_common.run / tf_common.run, where the
    profiling hooks are); None: it is profiled."""
    bucket_bytes: int | None = None
    """Its default gradient bucket / fusion size, for distbench predict (None: one message)."""
    reduce_to_one: bool = False
    """Gradients reduced onto one device and weights broadcast back (DataParallel), not all-reduced."""
    nosync_in_process: bool = False
    """Its no-sync variant runs in the synchronized run's processes (PointConfig.nosync_order), else in its own."""
    group: str = "core"
    """'core' runs when --strategy is not given; 'wrappers', 'sharded' and 'engines' when named (or their group,
    or all)."""
    traffic: tuple[float, str] = (1.0, "gradient all-reduce (reduce-scatter + all-gather)")
    """Its gradient traffic pattern for distbench predict: bytes on the wire relative to a ring all-reduce of
    the gradients (reduce-scatter + all-gather, 2(n-1)/n S), and what moves. A sharded strategy that
    all-gathers the parameters twice and reduce-scatters the gradients moves 3(n-1)/n S, 1.5x (ZeRO paper,
    arXiv 1910.02054, section 7.2.2). DDP, Horovod, ZeRO-1/2: 1x."""
    sharded_states: tuple[str, ...] = ()
    """The model states it divides among the N devices ('optimizer', 'grads', 'params'): ZeRO stage 1 the
    first, stage 2 the first two, stage 3 and FSDP's full shard all three; replicated strategies none."""
    master_copy: bool = False
    """Its optimizer keeps a flat fp32 copy of the parameters it updates (its shard's, where it shards the
    optimizer) besides the model's own: DeepSpeed's ZeRO optimizer does even when the model is fp32, so its
    model states are 16 bytes a parameter with SGD and momentum where ddp's and fsdp's are 12."""
    shard_scope: str = "world"
    """Over how many devices `sharded_states` are divided: 'world' (all N) or 'group' (the --shard-group ranks of
    hybrid sharding, the states replicated across the N/G groups)."""
    converge_module: str | None = None
    """`distbench converge`: its framework's converge worker, which drives this strategy's Distribution
    (None: converge does not run it)."""
    reference: bool = False
    """Its framework's reference data-parallel strategy (FRAMEWORK_REFERENCE): what the wrappers are compared
    with in the report, and what converge compares a strategy's accuracy with at N > 1."""
    driver_module: str | None = None
    """A worker module that only drives the ranks (a launcher, not a rank: telemetry leaves it out)."""

    def shard_degree(self, n: int, nodes: int = 1, shard_group: int | None = None) -> int:
        """How many devices its sharded states are divided among at N=n: n, or for hybrid sharding the
        --shard-group ranks (default n / nodes), the states replicated across the groups. The model-state
        formula per device is then the ZeRO one with this in place of N (full shard: 12P/G with fp32 SGD +
        momentum, 16P/G with mixed-precision Adam)."""
        if not self.sharded_states:
            return 1
        return (shard_group or max(1, n // max(1, nodes))) if self.shard_scope == "group" else n

    def group_skip(self, n: int, group: int) -> str | None:
        """Why a hybrid-shard point cannot run at N=n: n is not a whole number of shard groups of `group` ranks."""
        if self.shard_scope != "group" or n % group == 0:
            return None
        return f"N={n} is not a multiple of --shard-group {group} (hybrid shard needs whole groups)"


DDP_BUCKET = 25 * 2**20  # DistributedDataParallel's bucket_cap_mb default
HOROVOD_FUSION = 64 * 2**20  # HOROVOD_FUSION_THRESHOLD's default

SHARDED_NO_COMM = (
    "it shards training state: the parameter all-gathers (ZeRO-3, FSDP) and the shard updates are part of "
    "the step and cannot be removed without removing computation; a variant that drops only the gradient "
    "reduce-scatter is not implemented"
)

HYBRID_TRAFFIC = (
    1.5,
    "hybrid shard: FSDP's all-gather in forward and backward + reduce-scatter within a group of G ranks, then "
    "the gradient shards all-reduced across the N/G groups",
)
ZERO3_TRAFFIC = (1.5, "ZeRO-3: parameter all-gather in forward and backward + gradient reduce-scatter")

STRATEGIES: dict[str, Strategy] = {
    s.name: s
    for s in [
        Strategy(
            name="torch",
            converge_module="converge_torch",
            framework="torch",
            module="torch_single",
            launcher="process",
            baseline=True,
            requires=("torch",),
            description="plain single-device PyTorch loop (baseline)",
        ),
        Strategy(
            name="dp",
            framework="torch",
            module="torch_dp",
            no_profiler_reason="its own loop (distbench/workers/torch_dp.py) has no profiling hook",
            launcher="process",
            reduce_to_one=True,
            needs_cuda_for_multi=True,
            requires=("torch",),
            description="torch.nn.DataParallel over N GPUs in one process",
        ),
        Strategy(
            name="ddp",
            reference=True,
            converge_module="converge_torch",
            nosync_in_process=True,
            framework="torch",
            module="torch_ddp",
            launcher="torchrun",
            bucket_bytes=DDP_BUCKET,
            requires=("torch",),
            description="DistributedDataParallel, one process per device (torchrun)",
        ),
        Strategy(
            name="tf",
            converge_module="converge_tf",
            framework="tf",
            module="tf_single",
            launcher="process",
            baseline=True,
            requires=("tensorflow",),
            description="plain single-device TensorFlow custom step (baseline)",
        ),
        Strategy(
            name="mirrored",
            reference=True,
            converge_module="converge_tf",
            nosync_in_process=True,
            framework="tf",
            module="tf_mirrored",
            launcher="process",
            multi_node="tf-multiworker",
            requires=("tensorflow",),
            description="tf.distribute.MirroredStrategy over N devices",
        ),
        Strategy(
            name="horovod-torch",
            converge_module="converge_torch",
            nosync_in_process=True,
            framework="torch",
            module="horovod_torch",
            launcher="horovodrun",
            bucket_bytes=HOROVOD_FUSION,
            requires=("torch", "horovod.torch"),
            description="horovod.torch: gradient all-reduce + initial broadcast (horovodrun)",
        ),
        Strategy(
            name="horovod-tf",
            converge_module="converge_tf",
            nosync_in_process=True,
            framework="tf",
            module="horovod_tf",
            launcher="horovodrun",
            bucket_bytes=HOROVOD_FUSION,
            requires=("tensorflow", "horovod.tensorflow"),
            description="horovod.tensorflow: grouped all-reduce of gradients + variable broadcast",
        ),
        Strategy(
            name="accelerate",
            group="wrappers",
            bucket_bytes=DDP_BUCKET,
            framework="torch",
            module="accelerate_ddp",
            launcher="accelerate-launch",
            multi_node="torchrun",
            requires=("torch", "accelerate"),
            description="Hugging Face Accelerator around the same loop, DDP underneath (accelerate launch)",
        ),
        Strategy(
            name="lightning",
            group="wrappers",
            bucket_bytes=DDP_BUCKET,
            framework="torch",
            module="lightning_ddp",
            launcher="torchrun",
            requires=("torch", "lightning"),
            description='LightningModule under Trainer(strategy="ddp"), its defaults on (torchrun)',
        ),
        Strategy(
            name="fabric",
            group="wrappers",
            bucket_bytes=DDP_BUCKET,
            framework="torch",
            module="fabric_ddp",
            launcher="torchrun",
            requires=("torch", "lightning"),
            description="Lightning Fabric around the same loop, DDP (torchrun)",
        ),
        Strategy(
            name="ignite",
            group="wrappers",
            bucket_bytes=DDP_BUCKET,
            framework="torch",
            module="ignite_ddp",
            launcher="process",
            requires=("torch", "ignite"),
            description="PyTorch Ignite Engine, ignite.distributed (idist.Parallel spawns the N processes)",
        ),
        Strategy(
            name="composer",
            group="wrappers",
            framework="torch",
            module="composer_trainer",
            no_profiler_reason="Composer's Trainer runs its own loop (distbench/workers/composer_trainer.py), with no "
            "profiling hook",
            launcher="process",
            description="MosaicML Composer Trainer: skipped, its worker names the version conflict with the pinned torch",
        ),
        Strategy(
            name="ray-ddp",
            group="engines",
            nosync_in_process=True,
            bucket_bytes=DDP_BUCKET,
            framework="torch",
            module="ray_ddp",
            driver_module="ray_ddp",
            launcher="ray-train",
            requires=("torch", "ray"),
            description="ddp's DistributedDataParallel under Ray Train's TorchTrainer (a local Ray head, or --ray-address)",
        ),
        Strategy(
            name="fsdp",
            converge_module="converge_torch",
            group="sharded",
            framework="torch",
            module="torch_fsdp",
            launcher="torchrun",
            requires=("torch",),
            no_comm_reason=SHARDED_NO_COMM,
            traffic=(1.5, "FSDP: all-gather in forward, all-gather in backward, reduce-scatter of the gradients"),
            sharded_states=("optimizer", "grads", "params"),
            description="FSDP2 fully_shard per top-level module + root, reshard after forward (torchrun)",
        ),
        Strategy(
            name="fsdp-hybrid",
            group="sharded",
            framework="torch",
            module="torch_fsdp_hybrid",
            launcher="torchrun",
            requires=("torch",),
            no_comm_reason=SHARDED_NO_COMM,
            traffic=HYBRID_TRAFFIC,
            sharded_states=("optimizer", "grads", "params"),
            shard_scope="group",
            description="FSDP2 hybrid shard: fully_shard over a 2-D mesh (replicate x shard), states sharded "
            "within a group of --shard-group ranks (a node), gradients all-reduced across groups (torchrun)",
        ),
        *(
            Strategy(
                name=f"deepspeed-zero{k}",
                group="sharded",
                framework="torch",
                module="deepspeed_zero",
                launcher="torchrun",
                requires=("torch", "deepspeed"),
                no_comm_reason=SHARDED_NO_COMM,
                **({"traffic": ZERO3_TRAFFIC} if k == 3 else {}),
                sharded_states=("optimizer", "grads", "params")[:k],
                master_copy=True,
                description=f"deepspeed.initialize, ZeRO stage {k}: {what}, same torch SGD (torchrun)",
            )
            for k, what in [
                (1, "optimizer state sharded"),
                (2, "optimizer state and gradients sharded"),
                (3, "parameters, gradients and optimizer state sharded"),
            ]
        ),
    ]
}

FRAMEWORK_BASELINE = {"torch": "torch", "tf": "tf"}
FRAMEWORK_REFERENCE = {s.framework: s.name for s in STRATEGIES.values() if s.reference}
"""framework -> its reference data-parallel strategy (Strategy.reference)."""

DRIVER_MODULES = frozenset(
    name
    for s in STRATEGIES.values()
    if s.driver_module
    for name in (s.driver_module, f"distbench.workers.{s.driver_module}")
)
"""How a driver module (Strategy.driver_module) appears in its process's argv (telemetry leaves it out)."""


def strategy_names() -> list[str]:
    return list(STRATEGIES)


def check_shard_group(shard_group: int | None, names) -> None:
    """--shard-group means something only to a hybrid-shard strategy (shard_scope 'group'): refuse it, naming
    the flag, when none of `names` (the selected strategies' names) is one."""
    hybrid = [s.name for s in STRATEGIES.values() if s.shard_scope == "group"]
    if shard_group is not None and not set(hybrid) & set(names):
        raise BadInput(f"--shard-group applies to {', '.join(hybrid)}, which is not selected")


GROUPS = ("core", "wrappers", "sharded", "engines")
ALIASES = {"deepspeed": ("deepspeed-zero1", "deepspeed-zero2", "deepspeed-zero3")}
"""Names that stand for several strategies: `deepspeed` is its three ZeRO stages."""


def _valid() -> str:
    return f"{', '.join(STRATEGIES)}; groups: all, {', '.join(GROUPS)}"


def get_strategy(name: str) -> Strategy:
    try:
        return STRATEGIES[name]
    except KeyError:
        raise BadInput(f"unknown --strategy {name!r}; valid strategies: {_valid()}") from None


def parse_strategies(values: tuple[str, ...] | list[str]) -> list[Strategy]:
    """Comma lists of names or groups -> strategies in registry order; none given: the core group."""
    names: set[str] = set()
    for value in values:
        for part in value.split(","):
            part = part.strip()
            if not part:
                raise BadInput(f"empty --strategy name in {value!r}; valid strategies: {_valid()}")
            if part == "all" or part in GROUPS:
                names |= {s.name for s in STRATEGIES.values() if part in ("all", s.group)}
            elif part in ALIASES:
                names |= set(ALIASES[part])
            else:
                names.add(get_strategy(part).name)
    if not names:
        names = {s.name for s in STRATEGIES.values() if s.group == "core"}
    return [s for s in STRATEGIES.values() if s.name in names]


def installed(module: str) -> bool:
    """Whether `module` can be imported here (found, not imported)."""
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


def missing_modules(strategy: Strategy) -> list[str]:
    """The modules `strategy`'s worker imports that are not installed here."""
    return [m for m in strategy.requires if not installed(m)]


def not_installed(strategy: Strategy) -> str | None:
    """Why `strategy` cannot run here: the modules it needs that are missing (None: none is). The first of the
    skip rules (the plan's, runner.skip_reason)."""
    missing = missing_modules(strategy)
    return f"{', '.join(missing)} is not installed: {INSTALL_HINT}" if missing else None
