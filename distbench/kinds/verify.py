"""`distbench verify`: is each strategy the same training as one device with the same global batch?

All runs start from the same weights (non-zero ranks deliberately start elsewhere, so only a correct initial
broadcast makes them equal), see the same global batch (each rank its shard), run BatchNorm/dropout in
inference mode (a shard's forward pass must not depend on the others) and take k SGD steps. The global mean
loss must match the baseline's at every step; after k steps each tensor's weight update (L2 norm and sum)
must match and all replicas must hold the same weights. This catches a sum instead of a mean (updates N
times too large), a missing initial broadcast and a sampler that feeds every worker the same data.
"""

from __future__ import annotations

import dataclasses
import tempfile
from pathlib import Path

from distbench.results.kind import RecordKind
from distbench.run.plan import Plan, PlannedPoint
from distbench.run.runner import Kind, OpenSweep, single_run

DEFAULT_RTOL = 1e-4
"""fp32 sums taken in a different order (N shard means vs one full-batch mean, all-reduce order) differ by
~1e-7 relative; measured on CPU workers (ResNet-18, global batch 8, 3 steps, N=2): ddp and horovod-torch
5.2e-8 (loss) and 5.7e-8 (updates); the TF strategies' figures are in docs/verify.md. Three orders of
magnitude of margin, while the bugs caught are far larger: a sum instead of a mean is 100% off at N=2;
duplicated data or a missing broadcast moves the losses by 1e-2 or more."""


def _rel(a: float, b: float) -> float:
    return abs(a - b) / max(abs(b), 1e-12)


def compare(candidate: dict, baseline: dict, rtol: float) -> dict:
    out = {
        "strategy": candidate["strategy"],
        "world_size": candidate["world_size"],
        "status": candidate["status"],
        "reason": candidate.get("reason"),
        "passed": False,
    }
    if candidate["status"] != "ok":
        return out
    missing = [k for k in ("verify_losses", "update_checksums") if k not in candidate]
    if missing:
        out["reason"] = f"the worker reported no {', '.join(missing)}"
        return out
    losses, base_losses = candidate["verify_losses"], baseline["verify_losses"]
    loss_diff = max(_rel(a, b) for a, b in zip(losses, base_losses))
    upd, base_upd = candidate["update_checksums"], baseline["update_checksums"]
    largest = max(u[0] for u in base_upd) or 1.0
    # Ignore tensors whose update is negligible next to the largest (e.g. exactly-zero grads).
    upd_diff = max((_rel(a[0], b[0]) for a, b in zip(upd, base_upd) if b[0] > 1e-6 * largest), default=0.0)
    replicas = candidate.get("replica_max_rel_diff", 0.0) or 0.0
    problems = []
    if loss_diff > rtol:
        problems.append(f"losses differ from the single-device run by up to {loss_diff:.2e}")
    if upd_diff > rtol:
        ratio = upd[0][0] / max(base_upd[0][0], 1e-30)
        problems.append(
            f"weight updates differ by up to {upd_diff:.2e} (first tensor's update is {ratio:.3g}x "
            "the single-device one)"
        )
    if replicas > rtol:
        problems.append(f"replicas hold different weights (max relative difference {replicas:.2e})")
    out.update(
        loss_max_rel_diff=loss_diff,
        update_max_rel_diff=upd_diff,
        replica_max_rel_diff=replicas,
        losses=losses,
        baseline_losses=base_losses,
        passed=not problems,
        reason="; ".join(problems) or None,
    )
    return out


def run_plan(
    plan: Plan,
    *,
    rtol: float = DEFAULT_RTOL,
    timeout_s: float = 900.0,
    progress=lambda what: None,
    workdir: str | None = None,
    sweep: OpenSweep | None = None,
) -> list[dict]:
    """Run a plan_verify plan: each baseline, then each strategy judged against its framework's baseline.
    Every run is a point of the one runner (distbench.run.runner): stored in `sweep` (`distbench verify` opens
    one in --results), each candidate's record with its verdict under "verdict"; without `sweep` nothing is
    stored."""
    if sweep is None:
        sweep = OpenSweep(None, None, Path(workdir or tempfile.mkdtemp(prefix="distbench-verify-")))
    measure = single_run(timeout_s)
    baselines: dict[str, dict] = {}
    results = []
    for point in plan.points:
        s, cfg = point.strategy, point.config
        if s.baseline:
            progress(f"{s.name} (single device, global batch {cfg.per_device_batch})")
            [baselines[s.framework]] = sweep.run([point], Kind(measure, record_kind=RecordKind.VERIFY))
            continue
        base = baselines[s.framework]
        skip = point.skip_reason
        if not skip and base["status"] != "ok":
            skip = f"the {base['strategy']} baseline {base['status']}: {base.get('reason')}"
        if not skip:
            progress(f"{s.name} N={cfg.world_size}")

        def judged(_point: PlannedPoint, record: dict, base=base, skip=skip) -> list[dict]:
            record["verdict"] = _verdict(record, base, rtol, skip)
            results.append(record["verdict"])
            return [record]

        sweep.run(
            [dataclasses.replace(point, skip_reason=skip)], Kind(measure, finish=judged, record_kind=RecordKind.VERIFY)
        )
    return results


def _verdict(record: dict, base: dict, rtol: float, skip: str | None) -> dict:
    """A candidate's verdict: passed True/False, or None when it was not compared (skipped)."""
    if skip:  # not run: the reason is verify's own (no baseline, no CUDA for DataParallel)
        return {
            "strategy": record["strategy"],
            "world_size": record["world_size"],
            "status": "skipped",
            "passed": None,
            "reason": skip,
        }
    verdict = compare(record, base, rtol)
    if record["status"] != "ok":  # a point its worker skipped (composer's version conflict) is no failure
        verdict["passed"] = None if record["status"] == "skipped" else False
        verdict["reason"] = f"{record['status']}: {record.get('reason')}"
    return verdict
