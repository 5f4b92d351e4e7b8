"""The PyTorch workload every torch strategy runs, and the driver that measures it.

A strategy module supplies a `Distribution` (how processes talk and how the model is wrapped);
everything else (model, data, loss, optimizer, the step, timing, verify mode, the record) is here,
once, so every torch strategy runs the identical workload.
"""

from __future__ import annotations

import gc
import os
import time
from typing import Any

from distbench import datasets, mfu
from distbench.config import PointConfig
from distbench.workers import common


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


def configure_threads(cfg: PointConfig) -> dict:
    """CPU workers: intra-op threads = the worker's share of the cores. GPUs: the math mode both
    frameworks share (tf_common.configure): TF32 for float32 matmuls and convolutions as cfg.tf32
    says, cuDNN autotuning (cudnn.benchmark) on; verify mode keeps verify_determinism()'s settings
    (no TF32, deterministic kernels). Returns the math mode as the record keeps it."""
    import torch

    if cfg.device == "cpu":
        torch.set_num_threads(cfg.threads_per_worker)
        return {
            "tf32": None,
            "cudnn_autotune": None,
            "layout": _layout(cfg),
            "note": "CPU workers: TF32 and cuDNN do not apply",
        }
    if not cfg.verify:
        torch.backends.cuda.matmul.allow_tf32 = cfg.tf32
        torch.backends.cudnn.allow_tf32 = cfg.tf32
        torch.backends.cudnn.benchmark = True
    matmul, conv = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    return {
        "tf32": matmul
        if matmul == conv
        else f"matmul {'on' if matmul else 'off'}, convolutions {'on' if conv else 'off'}",
        "cudnn_autotune": torch.backends.cudnn.benchmark,
        "layout": _layout(cfg),
        "note": "verify: deterministic kernels" if cfg.verify else None,
    }


def _layout(cfg: PointConfig) -> str | None:
    """Memory layout of image activations (None for token models)."""
    if cfg.image_size is None:
        return None
    return "channels_last (NHWC in memory)" if cfg.channels_last else "NCHW"


def device_for(cfg: PointConfig, local_rank: int = 0):
    import torch

    if cfg.device == "cuda":
        if not torch.cuda.is_available():
            raise RuntimeError("--device cuda was requested but torch sees no CUDA device")
        torch.cuda.set_device(local_rank)
        return torch.device("cuda", local_rank)
    return torch.device("cpu")


def verify_determinism() -> dict:
    """Verify mode: no TF32 (GPUs would otherwise run float32 matmuls and convolutions with a 10-bit
    mantissa) and deterministic kernels, so the CPU-calibrated tolerance applies. Ops with no
    deterministic CUDA kernel (e.g. adaptive average pooling's backward) warn instead of failing.
    Call before CUDA is used: cuBLAS reads CUBLAS_WORKSPACE_CONFIG when its handle is created."""
    import torch

    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cudnn.benchmark = False
    torch.backends.cudnn.deterministic = True
    torch.use_deterministic_algorithms(True, warn_only=True)
    return {
        "deterministic_algorithms": "warn_only"
        if torch.is_deterministic_algorithms_warn_only_enabled()
        else torch.are_deterministic_algorithms_enabled(),
        "tf32": torch.backends.cuda.matmul.allow_tf32 or torch.backends.cudnn.allow_tf32,
        "cublas_workspace_config": os.environ["CUBLAS_WORKSPACE_CONFIG"],
    }


def make_sync(device):
    import torch

    if device.type == "cuda":

        def sync(_: Any) -> None:
            torch.cuda.synchronize(device)
    else:

        def sync(_: Any) -> None:
            return None

    return sync


def make_event_clock(device, dist: "Distribution"):
    """torch on CUDA: a factory of timing events (common.measure's event path), so the host is not made to
    wait for the device every step; None on CPU workers (the host clock, as before) and for wrappers that
    own their loop (their step boundary is a host-side hook: wrapper_loop)."""
    import torch

    if device.type != "cuda" or type(dist).drive is not Distribution.drive:
        return None
    return lambda: torch.cuda.Event(enable_timing=True)


def build_model(cfg: PointConfig, device, seed: int):
    import torch

    from distbench.models import torch_models

    torch.manual_seed(seed)
    model = torch_models.build_model(
        cfg.model, num_classes=cfg.num_classes, image_size=cfg.image_size, seq_len=cfg.seq_len
    ).to(device)
    if cfg.channels_last:
        model = model.to(memory_format=torch.channels_last)
    return model


def _to_device(t, device, cfg: PointConfig):
    import torch

    t = t.to(device, non_blocking=True)
    if cfg.channels_last and t.dim() == 4 and t.is_floating_point():
        t = t.contiguous(memory_format=torch.channels_last)
    return t


def make_batch(cfg: PointConfig, device, rank: int, batch: int):
    """Synthetic batch, made once and moved to the device before any timing.

    In verify mode every process makes the same global batch and takes its own shard.
    """
    from distbench.models import torch_models

    kw = dict(image_size=cfg.image_size, seq_len=cfg.seq_len, num_classes=cfg.num_classes)
    if cfg.verify:
        x, y = torch_models.synthetic_batch(cfg.model, cfg.global_batch, seed=cfg.seed, **kw)
        sl = common.rank_slice(cfg, rank)
        x, y = x[sl], y[sl]
    else:
        x, y = torch_models.synthetic_batch(cfg.model, batch, seed=cfg.seed + 1000 * (rank + 1), **kw)
    return _to_device(x, device, cfg), _to_device(y, device, cfg)


class DiskDataset:
    """Samples of a distbench.datasets folder; decoding (uint8 -> normalized float32) happens here,
    in the DataLoader's worker processes."""

    def __init__(self, folder: str):
        self.meta = datasets.load_meta(folder)
        self.paths = datasets.sample_paths(folder)
        self.targets = datasets.load_targets(folder)

    def __len__(self):
        return len(self.paths)

    def __getitem__(self, i):
        import numpy as np
        import torch

        m = self.meta
        x = torch.from_numpy(np.fromfile(self.paths[i], dtype=m["x_dtype"]).reshape(m["x_shape"]))
        if m["x_dtype"] == "uint8":  # HWC image -> CHW float, normalized
            x = x.permute(2, 0, 1).float().div_(255.0).sub_(0.5).div_(0.25)
        else:
            x = x.long()
        y = torch.from_numpy(np.array(self.targets[i]))
        y = y.long() if m["y_dtype"] == "int32" else y.float().permute(2, 0, 1)
        return x, y


class Batches:
    """Where each step's batch comes from; records the time spent waiting for it. A loader is
    iterated once for the whole run (its sampler repeats: RepeatingSampler)."""

    def __init__(self, fixed=None, loader=None, device=None, cfg=None):
        self.fixed, self.loader, self.device, self.cfg = fixed, loader, device, cfg
        self.waits: list[float] = []
        self._it = None

    def next(self):
        if self.fixed is not None:
            return self.fixed
        t0 = time.perf_counter()
        if self._it is None:
            self._it = iter(self.loader)
        x, y = next(self._it)
        x, y = _to_device(x, self.device, self.cfg), _to_device(y, self.device, self.cfg)
        self.waits.append(time.perf_counter() - t0)
        return x, y


class RepeatingSampler:
    """`sampler`'s order over and over, a new epoch (set_epoch, so a new shuffle) each pass, never
    ending: the DataLoader's iterator is built once, so its workers and prefetch queue never drain
    and restart at an epoch boundary (like tf.data's .repeat()); batches run across epochs."""

    def __init__(self, sampler):
        self.sampler = sampler

    def __iter__(self):
        epoch = 0
        while True:
            if hasattr(self.sampler, "set_epoch"):
                self.sampler.set_epoch(epoch)
            yield from self.sampler
            epoch += 1


def make_batches(cfg: PointConfig, device, rank: int, world: int, batch: int) -> Batches:
    if cfg.data == "synthetic":
        return Batches(fixed=make_batch(cfg, device, rank, batch))
    import torch
    from torch.utils.data import DataLoader, DistributedSampler, RandomSampler

    dataset = DiskDataset(cfg.data_dir)
    gen = torch.Generator().manual_seed(cfg.seed)
    sampler = (
        DistributedSampler(dataset, num_replicas=world, rank=rank, shuffle=True, seed=cfg.seed, drop_last=True)
        if world > 1
        else RandomSampler(dataset, generator=gen)
    )
    if len(sampler) < batch:
        raise ValueError(f"the disk dataset has {len(dataset)} samples: too few for a batch of {batch} per device")
    workers = cfg.loader_workers
    loader = DataLoader(
        dataset,
        batch_size=batch,
        sampler=RepeatingSampler(sampler),
        num_workers=workers,
        drop_last=True,
        pin_memory=cfg.pin_memory and device.type == "cuda",
        prefetch_factor=cfg.prefetch if workers > 0 else None,
        persistent_workers=workers > 0,
    )
    return Batches(loader=loader, device=device, cfg=cfg)


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


def param_count(model) -> int:
    return sum(p.numel() for p in model.parameters())


def grad_bytes(model) -> int:
    return sum(p.numel() * p.element_size() for p in model.parameters() if p.requires_grad)


def runtime_info(device) -> dict:
    import torch

    info = {
        "torch": torch.__version__,
        "torch_threads": torch.get_num_threads(),
        "omp_num_threads": os.environ.get("OMP_NUM_THREADS"),
    }
    if device.type == "cuda":
        info["cuda"] = torch.version.cuda
        info["cudnn"] = torch.backends.cudnn.version()
        info["gpu_name"] = torch.cuda.get_device_name(device)
    return info


def _update_checksums(model, start: list, params: list | None = None) -> list[list[float]]:
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
        model = build_model(cfg, device, common.verify_seed(cfg, dist.rank))
        optimizer = None if dist.optimizer_after_wrap else make_optimizer(cfg, model)
        extra: dict = {
            "data_cache": datasets.page_cache_status(cfg.data_dir)  # before anything reads it
            if cfg.data == "disk" and dist.rank == 0
            else None,
            "params": param_count(model),
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
                make_event_clock(device, dist),
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
        if segments:
            extra["segments"] = segments
        if cfg.verify:
            extra["probe"] = probe
            start = dist.full_parameters(model)
            losses = []
            for _ in range(cfg.steps):
                losses.append(dist.mean(float(step())))
            sums = _update_checksums(model, start, dist.full_parameters(model))
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
