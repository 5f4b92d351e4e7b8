import json
import re

import pytest

from distbench.analysis.lines import stopping_line, wrapper_lines
from distbench.analysis.output import json_document, print_table


def test_stopping_line_says_which_points_met_the_target():
    recs = [
        {"status": "ok", "strategy": "ddp", "world_size": 2, "stopping": {"rule": "max_time"}},
        {"status": "ok", "strategy": "torch", "world_size": 1, "stopping": {"rule": "target_ci_met"}},
        {"status": "failed", "strategy": "tf", "world_size": 1, "stopping": None},
    ]
    assert stopping_line(recs) == (
        "adaptive stopping: 1 point(s) reached the CI target; 1 stopped at --max-time before reaching it (ddp@2)"
    )
    assert (
        stopping_line([{"status": "ok", "strategy": "t", "world_size": 1, "stopping": {"rule": "fixed_steps"}}]) is None
    )
    split = recs[1:2] + [{"status": "ok", "strategy": "ddp", "world_size": 2, "stopping": {"rule": "two_stage"}}]
    assert stopping_line(split) == (
        "stopping: 1 point(s) reached the CI target; 1 point(s) with a split ran windows sized in advance from "
        "--max-time and a pilot's pace (two-stage, not adaptive)"
    )


def _decoder(strategy, n, seq, batch=4, rule="max_time", **kw):
    config = {"model": "gpt2", "seq_len": seq, "per_device_batch": batch, "scaling": "weak", "world_size": n}
    return {"status": "ok", "strategy": strategy, "framework": "torch", "world_size": n, "config": config,
            "stopping": {"rule": rule}, **kw}  # fmt: skip


def test_the_lines_under_the_table_name_the_sequence_length_and_a_swept_batch():
    recs = [_decoder("ddp", 2, 32), _decoder("ddp", 2, 64), _decoder("fsdp", 1, 64, wrapper_overhead=0.1)]
    assert stopping_line(recs) == (
        "adaptive stopping: 3 stopped at --max-time before reaching it (ddp@2 seq 32, ddp@2 seq 64, fsdp@1 seq 64)"
    )
    assert wrapper_lines(recs) == [
        "1-device wrapper cost: fsdp at N=1 (seq 64) is 10.0% slower than the plain 'torch' loop (CIs: distbench "
        "report)"
    ]
    batches = [_decoder("fsdp", 1, 64, batch=b, wrapper_overhead=w) for b, w in ((2, 0.1), (8, -0.05))]
    assert [line.split(" is ")[0] for line in wrapper_lines(batches)] == [
        "1-device wrapper cost: fsdp at N=1 (batch 2, seq 64)",
        "1-device wrapper cost: fsdp at N=1 (batch 8, seq 64)",
    ]
    assert stopping_line(batches).endswith("(fsdp@1 batch 2 seq 64, fsdp@1 batch 8 seq 64)")


def test_wrapper_lines_and_json_fields():
    recs = [{"strategy": "ddp", "framework": "torch", "world_size": 1, "wrapper_overhead": 0.05, "status": "ok"}]
    assert wrapper_lines(recs) == [
        "1-device wrapper cost: ddp at N=1 is 5.0% slower than the plain 'torch' loop (CIs: distbench report)"
    ]
    faster = [dict(recs[0], wrapper_overhead=-0.422)]
    assert wrapper_lines(faster)[0].startswith("1-device wrapper cost: ddp at N=1 is 42.2% faster than")
    doc = json.loads(json_document(recs))
    for key in (
        "strategy",
        "framework",
        "world_size",
        "device",
        "status",
        "reason",
        "throughput",
        "step_time_median_s",
        "step_time_p95_s",
        "speedup",
        "efficiency",
        "scaling",
        "comm_overhead",
        "exposed_comm_s",
        "allreduce_s",
        "grad_bytes",
        "overlap",
    ):
        assert key in doc[0]


def test_an_unbounded_ci_is_shown_not_crashed_on():
    """A step-time CI half-width of 100% or more leaves the throughput CI without an upper end (None)."""
    from rich.console import Console

    from distbench.analysis.output import results_table
    from distbench.commands.scale import _ok_detail
    from distbench.results.stats import rate_ci

    low, high = rate_ci(10.0, 1.2)
    assert high is None
    r = {"strategy": "ddp", "world_size": 2, "status": "ok", "throughput": 10.0, "measured_steps": 160}
    r.update(throughput_ci_low=low, throughput_ci_high=high, stopping={"rule": "max_time"})
    assert _ok_detail(r).startswith("10.00 samples/s, 95% CI 4.55..unbounded, stopped at --max-time")
    console = Console(width=250, record=True)
    console.print(results_table([r], title="t"))
    assert "4.55..unbounded" in console.export_text()


def _demo_records() -> list[dict]:
    """What `make demo` leaves on CPU workers: baselines, per-core references, ok points and long skip reasons."""
    dp_skip = "DataParallel needs CUDA devices; it cannot split work across CPU workers (use ddp for CPU workers)"
    out = []
    for strategy, framework, n, backend in (
        ("torch", "torch", 1, None),
        ("tf", "tf", 1, None),
        ("ddp", "torch", 1, "gloo"),
        ("ddp", "torch", 2, "gloo"),
        ("dp", "torch", 1, None),
        ("dp", "torch", 2, None),
        ("mirrored", "tf", 2, "ReductionToOneDevice"),
        ("horovod-torch", "torch", 2, "gloo"),
    ):
        r = {"strategy": strategy, "framework": framework, "world_size": n, "device": "cpu", "backend": backend}
        if strategy == "dp" and n == 2:
            r.update(status="skipped", reason=dp_skip)
        else:
            r.update(
                status="ok",
                throughput=123.456,
                throughput_ci_low=120.01,
                throughput_ci_high=126.99,
                speedup=1.93,
                efficiency=0.965,
                efficiency_per_core=0.71,
                mfu=0.123,
                step_time_median_s=0.0123,
                step_time_p95_s=0.0188,
                comm_overhead=0.12,
                overlap=0.5,
                noisy=strategy == "mirrored",
                step_time_cv=0.13,
            )
        out.append(r)
    out.append(
        {
            "strategy": "torch",
            "framework": "torch",
            "world_size": 1,
            "device": "cpu",
            "status": "failed",
            "config": {"baseline_threads": 1},
            "reason": "rank 0 exited with status 1: RuntimeError: " + "x" * 300,
        }
    )
    return out


def _summary(monkeypatch, columns_env=None, width=160, **kw) -> str:
    import io

    from rich.console import Console

    from distbench.analysis.output import print_summary

    if columns_env is None:
        monkeypatch.delenv("COLUMNS", raising=False)
    else:
        monkeypatch.setenv("COLUMNS", str(columns_env))
    out = io.StringIO()
    print_summary(Console(file=out, width=width, color_system=None), _demo_records(), [], "s1", "r.db", **kw)
    return out.getvalue()


def _table(text: str) -> list[str]:
    """The table's lines: from the title to the first reason line."""
    lines = text.splitlines()
    return lines[: next(i for i, ln in enumerate(lines) if ln.startswith("[1] "))]


def test_the_table_fits_120_columns_with_short_status_words_and_reasons_under_it(monkeypatch):
    text = _summary(monkeypatch)  # written to a file: 120 columns unless COLUMNS says otherwise
    table = _table(text)
    assert max(len(ln.rstrip()) for ln in text.splitlines()) <= 120
    rows = [ln.split() for ln in table]
    assert ["dp", "2", "-"] + ["-"] * 7 + ["skipped", "[1]"] in rows  # one line: no reason wraps the status
    assert ["mirrored", "2"] == rows[[r[:1] for r in rows].index(["mirrored"])][:2]
    assert any(ln.rstrip().endswith("ok noisy") for ln in table)
    assert any(r[:1] == ["ddp"] and "gloo" in r and "120.01..126.99" in r for r in rows)
    assert "backend" in " ".join(table[:5])
    assert "[1] dp N=2: DataParallel needs CUDA devices; it cannot split work across CPU workers (use ddp" in text
    assert "\n[2] torch (1 thread, per-core reference) N=1: rank 0 exited with status 1" in text


def test_columns_env_and_choice_of_columns(monkeypatch):
    from distbench.analysis.output import TABLE_COLUMNS, parse_columns

    narrow = _summary(monkeypatch, columns_env=100)
    assert max(len(ln.rstrip()) for ln in narrow.splitlines()) <= 100
    assert "skipped [1]" in narrow and "horovod-torch" in narrow  # names whole, numbers whole
    assert "left out to fit 100 characters: efficiency_per_core, comm, step_median (--columns" in narrow
    chosen = " ".join(_table(_summary(monkeypatch, columns=("strategy", "N", "throughput", "status")))[:4])
    assert "throughput" in chosen and "speedup" not in chosen and "backend" not in chosen
    wide = _summary(monkeypatch, columns=parse_columns(None, wide=True))
    header = " ".join(_table(wide)[:5])
    for word in ("overlap", "p95", "CV", "memory", "MFU", "backend"):
        assert word in header
    assert "horovod-torch" in wide  # --wide takes the width it needs: no name cut short
    assert parse_columns("status,N,strategy") == ("strategy", "N", "status")  # shown in display order
    assert parse_columns(None, wide=True) == tuple(TABLE_COLUMNS)


def test_bad_columns_are_one_line_errors_naming_the_flag():
    import pytest

    from distbench.commands.scale import table_columns
    from distbench.core.errors import BadInput

    with pytest.raises(BadInput, match=r"^--columns: unknown column\(s\) 'thruput'; valid: strategy, N, backend"):
        table_columns("strategy,thruput", False)
    with pytest.raises(BadInput, match=r"^--columns and --wide: give one of them"):
        table_columns("strategy", True)


def _scale_opts(monkeypatch, *args):
    """The SweepOptions `distbench scale ARGS` would run (the sweep itself replaced)."""
    from click.testing import CliRunner

    from distbench.commands import scale as cmd

    seen = {}
    monkeypatch.setattr(cmd, "_execute", lambda opts, **kw: (seen.update(opts=opts, **kw), [], None))
    result = CliRunner().invoke(cmd.scale, list(args))
    assert result.exit_code == 0, result.output
    return seen["opts"]


def test_an_explicit_steps_turns_adaptive_stopping_off_unless_target_ci_is_given(monkeypatch):
    from distbench.run.plan import make_plan

    assert _scale_opts(monkeypatch, "--gpus", "1,2").target_ci == 0.02
    fixed = _scale_opts(monkeypatch, "--gpus", "1,2", "--steps", "3", "--device", "cpu")
    assert fixed.target_ci == 0.0
    notes = make_plan(fixed).notes
    assert (
        "--steps 3: each point measures exactly 3 steps after warmup (adaptive stopping off; add --target-ci, "
        "e.g. 2%, to keep measuring past --steps until the CI target)" in notes
    )
    assert not any("measuring up to 60 s a point" in n for n in notes)
    both = _scale_opts(monkeypatch, "--gpus", "1,2", "--steps", "3", "--target-ci", "5%")
    assert both.target_ci == 0.05


def test_the_cpu_defaults_note_says_the_max_time_given():
    from distbench.run.plan import SweepOptions, make_plan

    notes = make_plan(SweepOptions(gpus="1,2", model="resnet18", device="cpu", max_time=5)).notes
    assert any("measuring up to 5 s a point unless the CI target is met first" in n for n in notes), notes
    notes = make_plan(SweepOptions(gpus="1,2", model="resnet18", device="cpu")).notes
    assert any("measuring up to 60 s a point" in n for n in notes), notes


def test_the_opening_line_says_roughly_how_long_and_offers_max_time():
    from distbench.commands.scale import POINT_OVERHEAD_S, duration_line
    from distbench.run.plan import SweepOptions, make_plan

    demo = make_plan(SweepOptions(gpus="1,2", model="resnet50", device="cpu", add_baselines=True))
    runnable = [p for p in demo.points if not p.skip_reason]
    extra_runs = sum((4 if p.strategy.nosync_in_process else 1) for p in runnable if p.config.measure_comm)
    minutes = (len(runnable) * (60 + POINT_OVERHEAD_S) + extra_runs * 60) / 60
    line = duration_line(demo)
    assert line.startswith(f"roughly {minutes:.0f} minutes: {len(runnable)} point(s) x up to 60 s of measuring each")
    assert "--max-time 10 for a quicker run (about " in line
    assert duration_line(demo, repeats=3).startswith(f"roughly {3 * minutes:.0f} minutes")
    # a sweep already at (or under) the quick budget is not offered a "quicker" run with a longer one
    short = make_plan(SweepOptions(gpus="1,2", model="resnet18", device="cpu", max_time=5))
    assert "quicker" not in duration_line(short) and duration_line(short).startswith("roughly ")
    fixed = make_plan(SweepOptions(gpus="1,2", model="resnet50", device="cpu", steps=3, target_ci=0.0))
    n = sum(not p.skip_reason for p in fixed.points)
    assert duration_line(fixed).startswith(
        f"{n} point(s), each 3 measured steps after 3 warmup plus ~16 s launch and teardown: at least "
        f"{n * POINT_OVERHEAD_S / 60:.0f} minutes, more as steps take time"
    )


def test_the_backend_is_in_the_report_and_the_json():
    from distbench.analysis import Sweep
    from distbench.report.tables import points_rows

    recs = [
        {"strategy": "horovod-torch", "framework": "torch", "world_size": 2, "device": "cuda", "backend": "nccl"},
        {"strategy": "torch", "framework": "torch", "world_size": 1, "device": "cuda", "status": "ok"},
    ]
    headers, rows, _ = points_rows(Sweep(info={"id": "s1"}, points=recs))
    column = headers.index("backend")
    assert [row[column] for row in rows] == ["nccl", "-"]
    assert json.loads(json_document(recs))[0]["backend"] == "nccl"


def test_a_short_sweep_is_estimated_in_seconds():
    from distbench.commands.scale import duration_line
    from distbench.run.plan import SweepOptions, make_plan

    one = make_plan(SweepOptions(gpus="1", strategies=("torch",), device="cpu", steps=2, target_ci=0.0))
    assert duration_line(one).startswith(
        "1 point(s), each 2 measured steps after 3 warmup plus ~16 s launch and teardown: at least 16 s,"
    )


def test_bad_columns_on_the_command_line_exit_2_with_one_line(capsys, tmp_path):
    from distbench.analysis.output import TABLE_COLUMNS
    from distbench.cli import main

    assert main(["run", "--strategy", "torch", "--columns", "strategy,bogus", "--results", str(tmp_path / "r.db")]) == 2
    assert (
        capsys.readouterr().err == f"Error: --columns: unknown column(s) 'bogus'; valid: {', '.join(TABLE_COLUMNS)}\n"
    )
    assert not (tmp_path / "r.db").exists()  # refused before anything ran or was stored


# -- issue 30, defect 3: every table fits COLUMNS, reasons under it ----------------------------------------------
LONG = (
    "TensorFlow is not installed in this environment: pip install tensorflow-cpu==2.21.0 (the extra [tf]), "
    "then run the command again"
)


def _no_sweep(*args, **kwargs):
    """runner.new_sweep without a store: the points run (faked), their records are only kept."""
    import contextlib
    from pathlib import Path

    from distbench.run.runner import OpenSweep

    return contextlib.nullcontext(OpenSweep(None, "s0", Path("/nonexistent")))


def _invoke(command, args):
    from click.testing import CliRunner

    return CliRunner().invoke(command, args).stdout  # the tables; notes and progress go to stderr


def _scale(monkeypatch, tmp_path):
    import io

    from rich.console import Console

    from distbench.analysis.output import print_summary
    from distbench.commands import options as opt
    from tests.builders import point, scaling_records

    records = scaling_records() + [point("dp", 2, status="skipped", reason=LONG)]
    buf = io.StringIO()
    monkeypatch.setattr(opt, "Console", lambda **kw: Console(file=buf, **kw))
    print_summary(opt.out_console(), records, [], "s0", tmp_path / "r.db")
    return buf.getvalue()


def _store(tmp_path) -> tuple[str, list[str]]:
    from distbench.results.store import Store
    from tests.builders import add_sweep, point, scaling_records

    db = tmp_path / "r.db"
    with Store(db) as store:
        ids = [
            add_sweep(store, scaling_records() + [point("tf", 2, status="skipped", reason=LONG)], command="c " * 80)
            for _ in range(2)
        ]
    return str(db), ids


def _results(args):
    def run(monkeypatch, tmp_path):
        from distbench.commands import results as cmd

        db, ids = _store(tmp_path)
        if args[0] == "compare":  # a top-level command: distbench compare A B
            return _invoke(cmd.compare, [*ids, "--results", db])
        return _invoke(cmd.results, [*args, "--results", db])

    return run


def _comm(monkeypatch, tmp_path):
    from distbench.commands import comm as cmd

    sizes = [1024 * 4**i for i in range(8)]
    fake = {
        "status": "ok",
        "strategy": "comm-gloo",
        "world_size": 2,
        "device": "cpu",
        "backend": "gloo",
        "sizes_bytes": sizes,
        "time_median_s": [1e-4 * (i + 1) for i in range(8)],
        "time_p95_s": [2e-4 * (i + 1) for i in range(8)],
        "algbw_gbps": [123.456] * 8,
        "busbw_gbps": [123.456] * 8,
        "correct": [True] * 8,
    }
    monkeypatch.setattr(cmd.runner, "run_point", lambda *a, **k: dict(fake))
    monkeypatch.setattr(cmd.runner, "new_sweep", _no_sweep)
    return _invoke(cmd.comm, ["--gpus", "2", "--device", "cpu", "--sizes", "1K:16M", "--factor", "4"])


def _infer(monkeypatch, tmp_path):
    from distbench.commands import infer as cmd

    def fake(strategy, cfg, *a, **k):
        return {"status": "failed", "reason": LONG, "strategy": strategy.name, "framework": strategy.framework}

    monkeypatch.setattr(cmd.runner, "run_point", fake)
    monkeypatch.setattr(cmd.runner, "new_sweep", _no_sweep)
    return _invoke(cmd.infer, ["--model", "linear", "--batch-sizes", "1,32,256", "--device", "cpu"])


def _verify(monkeypatch, tmp_path):
    from distbench.commands import verify as cmd

    verdicts = [
        {"strategy": "ddp", "world_size": 2, "passed": True, "loss_max_rel_diff": 1.2e-7},
        {"strategy": "mirrored", "world_size": 2, "passed": None, "reason": LONG},
        {"strategy": "horovod-tf", "world_size": 2, "passed": None, "reason": LONG},
    ]
    monkeypatch.setattr(cmd, "run_plan", lambda *a, **k: verdicts)
    monkeypatch.setattr(cmd.runner, "new_sweep", _no_sweep)
    return _invoke(cmd.verify, ["--model", "linear", "--gpus", "2", "--device", "cpu"])


def _fit(monkeypatch, tmp_path):
    import io

    from rich.console import Console

    from distbench.commands import fit as cmd
    from distbench.commands import options as opt
    from distbench.kinds.batchfit import BatchSearch

    ok = {"status": "ok", "world_size": 2, "peak_memory_bytes": 3 * 2**30}
    oom = {"status": "oom", "world_size": 2, "reason": "CUDA out of memory. " + LONG}
    fits = [
        (name, BatchSearch(0.05, 4096, [(b, ok) for b in (64, 128, 256)] + [(512, oom)], (256, ok), (512, oom)))
        for name in ("ddp", "fsdp", "deepspeed-zero3")
    ]
    buf = io.StringIO()
    monkeypatch.setattr(opt, "Console", lambda **kw: Console(file=buf, **kw))
    cmd._print_table(fits, "s0", str(tmp_path / "r.db"), 0.05, "cuda")
    return buf.getvalue()


def _converge(monkeypatch, tmp_path):
    import io

    from rich.console import Console

    from distbench.commands import converge as cmd
    from distbench.commands import options as opt

    row = {
        "strategy": "horovod-torch",
        "world_size": 8,
        "global_batch": 4096,
        "lr": {"peak_lr": 0.8},
        "converged": 4,
        "runs": 5,
        "epochs_to_target": 12.345,
        "time_to_target_s": 1234.5,
        "time_min_s": 1200.0,
        "time_max_s": 1300.0,
        "time_speedup": 3.21,
        "time_speedup_ci": {"low": 2.9, "high": 3.5},
        "throughput_speedup": 6.54,
        "final_accuracy": 0.9312,
        "final_accuracy_std": 0.0021,
    }
    buf = io.StringIO()
    monkeypatch.setattr(opt, "Console", lambda **kw: Console(file=buf, **kw))
    print_table(opt.out_console(), cmd.render_table([row, dict(row, strategy="ddp")], 0.9))
    return buf.getvalue()


def _predict(monkeypatch, tmp_path):
    import io

    from rich.console import Console

    from distbench.analysis.output import table
    from distbench.commands import options as opt

    headers = ["workload", "strategy", "N", "predicted throughput samples/s [95%]", "speedup", "efficiency", "limit"]
    shown = table("PREDICTED (not measured)", headers, headers[2:])
    for n in (16, 32, 64, 128):
        shown.add_row(
            "resnet50 224px batch 256 fp32", "horovod-torch", str(n), "12345.6 [11000.1, 13000.2]", "1", "1", LONG
        )
    buf = io.StringIO()
    monkeypatch.setattr(opt, "Console", lambda **kw: Console(file=buf, **kw))
    print_table(opt.out_console(), shown)  # commands/predict.py prints its tables with print_table
    return buf.getvalue()


TABLES = {
    "scale/run": _scale,
    "results list": _results(["list"]),
    "results show": _results(["show", "latest"]),
    "compare": _results(["compare"]),
    "comm": _comm,
    "infer": _infer,
    "verify": _verify,
    "fit": _fit,
    "converge": _converge,
    "predict": _predict,
}


@pytest.mark.parametrize("width", [120, 80])
@pytest.mark.parametrize("name", list(TABLES))
def test_every_table_fits_columns_with_reasons_under_it(monkeypatch, tmp_path, name, width):
    monkeypatch.setenv("COLUMNS", str(width))
    text = TABLES[name](monkeypatch, tmp_path)
    lines = text.splitlines()
    assert len(lines) > 3, text
    too_wide = [line for line in lines if len(line) > width]
    assert not too_wide, f"{name} at COLUMNS={width}:\n" + "\n".join(too_wide)
    if name in ("scale/run", "results show", "infer", "verify", "fit"):
        # the long reason is printed once, under the table, as a numbered note; no row spends lines on it
        flat = " ".join(text.split())
        assert flat.count(" ".join(LONG.split())) == 1, text
        assert re.search(r"^\[\d+\] .*(CUDA out of memory|TensorFlow is not)", text, re.M), text


def test_without_columns_and_without_a_terminal_tables_are_120_wide(monkeypatch):
    from distbench.commands import options as opt

    monkeypatch.delenv("COLUMNS", raising=False)
    assert opt.out_console().width == 120 and opt.table_width() == 120


def test_the_legend_explains_only_the_columns_shown():
    from distbench.analysis.output import DEFAULT_COLUMNS, legend_lines
    from tests.builders import point

    records = [point("torch", 1, 0.1), point("ddp", 2, 0.1)]
    text = " ".join(legend_lines(records, list(DEFAULT_COLUMNS)))
    assert "MFU =" not in text and "overlap =" not in text  # not default columns
    assert "speedup = " in text and "comm overhead = " in text and "efficiency (per core)" in text
    narrow = " ".join(legend_lines(records, ["strategy", "N", "throughput", "speedup", "status"]))
    assert "comm overhead" not in narrow and "efficiency" not in narrow and "speedup = " in narrow
    wide = " ".join(legend_lines(records, [*DEFAULT_COLUMNS, "mfu", "overlap"]))
    assert "MFU = " in wide and "overlap = " in wide


def test_stopping_and_noisy_lines_tell_the_per_core_reference_apart(capsys):
    from rich.console import Console

    from distbench.analysis.output import print_summary, stopping_line
    from tests.builders import point

    stop = {"rule": "max_time"}
    per_core = point("torch", 1, 0.1, noisy=True, stopping=stop, config={"baseline_threads": 1})
    records = [point("torch", 1, 0.1, stopping=stop), per_core]
    assert stopping_line(records) == (
        "adaptive stopping: 2 stopped at --max-time before reaching it (torch@1, torch (1 thread, per-core "
        "reference)@1)"
    )
    print_summary(Console(width=200), records, [], "sid", "r.db")
    out = " ".join(capsys.readouterr().out.split())
    assert (
        "noisy points (step-time CV above the threshold; read their curves with care): torch (1 thread, per-core" in out
    )


def test_a_decoder_tables_ci_is_in_tokens_per_second_beside_tokens_per_second():
    from distbench.analysis import output as out

    r = {"throughput": 100.0, "throughput_ci_low": 90.0, "throughput_ci_high": 110.0, "world_size": 1}
    r["config"] = {"model": "gpt2", "seq_len": 64}
    assert "tokens_ci" in out.default_columns([r]) and "ci" not in out.default_columns([r])
    assert out.TABLE_COLUMNS["tokens_ci"] == "95% CI\n(tokens/s)"
    assert out._CELL["tokens_ci"](r) == "5,760..7,040" and out._CELL["ci"](r) == "90.00..110.00"
    assert out._CELL["tokens_ci"]({**r, "throughput_ci_high": None}) == "5,760..unbounded"
