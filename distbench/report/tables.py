"""The report's tables: a sweep's points as rows of formatted cells (headers, rows), one builder per table.
Every number is formatted here; `results show` (terminal.py) lists points with the same columns."""

from __future__ import annotations

import json
from typing import Callable

from distbench import analysis as an
from distbench.analysis import Sweep, num
from distbench.analysis.output import cells, fmt_bytes, fmt_ms, fmt_num
from distbench.core.config import swept_batch
from distbench.report.blocks import Table
from distbench.results import split as split_mod

Rows = tuple[list[str], list[list[str]]]  # (headers, rows)


def sweep_when(info: dict) -> str:
    """'<status>, started <time>[, finished <time>]': the report's and `results show`'s header."""
    finished = f", finished {info['finished']}" if info.get("finished") else ""
    return f"{info.get('status')}, started {info.get('started')}{finished}"


def ci_text(record: dict) -> str:
    ci = an.throughput_ci(record)
    return f"{fmt_num(ci[0], '.2f')}-{fmt_num(ci[1], '.2f')}" if ci else "-"


def math_text(mode: dict | None) -> str:
    """'TF32 on, cuDNN autotune on, NCHW' (GPUs) or the layout alone (CPU workers); '-' for older records."""
    mode = mode or {}
    word = lambda v: v if isinstance(v, str) else ("on" if v else "off")  # noqa: E731
    flags = (("tf32", "TF32"), ("cudnn_autotune", "cuDNN autotune"))
    parts = [f"{name} {word(mode[k])}" for k, name in flags if mode.get(k) is not None]
    parts += [mode["layout"]] if mode.get("layout") else []
    return ", ".join(parts) or "-"


def scaling_columns(sweep: Sweep, br: str = " ") -> tuple[list[str], Callable[[dict], list[str]]]:
    """Throughput to MFU, as the report and `results show` list points: the headers and a record's cells. The
    CI column only when a point has a CI, efficiency per core only on CPU workers; `br` breaks the headers."""
    with_ci, cpu = any(an.throughput_ci(r) for r in sweep.points), sweep.cpu_workers
    headers = [f"throughput{br}(samples/s)", *([f"95% CI{br}(samples/s)"] if with_ci else []), "speedup"]
    headers += [f"efficiency{br}(whole{br}machine)", f"efficiency{br}(per core)"] if cpu else ["efficiency"]
    efficiency = ["efficiency", "efficiency_per_core"] if cpu else ["efficiency"]

    def row(r: dict) -> list[str]:
        ci = [ci_text(r)] if with_ci else []
        return [*cells(r, "throughput"), *ci, *cells(r, "speedup", *efficiency, "mfu")]

    return [*headers, "MFU"], row


def workload_cells(r: dict) -> list[str]:
    """Per-device batch, precision, and the input ('64 px' or 'seq 64'): what a capacity planner must match."""
    config = r.get("config") or {}
    batch = r.get("per_device_batch", config.get("per_device_batch"))
    seq, side = config.get("seq_len"), config.get("image_size")
    size = f"seq {seq}" if seq else f"{side} px" if side else "-"
    return [str(batch if batch is not None else "-"), str(config.get("precision") or "fp32"), size]


def points_rows(sweep: Sweep) -> tuple[list[str], list[list[str]], list[str]]:
    """The training points: headers, rows and a class per row ("bad" where the point did not run)."""
    scaling, scaling_cells = scaling_columns(sweep)
    headers = ["strategy", "N", "model", "batch (per device)", "precision", "input", "device", "backend", "status"]
    headers += [*scaling, "math mode"]
    headers += ["step median (ms)", "step p5 (ms)", "step p95 (ms)", "CV", "noisy"]
    rows, classes = [], []
    for r in sweep.points:
        if an.is_comm(r):
            continue
        ok = r.get("status") == "ok"
        row = [an.series_name(r), str(r.get("world_size")), str(r.get("model")), *workload_cells(r)]
        row += [str(r.get("device")), str(r.get("backend") or "-"), str(r.get("status"))]  # backend: gradients' carrier
        row += [*scaling_cells(r), math_text(r.get("math_mode"))]
        row += cells(r, "step_time_median_s", "step_time_p5_s", "step_time_p95_s", "step_time_cv")
        rows.append([*row, "yes" if ok and an.is_noisy(r) else ""])
        classes.append("" if ok else "bad")
    return headers, rows, classes


def comm_rows(sweep: Sweep) -> Rows:
    headers = ["strategy", "N", "step (window mean, ms)", "exposed comm (ms)", "comm overhead", "all-reduce (ms)"]
    rows = [
        [
            an.series_name(r),
            str(r.get("world_size")),
            fmt_ms((an.comm_breakdown(r) or {}).get("step_s", r.get("time_per_step_s"))),
            fmt_ms((an.comm_breakdown(r) or {}).get("exposed_s", r.get("exposed_comm_s"))),
            split_mod.overhead_cell(r, cells(r, "comm_overhead")[0]),
            *cells(r, "allreduce_s", "overlap", "grad_bytes", "data_wait_fraction"),
        ]
        for r in sweep.scaling_points
        if an.has_comm_fields(r)
    ]
    return [*headers, "overlap", "gradient bytes", "data wait"], rows


def comm_legend(sweep: Sweep) -> str | None:
    """The Communication table's line for its '≈0' overheads (split.overhead_legend), or None."""
    return split_mod.overhead_legend(
        [(f"{an.series_name(r)} N={r.get('world_size')}", r) for r in sweep.scaling_points if an.has_comm_fields(r)]
    )


def split_rows(sweep: Sweep) -> Rows:
    """One row per point with a three-term split: each term in ms with its 95% CI, and the straggler."""
    headers = ["strategy", "N", "mean step (ms)", "compute (ms)", "straggler wait (ms)", "communication (ms)"]

    def term(split: dict, key: str) -> str:
        ci = split.get(f"{key}_ci")
        text = split_mod.term_text(split[f"{key}_s"], ci, digits=2).replace(" ms", "", 1)
        below = split_mod.below_zero_phrase(split[f"{key}_s"], ci)
        return f"{text} ({below})" if below else text

    rows = []
    for r in sweep.scaling_points:
        split = r.get("comm_split")
        if not split:
            continue
        worst = split_mod.worst_straggler(r)
        straggler = (
            f"rank {worst['rank']}: {worst['slowest_share']:.0%} of steps, {worst['others_wait_s'] * 1e3:.2f} ms"
            if worst
            else "-"
        )
        rows.append(
            [
                an.series_name(r),
                str(r.get("world_size")),
                f"{split['step_s'] * 1e3:.2f}",
                *(term(split, k) for k in ("compute", "wait", "communication")),
                straggler,
                split.get("ci_scope") or "-",
            ]
        )
    return [*headers, "slowest rank most often (others' wait per step)", "CI covers"], rows


def busbw_pairs(record: dict) -> list[tuple[float, float]]:
    """(message size in bytes, bus bandwidth in GB/s) of a comm record."""
    sizes, bw = record.get("sizes_bytes"), record.get("busbw_gbps")
    if not (isinstance(sizes, list) and isinstance(bw, list)):
        return []
    return [(num(s), num(b)) for s, b in zip(sizes, bw) if num(s) and num(b) is not None]


def busbw_rows(sweep: Sweep) -> Rows:
    rows = []
    for r in sweep.comm_points:
        if pairs := busbw_pairs(r):
            size, peak = max(pairs, key=lambda p: p[1])
            sizes = f"{fmt_bytes(pairs[0][0])} - {fmt_bytes(pairs[-1][0])}"
            rows.append(
                [str(r.get("strategy")), str(r.get("world_size")), sizes, fmt_num(peak, ".3g"), fmt_bytes(size)]
            )
    return ["benchmark", "N", "message sizes", "peak busbw (GB/s)", "at size"], rows


def telemetry_rows(sweep: Sweep) -> tuple[list[str], list[tuple[dict, dict]]]:
    """The telemetry metrics any point has, and (record, its values) for the points that have some."""
    rows = [(r, t) for r in sweep.scaling_points if (t := an.telemetry_values(r))]
    return list(dict.fromkeys(m for _, t in rows for m in t)), rows


TELEMETRY_UNITS = {
    "cpu_util_mean": "% of one core",
    "gpu_util_mean": "%",
    "power_w_mean": "W",
    "energy_j": "J",
    "energy_per_sample_j": "J",
    "sm_clock_mhz_min": "MHz",
    "mem_imbalance": "max / mean",
}
"""The unit of each telemetry metric the table shows as a number (byte counts carry theirs in the cell)."""


def telemetry_table(sweep: Sweep) -> Rows:
    metrics, rows = telemetry_rows(sweep)

    def cell(m: str, v) -> str:
        if v is not None and m == "throttled":
            return "yes" if v else "no"
        return fmt_bytes(v) if "bytes" in m else fmt_num(v, ".4g")

    headers = ["point", *(f"{m} ({TELEMETRY_UNITS[m]})" if m in TELEMETRY_UNITS else m for m in metrics)]
    return headers, [[an.point_name(r), *(cell(m, t.get(m)) for m in metrics)] for r, t in rows]


def energy_notes(sweep: Sweep) -> list[str]:
    """What energy per sample covers where it is not every GPU of the point (e.g. node 0's GPUs only)."""
    notes = []
    for r in sweep.scaling_points:
        tel = r.get("telemetry") if isinstance(r.get("telemetry"), dict) else {}
        scope = tel.get("energy_scope")
        if tel.get("energy_per_sample_j") is not None and scope and not str(scope).startswith("all "):
            notes.append(f"{an.point_name(r)}: energy per sample covers {scope}.")
    return notes


def wall_table(sweep: Sweep) -> Rows:
    """One row per launched point and one for all of them; empty when no record has launch times."""
    points = [r for r in sweep.points if not an.is_comm(r) and an.wall_split(r)]
    splits = [(an.point_name(r), an.wall_split(r)) for r in points]
    splits += [("all points", an.wall_split_total(points))] if points else []
    rows = []
    for name, split in splits:
        total = split["total"]
        share = split["measuring"] / total if total and split["measuring"] is not None else None
        parts = (fmt_num(split[k], ".1f") for k, _ in an.WALL_PARTS)
        rows.append([name, *parts, fmt_num(total, ".1f"), fmt_num(share, ".0%")])
    return ["point", *(f"{label} (s)" for _, label in an.WALL_PARTS), "total (s)", "measuring share"], rows


def batch_of(r: dict) -> int | None:
    return swept_batch(r.get("config") or r)


def batch_points(sweep: Sweep) -> list[dict]:
    """Training and inference points of a sweep with more than one batch size (else none)."""
    pts = [r for r in sweep.points if not an.is_comm(r) and batch_of(r)]
    return pts if len({batch_of(r) for r in pts}) > 1 else []


def batch_values(r: dict) -> dict[str, float | None]:
    tel = an.telemetry_values(r)
    power = (r.get("telemetry") or {}).get("power_w_mean")
    return {
        "throughput": num(r.get("throughput")),
        "step_time_median_s": num(r.get("step_time_median_s")),
        "peak_memory_bytes": num(r.get("peak_memory_bytes"))
        or tel.get("gpu_mem_peak_bytes")
        or tel.get("rss_peak_bytes"),
        "power_w": num(r.get("power_w_mean")) or (sum(power.values()) if isinstance(power, dict) and power else None),
        "energy_per_sample_j": num(r.get("energy_per_sample_j")) or tel.get("energy_per_sample_j"),
    }


def batch_series(sweep: Sweep) -> dict[str, list[dict]]:
    """'strategy N=n [over k nodes] [seq S]' -> its points sorted by batch size: a language model's points
    at two sequence lengths are two series (a sample is S tokens: their samples/s are not the same work)."""
    groups: dict[tuple[str, int, int, int | None], list[dict]] = {}
    for r in batch_points(sweep):
        seq = (r.get("config") or {}).get("seq_len")
        key = (str(r.get("strategy")), int(r.get("world_size") or 0), int(r.get("nodes") or 1), seq)
        groups.setdefault(key, []).append(r)
    return {
        f"{s} N={n}" + (f" over {k} nodes" if k > 1 else "") + (f" seq {seq}" if seq else ""): sorted(v, key=batch_of)
        for (s, n, k, seq), v in groups.items()
    }


def batch_table(sweep: Sweep) -> Rows:
    rows = []
    for label, pts in batch_series(sweep).items():
        for r in pts:
            v = batch_values(r)
            rows.append(
                [
                    label,
                    str(batch_of(r)),
                    str(r.get("status")),
                    *cells(v, "throughput", "step_time_median_s"),
                    fmt_bytes(v["peak_memory_bytes"] or None),
                    fmt_num(v["power_w"], ".1f"),
                    fmt_num(v["energy_per_sample_j"], ".4g"),
                ]
            )
    headers = ["point", "batch", "status", "throughput (samples/s)", "step time median (ms)"]
    return [*headers, "peak memory per device", "mean power (W)", "energy per sample (J)"], rows


def batch_fit_table(sweep: Sweep) -> Rows:
    """Per strategy and N: the largest batch that ran, and the batch that ran out of memory."""
    rows = []
    for label, pts in batch_series(sweep).items():
        ok = [batch_of(r) for r in pts if r.get("status") == "ok"]
        oom = [batch_of(r) for r in pts if r.get("status") == "oom"]
        rows.append([label, str(max(ok)) if ok else "none", str(min(oom)) if oom else "-"])
    return ["point", "largest batch that fit", "ran out of memory at"], rows


def _ci_text(ci) -> str:
    """' [lo, hi]' of a throughput CI ('' without one; an unbounded high end as 'unbounded')."""
    if not ci:
        return ""
    return f" [{ci[0]:.2f}, {'unbounded' if ci[1] is None else f'{ci[1]:.2f}'}]"


def capacity_table(sweep: Sweep, target_throughput, epoch_samples, epoch_time) -> Rows:
    rows = an.capacity(
        sweep.scaling_points,
        target_throughput=target_throughput,
        epoch_samples=epoch_samples,
        epoch_time_s=epoch_time,
        step_times=sweep.step_times,
    )
    multi = len({r.workload for r in rows}) > 1
    word = an.device_word(sweep.scaling_points)[:-1] or "device"
    headers = (["workload"] if multi else []) + [
        "strategy",
        "measured throughput (samples/s) [95% CI]",
        f"per {word} (samples/s)",
    ]
    if target_throughput is not None:
        headers.append(f"devices for {target_throughput:g} samples/s")
    if epoch_samples:
        headers.append(f"time per epoch of {epoch_samples:,} samples")
        if epoch_time is not None:
            headers.append(f"devices for an epoch within {an.format_duration(epoch_time)}")
    out = []
    for row in rows:
        cells = ([row.workload] if multi else []) + [
            row.strategy,
            ", ".join(
                f"N={n}: {fmt_num(t, '.2f')}{_ci_text(ci) or ' (no CI)'}{' noisy' if noisy else ''}"
                for (n, t), ci, noisy in zip(row.measured, row.cis, row.noisy)
            ),
            ", ".join(f"N={n}: {fmt_num(t / n, '.2f')}" for n, t in row.measured),
        ]
        if target_throughput is not None:
            cells.append(row.target_throughput or "-")
        if epoch_samples:
            cells.append(", ".join(f"N={n}: {an.format_duration(t)}" for n, t in row.epoch_times))
            if epoch_time is not None:
                cells.append(row.target_epoch or "-")
        out.append(cells)
    return headers, out


def problem_table(points: list[dict]) -> Table:
    rows = [
        [
            an.series_name(r),
            str(r.get("world_size")),
            str(r.get("status")),
            str(r.get("reason") or "no reason recorded"),
        ]
        for r in points
    ]
    return Table(["strategy", "N", "status", "reason"], rows)


def env_rows(sweep: Sweep) -> list[list[str]]:
    env = sweep.info.get("env") or {}
    rows = []
    for key, value in sorted(env.items()):
        if isinstance(value, dict) and key == "packages":
            text = ", ".join(f"{k} {v}" for k, v in sorted(value.items()) if v)
        else:
            text = json.dumps(value, sort_keys=True, default=str) if isinstance(value, (dict, list)) else str(value)
        rows.append([key, text])
    return [*rows, ["options", json.dumps(sweep.info.get("options") or {}, sort_keys=True, default=str)]]
