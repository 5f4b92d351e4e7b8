"""A trace's profiled steps attributed to the categories (distbench.profile.categories), the same way for
torch and TF traces (both are trace-event JSON by then: distbench.profile.trace).

Each step is the span of its marker event (MARKERS, put around each profiled step by the hooks). Every instant
of it goes to exactly one place, so the categories add up to the traced step by construction:

- on each thread, the instant belongs to the deepest event running there (a conv op's own work, not the
  `aten::conv2d` wrapper around it);
- an event's category is the outermost categorized event around it (an `aten::mul_` inside the optimizer's
  step is the optimizer's, an `aten::mean` inside adaptive average pooling is pooling), except that anything
  inside a collective is communication, and that layers inside an optimizer step keep theirs (YIELDS_TO);
- an instant where operations of some category run (on GPUs: device kernels) is split equally among them
  (TF runs ops on two threads at once); else it is host overhead when some framework call runs, else idle.

What the categories cannot add up to is the step the clock measured around each profiled step (the hooks
time it, device synchronized): that difference is reported as what is left over."""

from __future__ import annotations

import re
import statistics
from collections import defaultdict
from dataclasses import dataclass, field

from distbench.profile.categories import CATEGORIES, DEVICE_ONLY, NOT_ON_GPU, classify

MARKER = "distbench.step"
"""The name (prefix) of the event the TF hook puts around each profiled step."""
TORCH_MARKER = "ProfilerStep#"
"""The torch hook's: the name torch.profiler itself gives a step, which Holistic Trace Analysis looks for."""
MARKERS = (MARKER, TORCH_MARKER)
DEVICE_CATS = ("kernel", "gpu_memcpy", "gpu_memset")
"""Trace-event categories of work on a GPU (torch's Kineto names; TF's device streams are converted to them)."""
YIELDS_TO = ("convolution", "matmul", "normalisation", "pooling", "loss", "data_input")
"""What an enclosing optimizer step does not claim: Lightning's automatic optimization runs forward and backward
inside `optimizer.step(closure)`, and those layers stay theirs (their elementwise ops do count as the
optimizer's there: nothing in the trace tells them from the update's own)."""
IGNORED_CATS = ("Trace", "gpu_user_annotation")
"""Not work: the profiler's own span, and torch's copies of the host's annotations on the GPU timeline."""
TOLERANCE = 0.10
"""The categories must add up to the measured (profiled) step within this fraction."""
TOP = 5
"""Top operations kept per category."""
IN_STEP = "(in the step, outside any framework call)"

_BACKWARD_PREFIX = re.compile(r"^autograd::engine::evaluate_function:\s*")
_TF_OP = re.compile(r"^[^:\s]+:(?P<type>[A-Za-z_][A-Za-z0-9_]*)$")


@dataclass
class _Event:
    name: str
    start: float  # microseconds
    end: float
    device: bool
    category: str | None = None
    root: str | None = None  # the outermost event of its category: what "top operations" name
    root_id: int = -1
    children: list = field(default_factory=list)


def op_name(name: str) -> str:
    """A readable operation name for the top-operations lists: a TF op by its type (one name for every
    layer's Conv2D), a torch backward node without the autograd prefix, long kernel names cut."""
    m = _TF_OP.match(name)
    if m:
        return m["type"]
    name = _BACKWARD_PREFIX.sub("", name)
    return name if len(name) <= 90 else name[:87] + "..."


def events_of(trace: dict | list) -> list[dict]:
    """The complete ('X') events of a trace-event document (the JSON object form or the bare array form)."""
    items = trace.get("traceEvents", []) if isinstance(trace, dict) else trace
    return [e for e in items if isinstance(e, dict) and e.get("ph") == "X"]


def step_windows(events: list[dict]) -> list[tuple[float, float]]:
    """(start, end) in microseconds of every profiled step (MARKER events), in order."""
    marks = sorted(
        (float(e["ts"]), float(e["ts"]) + float(e.get("dur") or 0))
        for e in events
        if str(e.get("name", "")).startswith(MARKERS) and e.get("cat") not in IGNORED_CATS
    )
    return [m for m in marks if m[1] > m[0]]


def _threads(events: list[dict], start: float, end: float) -> dict[tuple, list[_Event]]:
    """The events overlapping [start, end] per (pid, tid), clipped to it, nested (children inside parents)
    and each given its category; returns the top-level events per thread."""
    per: dict[tuple, list[_Event]] = defaultdict(list)
    for e in events:
        name = str(e.get("name", ""))
        s = float(e["ts"])
        d = float(e.get("dur") or 0)
        if d <= 0 or s >= end or s + d <= start or e.get("cat") in IGNORED_CATS or name.startswith(MARKERS):
            continue
        ev = _Event(name, max(s, start), min(s + d, end), e.get("cat") in DEVICE_CATS)
        per[(e.get("pid"), e.get("tid"))].append(ev)
    tops: dict[tuple, list[_Event]] = {}
    next_id = 0
    for key, evs in per.items():
        evs.sort(key=lambda ev: (ev.start, -(ev.end - ev.start)))
        stack: list[_Event] = []
        roots: list[_Event] = []
        for ev in evs:
            while stack and ev.start >= stack[-1].end:
                stack.pop()
            parent = stack[-1] if stack else None
            if parent is not None and ev.end > parent.end:  # overlapping, not nested (a bad trace): cut it
                ev.end = parent.end
                if ev.end <= ev.start:
                    continue
            own = classify(ev.name)
            inherit = (
                parent is not None
                and parent.category is not None
                and (
                    parent.category == "communication"
                    or (own != "communication" and not (parent.category == "optimizer" and own in YIELDS_TO))
                )
            )
            if inherit:
                ev.category, ev.root, ev.root_id = parent.category, parent.root, parent.root_id
            elif own is not None:
                ev.category, ev.root, ev.root_id = own, op_name(ev.name), next_id
                next_id += 1
            (parent.children if parent is not None else roots).append(ev)
            stack.append(ev)
        tops[key] = roots
    return tops


def _segments(ev: _Event, out: list) -> None:
    """The instants of `ev` not covered by its children, as (start, end, event), recursively."""
    at = ev.start
    for child in ev.children:
        if child.start > at:
            out.append((at, child.start, ev))
        _segments(child, out)
        at = max(at, child.end)
    if ev.end > at:
        out.append((at, ev.end, ev))


def attribute_window(events: list[dict], start: float, end: float, on_gpu: bool) -> dict:
    """One step [start, end] (microseconds) -> {category: {"us": time, "ops": {root_id}, "by_op": {name: us}}}."""
    segments: list = []
    for roots in _threads(events, start, end).values():
        for ev in roots:
            _segments(ev, segments)
    points = sorted({start, end, *(s for s, _, _ in segments), *(e for _, e, _ in segments)})
    by_start: dict[float, list] = defaultdict(list)
    for seg in segments:
        by_start[seg[0]].append(seg)
    out: dict[str, dict] = {c: {"us": 0.0, "ops": set(), "by_op": defaultdict(float)} for c in CATEGORIES}
    active: list = []
    for a, b in zip(points, points[1:]):
        active = [s for s in active if s[1] > a] + by_start.get(a, [])
        width = b - a
        working = [s[2] for s in active if s[2].category and (s[2].device or not on_gpu)]
        if working:
            for ev in working:
                slot = out[ev.category]
                slot["us"] += width / len(working)
                slot["ops"].add(ev.root_id)
                slot["by_op"][ev.root] += width / len(working)
        elif [s for s in active if not s[2].device]:
            host = [s[2] for s in active if not s[2].device]
            for ev in host:
                out["host_overhead"]["us"] += width / len(host)
                out["host_overhead"]["by_op"][op_name(ev.name)] += width / len(host)
        else:
            out["idle"]["us"] += width
            out["idle"]["by_op"][IN_STEP] += width
    return out


def breakdown(
    trace: dict | list,
    *,
    device: str,
    clock_step_s: list[float] | None = None,
    timed_step_median_s: float | None = None,
) -> dict:
    """The breakdown of a trace's profiled steps (its MARKER events), per step on average:

    categories: {category: {"s", "share", "ops", "top": [[name, s, share of the category]...]}} or, for a
    GPU-only category on CPU workers, {"not_applicable": "not on a GPU"}; traced_step_s: the mean marker span
    (what the categories add up to); clock_step_s: the step the hook's clock measured around each
    profiled step, like the categories a mean over the profiled steps; left_over_s and within_tolerance: how far the categories' sum is from that step.
    ValueError when the trace has no profiled step."""
    events = events_of(trace)
    windows = step_windows(events)
    if not windows:
        raise ValueError(f"the trace has no step events ({' or '.join(MARKERS)}): nothing to attribute")
    on_gpu = any(e.get("cat") in DEVICE_CATS for e in events)
    total: dict[str, dict] = {c: {"us": 0.0, "ops": 0, "by_op": defaultdict(float)} for c in CATEGORIES}
    for start, end in windows:
        for c, slot in attribute_window(events, start, end, on_gpu).items():
            total[c]["us"] += slot["us"]
            total[c]["ops"] += len(slot["ops"])
            for name, us in slot["by_op"].items():
                total[c]["by_op"][name] += us
    k = len(windows)
    traced = sum(e - s for s, e in windows) / k / 1e6
    categories: dict[str, dict] = {}
    for c in CATEGORIES:
        slot = total[c]
        if c in DEVICE_ONLY and device != "cuda":
            categories[c] = {"not_applicable": NOT_ON_GPU}
            continue
        s = slot["us"] / k / 1e6
        top = sorted(slot["by_op"].items(), key=lambda kv: -kv[1])[:TOP]
        categories[c] = {
            "s": s,
            "share": s / traced if traced > 0 else None,
            "ops": slot["ops"] / k if c not in ("host_overhead", "idle") else None,
            "top": [[name, us / k / 1e6, us / slot["us"] if slot["us"] else None] for name, us in top],
        }
    summed = sum(v.get("s", 0.0) for v in categories.values())
    clock = statistics.fmean(clock_step_s) if clock_step_s else None  # a mean, as the categories are
    out = {
        "steps": k,
        "device": device,
        "on_gpu_trace": on_gpu,
        "categories": categories,
        "sum_s": summed,
        "traced_step_s": traced,
        "clock_step_s": clock,
        "clock_steps_s": list(clock_step_s or []),
        "timed_step_median_s": timed_step_median_s,
    }
    if clock:
        out["left_over_s"] = clock - summed
        out["left_over_share"] = (clock - summed) / clock
        out["within_tolerance"] = abs(clock - summed) <= TOLERANCE * clock
        out["left_over_note"] = (
            "the clock's step minus the categories' sum: time outside the traced step span (the device "
            "synchronization after it, the profiler's own bookkeeping between steps)"
        )
    return out
