"""What the wrapper strategies (accelerate, fabric, lightning, ignite) share.

`ddp_distribution()`: the `ddp` strategy's Distribution class (gather, barrier, mean, the standalone
all-reduce, the no-op-hook variant): the wrappers put DDP underneath, so they subclass it.
`lightning_distribution()` and `lightning_settings()`: what Lightning's Trainer and Fabric share on top of it
(their single-device default at N=1, where no process group exists).

`SteppedLoop`: Lightning's Trainer and Ignite's Engine own the training loop, so distbench cannot call
their step. The wrapper's loop runs in a thread of its own and stops at every step boundary (a hook of
the wrapper: Lightning's Callback.on_train_batch_end, Ignite's Events.ITERATION_COMPLETED) until the
measuring code (stopping.measure, run by torch_common.run) asks for the next step. Exactly one of the two
threads runs at any time, so the measured time of a step is boundary to boundary: everything the
wrapper does per step (its hooks, callbacks, progress bar, logging) is inside it, plus the hand-over of
two semaphores (a median 0.1 ms measured on the loaded 2-core machine, benchmarks/wrapper_cost.py;
TIMING says so in the record). On CUDA devices the measuring thread records each step's CUDA event after
the hand-over (torch_common.make_event_clock), as for every torch strategy. Warmup, the barrier, the clock
reads and the stopping rule are stopping.measure's, unchanged.
"""

from __future__ import annotations

import os
import statistics
import threading
import time

TIMING = (
    "wrapper callback at step boundaries: the wrapper's own loop runs in a thread and pauses at its "
    "end-of-step hook; step time = boundary to boundary (on GPUs a CUDA event recorded at each boundary, the "
    "clock of every torch strategy; on CPU workers the host clock), stopping.measure's warmup, "
    "barrier and stopping rule. The hand-off between the threads is inside each step and not subtracted "
    "(a round trip took a median 0.1 ms on a loaded 2-core CPU machine, benchmarks/wrapper_cost.py: about 0.15% "
    "of a 70 ms CPU-worker step, 1-5% of a 2-10 ms GPU step)"
)

LIGHTNING_PRECISION = {"fp32": "32-true", "bf16": "bf16-mixed", "amp": "16-mixed"}
"""cfg.precision -> Lightning's Trainer / Fabric `precision`."""


def ddp_distribution() -> type:
    from distbench.workers import torch_ddp

    return type(torch_ddp.make_distribution())


def lightning_settings(cfg) -> dict:
    """The accelerator, devices, nodes, strategy and precision Lightning's Trainer and Fabric are given: DDP
    at N > 1 over torchrun's LOCAL_WORLD_SIZE devices a node; at N=1 their own single-device default
    (`strategy="auto"`: no DDP, no process group), what a user of either on one device gets (issue 20)."""
    return dict(
        accelerator="cpu" if cfg.device == "cpu" else "cuda",
        devices=int(os.environ.get("LOCAL_WORLD_SIZE", cfg.world_size // cfg.nodes)),
        num_nodes=cfg.nodes,
        strategy="ddp" if cfg.world_size > 1 else "auto",
        precision=LIGHTNING_PRECISION[cfg.precision],
    )


def lightning_distribution() -> type:
    """ddp's Distribution class for Lightning's Trainer and Fabric: where they set up no process group (their
    single-device default at N=1), gather, barrier and mean are this one process's own."""
    import torch.distributed as dist

    class LightningDistributionBase(ddp_distribution()):
        def note_backend(self) -> None:
            """The process group's backend, once the wrapper has set it up (None without one)."""
            self.backend = dist.get_backend() if dist.is_initialized() else None

        def gather(self, obj):
            return super().gather(obj) if dist.is_initialized() else [obj]

        def barrier(self):
            if dist.is_initialized():
                super().barrier()

        def mean(self, value):
            return super().mean(value) if dist.is_initialized() else value

    return LightningDistributionBase


class LoopEnded(RuntimeError):
    pass


class SteppedLoop:
    """A loop someone else owns, advanced one step per `step()` call (see the module's text).

    The loop side calls `ready()` before its first step and `boundary(out)` at the end of each step
    (True: stop now). The driver side calls `start(run)`, then `step()` as often as it likes, then
    `finish()`."""

    def __init__(self) -> None:
        self._go = threading.Semaphore(0)
        self._done = threading.Semaphore(0)
        self._out = None
        self._error: BaseException | None = None
        self._ended = False
        self.stopping = False
        self._thread: threading.Thread | None = None
        self.outer_s: list[float] = []  # per step(): from the go to the next boundary (driver side)
        self.inner_s: list[float] = []  # per call of a step function wrapped by timed() (loop side)

    # loop side (the wrapper's thread)
    def ready(self) -> None:
        self._done.release()
        self._go.acquire()

    def boundary(self, out) -> bool:
        self._out = out
        self._done.release()
        self._go.acquire()
        return self.stopping

    def timed(self, fn):
        """`fn` timed per call (the step function the wrapper's loop calls): around_s() subtracts it."""

        def call(*args, **kwargs):
            t0 = time.perf_counter()
            out = fn(*args, **kwargs)
            self.inner_s.append(time.perf_counter() - t0)
            return out

        return call

    def around_s(self) -> float | None:
        """Median over steps of what the wrapper's loop adds around the step function (its events and hooks,
        plus the hand-off): each step()'s time minus its step function's; None where fn was not timed()."""
        around = [o - i for o, i in zip(self.outer_s, self.inner_s)]
        return statistics.median(around) if around and len(self.inner_s) == len(self.outer_s) else None

    # driver side
    def start(self, run) -> None:
        """Run `run()` (the wrapper's whole loop) in a thread; return when it is ready for its first step."""

        def main():
            try:
                run()
            except BaseException as exc:  # noqa: BLE001 - handed to the driver
                self._error = exc
            finally:
                self._ended = True
                self._done.release()

        self._thread = threading.Thread(target=main, name="wrapper-loop", daemon=True)
        self._thread.start()
        self._wait()

    def step(self):
        t0 = time.perf_counter()
        self._go.release()
        self._wait()
        self.outer_s.append(time.perf_counter() - t0)
        return self._out

    def _wait(self) -> None:
        self._done.acquire()
        if self._error is not None:
            raise self._error
        if self._ended:
            raise LoopEnded("the wrapper's loop ended before distbench stopped it")

    def finish(self, timeout_s: float = 300.0) -> None:
        """Let the loop stop at the boundary it waits at and end (the wrapper's own teardown runs)."""
        if self._thread is None or self._ended:
            return
        self.stopping = True
        self._go.release()
        self._thread.join(timeout_s)
        if self._error is not None:
            raise self._error
