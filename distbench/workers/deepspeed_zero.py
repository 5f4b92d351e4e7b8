"""Strategies `deepspeed-zero1`, `-zero2`, `-zero3`: `deepspeed.initialize` with that ZeRO stage,
one process per device, launched by torchrun (DeepSpeed reads its environment).

The same torch SGD (--lr, --momentum) as every torch strategy, as DeepSpeed's client optimizer
(`zero_allow_untested_optimizer`); the step is DeepSpeed's own: `engine.backward(loss)`,
`engine.step()`. DeepSpeed clips the gradient norm at 1.0 unless told otherwise: here
`gradient_clipping` is 0 (off), as in the other strategies. bf16 is torch autocast around the
engine's forward, as elsewhere; amp (GPUs) is DeepSpeed's fp16 mode with its dynamic loss scaling.
Backend: NCCL on CUDA, gloo on CPU workers (DeepSpeed's CPU accelerator). The whole config is recorded.
"""

from __future__ import annotations

from distbench.workers import common

FRAMEWORK = "torch"
STAGES = {"deepspeed-zero1": 1, "deepspeed-zero2": 2, "deepspeed-zero3": 3}


AMP_NOTE = (
    "--precision amp here is DeepSpeed's fp16 mode: fp16 weights and fp16 gradient communication (half of "
    "ddp's and fsdp's bytes, whose amp is torch autocast over fp32 weights): not like-for-like with them"
)


def ds_config(cfg, stage: int) -> dict:
    out = {
        "train_micro_batch_size_per_gpu": cfg.per_device_batch,
        "gradient_accumulation_steps": 1,
        "zero_optimization": {"stage": stage},
        "zero_allow_untested_optimizer": True,
        "gradient_clipping": 0.0,
        "steps_per_print": 2**31 - 1,
        "wall_clock_breakdown": False,
    }
    if cfg.precision == "amp":
        out["fp16"] = {"enabled": True, "auto_cast": True}
    return out


def make_distribution(stage: int):
    import torch.distributed as dist

    from distbench.workers import torch_ddp

    class ZeroDistribution(type(torch_ddp.make_distribution())):
        name = f"deepspeed-zero{stage}"
        nosync_variant = None

        def start(self, cfg):
            import deepspeed

            super().start(cfg)  # the process group, the backend chosen as ddp's; DeepSpeed adopts it
            deepspeed.init_distributed(dist_backend=self.backend)
            self.wrapper_precision = cfg.precision == "amp"

        def wrap(self, cfg, model, optimizer, device):
            import deepspeed

            self.config = ds_config(cfg, stage)
            self.engine, optimizer, _, _ = deepspeed.initialize(model=model, optimizer=optimizer, config=self.config)
            return self.engine, optimizer

        def backward(self, loss):
            self.engine.backward(loss)

        def optimizer_step(self, optimizer):
            self.engine.step()

        def full_parameters(self, model):
            import deepspeed

            params = list(model.parameters())
            with deepspeed.zero.GatheredParameters(params, enabled=stage == 3):
                return [p.detach().double().clone() for p in params]

        def allreduce_seconds(self, cfg, model, wrapped):
            return None

        def stop(self):
            if getattr(self, "engine", None) is not None:
                self.engine.destroy()  # DeepSpeed's own cleanup (optimizer hooks, buffers) before the group goes
            super().stop()

        def record_fields(self):
            import deepspeed

            note = {"precision_note": AMP_NOTE} if self.config.get("fp16", {}).get("enabled") else {}
            return {
                **note,
                "deepspeed": {
                    "version": deepspeed.__version__,
                    "zero_stage": stage,
                    "config": self.config,
                    "accelerator": deepspeed.get_accelerator().device_name(),
                    "backend": dist.get_backend(),
                },
            }

    return ZeroDistribution()


def body(cfg, out_path):
    from distbench.workers import torch_common as tc

    tc.run(cfg, out_path, make_distribution(STAGES[cfg.strategy]))
    # The work is done, the record written and the process group destroyed. DeepSpeed's native threads have
    # aborted a rank in interpreter teardown ("terminate called without an active exception", about 1 run
    # in 30 here), which fails a finished point: end this rank without running the C++ destructors.
    common.exit_now(0)
