"""Memory per device of the decoder models beside the ZeRO paper's model-state formulas.

Runs one `distbench scale` sweep of a decoder (default: gpt2 l8-d512-h8, about 51M parameters) with the
replicated and the sharded torch strategies at N = 2 (--gpus) on CPU workers, at batch 1 and sequence 32 so
that activations are small against the model states, and writes a section of docs/benchmarks.md: per point
the formula (fp32 SGD with momentum: 4 bytes each of parameters, gradients and momentum, and DeepSpeed's fp32
master copy, the sharded ones divided by N) and the measured peak RSS above the RSS before the model was built (largest rank).

    PYTHONPATH=. .venv/bin/python benchmarks/decoder_memory.py [--model gpt2 --model-size l8-d512-h8]
"""

from __future__ import annotations

import argparse
import datetime
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="gpt2")
    ap.add_argument("--model-size", default="l8-d512-h8")
    ap.add_argument("--strategies", default="ddp,fsdp,deepspeed")
    ap.add_argument("--gpus", default="2")
    ap.add_argument("--out", default="docs/benchmarks.md")
    ap.add_argument(
        "--mmap-threshold",
        type=int,
        default=65536,
        help="MALLOC_MMAP_THRESHOLD_ of the workers (0: glibc's dynamic default): allocations above it are "
        "mapped and unmapped on free, so a freed tensor leaves the RSS",
    )
    ap.add_argument("--db", default=None, help="keep the sweep in this store (default: a temporary one)")
    args = ap.parse_args()
    from mdsection import write_section

    from distbench.core.memory import state_memory
    from distbench.results.store import Store

    reuse = bool(args.db and os.path.exists(args.db))
    load = "load average not recorded" if reuse else f"load average {os.getloadavg()[0]:.1f} before"
    with tempfile.TemporaryDirectory() as tmp:
        db = args.db or os.path.join(tmp, "mem.db")
        cmd = [sys.executable, "-m", "distbench.cli", "scale", "--model", args.model, "--model-size"]
        cmd += [args.model_size, "--strategy", args.strategies, "--gpus", args.gpus, "--device", "cpu"]
        cmd += ["--batch-size", "1", "--seq-len", "32", "--steps", "3", "--warmup", "1", "--target-ci", "0"]
        cmd += ["--no-comm", "--results", db, "--telemetry-interval", "0"]
        env = dict(os.environ, **({"MALLOC_MMAP_THRESHOLD_": str(args.mmap_threshold)} if args.mmap_threshold else {}))
        if not reuse:  # an existing --db: report its last sweep again
            subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, env=env)
        store = Store(db)
        sweep = store.sweeps(limit=1)[0]["id"]
        records = store.points(sweep)
    rows = []
    for r in records:
        m = state_memory(r)
        if r.get("status") != "ok" or m is None:
            rows.append(f"| {r['strategy']} | {r['world_size']} | {r.get('status')} | | | | |")
            continue
        measured, ratio = m["measured_bytes"], m["ratio"]
        rows.append(
            f"| {r['strategy']} | {r['world_size']} | {', '.join(m['sharded_states']) or 'none'} | "
            f"{m['formula'].split(' = ')[0]} | {m['formula_bytes'] / 2**20:.0f} | {'-' if measured is None else f'{measured / 2**20:.0f}'} | "
            f"{'-' if ratio is None else f'{ratio:.2f}'} |"
        )
    params = next((state_memory(r)["params"] for r in records if state_memory(r)), 0)
    malloc = (
        f"glibc's mmap threshold pinned at {args.mmap_threshold} bytes (MALLOC_MMAP_THRESHOLD_), so freed tensors "
        "leave the RSS"
        if args.mmap_threshold
        else "glibc's default (dynamic) mmap threshold"
    )
    text = (
        f"""## Decoder memory per device beside the ZeRO formulas: {args.model} {args.model_size}

`benchmarks/decoder_memory.py`, {datetime.date.today()}: `{args.model} --model-size {args.model_size}`
({params:,} parameters), batch 1, sequence 32, fp32, torch SGD with momentum, {args.strategies} at N = {args.gpus}
on CPU workers (gloo) of a 2-core machine shared with other jobs ({load});
{malloc}.
Formula: model states per device, 4 bytes each of parameters, gradients and momentum (ddp, fsdp) plus
DeepSpeed's fp32 master copy (4 more: 16 bytes a parameter), those the strategy shards divided by N (ZeRO's
formulas with the optimizer used instead of mixed-precision Adam). Measured: the largest rank's peak RSS over
the timed steps less its RSS before the model was built, so the torch runtime and gloo are left out; it
still holds activations, the logits, the wrapper's buffers, the modules it imported and allocator slack.
docs/benchmarks.md ("Decoder memory accounted for") takes these apart; docs/methodology.md ("Decoder
memory") explains them.

| strategy | N | sharded states | formula | formula (MiB) | measured (MiB) | measured / formula |
|---|---:|---|---|---:|---:|---:|
"""
        + "\n".join(rows)
        + "\n"
    )
    write_section(args.out, text)
    print(text)


if __name__ == "__main__":
    main()
