"""Memory per device beside the ZeRO paper's model-state formulas (distbench.models.decoders): for a decoder
point, the model states its strategy keeps per device (Strategy.sharded_states) and what the point measured
above the memory its processes held before the model was built."""

from __future__ import annotations

from distbench.core.strategies import STRATEGIES
from distbench.models import decoders

OPTIMIZER = "sgd_momentum"
"""What every distbench strategy trains with: torch.optim.SGD with momentum, fp32 weights (bf16 autocast keeps
them fp32), so 4 + 4 + 4 bytes per parameter, not mixed-precision Adam's 2 + 2 + 12."""


def state_memory(record: dict) -> dict | None:
    """{'params', 'sharded_states', 'formula_bytes', 'formula', 'measured_bytes', 'ratio'} of a decoder
    point, or None for other models. measured_bytes: the largest rank's peak RSS less its RSS before the
    model was built (CPU workers; None where that was not recorded), so the torch runtime, gloo and the
    launcher's own memory are left out; it still holds activations, communication buffers and allocator
    slack, which the formula does not."""
    config = record.get("config") or {}
    if config.get("model") not in decoders.FAMILIES:
        return None
    shape = decoders.decoder_shape(config["model"], config.get("model_size"))
    params = decoders.parameter_count(shape)
    strategy = STRATEGIES.get(str(record.get("strategy")))
    sharded = strategy.sharded_states if strategy else ()
    n = record.get("world_size") or 1
    per = decoders.state_bytes_per_param(OPTIMIZER)
    terms = " + ".join(f"{b:g}P{'/N' if k in sharded else ''} ({k})" for k, b in per.items())
    formula = decoders.model_state_bytes(params, n, sharded, OPTIMIZER)
    measured = None
    peaks = record.get("peak_memory_per_rank_bytes") or [record.get("peak_memory_bytes")]
    before = record.get("memory_before_model_per_rank_bytes") or []
    if record.get("device") == "cpu" and len(before) == len(peaks) and all(before) and all(peaks):
        measured = max(p - b for p, b in zip(peaks, before))
    return {
        "params": params,
        "sharded_states": sharded,
        "formula": f"{terms} = {formula / 2**20:.0f} MiB at P = {params:,}, N = {n}",
        "formula_bytes": formula,
        "measured_bytes": measured,
        "ratio": measured / formula if measured else None,
    }
