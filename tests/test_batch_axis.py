"""Batch size as a sweep axis: planning, real CPU-worker runs (a list of batches; a real out-of-memory
under an address-space limit, after which larger batches are skipped), resume keys, the report's
batch-size section (also in headless Chromium) and infer's memory and power columns."""

from __future__ import annotations

import json
import re
import resource
import subprocess

import pytest

from distbench.analysis import load_sweep
from distbench.cli import main
from distbench.core.strategies import parse_strategies
from distbench.report import write_report
from distbench.results.store import Store
from distbench.run.plan import SweepOptions, make_plan
from tests.builders import add_sweep, point, run_chromium
from tests.conftest import DISTBENCH, quick, require, run_cli, run_json

TINY = quick(batch=None)


def test_plan_sweeps_batches_per_strategy_and_n_smallest_first():
    opts = SweepOptions(
        model="resnet50", gpus=[1, 2], strategies=parse_strategies(("ddp",)), device="cpu", batch_size=(8, 2, 4)
    )
    plan = make_plan(opts, visible_gpus=0)
    got = [
        (p.strategy.name, p.config.world_size, p.config.per_device_batch)
        for p in plan.points
        if p.config.baseline_threads is None
    ]  # per-core baselines: tests/test_efficiency.py
    assert got == [
        ("torch", 1, 2),
        ("torch", 1, 4),
        ("torch", 1, 8),
        ("ddp", 1, 2),
        ("ddp", 1, 4),
        ("ddp", 1, 8),
        ("ddp", 2, 2),
        ("ddp", 2, 4),
        ("ddp", 2, 8),
    ]
    assert any("batch sizes 2,4,8" in n for n in plan.notes)
    strong = make_plan(
        SweepOptions(
            model="resnet50",
            gpus=[1, 2],
            strategies=parse_strategies(("ddp",)),
            device="cpu",
            batch_size=(4, 8),
            scaling="strong",
        ),
        visible_gpus=0,
    )
    assert {(p.config.world_size, p.config.per_device_batch, p.config.swept_batch) for p in strong.points} == {
        (1, 4, 4),
        (1, 8, 8),
        (2, 2, 4),
        (2, 4, 8),
    }


@pytest.mark.slow
@require("torch")
def test_a_list_of_batches_runs_and_resume_keeps_each_batch(tmp_path):
    db = str(tmp_path / "r.db")
    _, points = run_json(["scale", "--gpus", "1", "--strategy", "torch", "--batch-size", "2,4", "--results", db, *TINY])
    assert [(p["status"], p["per_device_batch"]) for p in points] == [("ok", 2), ("ok", 4)]
    for p in points:
        assert p["throughput"] > 0
        assert p["peak_memory_bytes"] > 50 * 2**20  # a torch process's peak RSS: tens of MiB at least
        assert p["peak_memory_source"] == "peak RSS per process"
    # Resuming a complete sweep runs nothing and keeps both points: they no longer share a key.
    proc, again = run_json(["scale", "--resume", "latest", "--results", db])
    assert [(p["point_id"], p["per_device_batch"]) for p in again] == [
        (p["point_id"], p["per_device_batch"]) for p in points
    ]
    assert proc.stderr.count("kept from sweep") == 2


def _torch_vm_peak_bytes() -> int:
    """Virtual memory a CPU torch worker maps before any batch (VmPeak after `import torch` + one op)."""
    code = (
        "import torch; torch.ones(4) @ torch.ones(4)\n"
        "print([l for l in open('/proc/self/status') if l.startswith('VmPeak')][0].split()[1])"
    )
    out = subprocess.run([DISTBENCH[0], "-c", code], capture_output=True, text=True, timeout=120, check=True)
    return int(out.stdout.strip()) * 1024


@pytest.mark.slow
@require("torch")
def test_a_batch_that_does_not_fit_is_oom_and_larger_ones_are_skipped(tmp_path):
    """Under an address-space limit (ulimit -v) a batch of 16384 resnet18 samples cannot be allocated:
    torch raises "DefaultCPUAllocator: can't allocate memory", the point is `oom`, and 32768 is not tried."""
    limit = _torch_vm_peak_bytes() + 2**30  # what torch itself maps + 1 GiB of room
    db = str(tmp_path / "r.db")

    def cap():
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))

    args = [
        "scale",
        "--gpus",
        "1",
        "--strategy",
        "torch",
        "--batch-size",
        "2,16384,32768",
        "--results",
        db,
        *TINY,
        "--format",
        "json",
    ]
    proc = subprocess.run(
        [*DISTBENCH, *args], capture_output=True, text=True, timeout=600, preexec_fn=cap, stdin=subprocess.DEVNULL
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    points = {p["per_device_batch"]: p for p in json.loads(proc.stdout)}
    assert points[2]["status"] == "ok"
    assert points[16384]["status"] == "oom", points[16384].get("reason")
    assert "can't allocate memory" in points[16384]["reason"]
    assert points[32768]["status"] == "skipped"
    assert points[32768]["reason"].startswith("not tried: batch 16384 ran out of memory at this strategy and N")
    assert points[32768]["after_oom"] is True
    # --resume keeps batch 2, and tries 16384 again (still out of memory) before skipping 32768 again.
    proc = subprocess.run(
        [*DISTBENCH, "scale", "--resume", "latest", "--results", db, "--format", "json"],
        capture_output=True,
        text=True,
        timeout=600,
        preexec_fn=cap,
        stdin=subprocess.DEVNULL,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stderr.count("kept from sweep") == 1
    assert [(p["per_device_batch"], p["status"]) for p in json.loads(proc.stdout)] == [
        (2, "ok"),
        (16384, "oom"),
        (32768, "skipped"),
    ]
    # The report names the largest batch that fit and where memory ran out.
    report = tmp_path / "report.html"
    assert main(["report", "latest", "--results", db, "--out", str(report)]) == 0
    text = report.with_suffix(".md").read_text()
    assert "## Batch size" in text
    assert re.search(r"\| torch N=1 \| 2 \| 16384 \|", text), text


def _batch_records() -> list[dict]:
    """torch and ddp N=2 on GPUs at batches 16, 32, 64; ddp N=2 runs out of memory at 64."""
    recs = []
    for batch, step in ((16, 0.10), (32, 0.16), (64, 0.30)):
        tel = {"power_w_mean": {"gpu0": 100.0 + batch}, "energy_per_sample_j": 0.5 / batch}
        recs.append(point("torch", 1, step, batch=batch, device="cuda", peak_memory_bytes=batch * 2**26, telemetry=tel))
        if batch < 64:
            tel2 = {"power_w_mean": {"gpu0": 120.0 + batch, "gpu1": 118.0 + batch}, "energy_per_sample_j": 0.6 / batch}
            recs.append(
                point("ddp", 2, step * 1.1, batch=batch, device="cuda", peak_memory_bytes=batch * 2**27, telemetry=tel2)
            )
        else:
            recs.append(
                point("ddp", 2, status="oom", batch=batch, device="cuda", reason="OutOfMemoryError: CUDA out of memory")
            )
    return recs


@pytest.mark.slow
def test_report_batch_section(tmp_path):
    with Store(tmp_path / "r.db") as store:
        sweep = load_sweep(store, add_sweep(store, _batch_records()))
    files = write_report(sweep, tmp_path / "report.html")
    html = files.html.read_text()
    assert '<section id="batch"><h2>Batch size</h2>' in html and 'id="plot-batch"' in html
    assert '<a href="#batch">Batch size</a>' in html
    md = files.markdown.read_text()
    assert "| torch N=1 | 64 | - |" in md  # largest batch that fit, nothing ran out of memory
    assert "| ddp N=2 | 32 | 64 |" in md  # fit up to 32, out of memory at 64
    assert "| torch N=1 | 64 | ok | 213.33 | 300.0 | 4 GiB | 164.0 | 0.007812 |" in md
    assert "| ddp N=2 | 32 | ok | 363.64 | 176.0 | 4 GiB | 302.0 | 0.01875 |" in md  # 2 GPUs: power summed
    assert "ran every batch size, smallest first" in md and "distbench fit" not in md
    # A `distbench fit` sweep says how its batches were chosen (doubling, then bisection).
    with Store(tmp_path / "fit.db") as store:
        fit = load_sweep(store, add_sweep(store, _batch_records(), options={"kind": "fit"}))
    md = write_report(fit, tmp_path / "fit.html").markdown.read_text()
    assert "A `distbench fit` search" in md and "smallest first" not in md
    # One batch size only: no section.
    with Store(tmp_path / "one.db") as store:
        one = load_sweep(store, add_sweep(store, [r for r in _batch_records() if r["per_device_batch"] == 16]))
    html = write_report(one, tmp_path / "one.html").html.read_text()
    assert 'id="batch"' not in html and "plot-batch" not in html


@pytest.mark.slow
def test_batch_section_renders_in_headless_chromium(chromium, tmp_path):
    with Store(tmp_path / "r.db") as store:
        sweep = load_sweep(store, add_sweep(store, _batch_records()))
    url = write_report(sweep, tmp_path / "report.html").html.resolve().as_uri()
    dom = run_chromium(chromium, tmp_path, "dom", "--virtual-time-budget=5000", "--dump-dom", url)
    assert dom.returncode == 0, dom.stderr[-2000:]
    root = re.search(r"<html[^>]*>", dom.stdout).group(0)
    assert 'data-report-ready="yes"' in root and "data-js-errors" not in root
    assert re.search(r'<img class="plot" id="plot-batch"', dom.stdout)
    assert '<section id="batch">' in dom.stdout


@pytest.mark.slow
@require("torch")
def test_infer_reports_memory_and_power_per_batch(tmp_path):
    args = [
        "infer",
        "--model",
        "resnet18",
        "--batch-sizes",
        "1,4",
        "--image-size",
        "32",
        "--framework",
        "torch",
        "--steps",
        "3",
        "--warmup",
        "1",
        "--device",
        "cpu",
        "--results",
        str(tmp_path / "r.db"),
    ]
    _, points = run_json(args)
    assert [p["per_device_batch"] for p in points] == [1, 4]
    for p in points:
        assert p["status"] == "ok" and p["peak_memory_bytes"] > 50 * 2**20
        assert p["power_w_mean"] is None and p["energy_per_sample_j"] is None  # CPU: no power sensor read
    table = run_cli(args).stdout
    # the header "peak memory (process RSS)" may wrap onto two lines to fit COLUMNS
    assert "peak memory" in table and "(process RSS)" in table and "unknown" in table and "MiB" in table


def test_terminal_table_names_the_batch_when_a_sweep_has_several():
    from rich.console import Console

    from distbench.analysis.output import results_table

    console = Console(width=300, color_system=None)
    with console.capture() as cap:
        console.print(results_table([point("torch", 1, 0.1, batch=2), point("torch", 1, 0.2, batch=4)]))
    assert "torch batch 2" in cap.get() and "torch batch 4" in cap.get()
    with console.capture() as cap:
        console.print(results_table([point("torch", 1, 0.1, batch=2)]))
    assert "batch" not in cap.get()
