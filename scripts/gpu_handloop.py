"""A hand-written training loop for `make gpu-check`: what a user would write without distbench (torchvision
ResNet, SGD with momentum, cudnn.benchmark, float16 autocast + GradScaler for --precision amp, CUDA events
around the measured steps). Prints one JSON line: {"throughput": samples/s, "steps": n, "seconds": s}.

Usage: python scripts/gpu_handloop.py --model resnet50 --batch-size 256 --precision amp --max-time 8"""

from __future__ import annotations

import argparse
import json
import time

import torch


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default="resnet50")
    p.add_argument("--batch-size", type=int, default=256)
    p.add_argument("--image-size", type=int, default=224)
    p.add_argument("--precision", choices=("fp32", "amp"), default="amp")
    p.add_argument("--warmup", type=int, default=10)
    p.add_argument("--max-time", type=float, default=8.0)
    a = p.parse_args()
    import torchvision

    dev = torch.device("cuda")
    torch.backends.cudnn.benchmark = True
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = True
    model = getattr(torchvision.models, a.model)(num_classes=1000).to(dev)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    scaler = torch.amp.GradScaler("cuda", enabled=a.precision == "amp")
    x = torch.randn(a.batch_size, 3, a.image_size, a.image_size, device=dev)
    y = torch.randint(0, 1000, (a.batch_size,), device=dev)

    def step() -> None:
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cuda", dtype=torch.float16, enabled=a.precision == "amp"):
            loss = torch.nn.functional.cross_entropy(model(x), y)
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()

    for _ in range(a.warmup):
        step()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    steps, t0 = 0, time.perf_counter()
    start.record()
    while time.perf_counter() - t0 < a.max_time:
        step()
        steps += 1
    end.record()
    end.synchronize()
    seconds = start.elapsed_time(end) / 1e3
    print(json.dumps({"throughput": steps * a.batch_size / seconds, "steps": steps, "seconds": seconds}))


if __name__ == "__main__":
    main()
