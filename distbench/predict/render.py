"""Presenting a prediction document: table rows (predicted beside the naive guess), the held-out table, the
summary lines (parameters with what they imply, warnings, what to measure next, what-ifs) and the plot."""

from __future__ import annotations

import io
from typing import Callable

import numpy as np

from distbench import analysis as an
from distbench.predict.document import parameter_lines

PREDICTION_NOTE = (
    "PREDICTED, not measured: from `distbench predict` (compute anchored at the largest measured N, communication "
    "exposed beyond the backward compute it can hide behind, measured straggler spread; docs/prediction.md). These rows are never part of the "
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
        "predicted throughput (samples/s) [95% PI]",
        "naive (samples/s)",
        "speedup [95% PI]",
        "efficiency [95% PI]",
        "step (ms) = compute + exposed comm + wait",
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
                _row_pi(p, "throughput", throughput_text) + (" ^" if p.get("capped_at_compute_limit") else ""),
                "n/a" if p.get("naive_throughput") is None else throughput_text(p["naive_throughput"]),
                _row_pi(p, "speedup", ".3g"),
                _row_pi(p, "efficiency", ".0%"),
                _breakdown(p),
            ]
            if has_epoch:
                cells.append(_row_pi(p, "epoch_s", an.format_duration))
                if has_cost:
                    cells.append(_row_pi(p, "epoch_cost", ".2f"))
            rows.append(cells)
    return headers, rows


def throughput_text(x: float) -> str:
    """A throughput as a plain number (no e-notation): thousands separated, at least 3 significant digits."""
    if abs(x) >= 100:
        return f"{x:,.0f}"
    return f"{x:.1f}" if abs(x) >= 10 else f"{x:.3f}" if abs(x) >= 0.01 else f"{x:.6f}"


def _ms(x: float) -> str:
    x *= 1e3
    if x == 0:
        return "0"
    return f"{x:,.0f}" if abs(x) >= 100 else f"{x:.1f}" if abs(x) >= 1 else f"{x:.3f}"


def _breakdown(row: dict) -> str:
    """The predicted step in milliseconds: compute + exposed communication + waiting for the slowest rank (jitter
    and pace) [+ from one device, the host loss no link explains]."""
    if "compute_s" not in row:  # a prediction stored before the breakdown was kept
        return "n/a"
    wait = row["straggler_s"] + (row.get("slow_rank_s") or 0.0)
    text = f"{_ms(row['step_time_s'])} = {_ms(row['compute_s'])} + {_ms(row['exposed_comm_s'])} + {_ms(wait)}"
    return text + (f" + {_ms(row['host_loss_s'])} host" if row.get("host_loss_s") else "")


def validation_rows(doc: dict) -> tuple[list[str], list[list[str]]]:
    multi = len({s["workload"] for s in doc["series"]}) > 1
    headers = (["workload"] if multi else []) + [
        "strategy",
        "held out",
        "fitted on N",
        "measured (samples/s)",
        "predicted (samples/s) [95% PI]",
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
            throughput_text(c["measured"]),
            _pi(c["predicted"], c["low"], c["high"], throughput_text),
            f"{c['error']:+.1%}",
            _num(c.get("naive_error"), "+.1%"),
            "yes" if c["covered"] else "no",
        ]
        for s in doc["series"]
        for c in s["validation"]
    ]
    return headers, rows


def summary_lines(doc: dict) -> list[str]:
    lines = [f"WARNING: {w}" for w in doc.get("warnings", [])]
    for s in doc["series"]:
        par, links = s["parameters"], s["inputs"]["links"]
        lines.append(
            f"{s['strategy']} ({s['workload']}): intra link {links['intra']}"
            + (f"; inter link {links['inter']}" if links["inter"] else "")
        )
        if "achieved_gbps" in next(iter(par.get("tiers", {}).values()), {}):
            lines += [f"  {line}" for line in parameter_lines(par)]
        else:  # a prediction stored before the time-overlap model
            lines.append(f"  compute {par['compute_s_per_sample'] * 1e3:.4g} ms/sample, {par['buckets']} bucket(s)")
        fit = [m for m in s.get("measured", []) if m.get("fitted")]
        if fit:
            lines.append(
                "  fit at the measured N (samples/s): "
                + "; ".join(
                    f"N={m['n']} {throughput_text(m['fitted'])} vs {throughput_text(m['throughput'])} measured "
                    f"({m['fitted'] / m['throughput'] - 1:+.1%})"
                    for m in fit
                )
                + (
                    f"; residual rms {par['fit_residual_se']:.1%} (log step time, N below the anchor)"
                    if par.get("fit_residual_se") is not None
                    else ""
                )
            )
        lines += [f"  {what}: " + "; ".join(s["inputs"][what]) for what in ("measured", "assumed")]
        if s["inputs"].get("from_one_device"):
            lines.append("  from one device, each input's source:")
            lines += [f"    {line}" for line in s["inputs"]["from_one_device"]]
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
        if not s["validation"] and not s["inputs"].get("from_one_device"):
            lines.append("  leave-largest-N-out: needs at least 3 measured N")
        lines += [f"  {line}" for line in s.get("verdict", [])]
        nxt = s.get("next_measurement")
        if nxt:
            lines.append(
                f"  what to measure next: {nxt['what']}: the 95% interval at N={nxt['target_n']} narrows from "
                f"+-{nxt['half_width_now']:.1%} to +-{nxt['half_width_after']:.1%} (if it lands on the prediction)"
            )
        for w in s.get("what_if", []):
            cells = ", ".join(f"N={r['n']}: {_row_pi(r, 'throughput', throughput_text)}" for r in w["predicted"])
            what = "" if w["strategy"].startswith("link=") else " traffic"
            lines.append(f"  what-if {w['strategy']}{what} ({w['traffic']}): {cells}")
            if w.get("assumes"):
                lines.append(f"    assumes: {w['assumes']}")
    if any(p.get("capped_at_compute_limit") for s in doc["series"] for p in s["predicted"]):
        lines.append(
            "^ the interval's high side is cut at the compute-only limit (no communication, no waiting, the fastest "
            "compute the anchor allows): compute per sample is taken as the same at every N"
        )
    if any(p.get("crosses_nodes_unmeasured") for s in doc["series"] for p in s["predicted"]):
        lines.append(
            "* crosses from one node to several with no measured multi-node point: the interval spans the plausible "
            "range of the inter-node link's achieved bandwidth (docs/prediction.md)"
        )
    for c in doc.get("order_checks", []):
        lines.append(
            f"order check {c['workload']} N={c['n']}: {c['pair'][0]} vs {c['pair'][1]} "
            + ("predicted order matches the measured order" if c["agrees"] else "predicted order DIFFERS from measured")
        )
    lines.append(
        "intervals: 95% = over the range of every parameter the measured points do not pin down, widened by the"
        " anchor's measurement error, a model error per doubling of N beyond the largest fitted N and, on its side"
        " only, the calibrated bias per doubling (docs/prediction.md)"
    )
    if any(s["inputs"].get("from_one_device") for s in doc["series"]):
        lines.append(
            "  from one device: the parameters' ranges and the model error (per doubling of the devices sharing a "
            "host) are independent and combine in quadrature"
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
