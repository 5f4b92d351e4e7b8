"""Strategy `accelerate`: Hugging Face Accelerate's `Accelerator` around the same loop, started by
`accelerate launch` (one process at N=1, torch's elastic launcher for N > 1: DDP underneath, gloo on
CPU workers). The Accelerator does what its users get from it: `prepare` (DDP wrap at N > 1, device
placement, its autocast for --precision), `accelerator.backward` (its loss scaling for amp) and its
optimizer wrapper's step. At N=1 Accelerate does not wrap the model in DDP (the `ddp` strategy does).
"""

from __future__ import annotations

FRAMEWORK = "torch"


def make_distribution():
    import torch.distributed as dist

    from distbench.workers.wrapper_loop import ddp_distribution

    class AccelerateDistribution(ddp_distribution()):
        name = "accelerate"
        wrapper_precision = True
        nosync_variant = (
            "the Accelerator-prepared DDP model with DDP's no-op communication hook (as ddp's variant): "
            "Accelerator, its optimizer wrapper, reducer, buckets and autograd hooks kept; only the "
            "gradient all-reduce and the buffer broadcast before every forward removed"
        )

        def start(self, cfg):
            from accelerate import Accelerator

            from distbench.workers.runtime import ACCELERATE_PRECISION

            # The flag `accelerate launch --mixed_precision` got too (multi-node points start under torchrun).
            self.accelerator = Accelerator(cpu=cfg.device == "cpu", mixed_precision=ACCELERATE_PRECISION[cfg.precision])
            self.rank = self.accelerator.process_index
            self.world = self.accelerator.num_processes
            self.local_rank = self.accelerator.local_process_index
            self.backend = dist.get_backend() if dist.is_initialized() else None

        def wrap(self, cfg, model, optimizer, device):
            return self.accelerator.prepare(model, optimizer)

        def backward(self, loss):
            self.accelerator.backward(loss)

        def gather(self, obj):
            return super().gather(obj) if self.world > 1 else [obj]

        def barrier(self):
            if self.world > 1:
                super().barrier()

        def mean(self, value):
            return super().mean(value) if self.world > 1 else value

        def record_fields(self):
            import accelerate

            a = self.accelerator
            return {
                "wrapper": {
                    "accelerate": accelerate.__version__,
                    "distributed_type": str(a.distributed_type),
                    "mixed_precision": a.mixed_precision,
                }
            }

        def stop(self):
            self.accelerator.end_training()

    return AccelerateDistribution()


def body(cfg, out_path):
    from distbench.workers import torch_common as tc

    tc.run(cfg, out_path, make_distribution())
