"""Reading a sweep back from the results store, and the analysis the report, `results` and `compare` share.

Everything here works on the stored result records (`points.record_json`) plus the per-step samples
(`steps` table); it never re-measures. Optional record fields (CIs, `noisy`, communication and
input-pipeline measurements, `telemetry`) are used when present; without them the analysis says what
it cannot tell instead of guessing.

One job per module (imports run one way, down this list):
- records: small helpers on one record (numbers, kind, keys, names, grouping into curves);
- sweep: opening the store read-only and loading a sweep (Sweep, load_sweep);
- cis: 95% CIs of a record's throughput, speedup and efficiency, and of two records' throughput ratio;
- summary: the summary's sentences (best strategy, efficiency drop, wrapper cost, limits, step split, notes);
- capacity: devices needed for a target throughput or epoch time;
- wall: where a point's wall time goes;
- fields: the step's communication breakdown and the telemetry scalars of a record;
- export: the points as a frame and the sweep as a JSON document.

The names below are re-exported so callers write `analysis.X` (or `an.X`) without knowing the module.
"""

from distbench.analysis.capacity import CapacityRow, capacity, format_duration
from distbench.analysis.cis import (
    Z95,
    ci_df,
    efficiency_ratio_ci,
    log_se,
    ratio_ci_from_cis,
    scaled_ci,
    steps_throughput_ci,
    throughput_ci,
    throughput_ratio_ci,
)
from distbench.analysis.export import FRAME_COLUMNS, points_frame, sweep_document
from distbench.analysis.fields import COMM_FIELDS, TELEMETRY_META, comm_breakdown, has_comm_fields, telemetry_values
from distbench.analysis.records import (
    CV_NOISY,
    baseline_for,
    by_strategy,
    device_word,
    group_by_workload,
    is_baseline,
    is_comm,
    is_noisy,
    is_verify,
    num,
    point_name,
    record_key,
    series_name,
    workload_key,
    workload_label,
)
from distbench.analysis.summary import (
    COMM_LARGE,
    DATA_WAIT_LARGE,
    DRIFT_FLAG,
    EFFICIENCY_TARGET,
    SUPERLINEAR,
    Summary,
    best_strategy,
    efficiency_drop,
    efficiency_key,
    efficiency_keys,
    limiting_factors,
    shared_cores_note,
    split_lines,
    summarize,
    wait_causes,
)
from distbench.analysis.sweep import Sweep, list_sweeps, load_sweep, open_store, pick_latest, resolve_sweep_id
from distbench.analysis.wall import WALL_PARTS, span, wall_split, wall_split_line, wall_split_total

__all__ = [
    # records
    "CV_NOISY",
    "baseline_for",
    "by_strategy",
    "device_word",
    "group_by_workload",
    "is_baseline",
    "is_comm",
    "is_noisy",
    "is_verify",
    "num",
    "point_name",
    "record_key",
    "series_name",
    "workload_key",
    "workload_label",
    # sweep
    "Sweep",
    "list_sweeps",
    "load_sweep",
    "pick_latest",
    "open_store",
    "resolve_sweep_id",
    # cis
    "Z95",
    "ci_df",
    "efficiency_ratio_ci",
    "log_se",
    "ratio_ci_from_cis",
    "scaled_ci",
    "steps_throughput_ci",
    "throughput_ci",
    "throughput_ratio_ci",
    # summary
    "COMM_LARGE",
    "DATA_WAIT_LARGE",
    "DRIFT_FLAG",
    "EFFICIENCY_TARGET",
    "SUPERLINEAR",
    "Summary",
    "best_strategy",
    "efficiency_drop",
    "efficiency_key",
    "efficiency_keys",
    "limiting_factors",
    "shared_cores_note",
    "split_lines",
    "summarize",
    "wait_causes",
    # capacity
    "CapacityRow",
    "capacity",
    "format_duration",
    # wall
    "WALL_PARTS",
    "span",
    "wall_split",
    "wall_split_line",
    "wall_split_total",
    # fields
    "COMM_FIELDS",
    "TELEMETRY_META",
    "comm_breakdown",
    "has_comm_fields",
    "telemetry_values",
    # export
    "FRAME_COLUMNS",
    "points_frame",
    "sweep_document",
]
