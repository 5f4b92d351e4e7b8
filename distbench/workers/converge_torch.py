"""`distbench converge` worker for the torch strategies (torch, ddp, fsdp, horovod-torch): the strategy's own
Distribution (start, wrap, collectives) and torch_common's step, fed by the converge loop with this rank's shard
of each global batch in the seeded order (distbench.converge.data), evaluated on the whole validation split."""

from __future__ import annotations

from distbench.workers import common

FRAMEWORK = "torch"


def make_distribution(module: str | None):
    from distbench.workers import torch_common as tc

    return common.strategy_distribution(module, tc.Distribution)


class Feed:
    """What torch_common.make_step reads its batch from: the batch the loop set for this step."""

    def __init__(self):
        self.batch = None
        self.waits: list[float] = []

    def next(self):
        return self.batch


def body(cfg, out_path):
    import torch

    from distbench.converge import data
    from distbench.models import torch_models
    from distbench.workers import converge_common
    from distbench.workers import torch_common as tc

    settings = cfg.converge
    dist = make_distribution(settings.distribution)
    dist.start(cfg)
    try:
        if dist.world != cfg.world_size:
            raise RuntimeError(f"launched with {dist.world} processes but the point asks for {cfg.world_size}")
        math_mode = tc.configure_threads(cfg)
        device = tc.device_for(cfg, dist.local_rank)
        cache = data.read_cache(settings.cache)
        x_tr, y_tr, x_va, y_va, _ = cache
        to = lambda a: torch.from_numpy(a).to(device)  # noqa: E731
        xt, yt = to(x_tr).permute(0, 3, 1, 2).contiguous(), to(y_tr)  # NHWC -> NCHW
        xv, yv = to(x_va).permute(0, 3, 1, 2).contiguous(), to(y_va)
        model = tc.build_model(cfg, device, cfg.seed)
        params = tc.param_count(model)
        wrapped, optimizer = dist.wrap(cfg, model, tc.make_optimizer(cfg, model), device)
        feed = Feed()
        step = tc.make_step(cfg, wrapped, optimizer, feed, device, None, dist)
        loss_fn = torch_models.loss_fn(cfg.model)

        def train_step(order, k, lr):
            for group in optimizer.param_groups:
                group["lr"] = lr
            idx = torch.from_numpy(data.rank_batch(order, k, dist.rank, dist.world, cfg.per_device_batch))
            feed.batch = (xt[idx], yt[idx])
            return float(step())

        def evaluate():
            wrapped.eval()
            with torch.no_grad():
                out = wrapped(xv)
                acc = float((out.argmax(dim=1) == yv).float().mean())
                loss = float(loss_fn(out.float(), yv))
            wrapped.train()
            return acc, loss

        converge_common.run_and_emit(
            cfg,
            out_path,
            framework=FRAMEWORK,
            rank=dist.rank,
            world=dist.world,
            data=cache,
            train_step=train_step,
            evaluate=evaluate,
            barrier=dist.barrier,
            agree=dist.mean,
            distribution=dist.name,
            record={
                "params": params,
                "backend": dist.backend,
                "runtime": tc.runtime_info(device),
                "math_mode": math_mode,
            },
        )
        dist.barrier()  # every rank leaves together, after the record is written: no rank tears down alone
    except BaseException:
        dist.stop()
        raise
    # Done on every rank and the record written: end now. The process group's and the interpreter's teardown
    # aborted a rank now and then on CPU workers ("terminate called without an active exception", 2 of ~40
    # ddp N=2 runs), after the run was complete; the benchmark workers skip TensorFlow's teardown alike.
    common.exit_now(0)
