"""The measured inputs of a prediction: points from a stored sweep or a CSV, grouped into series, with the
measured overlap and the measured per-rank step-time spread (the straggler term's sigma)."""

from __future__ import annotations

import csv
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import numpy as np

from distbench import analysis as an
from distbench.core.errors import BadInput

CSV_REQUIRED = ("strategy", "world_size", "per_device_batch", "throughput")
CSV_OPTIONAL = tuple(
    "model nodes scaling global_batch framework status grad_bytes overlap overlap_raw throughput_ci_low "
    "throughput_ci_high device rank_sd_s".split()
)


@dataclass
class Observed:
    n: int
    nodes: int
    per_device_batch: float
    throughput: float
    se: float | None
    """standard error of log throughput, from the point's 95% CI (None: no CI)."""

    @property
    def step_time(self) -> float:
        return self.n * self.per_device_batch / self.throughput


@dataclass
class Series:
    """One strategy on one workload: its measured points and what the model needs."""

    workload: str
    strategy: str
    framework: str
    scaling: str
    points: list[Observed]
    grad_bytes: float | None
    overlap: float | None
    overlap_note: str
    baseline_throughput: float | None
    baseline_name: str
    per_node: int
    rank_sd: float | None = None
    """seconds: the spread of one step's time across ranks (measured; None: not measured)."""
    rank_sd_note: str = "not measured: no per-rank step times; the straggler term is 0"
    device: str = "cuda"
    pace_gap: float | None = None
    """seconds: the slowest rank's steady lead over the ranks' mean pace (the split's pace gap), at pace_n ranks."""
    pace_n: int = 0
    pace_note: str = "not measured: no per-rank step times; the slow-rank term is 0"
    model: str = ""
    """The model's registry name (models/specs.py) where the points name one."""
    image_size: int | None = None
    seq_len: int | None = None
    model_size: str | None = None
    """A decoder's --model-size (its bucket layout and FLOPs: models/decoders.py)."""


def _int(value, default=None):
    x = an.num(value)
    return default if x is None else int(x)


def _observed(r: dict) -> Observed:
    ci = an.throughput_ci(r)
    se = None if ci is None or ci[1] <= ci[0] else an.log_se(ci)
    return Observed(
        _int(r["world_size"]), _int(r.get("nodes"), 1), an.num(r.get("per_device_batch")), an.num(r["throughput"]), se
    )


def _overlap_raw(r: dict) -> tuple[float | None, bool]:
    """A point's unclipped overlap, and whether it is communication's own: 1 - communication / standalone
    all-reduce where the point has the three-term split (communication = sync - tiny-collective variant,
    the straggler wait apart: the model has its own straggler term); else the record's overlap, from the
    exposed time (sync - no-sync), which also holds the wait for the slowest rank."""
    comm = an.num((r.get("comm_split") or {}).get("communication_s"))
    allreduce = an.num(r.get("allreduce_s"))
    if comm is not None and allreduce:
        return 1.0 - comm / allreduce, True
    raw = an.num(r.get("overlap_raw"))
    return (an.num(r.get("overlap")) if raw is None else raw), False


def hidden_share(records: Sequence[dict]) -> tuple[float | None, str]:
    """The median measured overlap over the points at N > 1, clipped to [0, 1], saying so when it had to
    be clipped, and whether the straggler wait was kept out of it."""
    raws, own = [], 0
    for r in records:
        raw, split = _overlap_raw(r)
        if raw is not None and _int(r.get("world_size"), 1) > 1:
            raws.append(raw)
            own += split
    if not raws:
        return None, "not measured (no overlap in the points): the overlap window is the assumed backward share"
    med = float(np.median(raws))
    note = f"measured: median overlap {med:.2f} over {len(raws)} point(s)"
    if own < len(raws):
        note += (
            f" ({len(raws) - own} without the three-term split: their exposed time includes the straggler wait,"
            " which the straggler term counts again)"
        )
    if med < 0:
        note += (
            " (negative: synchronized steps lost more than a standalone all-reduce takes, e.g. contention;"
            " taken as 0 hidden)"
        )
    elif med > 1:
        note += " (above 1 within the noise; taken as fully hidden)"
    return min(1.0, max(0.0, med)), note


def _rank_runs(r: dict) -> tuple[list, str]:
    """Per-rank step times of one record, per run, and what they are: the independent (no-sync) variant's,
    each rank's own pace, when the point has one (in a synchronized step every rank waits for the all-reduce,
    so its per-rank times hide the spread the straggler term is about); else the synchronized runs' (per
    repeat when the point was repeated)."""
    for key, what in (("independent", "the no-sync variant's (own pace)"), ("repeats", "synchronized")):
        runs = [b.get("per_rank_step_times_s") for b in (r.get(key) or []) if isinstance(b, dict)]
        runs = [x for x in runs if isinstance(x, list) and len(x) > 1]
        if runs:
            return runs, what
    top = r.get("per_rank_step_times_s")
    return ([top], "synchronized") if isinstance(top, list) and len(top) > 1 else ([], "")


def spread_sigma(variances: Sequence[float]) -> float:
    """sigma from per-step variances across ranks (ddof=1 each): the square root of their mean."""
    return float(np.sqrt(np.mean(variances)))


def rank_spread(records: Sequence[dict]) -> tuple[float | None, str]:
    """sigma for the straggler term (step-to-step jitter): per step, the variance across ranks of each rank's
    step time less that rank's own mean (its persistent pace is the slow-rank term, pace_gap), sigma = the square
    root of the mean of those variances over the steps of the largest-N point that has per-rank step times
    (per_rank_step_times_s, from the no-sync variant where there is one); or a CSV's rank_sd_s column.
    The mean variance is unbiased at any rank count (ddof=1 across ranks, and x steps / (steps - 1) for the
    ranks' means removed); the median of per-step standard deviations is not (its expected value is
    0.67 sigma at N = 2, 0.89 at 4, 0.95 at 8: the sample sd of few ranks is skewed low)."""
    best = None
    for r in sorted(records, key=lambda r: _int(r.get("world_size"), 1)):
        given = an.num(r.get("rank_sd_s"))
        if given is not None:
            best = (given, f"given: rank_sd_s {given * 1e3:.3g} ms at N={r.get('world_size')}")
            continue
        runs, what = _rank_runs(r)
        sds = []
        for ranks in runs:
            steps = min(len(x) for x in ranks)
            if steps:
                arr = np.array([x[:steps] for x in ranks], dtype=float)
                if steps < 2:
                    continue
                arr = arr - arr.mean(axis=1, keepdims=True)  # each rank's own pace is the slow-rank term
                sds += list(arr.var(axis=0, ddof=1) * steps / (steps - 1))
        if sds:
            sd = spread_sigma(sds)
            best = (
                sd,
                f"measured: {sd * 1e3:.3g} ms across {len(runs[0])} ranks at N={r.get('world_size')} "
                f"({what} per-rank step times less each rank's mean pace, {len(sds)} steps)",
            )
    if best is None:
        return None, Series.rank_sd_note
    return best


def pace_gap(records: Sequence[dict]) -> tuple[float | None, int, str]:
    """The slowest rank's steady lead over the ranks' mean pace, at the largest N that measured it: the split's
    pace_gap_s (stragglers, from the no-sync variant's per-rank step times), a CSV's pace_gap_s column, or
    computed from the per-rank step times the same way."""
    best: tuple[float | None, int, str] = (None, 0, Series.pace_note)
    for r in sorted(records, key=lambda r: _int(r.get("world_size"), 1)):
        n = _int(r.get("world_size"), 1)
        info = r.get("stragglers") if isinstance(r.get("stragglers"), dict) else {}
        gap = an.num(r.get("pace_gap_s"))
        where = "given: pace_gap_s"
        if gap is None:
            gap, where = an.num(info.get("pace_gap_s")), "measured: the split's pace gap"
        if gap is None:
            runs, what = _rank_runs(r)
            gaps = []
            for ranks in runs:
                means = [float(np.mean(x)) for x in ranks if len(x)]
                if len(means) > 1:
                    gaps.append(max(means) - float(np.mean(means)))
            gap, where = (float(np.mean(gaps)), f"measured: {what} per-rank mean step times") if gaps else (None, "")
        if gap is not None and n > 1:
            best = (max(0.0, gap), n, f"{where} {gap * 1e3:.3g} ms at N={n}")
    return best


def series_from_records(
    records: Sequence[dict],
    *,
    from_csv: bool = False,
    strategies: Sequence[str] | None = None,
    per_node: int | None = None,
) -> list[Series]:
    """Successful training points grouped into (workload, strategy) series, baselines kept aside."""
    ok = [r for r in records if (r.get("status") or "ok") == "ok" and not an.is_comm(r) and an.num(r.get("throughput"))]
    if from_csv:
        groups = _csv_groups(ok)
    else:
        workloads = an.group_by_workload(ok)
        groups = {an.workload_label(k, workloads): v for k, v in workloads.items()}
    out = []
    for label, pts in groups.items():
        bases = {r.get("framework"): r for r in pts if an.is_baseline(r)}
        by_strategy: dict[str, list[dict]] = {}
        for r in pts:
            if not an.is_baseline(r) and (not strategies or str(r["strategy"]) in strategies):
                by_strategy.setdefault(str(r["strategy"]), []).append(r)
        for strategy, spts in by_strategy.items():
            obs = sorted(map(_observed, spts), key=lambda o: (o.n, o.nodes))
            grads = [g for g in (an.num(r.get("grad_bytes")) for r in spts) if g]
            overlap, note = hidden_share(spts)
            sd, sd_note = rank_spread(spts)
            gap, gap_n, gap_note = pace_gap(spts)
            base = bases.get(spts[0].get("framework"))
            one = next((o for o in obs if o.n == 1), None)
            if base is not None:
                base_thr, base_name = an.num(base["throughput"]), f"{base['strategy']} baseline (measured)"
            elif one is not None:
                base_thr, base_name = one.throughput, f"{strategy} at N=1 (no separate baseline)"
            else:
                base_thr, base_name = obs[0].throughput / obs[0].n, f"{strategy} at N={obs[0].n} divided by N"
            out.append(
                Series(
                    workload=label,
                    strategy=strategy,
                    framework=str(spts[0].get("framework") or ""),
                    scaling=str(spts[0].get("scaling") or "weak"),
                    points=obs,
                    grad_bytes=grads[-1] if grads else None,
                    overlap=overlap,
                    overlap_note=note,
                    baseline_throughput=base_thr,
                    baseline_name=base_name,
                    per_node=per_node or max(o.n // max(1, o.nodes) for o in obs),
                    rank_sd=sd,
                    rank_sd_note=sd_note,
                    device=str(spts[0].get("device") or "cuda"),
                    pace_gap=gap,
                    pace_n=gap_n,
                    pace_note=gap_note,
                    model=str(spts[0].get("model") or ""),
                    image_size=_int(_field(spts[0], "image_size")),
                    seq_len=_int(_field(spts[0], "seq_len")),
                    model_size=_field(spts[0], "model_size"),
                )
            )
    return out


def _field(r: dict, key: str):
    """A workload field of a record: its own, else its config's."""
    cfg = r.get("config") if isinstance(r.get("config"), dict) else {}
    return r.get(key) if r.get(key) is not None else cfg.get(key)


def _csv_groups(rows: Sequence[dict]) -> dict[str, list[dict]]:
    groups: dict[str, list[dict]] = {}
    for r in rows:
        scaling = r.get("scaling") or "weak"
        batch = an.num(r.get("global_batch") if scaling == "strong" else r.get("per_device_batch"))
        label = f"{r.get('model') or 'workload'} ({scaling} scaling" + (f", batch {batch:g})" if batch else ")")
        groups.setdefault(label, []).append(r)
    return groups


def read_csv(path: str | Path) -> list[dict]:
    """Rows of a points CSV (`distbench results export --csv` or hand-written: CSV_REQUIRED columns)."""
    try:
        with open(path, newline="") as fh:
            reader = csv.DictReader(fh)
            rows = list(reader)
            columns = reader.fieldnames or []
    except OSError as exc:
        raise BadInput(f"--csv {path}: {exc.strerror or exc}") from None
    missing = [c for c in CSV_REQUIRED if c not in columns]
    if missing:
        raise BadInput(
            f"--csv {path} lacks column(s) {', '.join(missing)} (needs {', '.join(CSV_REQUIRED)}; "
            f"optional {', '.join(CSV_OPTIONAL)})"
        )
    out = []
    for i, row in enumerate(rows, start=2):
        r = {k: v for k, v in row.items() if k and v not in ("", None)}  # an empty cell is an absent field
        ok = (r.get("status") or "ok") == "ok"
        for k in ("world_size", "per_device_batch", "throughput"):
            if an.num(r.get(k)) is None and ok:
                raise BadInput(f"--csv {path} line {i}: {k} is not a number ({r.get(k)!r})")
        for k in ("world_size", "per_device_batch", "throughput", "grad_bytes"):
            x = an.num(r.get(k))
            if ok and k in r and (x is None or not x > 0):
                raise BadInput(f"--csv {path} line {i}: {k} must be a positive number ({r.get(k)!r})")
        out.append(r)
    return out
