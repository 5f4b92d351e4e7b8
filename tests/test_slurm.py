"""Slurm sweeps: validation and quoting of the generated scripts (pure), the points -> jobs mapping,
the job-side record helpers (the generated script run without Slurm), `distbench collect`, and a
real end-to-end sweep on a one-machine Slurm started by scripts/slurm-local.sh."""

import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from distbench.cli import main
from distbench.core.config import PointConfig
from distbench.core.strategies import STRATEGIES, parse_strategies
from distbench.kinds.collect import MANIFEST_KIND, stable_record_id
from distbench.models.specs import model_names
from distbench.results.record import base_record, read_record, write_record
from distbench.results.store import Store
from distbench.run.launchers import TORCHRUN
from distbench.run.plan import SweepOptions
from distbench.slurm.job import finish_point
from distbench.slurm.plan import SlurmSettings, plan_sweep, time_seconds
from distbench.slurm.submit import sbatch_argv
from tests.builders import point_config
from tests.conftest import DISTBENCH, ROOT, TINY, require

NAME_RULE = "use letters, digits, '_', '.' and '-', starting with a letter or digit"


def _cli(capsys, args):
    code = main(args)
    out = capsys.readouterr()
    return code, out.out, out.err


def _sweep_args(tmp_path, *extra):
    return ["slurm", "--out", str(tmp_path / "sweep.sbatch"), *extra]


# -- validation: one line, exit 2, nothing written ---------------------------------------------------
@pytest.mark.parametrize(
    "args,message",
    [
        (["--partition", "gpu;rm -rf ~"], f"--partition 'gpu;rm -rf ~' is not a valid name: {NAME_RULE}"),
        (["--account", "$(id)"], f"--account '$(id)' is not a valid name: {NAME_RULE}"),
        (["--partition", "-gpu"], f"--partition '-gpu' is not a valid name: {NAME_RULE}"),
        (["--model", "resnet50 --evil"], f"--model 'resnet50 --evil' is not a valid name: {NAME_RULE}"),
        (["--strategy", "ddp,`reboot`"], f"--strategy '`reboot`' is not a valid name: {NAME_RULE}"),
        (
            ["--strategy", "nope"],
            "unknown --strategy 'nope'; valid strategies: "
            + ", ".join(STRATEGIES)
            + "; groups: all, core, wrappers, sharded, engines",
        ),
        (["--model", "alexnet"], f"--model: unknown model 'alexnet'; valid models: {', '.join(model_names())}"),
        (["--time", "1 hour"], "--time '1 hour' is not a Slurm time limit: use MINUTES, HH:MM:SS or D-HH:MM:SS"),
        (
            ["--constraint", "a100'; x"],
            '--constraint "a100\'; x" is not a valid feature expression: use feature '
            "names with &, |, [ ], *, ( ) and digits only",
        ),
        (["--nodes", "0"], "--nodes value '0' must be a positive node count"),
        (["--nodes", "1,,2"], "--nodes '1,,2' has an empty entry: give a comma list such as 1,2,4"),
        (
            ["--gpus", "3", "--nodes", "2", "--strategy", "ddp"],
            "no points to run: every N must be divisible by a node count, with at most --gpus-per-node devices per node",
        ),
        (["--python", "python3"], "--python 'python3' must be an absolute path (the jobs run elsewhere)"),
    ],
)
def test_bad_input_exits_2_with_one_line_and_writes_nothing(capsys, tmp_path, args, message):
    code, out, err = _cli(capsys, _sweep_args(tmp_path, *args))
    assert code == 2
    assert err == f"Error: {message}\n"
    assert out == ""
    assert list(tmp_path.iterdir()) == []


def test_the_new_commands_have_help_with_an_example(capsys):
    for command in ("slurm", "collect"):
        code, out, _ = _cli(capsys, [command, "--help"])
        assert code == 0
        assert "Example: distbench " + command in out
    _, out, _ = _cli(capsys, ["slurm", "--help"])
    assert "one array per resource shape" in " ".join(out.split())


# -- planning: points -> jobs --------------------------------------------------------------------------
def _plan(gpus, nodes, strategies=("ddp", "horovod-torch", "mirrored", "dp"), gpus_per_node=None, device="cuda"):
    opts = SweepOptions(
        model="resnet50",
        gpus=gpus,
        strategies=parse_strategies(list(strategies)),
        device=device,
        image_size=32,
        batch_size=2,
        steps=2,
        warmup=1,
    )
    return plan_sweep(opts, nodes, gpus_per_node)


def test_points_are_strategy_gpus_nodes_with_gpus_divisible_across_nodes():
    plan = _plan([1, 2, 4, 8], [1, 2], gpus_per_node=4)
    keys = [p.key for p in plan.points]
    assert keys[:2] == ["torch-g1-n1", "tf-g1-n1"]  # baselines first, once, on one node
    assert {k for k in keys if k.startswith("ddp")} == {
        "ddp-g1-n1",
        "ddp-g2-n1",
        "ddp-g2-n2",
        "ddp-g4-n1",
        "ddp-g4-n2",
        "ddp-g8-n2",
    }  # no g8-n1: 4 per node at most
    assert {k for k in keys if k.startswith("dp")} == {"dp-g1-n1", "dp-g2-n1", "dp-g4-n1"}  # one process
    assert [p.index for p in plan.points] == list(range(len(plan.points)))
    by_key = {p.key: p for p in plan.points}
    assert by_key["mirrored-g8-n2"].launcher.name == "tf-multiworker"
    assert by_key["mirrored-g8-n2"].shape == (2, 4, 1)
    assert by_key["horovod-torch-g4-n2"].shape == (2, 2, 1)
    assert by_key["ddp-g4-n2"].config.nodes == 2 and by_key["ddp-g4-n2"].config.world_size == 4
    # one job array per resource shape
    assert sorted(plan.shapes()) == [(1, 1, 1), (1, 2, 1), (1, 4, 1), (2, 1, 1), (2, 2, 1), (2, 4, 1)]


def test_cpu_tf_points_run_one_worker_per_device():
    plan = _plan([4], [2], strategies=("mirrored",), device="cpu")
    [p] = [p for p in plan.points if p.strategy.name == "mirrored"]
    assert p.shape == (2, 0, 2)  # no GPUs requested, two TF workers per node
    assert sbatch_argv([p], _settings(Path("/x")))[3:6] == [
        "--nodes=2",
        "--ntasks-per-node=2",
        "--job-name=distbench-n2",
    ]


def _settings(tmp_path, **kw):
    kw.setdefault("script", tmp_path / "sweep.sbatch")
    kw.setdefault("records_dir", tmp_path / "records")
    return SlurmSettings(**kw)


def test_time_limits_in_slurm_formats():
    assert time_seconds("90") == 5400
    assert time_seconds("01:00:00") == 3600
    assert time_seconds("1-02:03:04") == 93784
    assert time_seconds("2-1") == 2 * 86400 + 3600


# -- rendering and quoting --------------------------------------------------------------------------
def _bash(script_text: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["bash", "-c", script_text],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=cwd,
        env={"PATH": os.environ["PATH"]},
    )


ODD = "records $HOME $(touch pwned) `touch pwned` 'q'"


def _generate(tmp_path, capsys, *extra, records=ODD, python=None):
    python = python or sys.executable
    code, out, err = _cli(
        capsys, _sweep_args(tmp_path, "--records-dir", str(tmp_path / records), "--python", python, *extra)
    )
    assert code == 0, err
    return tmp_path / "sweep.sbatch", out


def test_generated_script_passes_bash_n_and_keeps_odd_paths_literal(tmp_path, capsys):
    odd_python = str(tmp_path / "my env" / "bin" / "python")
    script, out = _generate(
        tmp_path,
        capsys,
        "--gpus",
        "1,2,4",
        "--nodes",
        "1,2",
        "--partition",
        "gpu-a100",
        "--account",
        "proj.x",
        "--time",
        "02:30:00",
        "--constraint",
        "a100&ib",
        python=odd_python,
    )
    for path in (script, script.with_name("sweep.submit.sh")):
        check = subprocess.run(["bash", "-n", str(path)], capture_output=True, text=True)
        assert check.returncode == 0, check.stderr
    text = script.read_text()
    assert "#SBATCH --partition=gpu-a100\n" in text
    assert "#SBATCH --account=proj.x\n" in text
    assert "#SBATCH --time=02:30:00\n" in text
    assert "#SBATCH --constraint=a100&ib\n" in text
    assert "#SBATCH --exclusive" in text
    # The knobs evaluate to exactly the paths given, whatever they contain.
    knobs = re.search(r"^PY=.*?^POINT_TIMEOUT=.*?$", text, re.S | re.M).group(0)
    shown = _bash(knobs + '\nprintf "%s\\n" "$PY" "$RECORDS" "$TORCHRUN"', tmp_path)
    assert shown.stdout.splitlines() == [odd_python, str(tmp_path / ODD), str(tmp_path / "my env" / "bin" / "torchrun")]
    assert f"records: {tmp_path / ODD}" in out
    assert not (tmp_path / "pwned").exists()
    no_point = _bash(text, tmp_path)  # outside an array job: a clear message, nothing run
    assert no_point.returncode == 2
    assert (
        no_point.stderr == f"distbench: submit this script as a job array: bash {script.with_name('sweep.submit.sh')}\n"
    )
    assert not (tmp_path / "pwned").exists()


def test_paths_with_control_characters_are_refused(capsys, tmp_path):
    bad = str(tmp_path / "a\nrm -rf x")
    code, out, err = _cli(capsys, _sweep_args(tmp_path, "--records-dir", bad))
    assert code == 2
    assert err == f"Error: --records-dir {bad!r} contains a control character (a newline?); choose another path\n"
    assert list(tmp_path.iterdir()) == []


def _case_block(text: str) -> str:
    start = text.index('case "$point" in')
    return text[start : text.index("\nesac\n", start) + 6]


def test_each_points_command_in_the_script_is_the_builders_command(tmp_path, capsys):
    """Run the script's point table in bash with stand-in values: the launch array of a multi-node
    ddp point is exactly distbench.run.launchers.TORCHRUN.rendezvous's argv, and every config parses back."""
    script, _ = _generate(
        tmp_path,
        capsys,
        "--gpus",
        "1,4",
        "--nodes",
        "1,2",
        "--strategy",
        "ddp,horovod-tf,mirrored",
        *TINY[:-2],
        "--target-ci",
        "0",
    )
    text = script.read_text()
    plan_points = json.loads((tmp_path / ODD / "sweep.manifest.json").read_text())["points"]
    stubs = (
        'PY=/v/bin/python; TORCHRUN=/v/bin/torchrun; HOROVODRUN=/v/bin/horovodrun; config="/w d/c.json"; '
        'result="/w d/r.json"; head_node=node7; MASTER_PORT=29511; job_tag=42_3; SLURM_CPUS_ON_NODE=16; '
        'horovod_hosts() { echo "node7:$1,node8:$1"; }\n'
    )
    for p in plan_points:
        shown = _bash(
            stubs
            + f"point={p['index']}\n"
            + _case_block(text)
            + '\nprintf "%s\\n" "$config_json"; printf "%s\\0" "${launch[@]}"',
            tmp_path,
        )
        assert shown.returncode == 0, shown.stderr
        config_line, argv = shown.stdout.split("\n", 1)
        cfg = PointConfig.from_json(config_line)
        assert (cfg.strategy, cfg.world_size, cfg.nodes) == (p["strategy"], p["world_size"], p["nodes"])
        argv = argv.split("\0")[:-1]
        assert argv[-4:] == ["--config", "/w d/c.json", "--out", "/w d/r.json"]
        if p["key"] == "ddp-g4-n2":
            expected, _ = TORCHRUN.rendezvous(
                STRATEGIES["ddp"],
                cfg,
                "/w d/c.json",
                "/w d/r.json",
                endpoint="node7:29511",
                rdzv_id="42_3",
                python="/v/bin/python",
                tool="/v/bin/torchrun",
            )
            assert argv == [
                "srun",
                "--nodes=2",
                "--ntasks=2",
                "--ntasks-per-node=1",
                "--kill-on-bad-exit=1",
                "--cpus-per-task",
                "16",
                *expected,
            ]
        if p["key"] == "horovod-tf-g4-n2":
            assert argv[:6] == ["/v/bin/horovodrun", "-np", "4", "-H", "node7:2,node8:2", "--gloo"]
        if p["key"] == "mirrored-g4-n2":
            assert argv[:8] == [
                "srun",
                "--nodes=2",
                "--ntasks=2",
                "--ntasks-per-node=1",
                "--kill-on-bad-exit=1",
                "--cpus-per-task",
                "16",
                "/v/bin/python",
            ]
            assert argv[8:14] == [
                "-m",
                "distbench.core.rankguard",
                "/v/bin/python",
                "-m",
                "distbench.workers",
                "tf_multiworker",
            ]
        if p["key"] == "ddp-g4-n1":
            assert argv[:4] == ["/v/bin/torchrun", "--standalone", "--nnodes=1", "--nproc_per_node=4"]


def test_submit_script_holds_one_sbatch_line_per_shape(tmp_path, capsys):
    script, out = _generate(tmp_path, capsys, "--gpus", "2,4", "--nodes", "1,2", "--strategy", "ddp")
    lines = [ln for ln in script.with_name("sweep.submit.sh").read_text().splitlines() if ln.startswith("sbatch")]
    argvs = [shlex.split(ln) for ln in lines]
    # points: 0 torch-g1-n1, 1 ddp-g2-n1, 2 ddp-g2-n2, 3 ddp-g4-n1, 4 ddp-g4-n2
    assert [a[2:6] for a in argvs] == [
        ["--array=0", "--nodes=1", "--ntasks-per-node=1", "--gres=gpu:1"],
        ["--array=1", "--nodes=1", "--ntasks-per-node=1", "--gres=gpu:2"],
        ["--array=2", "--nodes=2", "--ntasks-per-node=1", "--gres=gpu:1"],
        ["--array=3", "--nodes=1", "--ntasks-per-node=1", "--gres=gpu:4"],
        ["--array=4", "--nodes=2", "--ntasks-per-node=1", "--gres=gpu:2"],
    ]
    assert all(a[-1] == str(script) for a in argvs)
    assert lines == [ln.strip() for ln in out.splitlines() if ln.strip().startswith("sbatch")]
    check = subprocess.run(["bash", "-n", str(script.with_name("sweep.submit.sh"))], capture_output=True, text=True)
    assert check.returncode == 0, check.stderr


def test_submit_runs_sbatch_and_prints_the_job_ids(tmp_path, capsys, monkeypatch):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    calls = tmp_path / "calls"
    fake = bin_dir / "sbatch"
    fake.write_text(
        f'#!/bin/bash\necho "$*" >> {shlex.quote(str(calls))}\n'
        "n=$(wc -l < " + shlex.quote(str(calls)) + ')\necho "$((1000 + n));cluster"\n'
    )
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    code, out, err = _cli(
        capsys, _sweep_args(tmp_path, "--gpus", "2", "--strategy", "ddp", "--device", "cpu", "--submit")
    )
    assert code == 0, err
    assert "submitted job 1001: points torch-g1-n1, ddp-g2-n1" in out
    assert calls.read_text().startswith("--parsable --array=0,1 --nodes=1 --ntasks-per-node=1 --job-name=distbench-n1")

    fake.write_text("#!/bin/bash\necho 'sbatch: error: invalid partition specified: nope' >&2\nexit 1\n")
    code, out, err = _cli(capsys, _sweep_args(tmp_path, "--gpus", "2", "--strategy", "ddp", "--submit"))
    assert code == 1
    assert err.splitlines()[-1] == "Error: sbatch failed (exit 1): sbatch: error: invalid partition specified: nope"


# -- the example scripts in slurm/: the same template, and the same point as a sweep's ---------------------
def test_the_example_scripts_are_what_the_template_renders(tmp_path):
    """slurm/*.sbatch are written by `make slurm-examples`; writing them again changes no byte."""
    proc = subprocess.run(
        [sys.executable, "-m", "distbench.slurm.examples", str(tmp_path)], capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stderr
    written = sorted(p.name for p in tmp_path.iterdir())
    assert "multinode-ddp.sbatch" in written and "single-node-sweep.sbatch" in written
    assert written == sorted(p.name for p in (ROOT / "slurm").iterdir())
    for name in written:
        assert (tmp_path / name).read_bytes() == (ROOT / "slurm" / name).read_bytes(), (
            f"slurm/{name} differs from the template's: run make slurm-examples"
        )
        check = subprocess.run(["bash", "-n", str(tmp_path / name)], capture_output=True, text=True)
        assert check.returncode == 0, check.stderr


def test_an_examples_point_is_the_sweep_scripts_point(tmp_path, capsys):
    """`slurm-job point` (what an example runs inside its job) prints the very lines of the sweep's case."""
    workload = [*TINY, "--target-ci", "0"]  # the same workload options as `distbench slurm`
    script, _ = _generate(
        tmp_path, capsys, "--gpus", "4", "--nodes", "2", "--strategy", "ddp", "--device", "cpu", *workload
    )
    code, out, err = _cli(
        capsys,
        [
            "slurm-job",
            "point",
            "--strategy",
            "ddp",
            "--nodes",
            "2",
            "--gpus-per-node",
            "2",
            "--device",
            "cpu",
            *workload,
        ],
    )
    assert code == 0, err
    assert out.startswith("key=ddp-g4-n2; nodes=2; per_node=2; launcher=torchrun\n")
    assert "".join(" " * 8 + line for line in out.splitlines(keepends=True)) in _case_block(script.read_text())


@pytest.mark.parametrize(
    "args,message",
    [
        (["--strategy", "$(id)"], f"--strategy '$(id)' is not a valid name: {NAME_RULE}"),
        (
            ["--strategy", "ddp", "--gpus-per-node", "0"],
            "Invalid value for '--gpus-per-node': 0 is not in the range x>=1.",
        ),
        (["--strategy", "ddp,mirrored"], "--strategy: an example job runs one strategy, got ddp, mirrored"),
    ],
)
def test_the_job_side_command_is_hidden_and_refuses_bad_knobs(capsys, args, message):
    _, out, _ = _cli(capsys, ["--help"])
    assert "slurm-job" not in out
    args = ["slurm-job", "point", "--nodes", "1", *args]
    code, out, err = _cli(capsys, args if "--gpus-per-node" in args else [*args, "--gpus-per-node", "2"])
    assert (code, out, err) == (2, "", f"Error: {message}\n")


@pytest.mark.slow
def test_an_example_script_runs_its_point_and_records_a_failed_launch(tmp_path):
    records = tmp_path / "records"
    launcher = _fake_launcher(tmp_path, 'echo "RuntimeError: NCCL error: unhandled system error" >&2; exit 1')
    env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM_")}
    env.update(
        DISTBENCH_PYTHON=sys.executable,
        DISTBENCH_RECORDS_DIR=str(records),
        TORCHRUN=launcher,
        GPUS="2",
        DEVICE="cpu",
        BATCH="3",
        CONFIG_ARGS="--image-size 32 --steps 2 --warmup 1 --target-ci 0",
    )
    proc = subprocess.run(
        ["bash", str(ROOT / "slurm" / "multinode-ddp.sbatch")], env=env, capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 1, proc.stderr
    record = _only_record(records)
    assert (record["strategy"], record["world_size"], record["nodes"], record["status"]) == ("ddp", 2, 1, "failed")
    assert record["reason"] == "exit status 1: RuntimeError: NCCL error: unhandled system error"
    assert record["launch"]["argv"][:4] == [launcher, "--standalone", "--nnodes=1", "--nproc_per_node=2"]
    [config] = records.glob("work/*/config.json")
    cfg = PointConfig.from_json(config.read_text())
    assert (cfg.per_device_batch, cfg.image_size, cfg.steps, cfg.device) == (3, 32, 2, "cpu")
    assert cfg.threads_per_worker == max(1, len(os.sched_getaffinity(0)) // 2)


# -- the job side, run without Slurm ------------------------------------------------------------------
@pytest.fixture()
def cpu_sweep(tmp_path, capsys):
    script, _ = _generate(
        tmp_path, capsys, "--gpus", "2", "--strategy", "ddp", "--device", "cpu", *TINY[:-2], records="records"
    )
    return script, tmp_path / "records"


def _run_point(script, point, env, timeout=120):
    return subprocess.run(
        ["bash", str(script)],
        env={**os.environ, "DISTBENCH_POINT": str(point), **env},
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def _only_record(records: Path) -> dict:
    [path] = [p for p in records.glob("*.json") if not p.name.endswith(".manifest.json")]
    return read_record(path)


def _fake_launcher(tmp_path, body: str) -> str:
    path = tmp_path / "fake-launcher"
    path.write_text("#!/bin/bash\n" + body + "\n")
    path.chmod(0o755)
    return str(path)


@pytest.mark.slow
def test_a_failing_launch_leaves_a_failed_record_with_its_log_tail(cpu_sweep, tmp_path):
    script, records = cpu_sweep
    launcher = _fake_launcher(
        tmp_path, 'echo "loading"; echo "RuntimeError: NCCL error: unhandled system error" >&2; exit 1'
    )
    proc = _run_point(script, 1, {"TORCHRUN": launcher})
    assert proc.returncode == 1, proc.stderr
    record = _only_record(records)
    assert (record["strategy"], record["world_size"], record["nodes"], record["status"]) == ("ddp", 2, 1, "failed")
    assert record["reason"] == "exit status 1: RuntimeError: NCCL error: unhandled system error"
    assert "loading" in record["stderr_tail"]
    assert record["launch"]["argv"][0] == launcher
    assert record["launch"]["returncode"] == 1


@pytest.mark.slow
def test_a_point_past_its_timeout_is_recorded_timeout(cpu_sweep, tmp_path):
    script, records = cpu_sweep
    proc = _run_point(script, 1, {"TORCHRUN": _fake_launcher(tmp_path, "sleep 30"), "DISTBENCH_POINT_TIMEOUT": "1"})
    assert proc.returncode == 124
    record = _only_record(records)
    assert record["status"] == "timeout"
    # a Slurm job's ranks leave no phase marks (no DISTBENCH_RANK_DIR in an allocation): no phase is named
    assert record["reason"] == "timed out after 1s (--timeout)"


@pytest.mark.slow
def test_the_time_limit_signal_is_trapped_and_recorded(cpu_sweep, tmp_path):
    script, records = cpu_sweep
    started = tmp_path / "started"
    proc = subprocess.Popen(
        ["bash", str(script)],
        env={**os.environ, "DISTBENCH_POINT": "1", "TORCHRUN": _fake_launcher(tmp_path, f"touch {started}; sleep 60")},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.time() + 60
    while not started.exists() and time.time() < deadline:
        time.sleep(0.1)
    proc.send_signal(signal.SIGUSR1)  # what Slurm sends 60 s before --time runs out (--signal=B:USR1@60)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 143, err
    record = _only_record(records)
    assert record["status"] == "interrupted"
    assert record["reason"] == "the Slurm job was stopped by SIGUSR1 (its --time limit, or scancel)"


@pytest.mark.slow
def test_a_point_submitted_with_the_wrong_node_count_says_so(cpu_sweep):
    script, records = cpu_sweep
    proc = _run_point(script, 1, {"SLURM_JOB_NUM_NODES": "2"})
    assert proc.returncode == 2
    record = _only_record(records)
    assert record["status"] == "failed"
    assert record["reason"] == "submitted with 2 node(s); point ddp-g2-n1 needs 1 (use its sbatch line)"


@pytest.mark.slow
def test_a_finished_point_is_published_with_its_launch_and_slurm_facts(cpu_sweep, tmp_path):
    script, records = cpu_sweep
    writer = _fake_launcher(
        tmp_path,
        f"""
out="${{@: -1}}"; cfg="${{@: -3:1}}"
{shlex.quote(sys.executable)} - "$cfg" "$out" <<'EOF'
import json, sys
from distbench.results.record import base_record, write_record
cfg = json.load(open(sys.argv[1]))
rec = base_record(cfg, strategy="ddp", framework="torch", status="ok")
rec["step_times_s"] = [0.5, 0.5]
rec["threads"] = cfg["threads_per_worker"]
write_record(sys.argv[2], rec)
EOF""",
    )
    proc = _run_point(
        script, 1, {"TORCHRUN": writer, "SLURM_JOB_ID": "77", "SLURM_JOB_NODELIST": "", "SLURM_JOB_PARTITION": "debug"}
    )
    assert proc.returncode == 0, proc.stderr
    record = _only_record(records)
    assert record["status"] == "ok"
    assert record["threads"] == max(1, len(os.sched_getaffinity(0)) // 2)  # this node's CPUs over 2 workers
    assert record["slurm"]["job_id"] == "77" and record["slurm"]["job_partition"] == "debug"
    assert record["launch"]["launcher"] == "torchrun"
    assert record["environment"]["hostname"]
    assert list(records.glob("ddp-g2-n1-77.json"))


def test_a_rank_failing_after_rank0_wrote_its_record_keeps_the_measurement(tmp_path):
    """Rank 0 writes the record after gathering every rank's measurements: a rank failing later (teardown)
    is said beside the point, which stays ok (as locally: launch.outcome_record)."""
    cfg = point_config("ddp", 2, model="resnet50")
    result = tmp_path / "result.json"
    ok = base_record(cfg.to_dict(), strategy="ddp", framework="torch", status="ok")
    ok["step_times_s"] = [1.0]
    write_record(result, ok)
    (tmp_path / "log").write_text("[rank1]: RuntimeError: Connection reset by peer\n")
    record = finish_point(
        config_json=cfg.to_json(),
        result=str(result),
        log=str(tmp_path / "log"),
        record_path=str(tmp_path / "out.json"),
        returncode=1,
        wall_s=3,
        launcher="torchrun",
        argv=["torchrun"],
        environ={},
    )
    assert record["status"] == "ok" and record["step_times_s"] == [1.0]
    assert record["launch_note"] == (
        "a rank failed in teardown, after rank 0 wrote the record (the measurement was complete): "
        "exit status 1: RuntimeError: Connection reset by peer"
    )
    assert "Connection reset" in record["teardown_tail"]
    assert read_record(tmp_path / "out.json")["record_id"] == ok["record_id"]


# -- collect ------------------------------------------------------------------------------------------
def _record(strategy, framework, n, status="ok", step=0.5, **extra):
    cfg = point_config(strategy, n, model="resnet50", nodes=1)
    rec = base_record(
        cfg.to_dict(),
        strategy=strategy,
        framework=framework,
        status=status,
        reason=None if status == "ok" else "exit status 1: RuntimeError: boom",
    )
    rec["step_times_s"] = [step, step, step] if status == "ok" else []
    rec.update(extra)
    return rec


def test_collect_merges_once_and_lists_failed_and_missing_points(tmp_path, capsys):
    folder, db = tmp_path / "records", tmp_path / "results.db"
    write_record(folder / "torch-g1-n1-1_0.json", _record("torch", "torch", 1, step=0.5))
    write_record(folder / "ddp-g2-n1-1_1.json", _record("ddp", "torch", 2, step=0.5))
    failed = _record("ddp", "torch", 4, status="failed", stderr_tail="line a\n" + "\n".join(f"t{i}" for i in range(30)))
    write_record(folder / "ddp-g4-n1-1_2.json", failed)
    no_id = _record("ddp", "torch", 1, step=0.6)
    del no_id["record_id"]
    (folder / "by-hand.json").write_text(json.dumps(no_id))
    (folder / "notes.json").write_text('{"hello": 1}')
    (folder / "sweep.manifest.json").write_text(
        json.dumps(
            {
                "kind": MANIFEST_KIND,
                "points": [
                    {"key": "ddp-g8-n2", "strategy": "ddp", "world_size": 8, "nodes": 2},
                    {"key": "ddp-g2-n1", "strategy": "ddp", "world_size": 2, "nodes": 1},
                ],
            }
        )
    )

    code, out, err = _cli(capsys, ["collect", str(folder), "--results", str(db)])
    assert code == 0, err
    sweep_id = re.search(r"-> sweep (\S+) in", out).group(1)
    assert out.startswith(f"{folder}: 4 record(s) added, 0 already present, 1 file(s) ignored -> sweep {sweep_id}")
    assert "  ignored notes.json: not a distbench result record (schema 1)" in out
    assert (
        "1 failed point(s):\n  ddp N=4 nodes=1: failed: exit status 1: RuntimeError: boom (ddp-g4-n1-1_2.json)\n" in out
    )
    assert "    | t29\n" in out and "    | t14\n" not in out  # the log's last lines
    assert "1 point(s) without a record yet" in out and "  ddp-g8-n2\n" in out

    with Store(db) as store:
        points = {(p["strategy"], p["world_size"]): p for p in store.points(sweep_id)}
        assert store.sweep(sweep_id)["command"].startswith("distbench collect")
    assert set(points) == {("torch", 1), ("ddp", 2), ("ddp", 4), ("ddp", 1)}
    assert points[("ddp", 2)]["speedup"] == pytest.approx(2.0)  # twice the samples per step, same step time
    assert points[("ddp", 4)]["status"] == "failed"
    stable_id = points[("ddp", 1)]["record_id"]
    assert stable_id == stable_record_id((folder / "by-hand.json").read_bytes())

    code, out, _ = _cli(capsys, ["collect", str(folder), "--results", str(db)])
    assert code == 0
    assert out.startswith(f"{folder}: 0 record(s) added, 4 already present, 1 file(s) ignored\n")
    with Store(db) as store:
        assert sum(len(store.points(s["id"])) for s in store.sweeps()) == 4


def test_collect_of_a_missing_folder_is_bad_input(capsys, tmp_path):
    code, _, err = _cli(capsys, ["collect", str(tmp_path / "nope"), "--results", str(tmp_path / "r.db")])
    assert code == 2
    assert (
        err
        == f"Error: DIRECTORY {tmp_path / 'nope'} does not exist (give the records folder of a sweep, or a saved log)\n"
    )
    assert not (tmp_path / "r.db").exists()


# -- a real Slurm on this machine ----------------------------------------------------------------------
SLURM_SCRIPT = ROOT / "scripts" / "slurm-local.sh"


@pytest.fixture(scope="session")
def local_slurm():
    """munge + slurmctld + slurmd on localhost (scripts/slurm-local.sh); stopped again at the end of
    the session if this session started them."""
    if os.geteuid() != 0:
        pytest.skip("a local Slurm needs root (scripts/slurm-local.sh installs packages and starts daemons)")
    if os.environ.get("DISTBENCH_NO_LOCAL_SLURM") == "1":
        pytest.skip("DISTBENCH_NO_LOCAL_SLURM=1: no slurm-wlm, munge or daemons installed or started here")
    if shutil.which("apt-get") is None and shutil.which("slurmctld") is None:
        pytest.skip("no slurmctld and no apt-get to install slurm-wlm")
    was_up = subprocess.run(["bash", str(SLURM_SCRIPT), "status"], capture_output=True, text=True).returncode == 0
    try:
        proc = subprocess.run(["bash", str(SLURM_SCRIPT)], capture_output=True, text=True, timeout=1200)
    except subprocess.TimeoutExpired:
        pytest.skip("scripts/slurm-local.sh did not finish within 20 minutes")
    if proc.returncode != 0:
        lines = (proc.stderr or proc.stdout).strip().splitlines()
        pytest.skip(f"no local Slurm: {lines[-1] if lines else 'scripts/slurm-local.sh failed'}")
    partition = subprocess.run(["sinfo", "-h", "-o", "%P"], capture_output=True, text=True).stdout.split()[0]
    yield partition.rstrip("*")
    if not was_up:
        subprocess.run(["bash", str(SLURM_SCRIPT), "stop"], capture_output=True, text=True)


def _wait_for_jobs(job_ids, timeout_s=600):
    deadline = time.time() + timeout_s
    while time.time() < deadline:
        queue = subprocess.run(["squeue", "-h", "-o", "%A", "-j", ",".join(job_ids)], capture_output=True, text=True)
        if queue.returncode == 0 and not queue.stdout.strip():
            return
        time.sleep(3)
    subprocess.run(["scancel", *job_ids])
    pytest.fail(f"Slurm jobs {job_ids} still queued or running after {timeout_s}s")


@pytest.mark.slow
@require("torch")
def test_a_sweep_runs_as_slurm_jobs_and_is_collected(local_slurm, tmp_path):
    script = tmp_path / "sweep.sbatch"
    records, db = tmp_path / "sweep-records", tmp_path / "results.db"
    gen = subprocess.run(
        [
            *DISTBENCH,
            "slurm",
            "--device",
            "cpu",
            "--gpus",
            "2",
            "--strategy",
            "ddp",
            *TINY[:-2],
            "--target-ci",
            "0",
            "--timeout",
            "300",
            "--time",
            "00:15:00",
            "--partition",
            local_slurm,
            "--out",
            str(script),
            "--submit",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert gen.returncode == 0, gen.stderr
    job_ids = re.findall(r"^submitted job (\d+): points torch-g1-n1, ddp-g2-n1$", gen.stdout, re.M)
    assert len(job_ids) == 1, gen.stdout
    # The baseline once more, with a point timeout too short to finish: the job must leave a
    # 'timeout' record with its log tail, and collect must report it.
    again = subprocess.run(
        [
            "sbatch",
            "--parsable",
            "--array=0",
            "--nodes=1",
            "--ntasks-per-node=1",
            "--export=ALL,DISTBENCH_POINT_TIMEOUT=2",
            f"--output={records}/logs/slurm-%A_%a.out",
            str(script),
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert again.returncode == 0, again.stderr
    job_ids.append(again.stdout.strip().split(";")[0])
    # An example script from slurm/ on the one local node, on CPU workers (so without its --gres line).
    example, example_records = tmp_path / "ddp.sbatch", tmp_path / "example-records"
    example.write_text(
        "".join(
            ln for ln in (ROOT / "slurm" / "multinode-ddp.sbatch").read_text().splitlines(True) if "--gres" not in ln
        )
    )
    knobs = {
        "DISTBENCH_PYTHON": sys.executable,
        "DISTBENCH_RECORDS_DIR": str(example_records),
        "DEVICE": "cpu",
        "GPUS": "2",
        "BATCH": "2",
        "CONFIG_ARGS": "--image-size 32 --steps 3 --warmup 1 --target-ci 0",
    }
    ex = subprocess.run(
        [
            "sbatch",
            "--parsable",
            "--nodes=1",
            f"--partition={local_slurm}",
            f"--output={tmp_path}/example-%j.out",
            str(example),
        ],
        env={**os.environ, **knobs},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert ex.returncode == 0, ex.stderr
    job_ids.append(ex.stdout.strip().split(";")[0])
    _wait_for_jobs(job_ids)
    example_log = "\n".join(p.read_text()[-2000:] for p in tmp_path.glob("example-*.out"))
    record = _only_record(example_records)
    assert (record["strategy"], record["world_size"], record["nodes"], record["status"]) == ("ddp", 2, 1, "ok"), (
        record.get("reason"),
        example_log,
    )
    assert record["launch"]["argv"][1:4] == ["--standalone", "--nnodes=1", "--nproc_per_node=2"]
    assert record["slurm"]["job_id"] == job_ids[-1] and record["per_device_batch"] == 2

    collect = subprocess.run(
        [*DISTBENCH, "collect", str(records), "--results", str(db)], capture_output=True, text=True, timeout=120
    )
    logs = "\n".join(p.read_text()[-2000:] for p in (records / "logs").glob("*"))
    assert collect.returncode == 0, collect.stderr
    assert f"{records}: 3 record(s) added, 0 already present" in collect.stdout, (collect.stdout, logs)
    assert "1 failed point(s):\n  torch N=1 nodes=1: timeout: timed out after 2s (--timeout)" in collect.stdout
    sweep_id = re.search(r"-> sweep (\S+) in", collect.stdout).group(1)
    with Store(db) as store:
        points = store.points(sweep_id)
    ok = {(p["strategy"], p["world_size"], p["nodes"]): p for p in points if p["status"] == "ok"}
    assert set(ok) == {("torch", 1, 1), ("ddp", 2, 1)}, (points, logs)
    ddp = ok[("ddp", 2, 1)]
    assert ddp["slurm"]["job_partition"] == local_slurm and ddp["slurm"]["array_task_id"] == "1"
    assert ddp["launch"]["argv"][1:4] == ["--standalone", "--nnodes=1", "--nproc_per_node=2"]
    assert ddp["throughput"] > 0 and ddp["speedup"] > 0
    assert ddp["per_rank_step_times_s"] and len(ddp["per_rank_step_times_s"]) == 2

    again = subprocess.run(
        [*DISTBENCH, "collect", str(records), "--results", str(db)], capture_output=True, text=True, timeout=120
    )
    assert f"{records}: 0 record(s) added, 3 already present" in again.stdout


# -- the cluster commands take scale's knobs (issue 33) -----------------------------------------------
def _params(command) -> set[str]:
    return {p.name for p in command.params}


def test_the_cluster_commands_take_scales_knobs_but_a_declared_explained_few():
    """Every Workload and Measurement knob of `distbench scale` is an option of `distbench slurm`, `k8s` and
    the in-job `slurm-job point`, except the ones NOT_IN_JOBS names with a reason (each said in --help);
    --device is declared by the cluster commands themselves (cuda or cpu)."""
    from distbench.commands.k8s import k8s
    from distbench.commands.scale import scale
    from distbench.commands.slurm import slurm
    from distbench.commands.slurm_job import point
    from distbench.core.workload import Measurement, Workload, knobs
    from distbench.slurm.plan import NOT_IN_JOBS, jobs_epilog

    declared = set(knobs(Workload)) | set(knobs(Measurement))
    scale_knobs = _params(scale) & declared
    for command in (slurm, k8s, point):
        taken = _params(command) & declared
        assert scale_knobs - taken == set(NOT_IN_JOBS), command.name
        assert "device" in taken and not taken - scale_knobs
    assert {"repeats", "seq_len", "comm", "noisy_cv"} <= _params(slurm)
    assert all(why for why in NOT_IN_JOBS.values())
    epilog = jobs_epilog()
    assert all(f"--{name.replace('_', '-')}:" in epilog for name in NOT_IN_JOBS)


def test_the_sweep_script_carries_the_measurement_knobs(tmp_path, capsys):
    script, _ = _generate(
        tmp_path, capsys, "--gpus", "2", "--strategy", "ddp", "--device", "cpu", "--repeats", "3",
        "--noisy-cv", "0.25", "--no-comm", *TINY[:-2],
    )  # fmt: skip
    text = script.read_text()
    assert text.count("repeats=3; noisy_cv=0.25") == 2  # the ddp point and its baseline
    assert '--repeats "$repeats" --noisy-cv "$noisy_cv"' in text  # finish combines the repeats
    assert "for ((r = 1; r <= repeats; r++)); do" in text
    assert '"measure_comm": true' not in text  # --no-comm reached the points' configs
    assert subprocess.run(["bash", "-n", str(script)], capture_output=True).returncode == 0


@pytest.mark.parametrize(
    "args,message",
    [
        (["--repeats", "0"], "Invalid value for '--repeats': 0 is not in the range 1<=x<=1000."),
        (["--noisy-cv", "0"], "Invalid value for '--noisy-cv': 0.0 is not in the range 0<x<=10."),
        (["--seq-len", "16", "--model", "mlp"], "--seq-len does not apply to mlp (an image model): use --image-size"),
    ],
)
def test_bad_measurement_knobs_are_one_line_errors(capsys, tmp_path, args, message):
    code, out, err = _cli(capsys, _sweep_args(tmp_path, "--device", "cpu", *args))
    assert (code, err.strip().splitlines()[-1]) == (2, f"Error: {message}")
    assert not (tmp_path / "sweep.sbatch").exists()


def _ok_run(path, steps):
    cfg = point_config("ddp", 2, model="resnet50")
    rec = base_record(cfg.to_dict(), strategy="ddp", framework="torch", status="ok")
    rec["step_times_s"] = steps
    write_record(path, rec)
    return cfg


def test_finish_combines_the_jobs_repeats_as_scale_does(tmp_path):
    """The script's --repeats loop leaves repeat-1.json, repeat-2.json and the last run's result; the
    published record pools them with a run-to-run CI over the 3 repeats (what `compare` judges)."""
    for r, steps in ((1, [1.0, 1.1, 0.9]), (2, [1.2, 1.0, 1.1])):
        _ok_run(tmp_path / f"repeat-{r}.json", steps)
    cfg = _ok_run(tmp_path / "result.json", [1.0, 1.0, 1.05])
    (tmp_path / "log").write_text("")
    record = finish_point(
        config_json=cfg.to_json(), result=str(tmp_path / "result.json"), log=str(tmp_path / "log"),
        record_path=str(tmp_path / "out.json"), returncode=0, wall_s=9, launcher="torchrun", argv=["torchrun"],
        environ={}, repeats=3, noisy_cv=0.01,
    )  # fmt: skip
    assert record["status"] == "ok" and len(record["repeats"]) == 3 and len(record["step_times_s"]) == 9
    assert record["ci_scope"] == "run-to-run (t over 3 repeats)"
    assert record["throughput_ci_low"] < record["throughput"] < record["throughput_ci_high"]
    assert record["noisy"] is True  # step-time CV above --noisy-cv 0.01


def test_finish_names_the_repeat_that_failed(tmp_path):
    _ok_run(tmp_path / "repeat-1.json", [1.0, 1.1])
    cfg = point_config("ddp", 2, model="resnet50")
    (tmp_path / "log").write_text("RuntimeError: boom\n")
    record = finish_point(
        config_json=cfg.to_json(), result=str(tmp_path / "result.json"), log=str(tmp_path / "log"),
        record_path=str(tmp_path / "out.json"), returncode=1, wall_s=9, launcher="torchrun", argv=["torchrun"],
        environ={}, repeats=2,
    )  # fmt: skip
    assert record["status"] == "failed"
    assert record["reason"] == "repeat 2 of 2: exit status 1: RuntimeError: boom"
