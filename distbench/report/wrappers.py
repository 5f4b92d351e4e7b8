"""The wrapper comparison (issue 13): what a wrapper or sharded strategy costs against plain torch at 1 device and
against ddp at the same N, as ratios with their 95% CIs, table rows and sentences (sections.wrappers_section)."""

from __future__ import annotations

from dataclasses import dataclass

from distbench import analysis as an
from distbench.analysis import Sweep, num
from distbench.analysis.output import fmt_bytes, fmt_num
from distbench.core.strategies import FRAMEWORK_REFERENCE, STRATEGIES
from distbench.report.tables import batch_values

STEPS_SCOPE = "within-run noise (batch means over the point's stored step times)"


def is_wrapper(record: dict) -> bool:
    strategy = STRATEGIES.get(str(record.get("strategy")))
    return bool(strategy and strategy.group in ("wrappers", "sharded", "engines"))


@dataclass
class Ratio:
    """throughput(point) / throughput(ref) with its 95% CI (None, and `how` says why, when there is none)."""

    value: float
    ci: tuple[float, float] | None
    how: str

    @property
    def verdict(self) -> str:
        if self.ci is None:
            return f"no CI ({self.how})"
        return "slower" if self.ci[1] < 1 else "faster" if self.ci[0] > 1 else "within noise"

    @property
    def span(self) -> str:
        return f"{self.ci[0]:.3f}-{self.ci[1]:.3f}" if self.ci else "no CI"

    def cell(self) -> str:
        return f"{self.value:.3f}x ({self.span})"

    def words(self, ref: str) -> str:
        ci = f" (95% CI {self.span})" if self.ci else ""
        return f"{self.value:.3f}x {ref}'s throughput{ci}: {self.verdict}"


def throughput_ratio(sweep: Sweep, ref: dict | None, r: dict, scopes: set[str]) -> Ratio | None:
    """The ratio against `ref` (None without a successful reference); adds what its CI covers to `scopes`."""
    if ref is None or not num(ref.get("throughput")) or not num(r.get("throughput")):
        return None
    ci, how = an.throughput_ratio_ci(sweep, ref, sweep, r)
    if ci:
        scopes.update(str(p.get("ci_scope") or STEPS_SCOPE) if an.throughput_ci(p) else STEPS_SCOPE for p in (ref, r))
    return Ratio(num(r["throughput"]) / num(ref["throughput"]), ci, how)


def wrapper_rows(sweep: Sweep, points: list[dict], scopes: set[str]) -> tuple[list[list[str]], list[str], dict]:
    """One workload's wrapper points: table rows, a sentence per strategy, and each strategy's 1-device
    verdict against torch (strategy -> Ratio or None)."""
    order = list(STRATEGIES)
    wrappers = sorted(
        (r for r in points if is_wrapper(r)),
        key=lambda r: (order.index(r["strategy"]), int(r.get("nodes") or 1), int(r["world_size"])),
    )
    reference = FRAMEWORK_REFERENCE["torch"]  # the wrappers wrap torch's DistributedDataParallel
    ddp = {(int(r["world_size"]), int(r.get("nodes") or 1)): r for r in points if r.get("strategy") == reference}
    rows, words, one_device = [], [], {}
    for r in wrappers:
        n, name = int(r["world_size"]), an.series_name(r)
        base = an.baseline_for(r, points) if n == 1 else None
        ref = ddp.get((n, int(r.get("nodes") or 1)))
        vs_torch, vs_ddp = throughput_ratio(sweep, base, r, scopes), throughput_ratio(sweep, ref, r, scopes)
        mem, ref_mem = batch_values(r)["peak_memory_bytes"], batch_values(ref)["peak_memory_bytes"] if ref else None
        mem_ratio = mem / ref_mem if mem and ref_mem else None
        rows.append(
            [
                name,
                str(n),
                fmt_num(r.get("throughput"), ".2f"),
                vs_torch.cell() if vs_torch else "no 'torch' baseline" if n == 1 else "-",
                vs_ddp.cell() if vs_ddp else f"no '{reference}' point at N={n}",
                fmt_bytes(mem or None),
                fmt_bytes(ref_mem or None),
                fmt_num(mem_ratio, ".2f") + ("x" if mem_ratio else ""),
            ]
        )
        parts = [vs_torch.words("plain torch")] if vs_torch else []
        parts += [vs_ddp.words(reference)] if vs_ddp else []
        parts += [f"peak memory {mem_ratio:.2f}x {reference}'s"] if mem_ratio else []
        parts += [loop_cost_words(r)] if loop_cost_words(r) else []
        words.append(f"{name} at N={n}: " + ("; ".join(parts) or "no reference point to compare with") + ".")
        if n == 1:
            one_device[name] = vs_torch
    return rows, words, one_device


def loop_cost_words(r: dict) -> str | None:
    """The part of a loop-owning wrapper's step that is its own loop (measured in the worker: the step time
    minus the step function's, median per step; distbench/workers/wrapper_loop.SteppedLoop.around_s), or None."""
    around, step = (r.get("wrapper") or {}).get("loop_around_step_s"), r.get("step_time_median_s")
    if around is None or not step:
        return None
    return (
        f"its own loop around the step (events and hooks, plus the thread hand-off) {around * 1e3:.2f} ms a step, "
        f"{around / step:.2%} of its median step; the rest of any gap to plain torch is outside that loop "
        "(the step itself, the process, or run-to-run noise)"
    )


def wrapper_answer(one_device: dict, skipped: list[dict]) -> str:
    """The seed's question, 'do the wrappers cost training speed?', answered from the 1-device ratios."""
    groups: dict[str, list[str]] = {}
    for name, ratio in one_device.items():
        if ratio is None:
            label, entry = "with no 'torch' baseline to compare with", name
        elif ratio.ci is None:
            label, entry = "without a CI, so not settled", f"{name} ({ratio.value:.3f}x)"
        elif ratio.verdict == "within noise":
            label = "within noise of plain torch (95% CI includes 1.0)"
            entry = f"{name} ({ratio.value:.3f}x, 95% CI {ratio.span})"
        else:
            label = {
                "slower": "measurably slower than plain torch (95% CI below 1.0)",
                "faster": "measurably faster than plain torch (95% CI above 1.0)",
            }[ratio.verdict]
            cost = 1 - ratio.value
            entry = f"{name} ({abs(cost):.1%} {'slower' if cost >= 0 else 'faster'})"
        groups.setdefault(label, []).append(entry)
    lines = [f"{label}: {', '.join(names)}" for label, names in groups.items()]
    unmeasured = sorted({str(r.get("strategy")) for r in skipped if int(r.get("world_size") or 0) == 1})
    lines += [f"not measured: {', '.join(unmeasured)} (see below)"] if unmeasured else []
    if not lines:
        return "No wrapper or sharded strategy has a successful 1-device point, so its cost is not measured."
    return "At 1 device, " + "; ".join(lines) + "."


def timing_lines(points: list[dict]) -> list[str]:
    """How each strategy's steps were timed, where its records say so (a wrapper that owns its loop)."""
    notes: dict[str, dict] = {}  # timing note -> its strategies (a dict: ordered, once each)
    for r in points:
        if r.get("timing"):
            notes.setdefault(str(r["timing"]), {})[str(r.get("strategy"))] = None
    lines = [f"{', '.join(names)}: timing, as its records say: {note}." for note, names in notes.items()]
    if lines:
        lines.append(
            "The other strategies' records carry no timing note: distbench's own step function, timed like ddp's."
        )
    return lines
