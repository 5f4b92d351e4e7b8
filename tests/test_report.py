"""The analysis behind the report (best strategy, 80% drop, wrapper cost, limits, capacity), the report
files themselves (content, escaping) and a real headless Chromium load + screenshot.

Stores are built here with Store.start_sweep/add_point and records from distbench.results.record.base_record
whose step times are known, so every expected number can be worked out by hand:
torch baseline, per-device batch 4, 0.1 s/step -> 40 samples/s.
"""

from __future__ import annotations

import html
import random
import re
import struct

import pytest

from distbench import analysis as an
from distbench.analysis import load_sweep
from distbench.report import CSP, MARKER_JS, write_report
from distbench.report import plots as report_plots
from distbench.results.store import Store
from tests.builders import add_sweep, point, point_config, run_chromium, scaling_records


@pytest.fixture
def scaling_sweep(tmp_path):
    path = tmp_path / "r.db"
    with Store(path) as store:
        sid = add_sweep(store, scaling_records())
        return path, sid, load_sweep(store, sid)


# -- analysis ---------------------------------------------------------------------------------------------
def test_fixture_numbers_are_what_the_analysis_sees(scaling_sweep):
    _, _, sweep = scaling_sweep
    eff = {(r["strategy"], r["world_size"]): r["efficiency"] for r in sweep.scaling_points}
    assert eff[("ddp", 8)] == pytest.approx(0.60)
    assert eff[("horovod-torch", 2)] == pytest.approx(0.70)
    assert all(r["point_id"] for r in sweep.points)
    assert len(sweep.step_times(sweep.points[0])) == 200


def test_best_strategy_is_highest_efficiency_at_largest_n(scaling_sweep):
    _, _, sweep = scaling_sweep
    best = an.best_strategy(sweep.scaling_points, sweep)
    # N=8 is the largest N; only ddp reached it, horovod-torch stopped at 4.
    assert best["n"] == 8 and best["best"] == "ddp" and best["efficiency"] == pytest.approx(0.60)
    assert best["missing"] == ["horovod-torch"]
    text = " ".join(an.summarize(sweep).best)
    assert "ddp scales best: 60% efficiency at N=8, the largest N measured." in text
    assert "No successful point at N=8 for: horovod-torch." in text
    # CPU-worker records without a per-core baseline: the figure is the whole machine's, and the line says so
    assert text.endswith(
        "On CPU workers this is the whole-machine efficiency: not every point has a per-core baseline."
    )


def test_best_strategy_ranking_and_statistical_tie(tmp_path):
    recs = [point("torch", 1, 0.1), point("ddp", 2, 0.1 / 0.9), point("horovod-torch", 2, 0.1 / 0.6)]
    with Store(tmp_path / "r.db") as store:
        sweep = load_sweep(store, add_sweep(store, recs))
    best = an.best_strategy(sweep.scaling_points, sweep)
    assert [s for s, _, _ in best["ranking"]] == ["ddp", "horovod-torch"]
    assert best["tied"] == [] and best["undecided"] == []  # 1% jitter: 0.9 vs 0.6 is far beyond the noise

    # Overlapping recorded CIs: the ranking is not settled, and the summary says so.
    recs = [
        point("torch", 1, 0.1),
        point("ddp", 2, 0.1 / 0.82, throughput_ci_low=60.0, throughput_ci_high=72.0),
        point("horovod-torch", 2, 0.1 / 0.80, throughput_ci_low=58.0, throughput_ci_high=70.0),
    ]
    with Store(tmp_path / "r2.db") as store:
        sweep = load_sweep(store, add_sweep(store, recs))
    best = an.best_strategy(sweep.scaling_points, sweep)
    assert best["best"] == "ddp" and best["tied"] == ["horovod-torch"]
    assert "horovod-torch is within the 95% CI of it" in an.summarize(sweep).best[0]


def test_where_efficiency_drops_below_80(scaling_sweep):
    _, _, sweep = scaling_sweep
    drops = an.by_strategy(r for r in sweep.scaling_points if not an.is_baseline(r))
    assert an.efficiency_drop(drops["ddp"])["below_at"] == 8
    assert an.efficiency_drop(drops["horovod-torch"])["below_at"] == 2
    lines = an.summarize(sweep).drops
    assert "ddp: drops below 80% at N=8 (60%)." in lines
    assert "horovod-torch: drops below 80% at N=2 (70%)." in lines


def test_efficiency_never_below_80_and_below_already_at_one():
    ok = [point("ddp", 1, 0.1, efficiency=0.95), point("ddp", 2, 0.1, efficiency=0.9)]
    assert an.efficiency_drop(ok) == {"below_at": None, "efficiency": None, "largest_n": 2, "largest_efficiency": 0.9}
    bad = [point("ddp", 1, 0.1, efficiency=0.7), point("ddp", 2, 0.1, efficiency=0.9)]
    assert an.efficiency_drop(bad)["below_at"] == 1


def test_wrapper_cost_with_bootstrap_ci(scaling_sweep):
    _, _, sweep = scaling_sweep
    lines = an.summarize(sweep).wrapper
    ddp = next(line for line in lines if line.startswith("ddp"))
    assert ddp.startswith("ddp at N=1 is 5.0% slower than the plain 'torch' loop (95% CI of the cost +")
    assert "within the measurement noise" not in ddp  # 1% jitter, 5% cost: resolved


def test_wrapper_cost_within_noise_and_without_ci(tmp_path):
    rng = random.Random(3)
    noisy = [0.1 * (0.5 + rng.random()) for _ in range(200)]  # CV ~29%: a 2% cost cannot be told from zero
    recs = [point("torch", 1, times=noisy), point("ddp", 1, times=[t * 1.02 for t in noisy][::-1])]
    with Store(tmp_path / "r.db") as store:
        sweep = load_sweep(store, add_sweep(store, recs))
    assert an.summarize(sweep).wrapper[0].endswith(": within the measurement noise.")
    recs = [point("torch", 1, 0.1, steps=3), point("ddp", 1, 0.12, steps=3)]
    with Store(tmp_path / "r2.db") as store:
        sweep = load_sweep(store, add_sweep(store, recs))
    assert an.summarize(sweep).wrapper == [
        "ddp at N=1 is 16.7% slower than the plain 'torch' loop (no CI: too few steps (3 < 150))."
    ]


def test_what_limited_scaling_only_claims_what_was_measured(tmp_path):
    recs = scaling_records(comm_overhead=0.35, exposed_comm_s=0.058, allreduce_s=0.09, overlap=0.36)
    recs[7].update(data_wait_fraction=0.25, comm_overhead=0.05)  # horovod-torch N=4
    with Store(tmp_path / "r.db") as store:
        sweep = load_sweep(store, add_sweep(store, recs))
    limits = an.summarize(sweep).limits
    assert limits[0] == "ddp: communication (exposed communication is 35% of the step at N=8)."
    assert limits[1] == "horovod-torch: input pipeline (workers wait for data 25% of the step at N=4)."

    with Store(tmp_path / "r2.db") as store:
        sweep = load_sweep(store, add_sweep(store, scaling_records()))
    limits = an.summarize(sweep).limits
    assert limits[0].startswith(  # synthetic data (the default): there is no input pipeline to measure
        "ddp: not determined from these measurements (the records carry no communication measurements)."
    )
    disk = [dict(r, config={**r["config"], "data": "disk"}) for r in scaling_records()]
    with Store(tmp_path / "r3.db") as store:
        sweep = load_sweep(store, add_sweep(store, disk))
    limits = an.summarize(sweep).limits
    assert limits[0].startswith(
        "ddp: not determined from these measurements (the records carry no "
        "communication or input-pipeline measurements)."
    )


def test_speedup_ci_includes_the_baseline_when_it_has_one():
    base = point("torch", 1, 0.1, throughput=40.0, throughput_ci_low=38.0, throughput_ci_high=42.0)
    r = point(
        "ddp", 2, 0.05, throughput=80.0, speedup=2.0, efficiency=1.0, throughput_ci_low=76.0, throughput_ci_high=84.0
    )
    own = an.scaled_ci(r, "speedup")
    assert own == pytest.approx((1.9, 2.1))
    both = an.scaled_ci(r, "speedup", base)
    assert both[0] < own[0] and both[1] > own[1]  # wider: two sources of noise
    assert an.scaled_ci(r, "efficiency", base) == pytest.approx((both[0] / 2, both[1] / 2))
    assert an.baseline_for(r, [base, r]) is base


def test_noisy_baseline_and_superlinear_efficiency_are_called_out(tmp_path):
    recs = [point("torch", 1, times=[0.05, 0.4] * 5), point("ddp", 2, 0.05)]  # (8/0.05)/(4/0.225)/2 = 450%
    with Store(tmp_path / "r.db") as store:
        sweep = load_sweep(store, add_sweep(store, recs))
    notes = " ".join(an.summarize(sweep).notes)
    assert "The 'torch' baseline is noisy (step-time CV 82%): every torch speedup and efficiency" in notes
    assert "Efficiency above 110% (ddp N=2 (efficiency 450%)) is more than linear scaling allows" in notes


def test_cpu_workers_summary_reads_the_per_core_efficiency(tmp_path):
    # whole machine: ddp N=2 at 117% (the baseline had both cores); per core: 40% (baseline on one worker's threads)
    recs = [
        point("torch", 1, 0.1),
        point("ddp", 1, 0.1 / 0.74, efficiency_per_core=0.74),
        point("ddp", 2, 0.1 / 1.17, efficiency_per_core=0.40),
    ]
    with Store(tmp_path / "r.db") as store:
        sweep = load_sweep(store, add_sweep(store, recs))
    assert an.efficiency_key(sweep.scaling_points) == "efficiency_per_core"
    summary = an.summarize(sweep)
    assert summary.best[0].startswith("ddp scales best: 40% per-core efficiency at N=2, the largest N measured")
    assert "against the baseline on the whole machine it is 117%" in summary.best[0]
    assert summary.drops == [
        "ddp (per-core efficiency): already below 80% at N=1 (74%): the 1-device wrapper cost alone; 40% at N=2."
    ]
    assert not any("no limit" in line for line in summary.limits)
    assert summary.limits[0].startswith("ddp (per-core efficiency): ")
    assert not any("above 110%" in note for note in summary.notes)  # 117% is the whole-machine figure
    plot = report_plots.plot_efficiency(sweep, report_plots._colors(), "Scaling efficiency vs N")
    assert plot.axes[0].get_ylabel() == "efficiency (per core)"
    ys = [y for line in plot.axes[0].lines for y in line.get_ydata() if y not in (1.0, an.EFFICIENCY_TARGET)]
    assert sorted(ys) == pytest.approx([0.40, 0.74])


def test_cpu_workers_splitting_the_cores_is_stated_from_the_configs():
    base = point("torch", 1, 0.1)
    base["config"]["threads_per_worker"] = 2
    two = point("ddp", 2, 0.2)
    two["config"]["threads_per_worker"] = 1
    assert an.shared_cores_note(two, base) == (
        "On CPU workers the N=2 workers ran 1 thread(s) each (2 in total) where the baseline ran 2: they split "
        "the same cores, so little or no speedup is expected here."
    )
    two["config"]["threads_per_worker"] = 2  # more cores in total: nothing to say
    assert an.shared_cores_note(two, base) is None
    assert an.shared_cores_note(point("ddp", 2, 0.2, device="cuda"), base) is None


def test_noise_is_named_when_flagged():
    causes, _ = an.limiting_factors(point("ddp", 4, 0.1, noisy=True, step_time_cv=0.25))
    assert causes == ["noise (the N=4 point is flagged noisy, step-time CV 25%: its efficiency is uncertain)"]
    assert an.is_noisy(point("ddp", 4, 0.1, step_time_cv=0.2))
    assert not an.is_noisy(point("ddp", 4, 0.1, step_time_cv=0.2, noisy=False))  # the record's flag wins


def test_capacity_table_uses_measured_points_only(scaling_sweep):
    _, _, sweep = scaling_sweep
    rows = {
        r.strategy: r
        for r in an.capacity(
            sweep.scaling_points, target_throughput=130, epoch_samples=1_281_167, epoch_time_s=3 * 3600
        )
    }
    # ddp: 72 at N=2, 136 at N=4 -> 4; horovod-torch: 80 at N=4 is its largest -> not reached.
    assert rows["ddp"].target_throughput == "4 CPU workers"
    assert rows["horovod-torch"].target_throughput == "not reached at the largest measured N = 4 (80.00 samples/s)"
    assert rows["torch"].target_throughput == "not reached at the largest measured N = 1 (40.00 samples/s)"
    # epoch: 1,281,167 / 192 samples/s = 6673 s = 1.9 h at ddp N=8; 3 h needs ddp N=4 (9420 s = 2.6 h).
    assert rows["ddp"].target_epoch == "4 CPU workers"
    assert rows["ddp"].epoch_times[-1] == (8, pytest.approx(1_281_167 / 192))
    assert rows["horovod-torch"].target_epoch.startswith("not reached at the largest measured N = 4 (4.4 h")
    one = an.capacity(sweep.scaling_points, target_throughput=30)
    assert {r.strategy: r.target_throughput for r in one}["torch"] == "1 CPU worker"


def test_capacity_table_has_a_ci_under_its_header_and_marks_noisy_points(tmp_path):
    from distbench.report import tables

    recs = [point("torch", 1, 0.1), point("ddp", 2, 0.1, noisy=True), point("ddp", 4, 0.1, steps=3)]
    with Store(tmp_path / "r.db") as store:
        sweep = load_sweep(store, add_sweep(store, recs))
    headers, rows = tables.capacity_table(sweep, None, None, None)
    assert headers[1] == "measured throughput (samples/s) [95% CI]"
    torch_cell, ddp_cell = rows[0][1], rows[1][1]
    # no recorded CI: the within-run one from 200 steps (1% jitter) is under the header
    assert re.fullmatch(r"N=1: 40\.00 \[\d+\.\d\d, \d+\.\d\d\]", torch_cell)
    lo, hi = (float(x) for x in re.findall(r"\d+\.\d\d", torch_cell)[1:])
    assert lo < 40.0 < hi
    assert re.fullmatch(r"N=2: 80\.00 \[[\d.]+, [\d.]+\] noisy, N=4: 160\.00 \(no CI\)", ddp_cell)


def test_the_noisy_count_covers_every_point_the_table_flags(tmp_path):
    per_core = point("torch", 1, 0.2, noisy=True, config={"baseline_threads": 1})
    recs = [point("torch", 1, 0.1), per_core, point("ddp", 2, 0.1, noisy=True)]
    with Store(tmp_path / "r.db") as store:
        sweep = load_sweep(store, add_sweep(store, recs))
    flagged = [r for r in sweep.points if an.is_noisy(r)]
    assert len(flagged) == 2
    note = next(n for n in an.summarize(sweep).notes if "are noisy" in n)
    assert note.startswith("2 point(s) are noisy (flagged, or step-time CV above 10%): torch (1 thread, per-core")


def test_capacity_warns_when_the_ci_straddles_the_target():
    rows = an.capacity(
        [point("torch", 1, 0.1, throughput=40.0, throughput_ci_low=35.0, throughput_ci_high=45.0)], target_throughput=38
    )
    assert rows[0].target_throughput == ("1 CPU worker (its 95% CI lower bound, 35.00 samples/s, is below the target)")


def test_comm_breakdown_splits_the_step():
    b = an.comm_breakdown({"time_per_step_s": 0.2, "exposed_comm_s": 0.05, "allreduce_s": 0.08})
    assert b["exposed_s"] == pytest.approx(0.05) and b["overlapped_s"] == pytest.approx(0.03)
    assert b["compute_only_s"] == pytest.approx(0.12)
    b = an.comm_breakdown({"time_per_step_s": 0.2, "comm_overhead": 0.25, "overlap": 0.5})
    assert b["exposed_s"] == pytest.approx(0.05) and b["overlapped_s"] == pytest.approx(0.05)
    assert an.comm_breakdown({"time_per_step_s": 0.2}) is None


def test_telemetry_values_flatten_per_device_collections():
    r = {
        "telemetry": {
            "gpu_util_mean": 71.5,
            "gpu_mem_peak_bytes": [1.0e9, 3.0e9],
            "throttled": True,
            "cpu_util_mean": {"pid1": 40.0, "pid2": 45.0},
            "rss_peak_bytes": {"pid1": 5.0},
            "samples": 400,
            "window": [1.7e9, 1.8e9],
            "note": "text is ignored",
        }
    }
    assert an.telemetry_values(r) == {
        "gpu_util_mean": 71.5,
        "gpu_mem_peak_bytes": 3.0e9,
        "throttled": 1.0,
        "cpu_util_mean": 45.0,
        "rss_peak_bytes": 5.0,
    }
    assert an.telemetry_values({}) == {} and an.telemetry_values({"telemetry": "bad"}) == {}


# -- the report files -------------------------------------------------------------------------------------
def _full_records() -> list[dict]:
    recs = scaling_records(
        comm_overhead=0.35,
        exposed_comm_s=0.058,
        allreduce_s=0.09,
        overlap=0.36,
        grad_bytes=102_230_000,
        throughput_ci_low=185.0,
        throughput_ci_high=199.0,
        telemetry={
            "gpu_util_mean": 71.5,
            "gpu_mem_peak_bytes": [2.1e9, 2.3e9],
            "power_w_mean": 230.0,
            "energy_per_sample_j": 1.2,
            "rss_peak_bytes": [1.5e9] * 8,
            "throttled": False,
        },
    )
    recs.append(
        point("ddp", 16, status="failed", reason="worker 3 exited with code 1", stderr_tail="RuntimeError: boom")
    )
    recs.append(
        point(
            "comm-gloo",
            2,
            status="ok",
            times=[],
            sizes_bytes=[1024, 1 << 20, 1 << 24],
            busbw_gbps=[0.01, 0.8, 1.3],
            algbw_gbps=[0.01, 0.8, 1.3],
            time_median_s=[1e-4, 1e-3, 1e-2],
        )
    )
    return recs


def test_report_contents(tmp_path):
    with Store(tmp_path / "r.db") as store:
        sweep = load_sweep(store, add_sweep(store, _full_records()))
    files = write_report(
        sweep, tmp_path / "out" / "report.html", target_throughput=130, epoch_samples=1_000_000, epoch_time=3600
    )
    page = files.html.read_text()
    assert files.markdown == tmp_path / "out" / "report.md" and files.csv.name == "report-points.csv"
    names = sorted(p.name for p in files.images)
    assert names == [
        "report-busbw.png",
        "report-comm.png",
        "report-efficiency.png",
        "report-speedup.png",
        "report-steps.png",
        "report-telemetry.png",
        "report-throughput.png",
    ]
    assert all(p.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" for p in files.images)
    assert page.count('<img class="plot"') == 7 and "data:image/svg+xml;base64," in page
    # self-contained: no external URL anywhere, a CSP forbids network loads
    assert not re.search(r"""(src|href)=["']?(https?:)?//""", page)
    csp = re.search(r'<meta http-equiv="Content-Security-Policy" content="([^"]*)">', page)
    assert html.unescape(csp.group(1)) == CSP and "default-src 'none'" in CSP
    for text in (
        "ddp scales best: 60% efficiency at N=8",
        "ddp: communication (exposed communication is 35%",
        "Measured points only",
        "devices for 130 samples/s",
        "4 CPU workers",
        "worker 3 exited with code 1",
        "RuntimeError: boom",
        "CPU workers.",
        "185.00-199.00",
        "DataParallel needs CUDA devices",
        "2.14 GiB",
        "1 KiB - 16 MiB",
    ):
        assert text in page, text
    md = files.markdown.read_text()
    assert "![Speedup vs N" in md and "(report-speedup.png)" in md and "| ddp | 8 |" in md
    csv = files.csv.read_text().splitlines()
    assert csv[0].startswith("sweep_id,point_id,strategy,framework,model,world_size")
    assert len(csv) == 1 + len(_full_records())


def test_report_without_optional_fields_says_what_is_missing(scaling_sweep, tmp_path):
    _, _, sweep = scaling_sweep
    files = write_report(sweep, tmp_path / "plain.html")
    page = files.html.read_text()
    assert "This sweep has no communication measurements" in page
    assert "This sweep has no telemetry" in page
    assert "Pass --target-throughput" in page
    assert sorted(p.name for p in files.images) == [
        "plain-efficiency.png",
        "plain-speedup.png",
        "plain-steps.png",
        "plain-throughput.png",
    ]


def test_every_store_string_is_escaped(tmp_path):
    evil = "<script>alert(1)</script>"
    recs = [
        point("torch", 1, 0.1),
        point(evil, 2, 0.05),
        point("ddp", 4, status="failed", reason=f"boom {evil} | pipe", stderr_tail=evil),
        point("ddp", 2, 0.06, model=f"m{evil}"),
    ]
    with Store(tmp_path / "r.db") as store:
        sid = add_sweep(store, recs, command=f"distbench scale {evil}")
        sweep = load_sweep(store, sid)
    files = write_report(sweep, tmp_path / "x.html")
    page = files.html.read_text()
    assert page.count("<script") == 1  # only the report's own marker script
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    md = files.markdown.read_text()
    assert "boom \\<script>alert(1)\\</script> \\| pipe" in md  # a backslash: Markdown shows it as text
    assert "<script" not in md.replace("\\<", "")  # every '<' that could open a tag is escaped


def test_markdown_report_carries_no_html_entities(tmp_path):
    """Markdown is read as text: '82 < 150' and 'torch<2.7.1' stay as written (issue 30, defect 5)."""
    recs = [
        point("torch", 1, 0.1),
        point("ddp", 2, status="skipped", reason="needs torch<2.7.1 & 82 < 150 MB > free"),
    ]
    with Store(tmp_path / "r.db") as store:
        sweep = load_sweep(store, add_sweep(store, recs, command="distbench scale --gpus 1,2 'a<b'"))
    text = write_report(sweep, tmp_path / "x.html").markdown.read_text()
    assert "torch<2.7.1 & 82 < 150 MB > free" in text
    assert not any(e in text for e in ("&lt;", "&gt;", "&amp;")), "HTML entities in the Markdown"


# -- headless Chromium ------------------------------------------------------------------------------------
def _png_size(data: bytes) -> tuple[int, int]:
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    return struct.unpack(">II", data[16:24])


@pytest.mark.slow
def test_report_loads_in_headless_chromium(chromium, tmp_path):
    wrappers = [point("accelerate", 1, 0.1 / 0.9), point("composer", 1, status="skipped", reason="version conflict")]
    with Store(tmp_path / "r.db") as store:
        sweep = load_sweep(store, add_sweep(store, _full_records() + wrappers))
    files = write_report(sweep, tmp_path / "report.html", target_throughput=130)
    url = files.html.resolve().as_uri()

    dom = run_chromium(chromium, tmp_path, "dom", "--virtual-time-budget=5000", "--dump-dom", url)
    assert dom.returncode == 0, dom.stderr[-2000:]
    root = re.search(r"<html[^>]*>", dom.stdout).group(0)
    assert 'data-report-ready="yes"' in root, root
    assert 'data-plots-expected="7"' in root and 'data-plots-loaded="7"' in root
    assert "data-js-errors" not in root
    assert '<section id="wrappers"><h2>Wrapper and sharded strategies</h2>' in dom.stdout
    console = [
        line
        for line in dom.stderr.splitlines()
        if "CONSOLE" in line or "Uncaught" in line or "Content Security Policy" in line
    ]
    assert console == []

    shot = tmp_path / "report.png"
    proc = run_chromium(
        chromium, tmp_path, "shot", "--window-size=1280,2000", f"--screenshot={shot}", "--hide-scrollbars", url
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    data = shot.read_bytes()
    assert _png_size(data) == (1280, 2000)
    assert len(data) > 50_000  # a blank page compresses to a few KB


def test_the_browser_check_catches_errors_and_network_loads(chromium, tmp_path):
    """Negative control: the same checks fail on a page with a script error and an external image."""
    bad = tmp_path / "bad.html"
    bad.write_text(
        f'<!DOCTYPE html><html><head><meta http-equiv="Content-Security-Policy" content="{CSP}">'
        '</head><body><img class="plot" src="https://example.invalid/x.png">'
        f"<script>{MARKER_JS}undefinedFunction();</script></body></html>"
    )
    dom = run_chromium(chromium, tmp_path, "bad", "--virtual-time-budget=5000", "--dump-dom", bad.as_uri())
    root = re.search(r"<html[^>]*>", dom.stdout).group(0)
    assert 'data-js-errors="1"' in root and 'data-report-ready="no"' in root
    console = "\n".join(line for line in dom.stderr.splitlines() if "CONSOLE" in line)
    assert "Uncaught ReferenceError" in console and "Content Security Policy" in console


# -- point keys: the whole workload, nodes included --------------------------------------------------------
def test_point_key_is_the_whole_workload_from_the_config():
    from distbench.core.config import point_key
    from distbench.kinds import sweep

    cfg = point_config(
        "ddp",
        4,
        model="resnet50",
        per_device_batch=8,
        image_size=64,
        precision="bf16",
        nodes=2,
        steps=50,
        threads_per_worker=1,
    ).to_dict()
    key = point_key("ddp", cfg)
    assert key[:3] == ("ddp", 4, 2) and key.batch == 8 and sweep.point_key is point_key  # one function
    workload = dict(key.workload)
    assert workload["precision"] == "bf16" and workload["image_size"] == 64 and workload["device"] == "cpu"
    assert {"model", "scaling", "seq_len", "num_classes", "data", "compile", "xla", "channels_last"} <= set(workload)
    # how long and how it is measured, and the machine's thread split, are not the workload
    assert point_key("ddp", {**cfg, "steps": 9, "threads_per_worker": 2, "target_ci": 0.1}) == key
    assert point_key("ddp", {**cfg, "precision": "fp32"}) != key
    assert "loader_workers" not in workload
    assert "loader_workers" in dict(point_key("ddp", {**cfg, "data": "disk", "data_dir": "/x"}).workload)
    # an older record without a field counts at PointConfig's default
    old = {k: v for k, v in cfg.items() if k not in ("channels_last", "xla")}
    assert point_key("ddp", old) == key


def test_two_node_counts_at_the_same_n_are_two_curves_not_one(tmp_path):
    recs = [
        point("torch", 1, 0.1),
        point("ddp", 2, 0.1 / 0.9),
        point("ddp", 4, 0.1 / 0.85),
        point("ddp", 2, 0.1 / 0.5, nodes=2),
        point("ddp", 4, 0.1 / 0.4, nodes=2),
    ]
    with Store(tmp_path / "r.db") as store:
        sweep = load_sweep(store, add_sweep(store, recs))
    series = an.by_strategy(sweep.scaling_points)
    assert {k: [r["world_size"] for r in v] for k, v in series.items()} == {
        "torch": [1],
        "ddp": [2, 4],
        "ddp (2 nodes)": [2, 4],
    }
    assert series["ddp (2 nodes)"][1]["efficiency"] == pytest.approx(0.4)  # the later point did not win
    assert series["ddp"][1]["efficiency"] == pytest.approx(0.85)
    drops = an.summarize(sweep).drops
    assert "ddp: at or above 80% at every measured N (up to N=4, 85%)." in drops
    assert "ddp (2 nodes): drops below 80% at N=2 (50%)." in drops
    files = write_report(sweep, tmp_path / "out" / "report.html")
    text = files.markdown.read_text()
    assert "| ddp (2 nodes) | 4 |" in text and "| ddp | 4 |" in text


def test_a_workload_label_never_prints_an_unset_field_as_none():
    from distbench.analysis.records import workload_key

    plain, per_core = point("torch", 1, 0.1), point("torch", 1, 0.2, config={"baseline_threads": 1})
    keys = [workload_key(plain), workload_key(per_core)]
    labels = [an.workload_label(k, keys) for k in keys]
    assert labels == ["resnet50 (weak scaling, batch 4)", "resnet50 (weak scaling, batch 4, baseline_threads 1)"]


def test_workloads_that_differ_in_precision_are_grouped_apart_and_labelled(tmp_path):
    recs = [
        point("torch", 1, 0.1),
        point("ddp", 2, 0.1 / 0.9),
        point("torch", 1, 0.05, config={"precision": "bf16"}),
        point("ddp", 2, 0.05 / 0.6, config={"precision": "bf16"}),
    ]
    with Store(tmp_path / "r.db") as store:
        sweep = load_sweep(store, add_sweep(store, recs))
    groups = an.group_by_workload(sweep.scaling_points)
    assert len(groups) == 2
    labels = sorted(an.workload_label(k, groups) for k in groups)
    assert labels == [
        "resnet50 (weak scaling, batch 4, precision bf16)",
        "resnet50 (weak scaling, batch 4, precision fp32)",
    ]
    # each ddp point is divided by the baseline of its own workload
    assert an.baseline_for(recs[3], sweep.scaling_points)["config"]["precision"] == "bf16"
    limits = " ".join(an.summarize(sweep).drops)
    assert "resnet50 (weak scaling, batch 4, precision bf16): ddp: drops below 80% at N=2" in limits


# -- energy per sample on several nodes --------------------------------------------------------------------
def _gpu_samples(gpus: int, joules_per_gpu: float, window=(10.0, 20.0)) -> list[tuple]:
    """NVML-like samples: each GPU's energy counter rising linearly over the window."""
    out = []
    for g in range(gpus):
        for t in (window[0], window[1]):
            frac = (t - window[0]) / (window[1] - window[0])
            out += [
                (t, f"gpu{g}", "util_percent", 90.0),
                (t, f"gpu{g}", "mem_used_bytes", 1e9),
                (t, f"gpu{g}", "power_w", 300.0),
                (t, f"gpu{g}", "energy_j", 5000.0 + frac * joules_per_gpu),
            ]
    return out


def test_energy_per_sample_counts_only_the_sampled_nodes_samples():
    from distbench.run.telemetry import summarize

    # 8 devices over 2 nodes, per-device batch 32, 10 steps: 2560 samples in all, 1280 on node 0,
    # whose 4 sampled GPUs used 4 x 1000 J.
    tel = summarize(_gpu_samples(4, 1000.0), (10.0, 20.0), 10 * 32 * 8, world_size=8, nodes=2)
    assert tel["energy_j"] == pytest.approx(4000.0)
    assert tel["energy_per_sample_j"] == pytest.approx(4000.0 / 1280)
    assert tel["energy_scope"] == "node 0's GPUs only (4 of 8 GPUs)"
    # one node, every GPU sampled: the whole point
    tel = summarize(_gpu_samples(4, 1000.0), (10.0, 20.0), 10 * 32 * 4, world_size=4)
    assert tel["energy_per_sample_j"] == pytest.approx(4000.0 / 1280)
    assert tel["energy_scope"] == "all 4 GPUs of the point"


def test_report_says_what_energy_per_sample_covers(tmp_path):
    from distbench.run.telemetry import summarize

    tel = summarize(_gpu_samples(4, 1000.0), (10.0, 20.0), 2560, world_size=8, nodes=2)
    unscoped = dict(tel, energy_per_sample_j=4000.0 / 2560)
    del unscoped["energy_scope"]  # an older record: one node's energy over both nodes' samples
    recs = [point("ddp", 8, 0.1, nodes=2, telemetry=tel), point("ddp", 4, 0.1, nodes=2, telemetry=unscoped)]
    assert an.telemetry_values(recs[0])["energy_per_sample_j"] == pytest.approx(4000.0 / 1280)
    assert "energy_per_sample_j" not in an.telemetry_values(recs[1])
    with Store(tmp_path / "r.db") as store:
        sweep = load_sweep(store, add_sweep(store, recs))
    files = write_report(sweep, tmp_path / "out" / "report.html")
    note = "ddp (2 nodes) N=8: energy per sample covers node 0's GPUs only (4 of 8 GPUs)."
    assert note in files.markdown.read_text() and note in html.unescape(files.html.read_text())


# -- one data model, two renderings ------------------------------------------------------------------------
def test_html_and_markdown_render_every_block_of_the_same_model(tmp_path):
    from distbench.report import build_report, make_plots, md, render_html, render_markdown
    from distbench.report.blocks import Bullets, Details, Figure, Grid, Heading, Table, Text

    with Store(tmp_path / "r.db") as store:
        sweep = load_sweep(store, add_sweep(store, _full_records()))
    report = build_report(sweep, make_plots(sweep), target_throughput=130)
    page = html.unescape(render_html(report))
    text = render_markdown(report, images={p.name: f"{p.name}.png" for p in report.plots}, csv_name="p.csv")
    assert [s.id for s in report.sections] == [
        "summary",
        "points",
        "scaling",
        "communication",
        "steps",
        "telemetry",
        "capacity",
        "problems",
        "environment",
    ]
    for section in report.sections:
        assert f'<section id="{section.id}"><h2>{section.title}</h2>' in page and f"\n## {section.title}\n" in text
        assert f'<a href="#{section.id}">{section.nav}</a>' in page
        for b in section.blocks:
            match b:
                case Text() | Heading():
                    strings = [b.text]
                case Bullets():
                    strings = b.items
                case Table():
                    strings = [*b.headers, *(c for row in b.rows for c in row)]
                case Figure():
                    strings = [b.plot.title]
                case Grid():
                    strings = [f.plot.title for f in b.figures]
                case Details():  # a stderr tail: the page only
                    strings = []
                    assert f"<summary>{b.summary}</summary><pre>{b.text}</pre>" in page
            for s in strings:
                assert s in page and md(s) in text, s
    # every plot drawn is shown once in each: inline SVG in the page, the PNG's name in the Markdown
    for p in report.plots:
        assert page.count(f'id="plot-{p.name}"') == 1 and text.count(f"]({p.name}.png)") == 1
    assert "**CPU workers.** This sweep ran on CPU workers" in text and 'id="cpu-note"' in page


def test_a_new_plot_is_one_entry_in_PLOTS(tmp_path, monkeypatch):
    from distbench.report import plots

    def draw(sweep, colors, title):
        fig, ax = plots._figure(3.0, 2.0)
        ax.plot([r["world_size"] for r in sweep.scaling_points], [r["throughput"] for r in sweep.scaling_points])
        ax.set_title(title)
        return fig

    extra = plots.PlotSpec("extra", "An extra plot", draw, "steps", "Drawn by the test.")
    monkeypatch.setattr(plots, "PLOTS", [*plots.PLOTS, extra])
    with Store(tmp_path / "r.db") as store:
        sweep = load_sweep(store, add_sweep(store, scaling_records()))
    files = write_report(sweep, tmp_path / "x.html")
    page = files.html.read_text()
    steps = page[page.index('<section id="steps">') : page.index('<section id="telemetry">')]
    assert '<img class="plot" id="plot-extra" alt="An extra plot"' in steps
    assert "<figcaption>Drawn by the test.</figcaption>" in steps
    assert "![An extra plot](x-extra.png)\n\n*Drawn by the test.*" in files.markdown.read_text()
    assert (tmp_path / "x-extra.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_a_converge_sweep_is_not_summarized_as_lacking_a_baseline(tmp_path):
    recs = [point("torch", 1, 0.1, converge={"reached": True}), point("ddp", 2, 0.1, converge={"reached": True})]
    with Store(tmp_path / "r.db") as store:
        sweep = load_sweep(store, add_sweep(store, recs, command="distbench converge --strategy torch,ddp"))
    summary = an.summarize(sweep)
    assert summary.best == [] and not any("baseline" in line and "No strategy" in line for line in summary.best)
    assert any(note.startswith("A time-to-accuracy sweep (distbench converge)") for note in summary.notes)


def test_per_core_or_whole_machine_is_chosen_per_workload_in_the_summary_and_the_plot(tmp_path):
    """A CPU sweep of two workloads where only one has per-core figures: the summary reads per-core for that
    one and whole-machine for the other, and the efficiency plot draws each line with the same figure and
    says which; a superlinear note is judged on the figure its workload reads."""
    recs = [
        point("torch", 1, 0.1),
        point("ddp", 1, 0.1 / 0.74, efficiency_per_core=0.74),
        point("ddp", 2, 0.1 / 1.17, efficiency_per_core=0.40),  # whole machine 117%: not superlinear per core
        point("torch", 1, 0.1, config={"image_size": 128}),
        point("ddp", 1, 0.1 / 0.9, config={"image_size": 128}),
        point("ddp", 2, 0.1 / 0.75, config={"image_size": 128}),  # 75% whole machine, no per-core baseline
    ]
    with Store(tmp_path / "r.db") as store:
        sweep = load_sweep(store, add_sweep(store, recs))
    keys = an.efficiency_keys(sweep.scaling_points)
    assert sorted(keys.values()) == ["efficiency", "efficiency_per_core"]
    summary = an.summarize(sweep)
    [per_core] = [line for line in summary.best if "per-core efficiency at N=2" in line]
    assert "40%" in per_core
    [whole] = [line for line in summary.best if line is not per_core]
    assert "75% efficiency at N=2" in whole
    assert not any("above 110%" in note for note in summary.notes)
    plot = report_plots.plot_efficiency(sweep, report_plots._colors(), "Scaling efficiency vs N")
    labels = [t.get_text() for t in plot.axes[0].get_legend().get_texts()]
    assert any("(per core)" in label for label in labels), labels
    assert any("(whole machine)" in label for label in labels), labels
    ys = [y for line in plot.axes[0].lines for y in line.get_ydata() if y not in (1.0, an.EFFICIENCY_TARGET)]
    assert sorted(ys) == pytest.approx(sorted([0.74, 0.40, 0.9, 0.75]))
