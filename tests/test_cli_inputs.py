"""One-line errors (exit 2) for the options added after the first release of `scale`, `verify`, `comm`."""

import pytest

from distbench.cli import main


@pytest.mark.parametrize(
    "args,message",
    [
        (["scale", "--nodes", "0"], "--nodes value '0' must be a positive node count"),
        (
            ["scale", "--gpus", "2", "--nodes", "2"],
            "--nodes 2 runs multi-node points inside a Slurm allocation, and this shell is not in one "
            "(use salloc/sbatch, `distbench slurm` to submit the sweep as jobs, or scripts/cluster-local.sh up "
            "for nodes on this machine)",
        ),
        (
            ["scale", "--loader-workers", "-1"],
            "Invalid value for '--loader-workers': -1 is not in the range 0<=x<=256.",
        ),
        (
            ["scale", "--data", "disk", "--dataset-size", "0"],
            "Invalid value for '--dataset-size': 0 is not in the range 1<=x<=10000000.",
        ),
        (
            ["scale", "--max-time", "0"],
            "--max-time must be positive while --target-ci is on, got 0 (use --target-ci 0 for a fixed number of steps)",
        ),
        (["scale", "--seq-len", "16"], "--seq-len does not apply to resnet50 (an image model): use --image-size"),
        (
            ["scale", "--model", "bert_base", "--image-size", "64"],
            "--image-size does not apply to bert_base (a token model): use --seq-len",
        ),
        (
            ["scale", "--strategy", "ddp", "--xla"],
            "--xla does not apply to the selected strategies (ddp): XLA is TensorFlow's compiler",
        ),
        (["verify", "--gpus", "1,2"], "verify takes one device count, got '1,2'"),
        (
            ["verify", "--gpus", "2", "--batch-size", "5", "--device", "cpu"],
            "--batch-size 5 (global) is not divisible by --gpus 2",
        ),
        (
            ["comm", "--sizes", "1X:2K", "--device", "cpu"],
            "bad message size '1X': use a number with an optional K, M or G suffix (powers of 1024)",
        ),
    ],
)
def test_new_options_reject_bad_values_in_one_line(capsys, monkeypatch, tmp_path, args, message):
    for var in ("SLURM_JOB_NODELIST", "SLURM_NODELIST"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("DISTBENCH_CLUSTER_DIR", str(tmp_path / "no-cluster"))  # nor a one-machine cluster
    monkeypatch.chdir(tmp_path)  # any store these commands open lands here
    assert main(args) == 2
    err = capsys.readouterr().err
    assert err == f"Error: {message}\n"
