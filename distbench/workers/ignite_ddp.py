"""Strategy `ignite`: PyTorch Ignite's `Engine` runs the same step (its process function), under
`ignite.distributed`: `idist.Parallel(backend, nproc_per_node=N)` spawns the N processes from the one
distbench starts (gloo on CPU workers, NCCL on GPUs), `idist.auto_model` wraps the model in DDP
(N > 1; at N=1 it leaves the model alone) and `idist.auto_optim` the optimizer.

The Engine owns the loop, so steps are timed at its Events.ITERATION_COMPLETED (wrapper_loop.SteppedLoop).
Every spawned process dies with the process that spawned it (a parent-death signal), which itself runs
under distbench's rank guard: no process outlives the sweep.

Where ignite's 1-device cost goes (issue 20 item 5; benchmarks/wrapper_cost.py, docs/benchmarks.md "Where
a wrapper's 1-device cost goes"): with `data=None` there is no ignite loader; the batch is the step's own.
Timed in one process, interleaved with the plain torch step on the UNet (96 px, batch 4, 2 threads), the
Engine's event firing plus the thread hand-off add a median 0.13-0.24 ms around a ~70 ms step (0.2-0.3%),
the hand-off alone about 0.1 ms, and the step itself is no slower in the Engine's thread. The +23.9% of
one earlier sweep is not the Engine's: real ignite points on the loaded 2-core machine came out at ~70 ms
or, steadily, 120-136 ms a step (the loop 0.11-0.14 ms of it), torch's at 64-73 ms or, with stalls, up to
1.25 s; so the slow mode is in the step itself, cause not found (docs/benchmarks.md), and one run per side
cannot resolve a 24% gap. torch's collapses under load are libgomp's spinning threads: with
OMP_WAIT_POLICY=PASSIVE both sides ran at 120-150 ms, ignite 0.88-0.92x torch. Each record carries the
measured part as wrapper.loop_around_step_s (SteppedLoop.around_s); the report says it per point.
"""

from __future__ import annotations

import os

FRAMEWORK = "torch"


def make_distribution():
    from ignite import distributed as idist

    from distbench.workers.wrapper_loop import TIMING, SteppedLoop, ddp_distribution

    class IgniteDistribution(ddp_distribution()):
        name = "ignite"
        nosync_variant = (
            "idist.auto_model's DDP with DDP's no-op communication hook (as ddp's variant), the same "
            "Engine and events; only the gradient all-reduce and the buffer broadcast removed"
        )
        loop: SteppedLoop | None = None

        def start(self, cfg):  # idist.Parallel has set up the process group
            self.rank, self.world, self.local_rank = idist.get_rank(), idist.get_world_size(), idist.get_local_rank()
            self.backend = idist.backend()

        def wrap(self, cfg, model, optimizer, device):
            return idist.auto_model(model), idist.auto_optim(optimizer)

        def wrap_independent(self, cfg, model, optimizer, device):
            if self.world == 1:  # auto_model leaves one process's model unwrapped: nothing to remove
                self.buffer_sync = None
                return self.wrap(cfg, model, optimizer, device)
            return super().wrap_independent(cfg, model, optimizer, device)

        def drive(self, cfg, step, batches):
            from ignite.engine import Engine, Events

            loop = self.loop = SteppedLoop()
            timed_step = loop.timed(step)  # the Engine's cost around it: loop.around_s()
            engine = Engine(lambda engine, batch: timed_step())  # data=None: the step takes its own batch

            @engine.on(Events.STARTED)
            def _ready(engine):
                loop.ready()

            @engine.on(Events.ITERATION_COMPLETED)
            def _boundary(engine):
                if loop.boundary(engine.state.output):
                    engine.terminate()

            loop.start(lambda: engine.run(None, max_epochs=1, epoch_length=2**62))
            return loop.step

        def record_fields(self):
            import ignite

            return {
                "timing": TIMING,
                "wrapper": {
                    "ignite": ignite.__version__,
                    "launcher": "idist.Parallel",
                    "ddp_wrapped": self.world > 1,
                    # median per step: the Engine's events + the hand-off, around the step function
                    "loop_around_step_s": self.loop.around_s() if self.loop is not None else None,
                },
            }

        def stop(self):  # ignite's Parallel destroys the process group itself
            if self.loop is not None:
                self.loop.finish()

    return IgniteDistribution()


def training(local_rank, cfg, out_path, parent_pid):
    from distbench.core.rankguard import die_with_parent
    from distbench.workers import torch_common as tc

    die_with_parent()
    if os.getppid() != parent_pid:  # the parent died before the signal was armed
        os._exit(1)
    tc.run(cfg, out_path, make_distribution())


def body(cfg, out_path):
    from ignite import distributed as idist

    from distbench.workers.runtime import free_port

    backend = "nccl" if cfg.device == "cuda" else "gloo"
    if cfg.device == "cuda":
        # The point's GPUs only: at N=1 idist.auto_model wraps in DataParallel over every visible GPU.
        visible = [v for v in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if v.strip()]
        ids = visible or [str(i) for i in range(cfg.world_size)]
        os.environ["CUDA_VISIBLE_DEVICES"] = ",".join(ids[: cfg.world_size])
    with idist.Parallel(backend=backend, nproc_per_node=cfg.world_size, master_port=free_port()) as parallel:
        parallel.run(training, cfg, out_path, os.getpid())
