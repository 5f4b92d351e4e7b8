"""Communication: the overhead/overlap/busbw math, size parsing, and real all-reduce runs."""

import json
import sqlite3

import pytest

from distbench.core.errors import BadInput
from distbench.kinds.commbench import parse_size, parse_sizes
from distbench.results import stats
from distbench.workers.comm_common import summarize
from tests.conftest import require, run_cli


def test_bus_bandwidth_nccl_tests_definitions():
    algbw, busbw = stats.bus_bandwidth(1e9, 0.5, 4)
    assert algbw == 2e9
    assert busbw == pytest.approx(2e9 * 2 * 3 / 4)
    assert stats.bus_bandwidth(1e9, 1.0, 1) == (1e9, 0.0)
    with pytest.raises(ValueError):
        stats.bus_bandwidth(1.0, 0.0, 2)


def test_comm_metrics():
    m = stats.comm_metrics(step_sync_s=1.0, step_independent_s=0.8, allreduce_s=0.5)
    assert m["exposed_comm_s"] == pytest.approx(0.2)
    assert m["comm_overhead"] == pytest.approx(0.2)
    assert m["overlap"] == pytest.approx(0.6)  # 0.3 of the 0.5 s all-reduce was hidden
    # all exposed -> overlap 0 (clipped for display, raw kept); noise below zero stays raw, with its CI
    clipped = stats.comm_metrics(1.0, 0.2, 0.5)
    assert clipped["overlap"] == 0.0 and clipped["overlap_raw"] == pytest.approx(-0.6)
    noisy = stats.comm_metrics(1.0, 1.05, 0.5, exposed_ci=(-0.08, -0.02))
    assert noisy["exposed_comm_s"] == pytest.approx(-0.05) and noisy["comm_overhead"] == pytest.approx(-0.05)
    assert noisy["overlap"] == 1.0 and noisy["overlap_raw"] == pytest.approx(1.1)
    assert (noisy["exposed_comm_ci_low"], noisy["exposed_comm_ci_high"]) == (-0.08, -0.02)
    assert stats.comm_metrics(1.0, None, 0.5)["comm_overhead"] is None


def test_parse_sizes():
    assert parse_size("1K") == 1024 and parse_size("2m") == 2 * 1024**2 and parse_size("1G") == 1024**3
    assert parse_sizes("1K:8K") == [1024, 2048, 4096, 8192]
    assert parse_sizes("1K:16K", 4) == [1024, 4096, 16384]
    assert parse_sizes("4K,1K") == [1024, 4096]
    with pytest.raises(BadInput, match="bad message size '1X'"):
        parse_sizes("1X:2K")
    with pytest.raises(BadInput, match="the first size is larger than the last"):
        parse_sizes("8K:1K")
    with pytest.raises(BadInput, match="--factor must be 2 or 4"):
        parse_sizes("1K:8K", 3)


def test_summarize_uses_median_time():
    out = summarize([1000], [[0.001, 0.002, 0.004]], world_size=2)
    assert out["time_median_s"] == [0.002]
    assert out["algbw_gbps"] == [pytest.approx(1000 / 0.002 / 1e9)]
    assert out["busbw_gbps"] == out["algbw_gbps"]  # 2(n-1)/n == 1 at n=2


def test_bad_backend_and_nccl_without_gpu(capsys):
    from distbench.cli import main

    assert main(["comm", "--backend", "carrier-pigeon"]) == 2
    assert capsys.readouterr().err == (
        "Error: unknown backend 'carrier-pigeon'; valid backends: gloo, nccl, mpi, horovod, tf\n"
    )
    assert main(["comm", "--backend", "nccl", "--device", "cpu"]) == 2
    assert capsys.readouterr().err == "Error: --backend nccl needs CUDA GPUs; none are in use (try --backend gloo)\n"


def test_one_rank_is_refused_with_one_line(capsys):
    """An all-reduce over one rank moves nothing: no bandwidth is printed for it (issue 30, defect 4)."""
    from distbench.cli import main

    for gpus in ("1", "1,2"):
        assert main(["comm", "--gpus", gpus, "--device", "cpu"]) == 2
        err = capsys.readouterr().err.strip()
        assert err.count("\n") == 0 and "Traceback" not in err
        assert f"--gpus {gpus}: an all-reduce over 1 rank moves no data, so it has no bandwidth" in err


@pytest.mark.slow
@pytest.mark.parametrize(
    "backend,modules", [("gloo", ("torch",)), ("horovod", ("horovod.torch",)), ("tf", ("tensorflow",))]
)
def test_real_allreduce_is_correct_at_two_workers(tmp_path, backend, modules):
    if not all(require(m).args[0] is False for m in modules):
        pytest.skip(f"{modules} not installed")
    db = tmp_path / "c.db"
    proc = run_cli(
        [
            "comm",
            "--gpus",
            "2",
            "--backend",
            backend,
            "--sizes",
            "1K:256K",
            "--factor",
            "4",
            "--iters",
            "5",
            "--device",
            "cpu",
            "--results",
            str(db),
            "--format",
            "json",
        ],
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    [point] = json.loads(proc.stdout)
    assert point["status"] == "ok", point
    assert point["sizes_bytes"] == [1024, 4096, 16384, 65536, 262144]
    assert all(point["correct"])
    assert all(b > 0 for b in point["busbw_gbps"])
    assert all(m <= p for m, p in zip(point["time_median_s"], point["time_p95_s"]))
    stored = sqlite3.connect(db).execute("SELECT strategy, status FROM points").fetchall()
    assert stored == [(f"comm-{backend}", "ok")]
