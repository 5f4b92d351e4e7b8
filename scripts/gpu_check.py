"""Two steps of scripts/gpu-check.sh that need arithmetic.

pairs: the `torch` baseline (distbench run) and the hand-written loop (scripts/gpu_handloop.py) alternated
    back to back, --pairs times, each a whole process; prints each throughput and the ratio distbench / hand
    (median of the pairs' ratios) with a bootstrap 95% CI over the pairs (few pairs: a wide, rough interval).
clock: reads `distbench run --format json` on stdin and prints, per point, the step-time clock used and how
    the sum of its step times compares with the host's wall time of the measured window.
memory: reads `distbench scale --format json` of a decoder sweep on stdin and prints, per point, tokens/s, MFU
    and the peak allocated memory per GPU beside the model-state formula (distbench.core.memory's optimizer),
    and what is above the states in bytes per layer, token and hidden unit, the unit of Korthikanti et al.'s
    activation estimate (arXiv:2205.05198: 34 s b h bytes a layer in 16-bit without recomputation, less the
    attention scores with a fused attention kernel; with whole-block recomputation only the block inputs)."""

from __future__ import annotations

import argparse
import json
import random
import statistics
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent


def ratio_ci(ratios: list[float], draws: int = 10_000, seed: int = 0) -> tuple[float, float]:
    """Percentile bootstrap 95% CI of the median of `ratios` (resampling the pairs)."""
    rng = random.Random(seed)
    meds = sorted(statistics.median(rng.choices(ratios, k=len(ratios))) for _ in range(draws))
    return meds[int(0.025 * draws)], meds[int(0.975 * draws) - 1]


def pairs(a: argparse.Namespace) -> int:
    distbench = [sys.executable, "-c", "import sys; from distbench.cli import main; sys.exit(main())"]
    ours = [*distbench, "run", "--strategy", "torch", "--gpus", "1", "--device", "cuda", "--model", a.model]
    ours += ["--batch-size", str(a.batch_size), "--precision", "amp", "--max-time", str(a.max_time)]
    ours += ["--format", "json", "--results", a.results]
    hand = [sys.executable, str(HERE / "gpu_handloop.py"), "--model", a.model, "--batch-size", str(a.batch_size)]
    hand += ["--precision", "amp", "--max-time", str(a.max_time)]
    ratios = []
    for i in range(a.pairs):
        order = (("distbench", ours), ("hand", hand)) if i % 2 == 0 else (("hand", hand), ("distbench", ours))
        got = {}
        for name, cmd in order:
            done = subprocess.run(cmd, capture_output=True, text=True)
            if done.returncode != 0:
                print(f"pair {i + 1}: {name} failed (exit {done.returncode}): {done.stderr.strip()[-500:]}")
                return 1
            doc = json.loads(done.stdout[done.stdout.index("[") :] if name == "distbench" else done.stdout)
            got[name] = doc[0]["throughput"] if name == "distbench" else doc["throughput"]
            if got[name] is None:
                print(f"pair {i + 1}: {name} has no throughput: {doc[0].get('status')}: {doc[0].get('reason')}")
                return 1
        ratios.append(got["distbench"] / got["hand"])
        print(
            f"pair {i + 1}: distbench {got['distbench']:.1f} samples/s, hand loop {got['hand']:.1f}: {ratios[-1]:.3f}"
        )
    low, high = ratio_ci(ratios)
    print(
        f"distbench / hand loop: median {statistics.median(ratios):.3f}, 95% CI {low:.3f}..{high:.3f} ({a.pairs} pairs)"
    )
    return 0


def clock(_: argparse.Namespace) -> int:
    for r in json.load(sys.stdin):
        median, steps, window = r.get("step_time_median_s"), r.get("measured_steps"), r.get("measured_window_s")
        if r.get("status") != "ok" or not (median and steps and window):
            print(f"{r.get('strategy')}: {r.get('status')}: {r.get('reason') or 'no step times'}")
            continue
        rule = (r.get("stopping") or {}).get("clock", "host")
        print(
            f"{r['strategy']}: clock {rule}; step median {median * 1e3:.3f} ms x {steps} steps = "
            f"{median * steps:.3f} s vs the window's host wall time {window:.3f} s ({median * steps / window - 1:+.1%})"
        )
    return 0


def memory(_: argparse.Namespace) -> int:
    from distbench.core.memory import OPTIMIZER
    from distbench.core.strategies import STRATEGIES
    from distbench.models import decoders

    doc = json.load(sys.stdin)
    for r in doc["points"] if isinstance(doc, dict) else doc:
        c = r.get("config") or {}
        name = (
            f"{r.get('strategy')} N={r.get('world_size')} ckpt={'on' if c.get('activation_checkpointing') else 'off'}"
        )
        if r.get("status") != "ok" or not r.get("peak_memory_bytes"):
            print(f"{name}: {r.get('status')}: {r.get('reason') or 'no peak memory'}")
            continue
        shape = decoders.decoder_shape(c["model"], c.get("model_size"))
        params = decoders.parameter_count(shape)
        strategy = STRATEGIES.get(str(r.get("strategy")))
        sharded = strategy.sharded_states if strategy else ()
        states = decoders.model_state_bytes(params, r.get("world_size") or 1, sharded, OPTIMIZER)
        peak, seq, batch = r["peak_memory_bytes"], c.get("seq_len"), r.get("per_device_batch")
        above = peak - states
        unit = above / (shape.layers * seq * batch * shape.hidden)
        mfu = f"{r['mfu']:.1%}" if r.get("mfu") is not None else "n/a"
        print(
            f"{name} {c['model']} {c.get('model_size')} ({params:,} params) seq {seq} batch {batch}: "
            f"{r['throughput'] * seq:,.0f} tokens/s, MFU {mfu}; peak allocated {peak / 2**30:.2f} GiB, "
            f"model states ({OPTIMIZER}) {states / 2**30:.2f} GiB, above them {above / 2**30:.2f} GiB "
            f"= {unit:.1f} bytes per layer x token x hidden unit"
        )
    return 0


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="what", required=True)
    q = sub.add_parser("pairs")
    q.add_argument("--model", default="resnet50")
    q.add_argument("--batch-size", type=int, default=256)
    q.add_argument("--max-time", type=float, default=8.0)
    q.add_argument("--pairs", type=int, default=3)
    q.add_argument("--results", required=True)
    sub.add_parser("clock")
    sub.add_parser("memory")
    a = p.parse_args()
    return {"pairs": pairs, "clock": clock, "memory": memory}[a.what](a)


if __name__ == "__main__":
    sys.exit(main())
