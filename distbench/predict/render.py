"""Presenting a prediction document: table rows (predicted beside the naive guess), the held-out table, the
summary lines (parameters with what they imply, warnings, what to measure next, what-ifs) and the plot."""

from __future__ import annotations

import io
from typing import Callable

import numpy as np

from distbench import analysis as an

PREDICTION_NOTE = (
    "PREDICTED, not measured: from `distbench predict` (compute anchored at the largest measured N, bounded "
    "per-tier communication, measured straggler spread; docs/prediction.md). These rows are never part of the "
    "measured tables above. Intervals are 95% prediction intervals; 'naive' keeps the per-device throughput of the "
    "largest measured N."
)


def _pi(value: float, low: float, high: float, fmt: str | Callable[[float], str]) -> str:
    """'value [low, high]', formatted with a format spec or a function."""
    text = fmt if callable(fmt) else lambda x: format(x, fmt)
    return f"{text(value)} [{text(low)}, {text(high)}]"


def _row_pi(row: dict, key: str, fmt: str | Callable[[float], str]) -> str:
    return _pi(row[key], row[f"{key}_low"], row[f"{key}_high"], fmt)


def table_rows(doc: dict) -> tuple[list[str], list[list[str]]]:
    """One row per predicted (strategy, N): PREDICTED values with their 95% prediction intervals."""
    multi = len({s["workload"] for s in doc["series"]}) > 1
    has_epoch, has_cost = bool(doc.get("epoch_samples")), doc.get("gpu_hour_price") is not None
    headers = (["workload"] if multi else []) + [
        "strategy",
        "N",
        "nodes",
        "predicted throughput [95% PI]",
        "naive",
        "speedup [95% PI]",
        "efficiency [95% PI]",
    ]
    if has_epoch:
        headers.append(f"time per epoch of {doc['epoch_samples']:,} samples")
        if has_cost:
            headers.append(f"cost per epoch at {doc['gpu_hour_price']:g}/GPU-hour")
    rows = []
    for s in doc["series"]:
        for p in s["predicted"]:
            cells = ([s["workload"]] if multi else []) + [
                s["strategy"],
                str(p["n"]),
                str(p["nodes"]) + (" *" if p.get("crosses_nodes_unmeasured") else ""),
                _row_pi(p, "throughput", ".4g"),
                _num(p.get("naive_throughput"), ".4g"),
                _row_pi(p, "speedup", ".3g"),
                _row_pi(p, "efficiency", ".0%"),
            ]
            if has_epoch:
                cells.append(_row_pi(p, "epoch_s", an.format_duration))
                if has_cost:
                    cells.append(_row_pi(p, "epoch_cost", ".2f"))
            rows.append(cells)
    return headers, rows


def validation_rows(doc: dict) -> tuple[list[str], list[list[str]]]:
    multi = len({s["workload"] for s in doc["series"]}) > 1
    headers = (["workload"] if multi else []) + [
        "strategy",
        "held out",
        "fitted on N",
        "measured",
        "predicted [95% PI]",
        "error",
        "naive error",
        "inside PI",
    ]
    rows = [
        ([s["workload"]] if multi else [])
        + [
            s["strategy"],
            f"N={c['n']}",
            ", ".join(map(str, c["fitted_on"])),
            f"{c['measured']:.4g}",
            _pi(c["predicted"], c["low"], c["high"], ".4g"),
            f"{c['error']:+.1%}",
            _num(c.get("naive_error"), "+.1%"),
            "yes" if c["covered"] else "no",
        ]
        for s in doc["series"]
        for c in s["validation"]
    ]
    return headers, rows


def _tier_line(name: str, t: dict) -> str:
    bw = t.get("implied_effective_gbps")
    how = "fitted on measured points" if t["fitted_on_measured_points"] else "not measured: carried over"
    text = (
        f"{name} exposed share {t['exposed_share']:.3g} (plausible {t['bounds'][0]:.2g}..{t['bounds'][1]:.2g}, {how})"
    )
    if bw is not None and t.get("nominal_gbps"):
        text += f" = an effective {bw:.3g} GB/s against {t['nominal_gbps']:.3g} GB/s nominal"
    return text


def summary_lines(doc: dict) -> list[str]:
    lines = [f"WARNING: {w}" for w in doc.get("warnings", [])]
    for s in doc["series"]:
        par, links = s["parameters"], s["inputs"]["links"]
        lines.append(
            f"{s['strategy']} ({s['workload']}): compute {par['compute_s_per_sample'] * 1e3:.4g} ms/sample "
            f"(at N={par.get('anchored_at_n')}), straggler sigma {par.get('straggler_sigma_s', 0) * 1e3:.3g} ms, "
            f"{par['buckets']} bucket(s); intra link {links['intra']}"
            + (f"; inter link {links['inter']}" if links["inter"] else "")
        )
        for name, t in par.get("tiers", {}).items():
            if t.get("nominal_gbps") is not None:
                lines.append(f"  {_tier_line(name, t)}")
        lines += [f"  {what}: " + "; ".join(s["inputs"][what]) for what in ("measured", "assumed")]
        for key, what in (
            ("gpus_for_throughput", f"{doc.get('target_throughput')} samples/s"),
            ("gpus_for_epoch_time", f"an epoch within {an.format_duration(doc.get('epoch_time') or 0)}"),
        ):
            hit = s.get(key)
            if hit:
                lines.append(
                    f"  devices for {what}: "
                    + (f"{hit['n']} predicted" if hit["n"] else f"not reached up to N={hit.get('searched_up_to')}")
                    + (
                        f", {hit['n_at_lower_bound']} with the 95% lower bound"
                        if hit["n_at_lower_bound"]
                        else ", not reached at the 95% lower bound"
                    )
                )
        if not s["validation"]:
            lines.append("  leave-largest-N-out: needs at least 3 measured N")
        lines += [f"  {line}" for line in s.get("verdict", [])]
        nxt = s.get("next_measurement")
        if nxt:
            lines.append(
                f"  what to measure next: {nxt['what']}: the 95% interval at N={nxt['target_n']} narrows from "
                f"+-{nxt['half_width_now']:.1%} to +-{nxt['half_width_after']:.1%} (if it lands on the prediction)"
            )
        for w in s.get("what_if", []):
            cells = ", ".join(f"N={r['n']}: {_row_pi(r, 'throughput', '.4g')}" for r in w["predicted"])
            lines.append(f"  what-if {w['strategy']} traffic ({w['traffic']}): {cells}")
            if w.get("assumes"):
                lines.append(f"    assumes: {w['assumes']}")
    if any(p.get("crosses_nodes_unmeasured") for s in doc["series"] for p in s["predicted"]):
        lines.append(
            "* crosses from one node to several with no measured multi-node point: the interval spans the plausible "
            "inter-node link and a node-crossing term (docs/prediction.md)"
        )
    for c in doc.get("order_checks", []):
        lines.append(
            f"order check {c['workload']} N={c['n']}: {c['pair'][0]} vs {c['pair'][1]} "
            + ("predicted order matches the measured order" if c["agrees"] else "predicted order DIFFERS from measured")
        )
    lines.append(
        "intervals: 95% = the anchor's measurement error + a model error per doubling of N beyond the largest fitted N"
        " + a node-crossing term, over the plausible range of every unmeasured tier (docs/prediction.md)"
    )
    return lines


def _num(value, fmt: str) -> str:
    """A number, or 'n/a' for a field a prediction stored by an older distbench lacks."""
    return "n/a" if value is None else format(value, fmt)


def _label(text) -> str:
    """A label matplotlib shows literally: no mathtext ($), no legend-hiding leading underscore."""
    s = str(text).replace("$", r"\$")
    return " " + s if s.startswith("_") else s


def plot_images(doc: dict) -> tuple[bytes, bytes, str]:
    """(svg, png, caption) of measured points (filled markers, solid lines) and predicted ones (hollow markers,
    dashed lines, shaded 95% prediction interval), the naive guess dotted: never the same style."""
    from matplotlib.figure import Figure

    fig = Figure(figsize=(6.4, 4.0))
    ax = fig.subplots()
    ns = []
    for s in doc["series"]:
        mx, px = ([p["n"] for p in s[k]] for k in ("measured", "predicted"))
        (measured,) = ax.plot(
            mx, [m["throughput"] for m in s["measured"]], "o-", label=_label(f"{s['strategy']} measured")
        )
        color = measured.get_color()
        pred = {k: [p[k] for p in s["predicted"]] for k in ("throughput", "throughput_low", "throughput_high")}
        ax.plot(px, pred["throughput"], "o--", mfc="none", color=color, label=_label(f"{s['strategy']} predicted"))
        if all("naive_throughput" in p for p in s["predicted"]):  # predictions stored before issue 21 lack it
            ax.plot(px, [p["naive_throughput"] for p in s["predicted"]], ":", color=color, alpha=0.6)
        ax.fill_between(px, pred["throughput_low"], pred["throughput_high"], color=color, alpha=0.15)
        ns += mx + px
    ticks = sorted(set(ns))
    ax.set_xscale("log", base=2)
    ax.set_xticks(ticks, [str(n) for n in ticks])
    ax.set_xlabel("N (devices)")
    ax.grid(True, alpha=0.3)
    ax.set_ylim(bottom=0)
    ax.set_ylabel("throughput (samples/s)")
    ax.set_title("Measured (filled) and predicted (hollow, dashed, 95% PI shaded)")
    ax.legend(fontsize="small", loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0)
    svg, png = io.BytesIO(), io.BytesIO()
    fig.savefig(svg, format="svg", bbox_inches="tight", metadata={"Date": None})
    fig.savefig(png, format="png", dpi=110, bbox_inches="tight")
    errors = [abs(c["error"]) for s in doc["series"] for c in s["validation"]]
    caption = "Dotted: the naive guess (per-device throughput of the largest measured N)."
    if errors:
        caption += f" Held out on this sweep: median |error| {np.median(errors):.1%}."
    return svg.getvalue(), png.getvalue(), caption
