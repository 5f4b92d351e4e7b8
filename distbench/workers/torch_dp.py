"""Strategy `dp`: torch.nn.DataParallel over N CUDA devices in one process.

The global batch lives on device 0; every step DataParallel scatters it, replicates the model and
gathers the outputs. DataParallel only parallelizes over CUDA devices: with CPU workers the parent
reports the point as skipped instead of running it. The independent variant runs N plain model
copies, one per GPU, each on its per-device batch and in its own thread (as DataParallel runs its
replicas), so the scatter/replicate/gather overhead is measured the same way as other strategies'
communication.
"""

from __future__ import annotations

from distbench.workers import common, stopping

FRAMEWORK = "torch"
NOSYNC_VARIANT = (
    "N plain model copies, one per GPU, each stepped in its own thread like DataParallel's "
    "replicas: DataParallel's scatter, replicate, output gather and gradient reduce to GPU 0 removed"
)


def event_clock(devices):
    """dp's step clock: the CUDA events every torch strategy is timed with (torch_common.make_event_clock),
    each recorded on device 0 after its stream has waited for every other device's (a join on the devices,
    not a host wait). DataParallel's own step already ends on device 0 (outputs gathered and gradients
    reduced there), so there the join waits for nothing; the no-sync variant's replicas end on their own
    devices, and the join makes its step last until the slowest replica's work is done, as the host's
    per-step synchronize of every device did before, without stopping the host. None under torch_common's
    host-clock diagnostic (DISTBENCH_STEP_CLOCK=host)."""
    import torch

    from distbench.workers import torch_common as tc

    if tc.host_clock_forced():
        return None

    class JoinedEvent:
        def __init__(self):
            self.event = torch.cuda.Event(enable_timing=True)

        def record(self):
            main = torch.cuda.current_stream(devices[0])
            for d in devices[1:]:
                main.wait_event(torch.cuda.current_stream(d).record_event())
            self.event.record(main)

        def elapsed_time(self, other):
            return self.event.elapsed_time(other.event)

    return JoinedEvent


def body(cfg, out_path):
    import torch

    from distbench.models import torch_models
    from distbench.workers import torch_common as tc
    from distbench.workers import torch_data

    if cfg.device != "cuda":
        common.emit(
            cfg,
            out_path,
            framework=FRAMEWORK,
            status="skipped",
            reason="DataParallel needs CUDA devices; it cannot split work across CPU workers",
        )
        return
    n = cfg.world_size
    if torch.cuda.device_count() < n:
        raise RuntimeError(f"DataParallel over {n} GPUs, but torch sees {torch.cuda.device_count()}")
    devices = [torch.device("cuda", i) for i in range(n)]
    # The math mode every torch strategy uses (TF32 as --tf32 says, cuDNN autotuning), or verify's.
    determinism = tc.verify_determinism() if cfg.verify else None
    math_mode = tc.configure_threads(cfg)

    def sync(_):
        for d in devices:
            torch.cuda.synchronize(d)

    model = tc.build_model(cfg, devices[0], cfg.seed)
    optimizer = tc.make_optimizer(cfg, model)
    extra = {
        "params": tc.param_count(model),
        "grad_bytes": tc.grad_bytes(model),
        "backend": "dataparallel",
        "runtime": tc.runtime_info(devices[0]),
        "sync": cfg.sync,
        "nosync_variant": NOSYNC_VARIANT,
        "math_mode": math_mode,
    }
    probe: dict = {}
    extra["probe"] = probe
    if cfg.sync:
        # The global batch lives on device 0; DataParallel scatters it every step.
        if cfg.data == "disk":
            batches = tc.make_batches(cfg, devices[0], 0, 1, cfg.global_batch)
        else:
            x, y = torch_models.synthetic_batch(
                cfg.model,
                cfg.global_batch,
                image_size=cfg.image_size,
                seq_len=cfg.seq_len,
                num_classes=cfg.num_classes,
                seed=cfg.seed,
                model_size=cfg.model_size,
            )
            batches = torch_data.Batches(
                fixed=(torch_data.to_device(x, devices[0], cfg), torch_data.to_device(y, devices[0], cfg))
            )
        # DataParallel's replica threads re-enter autocast without its dtype (fp16 by default on CUDA):
        # autocast inside the replicated module so bf16 stays bf16.
        inner = tc.AutocastModule(model, cfg.precision) if cfg.precision != "fp32" else model
        dp_model = torch.nn.DataParallel(inner, device_ids=list(range(n)))
        step = tc.make_step(cfg, dp_model, optimizer, batches, devices[0], probe)
    else:
        replicas = []
        for i, d in enumerate(devices):
            m = model if i == 0 else tc.build_model(cfg, d, cfg.seed)
            opt = optimizer if i == 0 else tc.make_optimizer(cfg, m)
            batches = tc.make_batches(cfg, d, i, n, cfg.per_device_batch)
            replicas.append(tc.make_step(cfg, m, opt, batches, d, probe))

        from concurrent.futures import ThreadPoolExecutor

        pool = ThreadPoolExecutor(n, thread_name_prefix="replica")

        def on_device(i):
            with torch.cuda.device(devices[i]):
                return replicas[i]()

        def step():
            # One thread per replica, as DataParallel runs its replicas: a replica that waits on its
            # GPU (amp's GradScaler reads its inf check) must not hold back the others' launches.
            return list(pool.map(on_device, range(n)))[0]

    if cfg.verify:
        start = [p.detach().double().clone() for p in model.parameters()]
        losses = [float(step()) for _ in range(cfg.steps)]
        # One set of weights: DataParallel re-replicates them from device 0 every step.
        common.emit(
            cfg,
            out_path,
            framework=FRAMEWORK,
            status="ok",
            final_loss=losses[-1],
            verify_losses=losses,
            update_checksums=tc.update_checksums(model, start),
            replica_max_rel_diff=0.0,
            determinism=determinism,
            **extra,
        )
        return

    def replicate_and_reduce_seconds():
        # DataParallel's own communication: replicate the model, reduce the gradients to device 0.
        from torch.nn.parallel import comm, replicate

        grads = [[torch.zeros_like(p, device=d) for p in model.parameters()] for d in devices]

        def op():
            replicate(model, list(range(n)))
            comm.reduce_add_coalesced(grads, devices[0])
            sync(None)

        return common.time_collective(op, lambda: sync(None))

    times, loss, fields = common.measured_run(
        step, sync, cfg, stopping.single_gather, batches.waits, replicate_and_reduce_seconds, event_clock(devices)
    )
    common.check_loss(loss)
    common.emit(
        cfg,
        out_path,
        framework=FRAMEWORK,
        status="ok",
        step_times=times,
        final_loss=loss,
        **fields,
        **extra,
    )
