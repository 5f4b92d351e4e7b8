"""The wrapper strategies (issue 13): accelerate, fabric, lightning, ignite run for real on CPU workers at
N=1 and N=2, each is the same training as one device (verify), their no-sync variants exchange nothing,
and composer is skipped with its version conflict named."""

import os
import signal
import subprocess
import sys
import time

import psutil
import pytest

from distbench.core.strategies import STRATEGIES
from distbench.kinds.verify import DEFAULT_RTOL
from distbench.run.launch import run_point
from distbench.run.launchers import ACCELERATE
from distbench.workers.wrapper_loop import TIMING, LoopEnded, SteppedLoop
from tests.builders import tiny_config, verify
from tests.conftest import require

WRAPPERS = {
    "accelerate": ("torch", "accelerate"),
    "fabric": ("torch", "lightning"),
    "lightning": ("torch", "lightning"),
    "ignite": ("torch", "ignite"),
}
PARAMS = [pytest.param(s, marks=require(*mods)) for s, mods in WRAPPERS.items()]
OWN_LOOP = {"lightning", "ignite"}  # the wrapper owns the loop: timed by its own callback


def _cfg(strategy, n, **kw):
    return tiny_config(strategy, n, **{"num_classes": 10, "steps": 3, "target_ci": 0, **kw})


def _run(cfg, tmp_path, name):
    record = run_point(STRATEGIES[cfg.strategy], cfg, tmp_path / name, 300)
    assert record["status"] == "ok", (record.get("reason"), record.get("stderr_tail"))
    return record


@pytest.mark.slow
@pytest.mark.parametrize("n", [1, 2])
@pytest.mark.parametrize("strategy", PARAMS)
def test_each_wrapper_runs_and_is_measured(strategy, n, tmp_path):
    record = _run(_cfg(strategy, n), tmp_path, "point")
    assert len(record["step_times_s"]) == 3 and min(record["step_times_s"]) > 0
    assert record["stopping"]["rule"] == "fixed_steps" and record["measured_window_s"] > 0
    assert record["peak_memory_bytes"] > 100 * 2**20  # a worker's peak RSS: torch alone is more
    assert record["launch"]["launcher"] == STRATEGIES[strategy].launcher
    assert record["wrapper"]
    assert record.get("timing") == (TIMING if strategy in OWN_LOOP else None)
    if strategy == "lightning":  # Trainer defaults stay on, and the record says so
        assert record["wrapper"]["logger"] and record["wrapper"]["progress_bar"] and record["wrapper"]["checkpointing"]
    if strategy == "accelerate":
        assert record["wrapper"]["distributed_type"] == ("DistributedType.MULTI_CPU" if n > 1 else "DistributedType.NO")
    if strategy in ("fabric", "lightning"):  # one device: their single-device default, what users get (issue 20)
        assert record["wrapper"]["strategy"] == ("DDPStrategy" if n > 1 else "SingleDeviceStrategy")


@pytest.mark.slow
@require("torch", "accelerate", "lightning", "ignite")
def test_verify_passes_for_every_wrapper(tmp_path):
    results = verify(
        model="resnet18",
        world_size=2,
        strategies=[STRATEGIES[s] for s in [*WRAPPERS, "composer"]],
        device="cpu",
        global_batch=4,
        steps=2,
        image_size=32,
        num_classes=10,
        threads=2,
        timeout_s=300,
        workdir=str(tmp_path),
    )
    assert [r["strategy"] for r in results] == [*WRAPPERS, "composer"]
    composer = results.pop()
    assert composer["passed"] is None and composer["reason"].startswith("skipped: version conflict: mosaicml 0.32.1")
    for r in results:
        assert r["passed"] is True, r
        assert r["loss_max_rel_diff"] < DEFAULT_RTOL and r["update_max_rel_diff"] < DEFAULT_RTOL


@pytest.mark.slow
@pytest.mark.parametrize("strategy", PARAMS)
def test_the_nosync_variant_exchanges_nothing(strategy, tmp_path):
    # As tests/test_nosync.py: every rank starts from rank 0's weights (the wrapper's broadcast) and
    # trains on its own shard; with the no-op hook the replicas drift apart, and the hook really ran.
    record = _run(_cfg(strategy, 2, sync=False, verify=True), tmp_path, "nosync")
    assert record["replica_max_rel_diff"] > 1e-2
    assert record["nosync_hook_calls"] > 0 and record["nosync_buffer_sync"] is False
    assert "no-op communication hook" in record["nosync_variant"]


def test_composer_is_skipped_with_the_version_conflict(tmp_path):
    import torch

    record = run_point(STRATEGIES["composer"], _cfg("composer", 1), tmp_path / "composer", 60)
    assert record["status"] == "skipped"
    assert record["reason"] == (
        f"version conflict: mosaicml 0.32.1 (the newest Composer) requires torch<2.7.1, the "
        f"installed torch is {torch.__version__} (distbench pins torch 2.13.0 and never "
        "downgrades it for a wrapper)"
    )


@pytest.mark.slow
@require("torch", "ignite")
def test_ignite_spawned_ranks_die_with_the_worker(tmp_path):
    # idist.Parallel spawns the ranks from the worker distbench started: a SIGKILL of that worker (what the
    # rank guard does when distbench is gone) must take them along.
    cfg = _cfg("ignite", 2, steps=100000)
    (tmp_path / "config.json").write_text(cfg.to_json())
    worker = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "distbench.workers",
            "ignite_ddp",
            "--config",
            str(tmp_path / "config.json"),
            "--out",
            str(tmp_path / "result.json"),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        parent = psutil.Process(worker.pid)
        deadline = time.time() + 120
        while len(parent.children()) < 2 and time.time() < deadline:
            time.sleep(0.5)
        ranks = [c for c in parent.children() if "spawn" in " ".join(c.cmdline())]
        assert len(ranks) == 2, parent.children()
        time.sleep(3)  # the ranks have armed their parent-death signal
        os.kill(worker.pid, signal.SIGKILL)
        worker.wait()
        _, alive = psutil.wait_procs(ranks, timeout=10)
        assert not alive
    finally:
        worker.kill()


def test_accelerate_launch_commands():
    argv, env = ACCELERATE.local(STRATEGIES["accelerate"], _cfg("accelerate", 1), "c.json", "r.json", tool="accelerate")
    assert argv[:2] == ["accelerate", "launch"] and "--cpu" in argv and "--multi_gpu" not in argv
    assert argv[argv.index("--cpu") + 1 :] == [
        "-m",
        "distbench.core.rankguard",
        sys.executable,
        "-m",
        "distbench.workers",
        "accelerate_ddp",
        "--config",
        "c.json",
        "--out",
        "r.json",
    ]
    assert "--mixed_precision=no" in argv and env["OMP_NUM_THREADS"] == "1"
    argv, _ = ACCELERATE.local(STRATEGIES["accelerate"], _cfg("accelerate", 2, precision="bf16"), "c", "r")
    assert "--num_processes=2" in argv and "--multi_gpu" in argv and "--mixed_precision=bf16" in argv
    assert argv[argv.index("--main_process_port") + 1].isdigit()
    step = ACCELERATE.sbatch_step(STRATEGIES["accelerate"], _cfg("accelerate", 2))
    assert step[0] == '"$(dirname "$PY")/accelerate"' and '"$MASTER_PORT"' in step


def test_stepped_loop_hands_steps_over_and_reports_the_loop_s_failures():
    def loop_of(n, fail_at=None):
        loop = SteppedLoop()

        def run():
            loop.ready()
            for i in range(n):
                if i == fail_at:
                    raise ValueError("broken step")
                if loop.boundary(i):
                    return

        return loop, run

    loop, run = loop_of(10)
    loop.start(run)
    assert [loop.step() for _ in range(3)] == [0, 1, 2]
    loop.finish()  # the loop stops at its boundary and ends
    loop, run = loop_of(10, fail_at=1)
    loop.start(run)
    assert loop.step() == 0
    with pytest.raises(ValueError, match="broken step"):
        loop.step()
    loop, run = loop_of(1)
    loop.start(run)
    loop.step()
    with pytest.raises(LoopEnded):
        loop.step()


def _wrapper_cost():
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[1] / "benchmarks" / "wrapper_cost.py"
    spec = importlib.util.spec_from_file_location("wrapper_cost", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_wrapper_cost_splits_each_step_into_the_step_itself_and_what_is_around_it():
    wc = _wrapper_cost()
    outer = {"torch": [0.100, 0.102, 0.098], "thread": [0.101, 0.103, 0.099], "ignite": [0.110, 0.112, 0.108]}
    inner = {"torch": [0.100, 0.102, 0.098], "thread": [0.1009, 0.1029, 0.0989], "ignite": [0.1, 0.102, 0.098]}
    per_round = [{"torch": 0.1, "thread": 0.101, "ignite": 0.11}, {"torch": 0.1, "thread": 0.1, "ignite": 0.12}]
    rows = {r["variant"]: r for r in wc.summarize({"outer": outer, "inner": inner, "per_round": per_round})}
    assert rows["torch"]["ratio"] == 1.0 and rows["torch"]["around_ms"] == pytest.approx(0.0)
    assert rows["thread"]["around_ms"] == pytest.approx(0.1)  # the hand-off
    assert rows["ignite"]["around_ms"] == pytest.approx(10.0)  # the Engine's events + the hand-off
    assert rows["ignite"]["inner_ms"] == pytest.approx(100.0)
    assert rows["ignite"]["ratio"] == pytest.approx(1.1)
    assert (rows["ignite"]["round_min"], rows["ignite"]["round_max"]) == pytest.approx((1.1, 1.2))
    assert "| ignite | 3 | 110.0 | 100.0 | 10.000 | 1.100 | 1.100-1.200 | - |" in wc.table(list(rows.values()))


@pytest.mark.parametrize("flag", ["--rounds", "--block", "--threads"])
def test_wrapper_cost_rejects_a_bad_count_in_one_line(flag, capsys):
    assert _wrapper_cost().main([flag, "0"]) == 2
    err = capsys.readouterr().err.strip()
    assert err == f"wrapper_cost: {flag} must be >= 1, got 0"


@pytest.mark.slow  # about 2 s: imports ignite and trains a few steps in-process
@require("ignite")
def test_wrapper_cost_drives_the_same_step_through_ignite_s_engine_in_process():
    """A real (tiny, in-process) measurement: every variant's steps are kept, the Engine's and the
    hand-off's share is what is around the step, and the step itself ran under each."""
    wc = _wrapper_cost()
    args = type("A", (), dict(model="mlp", image_size=8, batch_size=2, threads=1, rounds=2, block=2, warmup=1))
    result = wc.measure(args)
    for v in wc.VARIANTS:
        assert len(result["outer"][v]) == 4 and len(result["inner"][v]) == 4
        assert all(o >= i > 0 for o, i in zip(result["outer"][v], result["inner"][v]))
    assert [sorted(r) for r in result["per_round"]] == [sorted(wc.VARIANTS)] * 2


def test_stepped_loop_measures_what_the_wrapper_s_loop_adds_around_the_step():
    loop = SteppedLoop()
    step = loop.timed(lambda: time.sleep(0.002))

    def run():
        loop.ready()
        while True:
            step()
            time.sleep(0.003)  # the wrapper's own per-step work, around the step function
            if loop.boundary(None):
                return

    loop.start(run)
    for _ in range(5):
        loop.step()
    loop.finish()
    assert len(loop.outer_s) == len(loop.inner_s) == 5
    assert 0.003 <= loop.around_s() < 0.003 + 0.05  # the sleep, plus the hand-off (not less)
    assert SteppedLoop().around_s() is None  # nothing timed


def test_the_report_says_how_much_of_a_wrapper_s_step_is_its_own_loop(tmp_path):
    from distbench.analysis import load_sweep
    from distbench.report import wrappers
    from distbench.results.store import Store
    from tests.builders import add_sweep, point

    recs = [
        point("torch", 1, 0.1),
        point("ignite", 1, 0.1, wrapper={"ignite": "0.5.5", "loop_around_step_s": 0.0002}),
        point("accelerate", 1, 0.1),
    ]
    with Store(tmp_path / "r.db") as store:
        sweep = load_sweep(store, add_sweep(store, recs))
    _, words, _ = wrappers.wrapper_rows(sweep, sweep.points, set())
    ignite = next(w for w in words if w.startswith("ignite"))
    assert (
        "its own loop around the step (events and hooks, plus the thread hand-off) 0.20 ms a step, 0.20% of" in ignite
    )
    assert not any("own loop" in w for w in words if w.startswith("accelerate"))  # not measured: not claimed
