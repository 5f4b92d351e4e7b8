"""`distbench infer` worker, PyTorch: model.eval() under torch.inference_mode()."""

from __future__ import annotations

FRAMEWORK = "torch"


def body(cfg, out_path):
    import torch

    from distbench.models import torch_models
    from distbench.workers import torch_common as tc
    from distbench.workers.infer_common import is_oom_text, sweep_and_emit
    from distbench.workers.torch_data import to_device

    tc.configure_threads(cfg)
    device = tc.device_for(cfg)
    model = tc.build_model(cfg, device, cfg.seed).eval()
    sync_dev = tc.make_sync(device)

    def run_batch(bs):
        x, _ = torch_models.synthetic_batch(
            cfg.model,
            bs,
            image_size=cfg.image_size,
            seq_len=cfg.seq_len,
            num_classes=cfg.num_classes,
            seed=cfg.seed,
            model_size=cfg.model_size,
        )
        x = to_device(x, device, cfg)
        ctx = (
            torch.autocast(device.type, dtype=torch.bfloat16)
            if cfg.precision == "bf16"
            else torch.autocast(device.type, dtype=torch.float16)
            if cfg.precision == "amp"
            else None
        )

        def forward():
            with torch.inference_mode():
                if ctx is None:
                    return model(x)
                with ctx:
                    return model(x)

        return forward

    def is_oom(exc):
        if device.type == "cuda":
            torch.cuda.empty_cache()
        return isinstance(exc, torch.cuda.OutOfMemoryError) or is_oom_text(exc)

    params, runtime = tc.param_count(model), tc.runtime_info(device)
    sweep_and_emit(cfg, out_path, FRAMEWORK, run_batch, sync_dev, is_oom, params=params, runtime=runtime)
