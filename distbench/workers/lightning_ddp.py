"""Strategy `lightning`: a LightningModule (the same model, loss and SGD optimizer) trained by
`Trainer(strategy="ddp")`, launched by torchrun (Lightning reads torchrun's environment and starts no
processes itself; its own re-launching would start ranks outside distbench's rank guard). At N=1 the
Trainer runs with its single-device default (`strategy="auto"`: no DDP, no process group), what a user of
Lightning on one device gets, so its 1-device cost is Lightning's own, not DDP's (issue 20).

The Trainer owns the loop (automatic optimization: zero_grad, backward, optimizer step) with its
defaults on: logger (TensorBoard or CSV into the point's work folder), progress bar, model summary and
checkpointing (a checkpoint at the end of training, after the measured steps). Steps are timed at the
Callback's on_train_batch_end (wrapper_loop.SteppedLoop). The Trainer runs in a thread of its own, where
Lightning registers no signal handlers (it does so only in the main thread); nothing else differs.
"""

from __future__ import annotations

import os

FRAMEWORK = "torch"
DEFAULTS_ON = "logger, progress bar, model summary, checkpointing (Trainer defaults, unchanged)"


class Endless:
    """The DataLoader Lightning iterates: the point's batches (torch_common.Batches), without end."""

    def __init__(self, batches):
        self.batches = batches

    def __iter__(self):
        while True:
            yield self.batches.next()


def make_distribution(out_path: str):
    from distbench.workers.torch_ddp import silence
    from distbench.workers.wrapper_loop import TIMING, SteppedLoop, lightning_distribution, lightning_settings

    class LightningDistribution(lightning_distribution()):
        name = "lightning"
        nosync_variant = (
            "the Trainer's DDP module given DDP's no-op communication hook and no buffer broadcast (as "
            "ddp's variant), the same Trainer, callbacks and logging; only the gradient "
            "all-reduce and the buffer broadcast removed"
        )
        loop: SteppedLoop | None = None

        def start(self, cfg):  # the Trainer sets up the process group (in drive)
            self.rank, self.world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
            self.local_rank = int(os.environ.get("LOCAL_RANK", 0))

        def wrap(self, cfg, model, optimizer, device):
            self.model, self.optimizer = model, optimizer
            return model, optimizer

        wrap_independent = wrap  # the no-op hook goes onto the Trainer's DDP (Boundaries.on_train_start)

        def drive(self, cfg, step, batches):  # `step` is unused: the Trainer's own step runs
            import lightning as L
            import torch

            from distbench.models import torch_models

            loop = self.loop = SteppedLoop()
            outer = self
            loss_fn, optimizer = torch_models.loss_fn(cfg.model), self.optimizer

            class Module(L.LightningModule):
                def __init__(self, model):
                    super().__init__()
                    self.model = torch.compile(model) if cfg.compile else model

                def training_step(self, batch, batch_idx):
                    x, y = batch
                    out = self.model(x)
                    return loss_fn(out.float() if cfg.precision != "fp32" else out, y)

                def configure_optimizers(self):
                    return optimizer

                def on_train_batch_start(self, batch, batch_idx):
                    if cfg.verify:  # as torch_common.make_step: BatchNorm/dropout in inference mode
                        self.model.eval()

            class Boundaries(L.Callback):
                def on_train_start(self, trainer, module):
                    if not cfg.sync:
                        silence(outer, trainer.strategy.model)  # the Trainer's DDP, before its first step
                    loop.ready()

                def on_train_batch_end(self, trainer, module, outputs, batch, batch_idx):
                    if loop.boundary(outputs["loss"].detach()):
                        trainer.should_stop = True

            trainer = L.Trainer(
                **lightning_settings(cfg),  # DDP; at N=1 the Trainer's own single-device default
                max_epochs=-1,
                max_steps=-1,
                callbacks=[Boundaries()],
                default_root_dir=os.path.dirname(os.path.abspath(out_path)),
            )
            self.trainer, self.module = trainer, Module(self.model)
            loop.start(lambda: trainer.fit(self.module, train_dataloaders=Endless(batches)))
            self.note_backend()
            return loop.step

        def record_fields(self):
            import lightning

            t = self.trainer
            return {
                "timing": TIMING,
                "wrapper": {
                    "lightning": lightning.__version__,
                    "strategy": type(t.strategy).__name__,
                    "precision": t.precision,
                    "defaults_on": DEFAULTS_ON,
                    "logger": type(t.logger).__name__ if t.logger else None,
                    "progress_bar": type(t.progress_bar_callback).__name__ if t.progress_bar_callback else None,
                    "checkpointing": t.checkpoint_callback is not None,
                },
            }

        def stop(self):
            if self.loop is not None:
                self.loop.finish()
            super().stop()

    return LightningDistribution()


def body(cfg, out_path):
    from distbench.workers import torch_common as tc

    tc.run(cfg, out_path, make_distribution(out_path))
