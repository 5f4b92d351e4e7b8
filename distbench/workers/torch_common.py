"""The PyTorch workload every torch strategy runs, and the driver that measures it.

A strategy module supplies a `Distribution` (how processes talk and how the model is wrapped);
everything else (model, loss, optimizer, the step, timing, verify mode, the record) is here, with the
batches of torch_data.py and the device setup of torch_device.py, once, so every torch strategy runs
the identical workload.
"""

from __future__ import annotations

import gc
import os
import time
from typing import Any

from distbench.core import datasets, mfu, phases
from distbench.core.config import PointConfig
from distbench.profile import hooks as profile_hooks
from distbench.workers import common
from distbench.workers.torch_data import Batches, make_batches
from distbench.workers.torch_device import configure_threads, device_for, make_sync, runtime_info, verify_determinism


class Distribution:
    """Single-device default; strategies override what differs."""

    name = "single"
    backend: str | None = None
    rank = 0
    world = 1
    local_rank = 0

    def start(self, cfg: PointConfig) -> None:
        pass

    nosync_variant: str | None = None
    """What the no-sync ("independent") variant of this strategy removes (recorded in every record)."""

    def wrap(self, cfg: PointConfig, model, optimizer, device):
        """Return (model to call, optimizer to step) for synchronized training."""
        return model, optimizer

    def wrap_independent(self, cfg: PointConfig, model, optimizer, device):
        """(model, optimizer) for the no-sync variant: the same wrapper with only its collective removed."""
        return model, optimizer

    def rewrap(self, cfg: PointConfig, model, optimizer, wrapped_optimizer, device):
        """(model, optimizer) for the next segment of an in-process sync/no-sync run (cfg.sync says which;
        cfg.nosync_order): by default the model wrapped afresh, after run() dropped the previous wrapper."""
        return (self.wrap if cfg.sync else self.wrap_independent)(cfg, model, optimizer, device)

    def nosync_fields(self) -> dict:
        """Evidence recorded from a no-sync run (e.g. how often the no-op hook ran)."""
        return {}

    tiny_calls = 0
    """How often the tiny variant's collective ran (counted by the strategy where it issues it)."""

    def tiny_collective(self) -> None:
        """The tiny variant's one collective per step (common.is_tiny), called after backward: an all-reduce
        of one float over every rank where the gradient reduction was (or nothing, where the strategy puts
        it inside backward itself: ddp's communication hook). Strategies with an in-process variant
        (Strategy.nosync_in_process) implement it and count it in tiny_calls."""
        raise NotImplementedError(f"{self.name}: no tiny-collective variant")

    optimizer_after_wrap = False
    """wrap() builds the optimizer itself, over the parameters it put in place (sharding): run() builds none
    before it, so no optimizer keeps the unsharded parameters alive (peak memory)."""

    wrapper_precision = False
    """The wrapper autocasts and scales the loss itself (Accelerator, Fabric): make_step then does neither."""

    def backward(self, loss) -> None:
        """The backward pass of make_step's step (a wrapper's own: accelerator.backward, fabric.backward)."""
        loss.backward()

    def optimizer_step(self, optimizer) -> None:
        optimizer.step()

    def drive(self, cfg: PointConfig, step, batches):
        """What the measuring code calls once per step: `step` itself, or, where the wrapper owns the loop
        (Lightning's Trainer, Ignite's Engine), one step of that loop (distbench/workers/wrapper_loop.py)."""
        return step

    def record_fields(self) -> dict:
        """What the wrapper adds to the record (its settings; how its steps were timed)."""
        return {}

    def full_parameters(self, model) -> list:
        """Float64 copies of every whole parameter (verify's checksums); sharding strategies gather them."""
        return [p.detach().double().clone() for p in model.parameters()]

    def gather(self, obj: Any) -> list:
        return [obj]

    def barrier(self) -> None:
        pass

    def mean(self, value: float) -> float:
        return value

    def allreduce_seconds(self, cfg: PointConfig, model, wrapped) -> list[float] | None:
        """Standalone time to all-reduce the gradient volume the way this strategy does."""
        return None

    def stop(self) -> None:
        pass


def make_event_clock(device):
    """torch on CUDA: a factory of timing events (stopping.measure's event path), so the host is not made to
    wait for the device every step; None on CPU workers (the host clock). Every torch strategy on CUDA gets it
    (one clock for all; dp builds the same events over its devices: torch_dp.event_clock), wrappers that own
    their loop (Lightning's Trainer, Ignite's Engine: wrapper_loop.SteppedLoop) included: their step boundary
    is a host-side hook, and the measuring thread records the step's event after the hand-over from it, on
    the device's current stream, which the wrapper's thread launches on too (the device's default stream,
    shared by threads), so the event follows all the work the step queued. DISTBENCH_STEP_CLOCK=host in the
    workers' environment (HOST_CLOCK_ENV) selects the host clock with a device synchronize per step instead: a diagnostic, to
    measure what the clock changes on a short GPU step (the record's stopping.clock names the clock used)."""
    import torch

    if device.type != "cuda" or host_clock_forced():
        return None
    return lambda: torch.cuda.Event(enable_timing=True)


HOST_CLOCK_ENV = "DISTBENCH_STEP_CLOCK"


def host_clock_forced() -> bool:
    """The diagnostic of make_event_clock: DISTBENCH_STEP_CLOCK=host."""
    return os.environ.get(HOST_CLOCK_ENV, "").strip().lower() == "host"


def build_model(cfg: PointConfig, device, seed: int):
    phases.mark("model build")
    import torch

    from distbench.models import torch_models

    torch.manual_seed(seed)
    model = torch_models.build_model(
        cfg.model,
        num_classes=cfg.num_classes,
        image_size=cfg.image_size,
        seq_len=cfg.seq_len,
        model_size=cfg.model_size,
    ).to(device)
    if cfg.activation_checkpointing:
        from distbench.models.torch_decoder import set_checkpointing

        if not set_checkpointing(model, True):
            raise RuntimeError(f"--activation-checkpointing: {cfg.model} has no decoder blocks to recompute")
    if cfg.channels_last:
        model = model.to(memory_format=torch.channels_last)
    return model


def AutocastModule(module, precision: str):
    """`module` whose forward runs under autocast with the precision's dtype (for DataParallel)."""
    import torch

    dtype = torch.bfloat16 if precision == "bf16" else torch.float16

    class _Autocast(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.inner = module

        def forward(self, x):
            with torch.autocast(x.device.type, dtype=dtype):
                return self.inner(x)

    return _Autocast()


def make_optimizer(cfg: PointConfig, model):
    import torch

    return torch.optim.SGD(model.parameters(), lr=cfg.lr, momentum=cfg.momentum)


def channels_last_layout(x, model) -> dict:
    """Whether the step's 4-D tensors are laid out channels-last (NHWC strides), as the step used them: the
    input batch and every 4-D weight (None: the step has none)."""
    import torch

    weights = [p for p in model.parameters() if p.dim() == 4]
    fmt = torch.channels_last
    return {
        "input": x.is_contiguous(memory_format=fmt) if torch.is_tensor(x) and x.dim() == 4 else None,
        "weights": all(p.is_contiguous(memory_format=fmt) for p in weights) if weights else None,
    }


def make_step(
    cfg: PointConfig,
    model,
    optimizer,
    batches: Batches,
    device,
    probe: dict | None = None,
    dist: Distribution | None = None,
):
    """One training step. Precision: 'bf16' autocasts to bfloat16 (CPU and GPU); 'amp' autocasts to
    float16 with a GradScaler (GPUs). With Horovod's optimizer the scaler unscales after Horovod's
    all-reduce (synchronize, then step without synchronizing again)."""
    import contextlib

    import torch

    from distbench.models import torch_models

    loss_fn = torch_models.loss_fn(cfg.model)
    dist = dist or Distribution()
    # Verify mode: BatchNorm/dropout in inference mode so a shard's forward pass does not depend on
    # the other shards; gradients then average exactly to the full-batch gradient.
    model.eval() if cfg.verify else model.train()
    if cfg.compile:
        model = torch.compile(model)
    if dist.wrapper_precision:
        autocast = contextlib.nullcontext
    elif cfg.precision == "bf16":
        autocast = lambda: torch.autocast(device.type, dtype=torch.bfloat16)  # noqa: E731
    elif cfg.precision == "amp":
        autocast = lambda: torch.autocast(device.type, dtype=torch.float16)  # noqa: E731
    else:
        autocast = contextlib.nullcontext
    scaler = torch.amp.GradScaler(device.type) if cfg.precision == "amp" and not dist.wrapper_precision else None
    horovod_opt = hasattr(optimizer, "synchronize") and hasattr(optimizer, "skip_synchronize")
    tiny = common.is_tiny(cfg)

    def backward(loss):
        dist.backward(loss)
        if tiny:  # the tiny variant: one float all-reduced where the gradient reduction was
            dist.tiny_collective()

    def step():
        x, y = batches.next()
        optimizer.zero_grad(set_to_none=True) if not horovod_opt else model.zero_grad(set_to_none=True)
        with autocast():
            out = model(x)
            loss = loss_fn(out.float() if cfg.precision != "fp32" else out, y)
        if probe is not None and "activation_dtype" not in probe:
            probe["activation_dtype"] = str(out.dtype).replace("torch.", "")
            probe["channels_last"] = channels_last_layout(x, model)
        if scaler is None:
            backward(loss)
            dist.optimizer_step(optimizer)
        else:
            backward(scaler.scale(loss))
            if horovod_opt:
                optimizer.synchronize()
                scaler.unscale_(optimizer)
                with optimizer.skip_synchronize():
                    scaler.step(optimizer)
            else:
                scaler.step(optimizer)
            scaler.update()
        return loss.detach()

    return step


def current_rss_bytes() -> int | None:
    """This process's resident set now (Linux's VmRSS; None elsewhere)."""
    try:
        with open("/proc/self/status") as fh:
            for line in fh:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


def checkpointed_blocks(model) -> int:
    """How many decoder blocks recompute their activations in backward (--activation-checkpointing)."""
    return sum(len(m.layers) for m in model.modules() if getattr(m, "checkpointing", False) and hasattr(m, "layers"))


def param_count(model) -> int:
    return sum(p.numel() for p in model.parameters())


def grad_bytes(model) -> int:
    return sum(p.numel() * p.element_size() for p in model.parameters() if p.requires_grad)


def update_checksums(model, start: list, params: list | None = None) -> list[list[float]]:
    """Per tensor: [L2 norm of the weight update, sum of the update] (float64); `params`: the whole
    parameters where the model holds shards (Distribution.full_parameters)."""
    out = []
    for p, p0 in zip(model.parameters() if params is None else params, start):
        d = p.detach().double() - p0
        out.append([float(d.norm()), float(d.sum())])
    return out


def run(cfg: PointConfig, out_path: str, dist: Distribution) -> None:
    """Build, (wrap), measure or verify, and let rank 0 write the record."""

    determinism = verify_determinism() if cfg.verify else None
    dist.start(cfg)
    try:
        if dist.world != cfg.world_size:
            raise RuntimeError(f"launched with {dist.world} processes but the point asks for {cfg.world_size}")
        math_mode = configure_threads(cfg)
        device = device_for(cfg, dist.local_rank)
        rss_before_model = current_rss_bytes() if cfg.device == "cpu" else None
        model = build_model(cfg, device, common.verify_seed(cfg, dist.rank))
        optimizer = None if dist.optimizer_after_wrap else make_optimizer(cfg, model)
        extra: dict = {
            "data_cache": datasets.page_cache_status(cfg.data_dir)  # before anything reads it
            if cfg.data == "disk" and dist.rank == 0
            else None,
            "params": param_count(model),
            "checkpointed_blocks": checkpointed_blocks(model),
            "grad_bytes": grad_bytes(model),
        }  # before any sharding
        batches = make_batches(cfg, device, dist.rank, dist.world, cfg.per_device_batch)
        sync = make_sync(device)
        extra.update(backend=dist.backend, runtime=runtime_info(device), sync=cfg.sync)
        extra.update(nosync_variant=dist.nosync_variant, math_mode=math_mode)
        times: list[float] = []
        wrapped, segments = None, []
        for letter, seg_cfg in common.segment_configs(cfg):
            started = time.time()
            if wrapped is None:  # the no-sync variant: the same wrapper, only its gradient collective removed
                wrapped, wrapped_opt = (dist.wrap if seg_cfg.sync else dist.wrap_independent)(
                    seg_cfg, model, optimizer, device
                )
            else:  # the next run of this process (cfg.nosync_order), the previous wrapper dropped first
                step = wrapped = None
                gc.collect()
                seg_cfg = common.fixed_steps(seg_cfg, times)
                wrapped, wrapped_opt = dist.rewrap(seg_cfg, model, optimizer, wrapped_opt, device)
            # Peak memory from here on: training, not the unsharded model a sharding wrapper has just split.
            gc.collect()
            common.reset_peak_memory(cfg.device)
            extra["peak_memory_scope"] = "from after the model was built and wrapped (sharded) through the last step"
            probe: dict = {}
            dist.tiny_calls = 0
            step = dist.drive(seg_cfg, make_step(seg_cfg, wrapped, wrapped_opt, batches, device, probe, dist), batches)
            if cfg.verify:
                break
            seg_times, seg_loss, fields = common.measured_run(
                step,
                sync,
                seg_cfg,
                dist.gather,
                batches.waits,
                lambda: dist.allreduce_seconds(seg_cfg, model, wrapped),
                make_event_clock(device),
            )
            if letter == "A" and not times:  # the point itself
                times, loss = seg_times, seg_loss
                extra.update(fields, probe=probe)
            else:
                segments.append(common.segment_record(letter, seg_times, seg_loss, fields, started))
                segments[-1].update(dist.nosync_fields() if letter != "A" else {}, probe=probe)
                if letter == "T":
                    segments[-1]["tiny_collective_calls"] = dist.tiny_calls
        common.lift_allreduce(extra, segments)
        extra["memory_before_model_per_rank_bytes"] = dist.gather(rss_before_model)  # every rank: a collective
        if segments:
            extra["segments"] = segments
        if profile_hooks.request(cfg):  # a few steps after the timed window, under torch.profiler
            other_thread = type(dist).drive is not Distribution.drive  # the wrapper's loop: its own thread
            extra.update(profile_hooks.profile_torch(cfg, step, sync, device, dist.rank, times, other_thread))
        if cfg.verify:
            extra["probe"] = probe
            start = dist.full_parameters(model)
            losses = []
            for _ in range(cfg.steps):
                losses.append(dist.mean(float(step())))
            sums = update_checksums(model, start, dist.full_parameters(model))
            replicas = dist.gather(sums)
            extra.update(
                verify_losses=losses,
                update_checksums=sums,
                determinism=determinism,
                replica_max_rel_diff=common.max_rel_diff(replicas),
            )
            times, loss = [], losses[-1]
        elif cfg.device == "cpu" and cfg.sync:  # MFU's peak on CPU workers, after the timed loop
            extra["cpu_gemm_peak"] = mfu.measure_cpu_gemm(cfg.threads_per_worker, dist.gather)
        if not cfg.sync:
            extra.update(dist.nosync_fields())
        extra.update(dist.record_fields())
        common.check_loss(loss)
        if dist.rank == 0:
            common.emit(
                cfg,
                out_path,
                framework="torch",
                status="ok",
                step_times=times,
                final_loss=loss,
                **extra,
            )
    finally:
        dist.stop()


def bucket_sizes(model, cap_bytes: int = 25 * 1024 * 1024, first_bytes: int = 1024 * 1024) -> list[int]:
    """Element counts of DDP-style gradient buckets: parameters in reverse order, the first bucket
    capped at 1 MiB and the rest at 25 MiB (DDP's defaults)."""
    sizes, current, current_bytes, cap = [], 0, 0, first_bytes
    for p in reversed([p for p in model.parameters() if p.requires_grad]):
        nbytes = p.numel() * p.element_size()
        if current and current_bytes + nbytes > cap:
            sizes.append(current)
            current, current_bytes, cap = 0, 0, cap_bytes
        current += p.numel()
        current_bytes += nbytes
    if current:
        sizes.append(current)
    return sizes
