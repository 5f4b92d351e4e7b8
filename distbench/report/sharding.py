"""The report's "What sharding costs and buys" section: per strategy (ddp and the sharded strategies) at each N,
memory per device beside the model-state formula of the optimizer and precision the point trained with (plus a
decoder's activations), the communication the three-term split measured beside the traffic the strategy is
expected to send relative to ddp's, the step time against ddp's, and tokens/s. It appears when the sweep
has a decoder model or a sharded strategy."""

from __future__ import annotations

from distbench import analysis as an
from distbench.analysis import Sweep, num
from distbench.analysis.output import fmt_num, tokens_per_s
from distbench.core.memory import optimizer_for, state_memory
from distbench.core.strategies import FRAMEWORK_REFERENCE, STRATEGIES
from distbench.models import decoders
from distbench.report.blocks import Bullets, Heading, Section, Table, Text
from distbench.results import split as split_mod

MIB = 2**20
REFERENCE = FRAMEWORK_REFERENCE["torch"]

FORMULAS = (
    "Model states per device follow the ZeRO paper (Rajbhandari et al. 2020, arXiv 1910.02054, section 3.1): "
    "with mixed-precision Adam and P parameters, 2P fp16 parameters + 2P fp16 gradients + 12P fp32 master "
    "copy, momentum and variance, so replicated (ddp) 16P, stage 1 4P + 12P/N, stage 2 2P + 14P/N, stage 3 "
    "16P/N; FSDP's full shard is stage 3 (Zhao et al. 2023, arXiv 2304.11277). The formula in each row is the "
    "one for the optimizer and precision the point used: ddp and fsdp train with torch SGD with momentum on "
    "fp32 weights (bf16 autocast keeps them fp32): 4P parameters + 4P gradients + 4P momentum, so ddp 12P, "
    "stage 1 8P + 4P/N, stage 2 4P + 8P/N, stage 3 and fsdp 12P/N. DeepSpeed's ZeRO optimizer wraps the same "
    "SGD and keeps an fp32 master copy of its partition even when the model is fp32: 4P + 4P + (4P master + "
    "4P momentum), 16P in all, split as stage 1 8P + 8P/N, stage 2 4P + 12P/N, stage 3 16P/N (in its fp16 "
    "mode, --precision amp, the parameters and gradients are 2P each). Adam on fp32 weights would be "
    "4P + 4P + 8P, 16P too, with the same split as DeepSpeed's."
)
MEMORY_NOTE = (
    "Measured: per device, on CPU workers the largest worker's peak RSS over the timed steps less its RSS "
    "before the model was built (the interpreter, torch and gloo left out), on GPUs the most memory torch "
    "had allocated. Activations: an estimate for decoders (Korthikanti et al. 2022, arXiv 2205.05198, "
    "without dropout and with fused attention: 16 values per token and hidden unit per layer, plus the fp32 "
    "logits and their gradient), '-' for other models. Expected = model states + activations. The "
    "difference is what the formulas leave out: the wrapper's buffers (ddp's gradient buckets, a second "
    "copy of the gradients; fsdp's gathered blocks; DeepSpeed's reduce and gather buckets, whose default "
    "sizes exceed a small model), the modules the wrapper imports and allocator slack "
    "(docs/methodology.md, 'Decoder memory', accounts for them component by component)."
)
TRAFFIC_NOTE = (
    "Communication: the three-term split's communication term (the synchronized step less the step with one "
    "tiny all-reduce in place of the gradient collectives), with its 95% CI, where the point measured a "
    "split. fsdp and ZeRO-3 are expected to send 1.5x ddp's bytes (the parameters all-gathered in forward and "
    "again in backward, the gradients reduce-scattered: 3(N-1)/N P values against a ring all-reduce's "
    "2(N-1)/N P; ZeRO paper, section 7.2.2), ZeRO-1 and -2 1x. A sharded strategy has no no-sync variant "
    "(its gathers and shard updates are part of the step), so its split is not measured: the step time "
    "against ddp's at the same N is what it measurably costs, beside the extra time 1.5x ddp's traffic "
    "would take at ddp's measured rate (0.5x ddp's communication term). Time is proportional to bytes only "
    "where the link, not latency or overlap, sets the pace."
)


def applies(sweep: Sweep) -> bool:
    """The sweep has a decoder language model or a sharded strategy."""
    return any(
        (r.get("config") or {}).get("model") in decoders.FAMILIES
        or bool(getattr(STRATEGIES.get(str(r.get("strategy"))), "sharded_states", ()))
        for r in sweep.scaling_points
    )


def _shown(r: dict) -> bool:
    entry = STRATEGIES.get(str(r.get("strategy")))
    return entry is not None and entry.framework == "torch" and (entry.name == REFERENCE or bool(entry.sharded_states))


def _order(r: dict) -> tuple:
    names = list(STRATEGIES)
    s = str(r.get("strategy"))
    return (names.index(s) if s in names else len(names), s, int(r.get("world_size") or 0))


def step_s(r: dict) -> float | None:
    """Mean time per step over the measured window: the step's samples / throughput (every point alike)."""
    cfg, throughput = r.get("config") or {}, num(r.get("throughput"))
    batch = cfg.get("per_device_batch")
    if not throughput or not batch:
        return None
    return batch * int(r.get("world_size") or 1) / throughput


def _mib(value) -> str:
    """MiB, whole above 10, to 0.1 below (a tiny model's states)."""
    if value is None:
        return "-"
    return f"{value / MIB:,.0f}" if value >= 10 * MIB else f"{value / MIB:.1f}"


def _shape(sharded: tuple[str, ...], optimizer: str, precision: str) -> str:
    """'4P + 12P/N': the formula's replicated and sharded bytes per parameter."""
    per = decoders.state_bytes_per_param(optimizer, precision)
    whole = sum(b for k, b in per.items() if k not in sharded)
    split = sum(b for k, b in per.items() if k in sharded)
    return " + ".join(t for t in (f"{whole:g}P" if whole else "", f"{split:g}P/N" if split else "") if t)


def memory_rows(points: list[dict]) -> tuple[list[str], list[list[str]]]:
    headers = [
        "strategy",
        "N",
        "sharded states",
        "model-state formula",
        "model states (MiB)",
        "activations, estimate (MiB)",
        "expected (MiB)",
        "measured per device (MiB)",
        "measured / expected",
    ]
    rows = []
    for r in points:
        m = state_memory(r)
        if m is None:
            rows.append([an.series_name(r), str(r.get("world_size")), "-", "parameter count not recorded"] + ["-"] * 5)
            continue
        optimizer, precision = optimizer_for(r.get("strategy"), (r.get("config") or {}).get("precision"))
        expected = m["formula_bytes"] + (m["activation_bytes"] or 0)
        measured = m["measured_bytes"]
        rows.append(
            [
                an.series_name(r),
                str(r.get("world_size")),
                ", ".join(m["sharded_states"]) or "none",
                _shape(m["sharded_states"], optimizer, precision),
                _mib(m["formula_bytes"]),
                _mib(m["activation_bytes"]),
                _mib(expected),
                _mib(measured),
                f"{measured / expected:.2f}x" if measured else "-",
            ]
        )
    return headers, rows


def _comm(r: dict | None) -> tuple[float, list | None] | None:
    split = (r or {}).get("comm_split")
    if not split or split.get("communication_s") is None:
        return None
    return split["communication_s"], split.get("communication_ci")


def traffic_rows(points: list[dict], reference: dict[int, dict]) -> tuple[list[str], list[list[str]], list[str]]:
    """The time table and, per sharded point with a ddp point beside it, one sentence on its cost."""
    headers = [
        "strategy",
        "N",
        "tokens/s",
        "tokens/s per device",
        "step (ms)",
        f"step vs {REFERENCE}'s",
        "communication, split (ms, 95% CI)",
        f"vs {REFERENCE}'s communication",
        f"traffic expected vs {REFERENCE}'s",
    ]
    rows, words = [], []
    base_traffic = STRATEGIES[REFERENCE].traffic[0]
    for r in points:
        n = int(r.get("world_size") or 0)
        entry = STRATEGIES[str(r.get("strategy"))]
        ref = reference.get(n)
        step, ref_step = step_s(r), step_s(ref) if ref else None
        comm, ref_comm = _comm(r), _comm(ref)
        if comm:
            text = split_mod.term_text(comm[0], comm[1], digits=2).replace(" ms", "", 1)
        else:
            text = "not measured: no no-sync variant" if entry.sharded_states and n > 1 else "-"
        ratio = f"{comm[0] / ref_comm[0]:.2f}x" if comm and ref_comm and ref_comm[0] > 0 and ref is not r else "-"
        expected = entry.traffic[0] / base_traffic
        rows.append(
            [
                an.series_name(r),
                str(n),
                fmt_num(tokens_per_s(r), ",.0f"),
                fmt_num(tokens_per_s(r, per_device=True), ",.0f"),
                fmt_num(step, ".1f", 1e3),
                f"{step / ref_step:.2f}x" if step and ref_step and ref is not r else "-",
                text,
                ratio,
                f"{expected:g}x" if n > 1 else "-",
            ]
        )
        if entry.sharded_states and n > 1 and step and ref_step and ref is not r:
            extra = step - ref_step
            line = f"{an.point_name(r)}: its step is {abs(extra) * 1e3:.1f} ms {'longer' if extra >= 0 else 'shorter'} than {REFERENCE}'s"
            if ref_comm and ref_comm[0] > 0:
                line += (
                    f"; {expected:g}x {REFERENCE}'s traffic at {REFERENCE}'s measured rate would add "
                    f"{(expected - 1) * ref_comm[0] * 1e3:.1f} ms ({expected - 1:g} x its communication term, "
                    f"{ref_comm[0] * 1e3:.1f} ms)"
                )
            else:
                line += f"; {REFERENCE}'s communication term was not measured, so the traffic's share is not known"
            m = state_memory(r)
            mr = state_memory(ref) if ref else None
            if m and mr and m["measured_bytes"] and mr["measured_bytes"]:
                line += (
                    f"; it holds {m['measured_bytes'] / mr['measured_bytes']:.2f}x {REFERENCE}'s memory per device "
                    f"(model states {m['formula_bytes'] / mr['formula_bytes']:.2f}x by the formulas)"
                )
            words.append(line + ".")
    return headers, rows, words


def sharding_section(sweep: Sweep) -> Section | None:
    if not applies(sweep):
        return None
    groups = {k: [r for r in g if _shown(r)] for k, g in an.group_by_workload(sweep.scaling_points).items()}
    groups = {k: g for k, g in groups.items() if g}
    blocks: list = []
    for key, group in groups.items():
        ok = sorted((r for r in group if r.get("status") == "ok"), key=_order)
        blocks += [Heading(an.workload_label(key, groups))] if len(groups) > 1 else []
        if not ok:
            blocks.append(Text("No ddp or sharded point of this workload produced a measurement."))
            continue
        reference = {int(r.get("world_size") or 0): r for r in ok if r.get("strategy") == REFERENCE}
        headers, rows = memory_rows(ok)
        blocks += [Heading("Memory per device"), Table(headers, rows)]
        headers, rows, words = traffic_rows(ok, reference)
        blocks += [Heading("Traffic, step time and tokens/s"), Table(headers, rows)]
        blocks += [Bullets(words)] if words else []
    if not groups:
        blocks.append(Text("The sweep has no ddp or sharded torch point."))
    blocks += [Text(FORMULAS, "muted"), Text(MEMORY_NOTE, "muted"), Text(TRAFFIC_NOTE, "muted")]
    return Section("sharding", "Sharding", blocks, "What sharding costs and buys")
