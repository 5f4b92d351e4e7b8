"""`distbench fit`: the search (distbench.kinds.batchfit) over fake trials, the command's bad input, and one real
search on a CPU worker under an address-space limit, where torch's allocator runs out at a small batch."""

from __future__ import annotations

import json
import resource
import sqlite3
import subprocess

import pytest

from distbench.cli import main
from distbench.kinds.batchfit import find_largest_batch
from tests.conftest import DISTBENCH, require
from tests.test_batch_axis import _torch_vm_peak_bytes


def fake(limit: int | None = None, fail_at: int | None = None):
    """A trial that fits up to `limit` (None: anything) and fails for another reason at batch `fail_at`;
    it keeps the batches it was asked for."""
    tried = []

    def trial(batch: int) -> dict:
        tried.append(batch)
        if batch == fail_at:
            return {"status": "failed", "reason": "rank 1 killed (SIGSEGV)"}
        if limit is not None and batch > limit:
            return {"status": "oom", "reason": "DefaultCPUAllocator: can't allocate memory"}
        return {"status": "ok", "peak_memory_bytes": batch * 1000}

    return trial, tried


def test_doubles_then_bisects_to_the_exact_limit():
    trial, tried = fake(limit=100)
    fit = find_largest_batch(trial, start=8, max_batch=1 << 20, tolerance=0)
    assert tried[:6] == [8, 16, 32, 64, 128, 96]  # doubling until 128 is oom, then the midpoint of 64..128
    assert fit.largest[0] == 100 and fit.first_oom[0] == 101
    assert fit.largest[1]["peak_memory_bytes"] == 100_000
    assert fit.stopped is None and not fit.reached_max_batch
    assert len(tried) == 5 + 6  # log2(64) bisection steps between 64 and 128
    assert [b for b, _ in fit.trials] == tried


def test_tolerance_stops_the_bisection_early():
    trial, tried = fake(limit=100)
    fit = find_largest_batch(trial, start=8, max_batch=1 << 20, tolerance=0.05)
    assert fit.largest[0] <= 100 < fit.first_oom[0]
    assert fit.first_oom[0] - fit.largest[0] <= 0.05 * fit.largest[0]
    assert tried == [8, 16, 32, 64, 128, 96, 112, 104, 100]


def test_a_start_that_does_not_fit_halves_until_one_does():
    trial, tried = fake(limit=5)
    fit = find_largest_batch(trial, start=64, max_batch=1024, tolerance=0)
    assert tried == [64, 32, 16, 8, 4, 6, 5]
    assert (fit.largest[0], fit.first_oom[0]) == (5, 6)
    trial, tried = fake(limit=0)  # nothing fits, not even 1
    fit = find_largest_batch(trial, start=4, max_batch=1024)
    assert tried == [4, 2, 1] and fit.largest is None and fit.first_oom[0] == 1


def test_a_failure_that_is_not_oom_stops_the_search_with_its_reason():
    trial, tried = fake(limit=100, fail_at=32)
    fit = find_largest_batch(trial, start=8, max_batch=1024)
    assert tried == [8, 16, 32]
    assert fit.stopped == (32, {"status": "failed", "reason": "rank 1 killed (SIGSEGV)"})
    assert fit.largest[0] == 16 and fit.first_oom is None
    # during the bisection too: the search stops there, the bracket found so far is kept
    trial, tried = fake(limit=100, fail_at=96)
    fit = find_largest_batch(trial, start=8, max_batch=1024)
    assert tried == [8, 16, 32, 64, 128, 96]
    assert fit.stopped[0] == 96 and (fit.largest[0], fit.first_oom[0]) == (64, 128)


def test_max_batch_caps_the_doubling_and_a_batch_that_fits_there_is_reported_as_such():
    trial, tried = fake(limit=None)
    fit = find_largest_batch(trial, start=8, max_batch=50)
    assert tried == [8, 16, 32, 50]
    assert fit.largest[0] == 50 and fit.reached_max_batch and fit.first_oom is None and fit.stopped is None
    trial, tried = fake(limit=40)  # oom at the cap: bisect below it
    fit = find_largest_batch(trial, start=8, max_batch=50, tolerance=0)
    assert tried[:4] == [8, 16, 32, 50] and (fit.largest[0], fit.first_oom[0]) == (40, 41)
    assert not fit.reached_max_batch
    trial, tried = fake(limit=None)  # start == max-batch: one trial
    fit = find_largest_batch(trial, start=16, max_batch=16)
    assert tried == [16] and fit.reached_max_batch


@pytest.mark.parametrize(
    "args, message",
    [
        (["--start", "0"], "Invalid value for '--start': 0 is not in the range 1<=x<=1048576."),
        (["--max-batch", "abc"], "Invalid value for '--max-batch': 'abc' is not a valid integer range."),
        (["--start", "64", "--max-batch", "32"], "--start 64 is larger than --max-batch 32"),
        (["--tolerance", "x"], "Invalid value for '--tolerance': 'x' is not a percentage such as 2%"),
        (["--tolerance", "150%"], "Invalid value for '--tolerance': '150%' must be between 0% and 100%"),
        (["--gpus", "1,2"], "--gpus takes one device count for fit, got '1,2'"),
        (["--gpus", "0"], "--gpus value '0' must be a positive device count"),
        (["--strategy", "nope"], "unknown --strategy 'nope'"),
        (["--model", "nope"], "unknown model 'nope'"),
        (["--timeout", "0"], "Invalid value for '--timeout': 0.0 is not in the range 0<x<=604800."),
        (["--image-size", "0"], "Invalid value for '--image-size': 0 is not in the range 1<=x<=8192."),
    ],
)
def test_bad_input_is_one_line_naming_the_flag(capsys, tmp_path, args, message):
    base = {"--strategy": "ddp", "--model": "resnet18", "--device": "cpu", "--results": str(tmp_path / "r.db")}
    given = dict(zip(args[::2], args[1::2]))
    argv = ["fit", *[x for k, v in {**base, **given}.items() for x in (k, v)]]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("Error: ") and message in err, err
    assert err.count("\n") == 1 and "Traceback" not in err
    assert not (tmp_path / "r.db").exists()  # nothing ran, nothing stored


def test_strategy_is_required(capsys):
    assert main(["fit", "--model", "resnet18"]) == 2
    assert "Missing option '--strategy'" in capsys.readouterr().err


@pytest.mark.slow
@require("torch")
def test_a_real_search_on_a_cpu_worker_finds_where_torch_runs_out_of_memory(tmp_path):
    """resnet18 at 32 px under `ulimit -v` (what torch maps + 400 MiB): torch's DefaultCPUAllocator fails
    somewhere around batch 100 here. Whatever the exact limit on this machine, the largest batch reported
    ran ok, the first that did not fit is oom and within the tolerance above it, and every trial is stored."""
    limit = _torch_vm_peak_bytes() + (400 << 20)
    db = tmp_path / "r.db"

    def cap():
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))

    args = [
        "fit",
        "--strategy",
        "torch",
        "--gpus",
        "1",
        "--model",
        "resnet18",
        "--image-size",
        "32",
        "--device",
        "cpu",
        "--start",
        "64",
        "--max-batch",
        "4096",
        "--tolerance",
        "50%",
        "--timeout",
        "300",
        "--results",
        str(db),
        "--format",
        "json",
    ]
    proc = subprocess.run(
        [*DISTBENCH, *args], capture_output=True, text=True, timeout=600, preexec_fn=cap, stdin=subprocess.DEVNULL
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "limit found is host memory (peak RSS per worker process), shared by all workers" in " ".join(
        proc.stderr.split()
    )
    doc = json.loads(proc.stdout)
    [row] = doc["strategies"]
    print(
        f"\n[fit] torch resnet18 32px under ulimit -v {limit >> 20} MiB: largest {row['largest_batch']} "
        f"(peak RSS {row['peak_memory_bytes'] >> 20} MiB), first oom {row['first_oom_batch']}; trials "
        + ", ".join(f"{t['per_device_batch']} {t['status']}" for t in row["trials"])
    )
    trials = {t["per_device_batch"]: t for t in row["trials"]}
    largest, first_oom = row["largest_batch"], row["first_oom_batch"]
    assert row["stopped"] is None and not row["reached_max_batch"]
    assert trials[largest]["status"] == "ok" and row["peak_memory_bytes"] > 50 << 20
    assert trials[first_oom]["status"] == "oom" and "can't allocate memory" in row["first_oom_reason"]
    assert largest < first_oom <= largest * 1.5
    assert all(t["status"] == "ok" for b, t in trials.items() if b <= largest)
    assert all(t["status"] == "oom" for b, t in trials.items() if b >= first_oom)
    con = sqlite3.connect(db)
    stored = con.execute("SELECT COUNT(*) FROM points WHERE sweep_id = ?", (doc["sweep_id"],)).fetchone()[0]
    options = json.loads(con.execute("SELECT options_json FROM sweeps WHERE id = ?", (doc["sweep_id"],)).fetchone()[0])
    con.close()
    assert stored == len(row["trials"]) and options["kind"] == "fit"


def test_the_table_gives_each_strategys_limit_memory_and_ratio_to_the_first(capsys):
    from distbench.commands.fit import _print_table

    def search(limit, fail_at=None):
        trial, _ = fake(limit, fail_at)
        return find_largest_batch(lambda b: {**trial(b), "world_size": 2}, start=8, max_batch=1024, tolerance=0)

    fits = [("ddp", search(50)), ("fsdp", search(100)), ("horovod-torch", search(100, fail_at=16))]
    _print_table(fits, "S1", "r.db", 0.0, "cuda")
    out = capsys.readouterr().out
    assert "fsdp fits 2.00x ddp's per-device batch (100 vs 50)" in out
    assert "horovod-torch fits 0.16x ddp's per-device batch (8 vs 50)" in out
    row = next(line for line in out.splitlines() if line.startswith("fsdp "))
    assert row.split()[:6] == ["fsdp", "2", "100", "101:", "oom", "[1]"] and "97.7 KiB" in row  # 100 * 1000 B
    row = next(line for line in out.splitlines() if line.startswith("horovod-torch "))
    assert row.split()[:7] == ["horovod-torch", "2", "8", "search", "stopped", "at", "16:"]
    # the reasons under the table, numbered in the cells
    assert "\n[1] DefaultCPUAllocator: can't allocate memory\n" in out and "failed [2]" in out
    assert "resolution: exact: the first batch that did not fit is the largest that did + 1" in out
