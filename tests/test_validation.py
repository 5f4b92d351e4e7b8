"""Every numeric option of scale/run/infer/comm/verify/slurm: a value outside its range is one line
naming the flag and the allowed range, exit 2, before anything runs or is stored."""

import pytest

from distbench.cli import main


def _range(flag: str, value: str, bounds: str) -> str:
    return f"Invalid value for '{flag}': {value} is not in the range {bounds}."


WEEK = "0<x<=604800"
CASES = [
    # scale (the workload options are shared with run and, in part, slurm)
    (["scale", "--image-size", "0"], _range("--image-size", "0", "1<=x<=8192")),
    (["scale", "--seq-len", "0", "--model", "lstm"], "--seq-len value '0' must be a positive sequence length"),
    (["scale", "--steps", "0"], _range("--steps", "0", "1<=x<=1000000")),
    (["scale", "--warmup", "0"], _range("--warmup", "0", "1<=x<=100000")),
    (["scale", "--timeout", "1e12"], _range("--timeout", "1000000000000.0", WEEK)),
    (["scale", "--timeout", "nan"], _range("--timeout", "nan", WEEK)),
    (["scale", "--timeout", "inf"], _range("--timeout", "inf", WEEK)),
    (["scale", "--timeout", "0"], _range("--timeout", "0.0", WEEK)),
    (["scale", "--batch-size", "999999999999"], "--batch-size value '999999999999' is not in the range 1..1048576"),
    (["scale", "--batch-size", "8,0"], "--batch-size value '0' must be a positive batch size"),
    (["scale", "--batch-size", "8,4,8"], "--batch-size value '8' is duplicated"),
    (["scale", "--gpus", "99999999999999999999"], "--gpus value '99999999999999999999' is not in the range 1..65536"),
    (["scale", "--nodes", "99999999999999999999"], "--nodes value '99999999999999999999' is not in the range 1..65536"),
    (["scale", "--num-classes", "1"], _range("--num-classes", "1", "2<=x<=1000000")),
    (["scale", "--seed", "-1"], _range("--seed", "-1", "0<=x<=4294967295")),
    (["scale", "--repeats", "0"], _range("--repeats", "0", "1<=x<=1000")),
    (["scale", "--max-time", "nan"], _range("--max-time", "nan", "0<=x<=86400")),
    (["scale", "--noisy-cv", "inf"], _range("--noisy-cv", "inf", "0<x<=10")),
    (["scale", "--telemetry-interval", "-1"], _range("--telemetry-interval", "-1.0", "0<=x<=3600")),
    (["scale", "--dataset-size", "0"], _range("--dataset-size", "0", "1<=x<=10000000")),
    (["scale", "--loader-workers", "-1"], _range("--loader-workers", "-1", "0<=x<=256")),
    (["scale", "--prefetch", "2000"], _range("--prefetch", "2000", "0<=x<=1024")),
    (["scale", "--target-ci", "nan"], "Invalid value for '--target-ci': 'nan' must be between 0% and 100%"),
    # run
    (["run", "--strategy", "torch", "--steps", "0"], _range("--steps", "0", "1<=x<=1000000")),
    (["run", "--strategy", "torch", "--timeout", "nan"], _range("--timeout", "nan", WEEK)),
    (
        ["run", "--strategy", "torch", "--batch-size", "2,4"],
        "run measures one point: --batch-size takes one value (use `distbench scale` for several)",
    ),
    # infer
    (["infer", "--batch-sizes", "999999999999"], "--batch-sizes value '999999999999' is not in the range 1..1048576"),
    (["infer", "--image-size", "0"], _range("--image-size", "0", "1<=x<=8192")),
    (["infer", "--steps", "1"], _range("--steps", "1", "2<=x<=1000000")),
    (["infer", "--warmup", "0"], _range("--warmup", "0", "1<=x<=100000")),
    (["infer", "--timeout", "inf"], _range("--timeout", "inf", WEEK)),
    # comm
    (["comm", "--gpus", "99999999999999999999"], "--gpus value '99999999999999999999' is not in the range 1..65536"),
    (["comm", "--iters", "2"], _range("--iters", "2", "3<=x<=100000")),
    (["comm", "--warmup", "0"], _range("--warmup", "0", "1<=x<=100000")),
    (["comm", "--max-time-per-size", "nan"], _range("--max-time-per-size", "nan", "0<x<=3600")),
    (["comm", "--timeout", "1e12"], _range("--timeout", "1000000000000.0", WEEK)),
    # verify
    (["verify", "--gpus", "99999999999999999999"], "--gpus value '99999999999999999999' is not in the range 1..65536"),
    (["verify", "--batch-size", "999999999999"], _range("--batch-size", "999999999999", "1<=x<=1048576")),
    (["verify", "--steps", "0"], _range("--steps", "0", "1<=x<=1000")),
    (["verify", "--image-size", "0"], _range("--image-size", "0", "1<=x<=8192")),
    (["verify", "--num-classes", "1"], _range("--num-classes", "1", "2<=x<=1000000")),
    (["verify", "--rtol", "nan"], _range("--rtol", "nan", "0<x<=1")),
    (["verify", "--lr", "inf"], _range("--lr", "inf", "0<x<=10")),
    (["verify", "--timeout", "nan"], _range("--timeout", "nan", WEEK)),
    # slurm
    (["slurm", "--gpus", "99999999999999999999"], "--gpus value '99999999999999999999' is not in the range 1..65536"),
    (["slurm", "--gpus-per-node", "0"], _range("--gpus-per-node", "0", "1<=x<=1024")),
    (["slurm", "--steps", "0"], _range("--steps", "0", "1<=x<=1000000")),
    (["slurm", "--timeout", "nan"], _range("--timeout", "nan", WEEK)),
    (["slurm", "--batch-size", "999999999999"], "--batch-size value '999999999999' is not in the range 1..1048576"),
    (
        ["slurm", "--seq-len", "32,64", "--model", "gpt2"],
        "distbench slurm takes one --seq-len per sweep (write one script per sequence length)",
    ),
    (
        ["scale", "--seq-len", "70000", "--model", "lstm"],
        "--seq-len value '70000' is not in the range 1..65536",
    ),
    (
        ["slurm", "--batch-size", "2,4"],
        "distbench slurm takes one --batch-size per sweep (write one script per batch size)",
    ),
]


@pytest.mark.parametrize("args,message", CASES, ids=[" ".join(a) for a, _ in CASES])
def test_out_of_range_numbers_are_one_line_errors(capsys, monkeypatch, tmp_path, args, message):
    monkeypatch.chdir(tmp_path)  # a store opened by mistake would land here, and is checked for below
    monkeypatch.setattr("distbench.core.envinfo.visible_gpu_count", lambda: 0)
    assert main(args) == 2
    assert capsys.readouterr().err == f"Error: {message}\n"
    assert not list(tmp_path.rglob("*.db")), "nothing may be stored for a refused command"


@pytest.mark.parametrize("args", [["scale"], ["comm"], ["verify", "--batch-size", "32"]])
def test_more_cpu_workers_than_the_machine_can_host_is_refused(capsys, monkeypatch, tmp_path, args):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr("distbench.core.envinfo.visible_gpu_count", lambda: 0)
    monkeypatch.setattr("distbench.run.devices.cpu_cores", lambda: 2)  # the rule lives in resolve_device
    assert main([*args, "--gpus", "32"]) == 2
    assert capsys.readouterr().err == (
        "Error: --gpus 32: CPU workers are limited to 16 on this machine (8 per core, 2 core(s))\n"
    )
    assert not list(tmp_path.rglob("*.db"))
