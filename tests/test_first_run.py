"""What a new user meets first (issue 33): help that says what the code does, `latest` that picks a sweep the
command can use and says which, the store found through DISTBENCH_RESULTS, every model of `distbench models`
running with the CPU defaults, and no project history in user-facing text."""

from __future__ import annotations

import dataclasses
import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from distbench.cli import cli, main
from distbench.commands import scale as scale_cmd
from distbench.models.specs import MODEL_SPECS
from distbench.results.store import Store
from tests.builders import add_sweep, point, scaling_records


def _help(*args: str) -> str:
    result = CliRunner().invoke(cli, [*args, "--help"], terminal_width=200)
    assert result.exit_code == 0, result.output
    return " ".join(result.output.split())


def _run(capsys, args: list[str]) -> tuple[int, str, str]:
    """The installed entry point's behaviour: one-line errors, exit codes."""
    code = main(args)
    out = capsys.readouterr()
    return code, out.out, out.err


# -- help that matches the code
def test_run_takes_one_strategy_and_one_batch_and_says_so(capsys, monkeypatch):
    text = _help("run")
    assert "Default: core" not in text and "comma list sweeps" not in text
    assert "--strategy NAME The one strategy to run" in text and "[default: ddp]" in text
    assert "--batch-size B " in text and "one value" in text
    seen = {}
    monkeypatch.setattr(scale_cmd, "_execute", lambda opts, **kw: (seen.setdefault("opts", opts), [], None))
    code, _, err = _run(capsys, ["run", "--gpus", "2", "--device", "cpu"])
    assert code == 0, err  # `distbench run --gpus 2` runs: one ddp point
    assert seen["opts"].strategies == ("ddp",) and seen["opts"].gpus == (2,)
    for args, flag_text in (
        (["--strategy", "ddp,fsdp"], "give exactly one --strategy"),
        (["--strategy", "core"], "give exactly one --strategy"),
        (["--batch-size", "8,16"], "--batch-size takes one value"),
    ):
        code, _, err = _run(capsys, ["run", "--gpus", "2", "--device", "cpu", *args])
        assert code == 2 and flag_text in err and len(err.strip().splitlines()) == 1, err


def test_verify_and_infer_help_state_the_real_defaults():
    from distbench.core.strategies import parse_strategies

    text = _help("verify")
    assert "default: all" not in text and "Default: core." in text
    assert {s.name for s in parse_strategies(())} < {s.name for s in parse_strategies(["all"])}  # core, not all
    assert "see docs" not in text and "|a - b| / |b|" in text  # --rtol explained where it is offered
    text = _help("infer")
    assert "or both" not in text and "torch,tf runs both" in text


def _commands(group: click.Group, prefix=()):
    for name, cmd in group.commands.items():
        if cmd.hidden:
            continue
        yield (*prefix, name)
        if isinstance(cmd, click.Group):
            yield from _commands(cmd, (*prefix, name))


def test_no_project_history_in_what_users_read():
    """Every command's --help and the `models` table speak of the tool, not of the tracker ("issue 20")."""
    texts = [_help(*path) for path in _commands(cli)]
    texts += [spec.description for spec in MODEL_SPECS.values()]  # the `models` table's descriptions
    found = [m.group(0) for t in texts for m in re.finditer(r".{40}\bissue \d+", t)]
    assert not found, found
    assert len(texts) > 15


# -- the store: DISTBENCH_RESULTS, and the path searched in the error
def test_the_store_is_found_through_DISTBENCH_RESULTS(capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("DISTBENCH_RESULTS", raising=False)
    code, _, err = _run(capsys, ["results", "list"])
    assert code == 2
    assert f"no results store at {tmp_path / 'distbench-results' / 'distbench.db'}" in err  # the path searched
    assert "DISTBENCH_RESULTS" in err
    db = tmp_path / "elsewhere" / "store.db"
    with Store(db) as store:
        sid = add_sweep(store, scaling_records())
    monkeypatch.setenv("DISTBENCH_RESULTS", str(db))
    code, out, err = _run(capsys, ["results", "list"])
    assert code == 0 and sid in out, err
    assert "env var: DISTBENCH_RESULTS" in _help("report")


# -- latest: the newest sweep the command can use, named on stderr
def test_latest_is_per_command_and_named(capsys, tmp_path):
    db = tmp_path / "r.db"
    with Store(db) as store:
        training = add_sweep(store, scaling_records())
        infer = add_sweep(
            store, [dict(point("torch", 1, 0.01), kind="inference")], command="distbench infer --model resnet50"
        )
        broken = store.start_sweep(
            command="distbench scale --gpus 1,2", version="0", git_sha=None, env={}, options={}, notes=[]
        )
        store.finish_sweep(broken, "interrupted")  # Ctrl-C before any point
    args = ["--results", str(db)]
    code, _, err = _run(capsys, ["results", "show", "latest", *args])  # any sweep: the newest
    err = " ".join(err.split())  # wrapped at the terminal's width
    assert code == 0 and f"latest: sweep {broken} (interrupted, 0 of 0 point(s) ok" in err, err
    assert f"`distbench scale --resume {broken}` finishes" in err
    code, _, err = _run(capsys, ["report", "latest", *args, "--out", str(tmp_path / "r.html")])
    assert code == 0, err
    assert len([line for line in err.splitlines() if line.startswith("latest:")]) == 1
    err = " ".join(err.split())
    assert f"latest: sweep {training} (complete, 8 of 9 point(s) ok" in err
    assert f"passed over 2 newer sweep(s) without training points: {broken} (interrupted, 0 ok), {infer}" in err
    assert f"`distbench scale --resume {broken}` finishes" in err
    code, out, err = _run(capsys, ["compare", training, "latest", *args, "--format", "json"])
    assert f"latest: sweep {training} (complete" in err  # its exit code is the gate's (test_compare.py)


def test_latest_is_the_newest_sweep_of_the_kind_each_command_uses(capsys, tmp_path):
    from distbench.analysis import pick_latest

    db = tmp_path / "r.db"
    with Store(db) as store:
        stored = {"sweep_options": {"gpus": "1,2,4"}}  # what scale, run, fit and profile store for --resume
        scaled = add_sweep(store, scaling_records(), options=stored)
        fit = add_sweep(
            store, [point("ddp", 2, 0.1, batch=64)], command="distbench fit --strategy ddp --gpus 2", options=stored
        )
        converge = add_sweep(store, [point("torch", 1, 0.1)], command="distbench converge --strategy torch")
        assert pick_latest(store, "any")[0] == converge
        assert pick_latest(store, "training")[0] == converge  # report: time to accuracy is a report too
        for use in ("scaling", "resume"):  # compare, predict; scale --resume
            picked, line = pick_latest(store, use)
            assert picked == scaled and "passed over 2 newer sweep(s) without" in line, line
            assert f"{converge} (complete, 1 ok), {fit} (complete, 1 ok)" in line
    code, _, err = _run(capsys, ["compare", scaled, "latest", "--results", str(db), "--format", "json"])
    assert f"latest: sweep {scaled} (complete" in err and fit not in err.split("passed over")[0]


def test_latest_with_no_usable_sweep_is_a_one_line_error(capsys, tmp_path):
    db = tmp_path / "r.db"
    with Store(db) as store:
        add_sweep(store, [dict(point("torch", 1, 0.01), kind="inference")], command="distbench infer")
    code, _, err = _run(capsys, ["report", "latest", "--results", str(db), "--out", str(tmp_path / "r.html")])
    assert code == 2 and "none of the 1 newest sweep(s)" in err and "has training points: give a sweep id" in err
    assert len(err.strip().splitlines()) == 1, err


# -- every listed model runs with the defaults (CPU), in this process through the worker's code
def _cpu_config(name: str):
    """The torch point the planner makes for model `name` on CPU workers with every default but a batch of 2."""
    from distbench.run.plan import SweepOptions, make_plan

    opts = SweepOptions(gpus=(1,), strategies=("torch",), model=name, device="cpu", batch_size=(2,), steps=2, warmup=1)
    return dataclasses.replace(make_plan(opts).points[0].config, target_ci=0.0, threads_per_worker=1)


def test_every_listed_model_keeps_a_valid_cpu_input_and_its_flops_are_counted():
    """The CPU default input is 64 px, at most the model's own (mlp's 8x8 digits, cnn's 20x20 shapes stay) and
    the FLOPs behind MFU are counted on the model built at that input (mlp's first layer depends on it)."""
    from distbench.core.mfu import train_flops_per_sample

    sides = {name: _cpu_config(name).image_size for name in MODEL_SPECS}
    assert sides["mlp"] == 8 and sides["cnn"] == 20 and sides["resnet50"] == 64 and sides["bert_base"] is None
    for name in MODEL_SPECS:
        cfg = _cpu_config(name)
        flops, how = train_flops_per_sample(cfg.to_dict())
        assert flops and flops > 0, (name, how)
    mlp = train_flops_per_sample({**_cpu_config("mlp").to_dict(), "image_size": 16, "num_classes": 10})[0]
    assert mlp == 3 * 2 * (16 * 16 * 128 + 128 * 10)  # 3 x forward, multiply-add = 2 FLOPs, 256 -> 128 -> 10


@pytest.mark.slow  # 12 models' real training steps: about 30 s alone, 90 s on a busy machine
def test_every_listed_model_trains_with_the_cpu_defaults(tmp_path):
    """`distbench models` lists each model as trainable: each one's CPU point as the planner makes it (the CPU
    default input: 64 px, a model defined on smaller inputs keeping its own, e.g. mlp's 8x8 digits) takes
    1 warmup + 2 steps in torch's single-device worker, and its FLOPs (MFU) are counted at that input."""
    from distbench.core.mfu import train_flops_per_sample
    from distbench.workers import torch_common as tc

    for name in MODEL_SPECS:  # the rows of `distbench models`
        cfg = _cpu_config(name)
        out = tmp_path / f"{name}.json"
        tc.run(cfg, str(out), tc.Distribution())
        record = json.loads(out.read_text())
        assert record["status"] == "ok" and len(record["step_times_s"]) == 2, name
        flops, how = train_flops_per_sample(record["config"])
        assert flops and flops > 0, (name, how)


# -- make test as root: said before it installs and starts anything
@pytest.mark.skipif(shutil.which("make") is None, reason="no make on this machine")
def test_make_test_says_before_the_slow_tier_that_it_installs_slurm_as_root():
    root = Path(__file__).resolve().parents[1]
    for target in ("test", "test-slow"):
        plan = subprocess.run(
            ["make", "-n", "-o", "install", "-o", "lint", target], cwd=root, capture_output=True, text=True
        ).stdout
        assert "slurm-wlm and munge" in plan and "DISTBENCH_NO_LOCAL_SLURM=1" in plan, plan
        assert plan.index("slurm-wlm") < plan.index("-m slow"), plan  # before the slow tier starts
    said = subprocess.run(["make", "-s", "slurm-notice"], cwd=root, capture_output=True, text=True).stdout
    assert ("start munged, slurmctld and slurmd" in said) == (os.geteuid() == 0), said


def test_results_given_a_folder_blames_the_flag_or_the_variable(capsys, tmp_path, monkeypatch):
    monkeypatch.delenv("DISTBENCH_RESULTS", raising=False)
    code, out, err = _run(capsys, ["results", "list", "--results", str(tmp_path)])
    assert code == 2 and out == ""
    assert err == (
        f"Error: --results {tmp_path} is a folder, not a results store: name the .db file, e.g. "
        f"{tmp_path / 'distbench.db'}\n"
    )
    monkeypatch.setenv("DISTBENCH_RESULTS", str(tmp_path))
    code, _, err = _run(capsys, ["report", "latest"])
    assert code == 2 and err.startswith(f"Error: $DISTBENCH_RESULTS={tmp_path} is a folder") and "\n" == err[-1]
    assert err.count("\n") == 1


@pytest.mark.parametrize("command", [["scale", "--gpus", "1,2"], ["run", "--gpus", "2"]])
def test_a_sweep_where_no_point_succeeded_exits_1_with_one_line(capsys, monkeypatch, command):
    def records_of(*statuses):
        return lambda opts, **kw: (7, [{"status": s} for s in statuses], None)

    args = [*command, "--device", "cpu"]
    monkeypatch.setattr(scale_cmd, "_execute", records_of("failed", "timeout", "failed", "skipped"))
    code, out, err = _run(capsys, args)
    assert (code, out) == (1, "")
    assert err == (
        "Error: no point succeeded: 3 of 4 point(s) ran (2 failed, 1 timeout); the reasons are above and in "
        "`distbench results show 7`\n"
    )
    for fine in (("failed", "ok"), ("skipped", "skipped"), ()):  # one ok point, or nothing ran: exit 0
        monkeypatch.setattr(scale_cmd, "_execute", records_of(*fine))
        code, _, err = _run(capsys, args)
        assert code == 0, (fine, err)
