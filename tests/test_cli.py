"""CLI tests: exit codes and exact one-line error text, through the real entry point."""

import click
import pytest

from distbench.cli import cli, main
from distbench.core.strategies import STRATEGIES
from distbench.models.specs import model_names


def _run(capsys, args):
    code = main(args)
    out = capsys.readouterr()
    return code, out.out, out.err


@pytest.mark.parametrize(
    "args,message",
    [
        (
            ["scale", "--gpus", "", "--model", "resnet50"],
            "Error: --gpus is empty: give a comma list of device counts, e.g. --gpus 1,2,4\n",
        ),
        (["scale", "--gpus", "0"], "Error: --gpus value '0' must be a positive device count\n"),
        (["scale", "--gpus", "-2"], "Error: --gpus value '-2' must be a positive device count\n"),
        (["scale", "--gpus", "1,x"], "Error: --gpus value 'x' is not a whole number\n"),
        (["scale", "--gpus", "1,2,1"], "Error: --gpus value '1' is duplicated\n"),
        (
            ["scale", "--gpus", "1", "--model", "alexnet"],
            f"Error: --model: unknown model 'alexnet'; valid models: {', '.join(model_names())}\n",
        ),
        (
            ["scale", "--gpus", "1", "--model", "ResNet18"],
            f"Error: --model: unknown model 'ResNet18' (did you mean 'resnet18'?); valid models: "
            f"{', '.join(model_names())}\n",
        ),
        (
            ["scale", "--gpus", "1", "--strategy", "nope"],
            f"Error: unknown --strategy 'nope'; valid strategies: {', '.join(STRATEGIES)}; groups: all, core, wrappers, "
            "sharded, engines\n",
        ),
        (
            ["scale", "--gpus", "1", "--batch-size", "-4"],
            "Error: --batch-size value '-4' must be a positive batch size\n",
        ),
        (
            ["run", "--gpus", "1,2", "--strategy", "ddp"],
            "Error: run measures one point: --gpus takes one count, got '1,2' (use `distbench scale`)\n",
        ),
        (
            ["run", "--gpus", "2", "--strategy", "ddp,torch"],
            "Error: run measures one point: give exactly one --strategy (use `distbench scale` for several)\n",
        ),
    ],
)
def test_bad_input_exits_2_with_one_line(capsys, args, message):
    code, out, err = _run(capsys, args)
    assert code == 2
    assert err == message
    assert out == ""


def test_cuda_with_no_visible_gpu(capsys, monkeypatch):

    monkeypatch.setattr("distbench.core.envinfo.visible_gpu_count", lambda: 0)
    code, _, err = _run(capsys, ["scale", "--gpus", "1", "--device", "cuda"])
    assert code == 2
    assert err == "Error: --device cuda: no CUDA GPU is visible on this machine (use --device cpu)\n"


def test_more_gpus_than_visible(capsys, monkeypatch):

    monkeypatch.setattr("distbench.core.envinfo.visible_gpu_count", lambda: 2)
    code, _, err = _run(capsys, ["scale", "--gpus", "1,8", "--device", "cuda"])
    assert code == 2
    assert err == "Error: --gpus asks for 8 GPUs but only 2 are visible\n"


def test_bad_target_ci(capsys):
    code, _, err = _run(capsys, ["scale", "--target-ci", "lots"])
    assert code == 2
    assert err == "Error: Invalid value for '--target-ci': 'lots' is not a percentage such as 2%\n"


def test_click_usage_errors_are_one_line_exit_2(capsys):
    code, _, err = _run(capsys, ["scale", "--scaling", "diagonal"])
    assert code == 2
    assert err.count("\n") == 1 and err.startswith("Error: Invalid value for '--scaling'")
    code, _, err = _run(capsys, ["nosuchcommand"])
    assert code == 2 and err == "Error: No such command 'nosuchcommand'.\n"


def test_a_store_that_is_not_distbench_is_refused_untouched(capsys, tmp_path):
    bogus = tmp_path / "notes.db"
    bogus.write_bytes(b"this is not sqlite at all" * 10)
    before = bogus.read_bytes()
    code, _, err = _run(capsys, ["run", "--strategy", "torch", "--results", str(bogus)])
    assert code == 2
    assert err == f"Error: {bogus} is not a distbench results store (left untouched)\n"
    assert bogus.read_bytes() == before


def _all_commands(group, prefix=()):
    """Every command users see (hidden ones are called by distbench's own job scripts)."""
    for name, cmd in group.commands.items():
        if cmd.hidden:
            continue
        yield prefix + (name,), cmd
        if isinstance(cmd, click.Group):
            yield from _all_commands(cmd, prefix + (name,))


def test_every_command_has_help_with_an_example():
    for path, cmd in _all_commands(cli):
        assert cmd.help and cmd.help.strip(), f"{' '.join(path)} has no help"
        assert "Example:" in cmd.help, f"{' '.join(path)} help has no example"
        for param in cmd.params:
            if isinstance(param, click.Option) and param.name not in ("seed", "num_classes"):
                assert param.help, f"{' '.join(path)} {param.opts[0]} has no help"


def test_models_lists_reference_counts(capsys):
    code, out, _ = _run(capsys, ["models"])
    assert code == 0
    assert "resnet50" in out and "25,557,032" in out
