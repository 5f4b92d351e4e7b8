"""Where a point's wall time goes (analysis.wall_split): synthetic records whose phases are known,
the sweep summary line and the report table, and one real ddp point that stamps every phase."""

from __future__ import annotations

import io
import time

import pytest
from rich.console import Console

from distbench import analysis as an
from distbench.analysis import load_sweep
from distbench.analysis.output import print_summary
from distbench.core.strategies import STRATEGIES
from distbench.kinds.measure import measure_point
from distbench.report.tables import wall_table
from distbench.results.record import base_record
from distbench.results.store import Store
from distbench.run.plan import PlannedPoint
from tests.builders import point_config
from tests.conftest import require


def run(start: float, wall: float, warmup_start: float, window: tuple[float, float], allreduce=None) -> dict:
    """One launched process tree: the parent's launch stamps and the worker's."""
    r = base_record({"world_size": 2, "per_device_batch": 4}, strategy="ddp", framework="torch", status="ok")
    r["launch"] = {"started": start, "wall_s": wall}
    r["stopping"] = {"warmup_start": warmup_start, "window": list(window)}
    if allreduce:
        r["stopping"]["allreduce_window"] = list(allreduce)
        r["allreduce_s"] = 0.01
    return r


def test_one_run_with_its_no_sync_variant():
    # launched at 1000, first step at 1008, measured 1010-1018, all-reduce 1018.5-1019, exited at 1020
    r = run(1000.0, 20.0, 1008.0, (1010.0, 1018.0), allreduce=(1018.5, 1019.0))
    r["independent"] = [{"launch": {"started": 1021.0, "wall_s": 12.0}}]
    split = an.wall_split(r)
    assert split == pytest.approx(
        {
            "startup": 8.0,
            "warmup": 2.0,
            "measuring": 8.0,
            "allreduce": 0.5,
            "teardown": 1.5,
            "no_sync": 12.0,
            "total": 32.0,
            "unattributed": 0.0,
        }
    )


def test_repeats_are_summed_and_a_point_without_comm_has_no_allreduce_or_variant():
    r = run(0.0, 10.0, 3.0, (4.0, 9.0))
    r["repeats"] = [run(0.0, 10.0, 3.0, (4.0, 9.0)), run(100.0, 12.0, 104.0, (105.0, 111.0))]
    split = an.wall_split(r)
    assert split == pytest.approx(
        {
            "startup": 7.0,
            "warmup": 2.0,
            "measuring": 11.0,
            "allreduce": 0.0,
            "teardown": 2.0,
            "no_sync": 0.0,
            "total": 22.0,
            "unattributed": 0.0,
        }
    )


def test_what_the_record_cannot_place_is_unattributed_and_clock_skew_never_goes_negative():
    old = run(0.0, 10.0, 3.0, (4.0, 9.0))
    del old["launch"]["started"]  # no launch stamp: startup and teardown cannot be told apart
    split = an.wall_split(old)
    assert split["startup"] is None and split["teardown"] is None
    assert split["warmup"] == 1.0 and split["measuring"] == 5.0 and split["unattributed"] == pytest.approx(4.0)
    skewed = run(10.0, 10.0, 9.5, (11.0, 21.0))  # another node's clock: first step "before" the launch
    assert an.wall_split(skewed)["startup"] == 0.0
    skipped = base_record({"world_size": 1}, strategy="dp", framework="torch", status="skipped", reason="x")
    assert an.wall_split(skipped) is None


def test_sweep_total_and_summary_line():
    a = run(0.0, 20.0, 8.0, (10.0, 18.0), allreduce=(18.5, 19.0))
    a["independent"] = [{"launch": {"wall_s": 12.0}}]
    b = run(0.0, 8.0, 2.0, (3.0, 7.0))  # 2 startup, 1 warmup, 4 measuring, 1 teardown
    total = an.wall_split_total([a, b])
    assert total == pytest.approx(
        {
            "startup": 10.0,
            "warmup": 3.0,
            "measuring": 12.0,
            "allreduce": 0.5,
            "teardown": 2.5,
            "no_sync": 12.0,
            "total": 40.0,
            "unattributed": 0.0,
        }
    )
    assert an.wall_split_line([a, b]) == (
        "wall time of the points: 40 s; launch to first step 25%, warmup 8%, "
        "measuring 30% (12 s), no-sync variant 30%, all-reduce benchmark 1%, "
        "teardown 6%"
    )
    out = io.StringIO()
    print_summary(Console(file=out, width=400), [a, b], [], "s1", "r.db")
    assert "wall time of the points: 40 s; launch to first step 25%" in out.getvalue()


def test_report_table_has_a_row_per_point_and_one_for_all(tmp_path):
    a = run(0.0, 20.0, 8.0, (10.0, 18.0))
    with Store(tmp_path / "r.db") as store:
        sid = store.start_sweep(command="distbench scale", version="0", git_sha=None, env={}, options={}, notes=[])
        store.add_point(sid, a)
        store.finish_sweep(sid, "complete")
        headers, rows = wall_table(load_sweep(store, sid))
    assert headers[1:4] == ["launch to first step (s)", "warmup (s)", "measuring (s)"]
    assert rows[0][:4] == ["ddp N=2", "8.0", "2.0", "8.0"] and rows[0][-1] == "40%"
    assert rows[-1][0] == "all points" and rows[-1][-2] == "20.0"


@pytest.mark.slow
@require("torch")
def test_a_real_ddp_point_stamps_every_phase(tmp_path):
    """Worker stamps of the sync run (warmup start, window, all-reduce) and the no-sync variant's launch,
    against the clock around the whole point."""
    cfg = point_config("ddp", 2, image_size=32, num_classes=10, steps=3, warmup=1, measure_comm=True)
    before = time.time()
    r = measure_point(PlannedPoint(STRATEGIES["ddp"], cfg), tmp_path, timeout_s=300)
    after = time.time()
    assert r["status"] == "ok", r.get("reason")
    st = r["repeats"][0]["stopping"]
    assert before < st["warmup_start"] < st["window"][0] < st["window"][1] <= st["allreduce_window"][0] < after
    split = an.wall_split(r)
    assert split["measuring"] > 0 and split["warmup"] > 0 and split["allreduce"] > 0 and split["no_sync"] > 0
    assert split["total"] <= after - before
    assert sum(v for k, v in split.items() if k != "total" and v) == pytest.approx(split["total"])
