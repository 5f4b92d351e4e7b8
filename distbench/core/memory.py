"""Memory per device beside the ZeRO paper's model-state formulas (distbench.models.decoders): for a torch
training point, the model states its strategy keeps per device (Strategy.sharded_states, Strategy.master_copy),
the activations a decoder keeps for backward (an estimate), and what the point measured: on CPU workers the
peak RSS above the RSS before the model was built, on GPUs the most memory torch had allocated."""

from __future__ import annotations

from distbench.core.strategies import STRATEGIES
from distbench.models import decoders

OPTIMIZER = "sgd_momentum"
"""What every distbench torch strategy trains with: torch.optim.SGD with momentum, fp32 weights (bf16 autocast
keeps them fp32), so 4 + 4 + 4 bytes per parameter, not mixed-precision Adam's 2 + 2 + 12. DeepSpeed's ZeRO
optimizer wraps it and adds an fp32 master copy (Strategy.master_copy): 4 + 4 + 8."""


def optimizer_for(strategy: str | None, precision: str | None = None) -> tuple[str, str]:
    """(optimizer, state precision) of a strategy's model states, the names decoders.state_bytes_per_param
    takes: DeepSpeed's fp16 mode (--precision amp) keeps fp16 parameters and gradients beside its fp32 master."""
    entry = STRATEGIES.get(str(strategy))
    if entry is not None and entry.master_copy:
        return "sgd_momentum_master", "fp16" if precision == "amp" else "fp32"
    return OPTIMIZER, "fp32"


def formula_text(per: dict[str, float], sharded: tuple[str, ...]) -> str:
    """'4P (params) + 4P (grads) + 4P/N (optimizer)': the formula with the states the strategy shards over N."""
    return " + ".join(f"{b:g}P{'/N' if k in sharded else ''} ({k})" for k, b in per.items())


def measured_bytes(record: dict) -> int | None:
    """What the point measured per device: on CPU workers the largest rank's peak RSS less its RSS before the
    model was built (None where that was not recorded), on GPUs the most any device had allocated."""
    if record.get("device") == "cuda":
        return record.get("peak_memory_bytes")
    peaks = record.get("peak_memory_per_rank_bytes") or [record.get("peak_memory_bytes")]
    before = record.get("memory_before_model_per_rank_bytes") or []
    if record.get("device") == "cpu" and len(before) == len(peaks) and all(before) and all(peaks):
        return max(p - b for p, b in zip(peaks, before))
    return None


def state_memory(record: dict) -> dict | None:
    """{'params', 'sharded_states', 'optimizer', 'formula_bytes', 'formula', 'activation_bytes',
    'measured_bytes', 'ratio'} of a torch training point, or None where the parameter count is not known
    (a decoder's comes from its shape, any other model's from the record's `params`).

    measured_bytes (measured_bytes()): on CPU workers the torch runtime, gloo and the launcher's own memory are
    left out; it still holds activations, communication buffers, the modules the wrapper imported and
    allocator slack, which the formula does not (docs/methodology.md, "Decoder memory"). activation_bytes: a
    decoder's estimate (decoders.activation_bytes), None for other models. ratio: measured / formula."""
    config = record.get("config") or {}
    shape = None
    if config.get("model") in decoders.FAMILIES:
        shape = decoders.decoder_shape(config["model"], config.get("model_size"))
        params = decoders.parameter_count(shape)
    elif isinstance(record.get("params"), int) and record.get("framework", "torch") == "torch":
        params = record["params"]
    else:
        return None
    strategy = STRATEGIES.get(str(record.get("strategy")))
    sharded = strategy.sharded_states if strategy else ()
    n = record.get("world_size") or 1
    optimizer, precision = optimizer_for(record.get("strategy"), config.get("precision"))
    per = decoders.state_bytes_per_param(optimizer, precision)
    formula = decoders.model_state_bytes(params, n, sharded, optimizer, precision)
    activations = None
    if shape is not None and config.get("seq_len") and config.get("per_device_batch"):
        value = 2 if config.get("precision") in ("bf16", "amp") else 4
        checkpointed = bool(config.get("activation_checkpointing"))
        activations = decoders.activation_bytes(
            shape, config["per_device_batch"], config["seq_len"], value, checkpointed
        )
    measured = measured_bytes(record)
    return {
        "params": params,
        "sharded_states": sharded,
        "optimizer": optimizer,
        "formula": f"{formula_text(per, sharded)} = {formula / 2**20:.0f} MiB at P = {params:,}, N = {n}",
        "formula_bytes": formula,
        "activation_bytes": activations,
        "measured_bytes": measured,
        "ratio": measured / formula if measured else None,
    }
