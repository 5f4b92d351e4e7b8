"""The one declaration of the knobs (distbench.core.workload): the click options, the checks, the device defaults and
a point's identity all come from it."""

import dataclasses

import pytest

from distbench.cli import cli, main
from distbench.commands.options import WORKLOAD
from distbench.core.config import IDENTITY, LOADER_FIELDS, point_key
from distbench.core.errors import BadInput
from distbench.core.workload import Measurement, Workload, device_default, knobs
from distbench.run.plan import SweepOptions, make_plan
from tests.builders import point_config


def test_every_knob_a_user_sets_has_one_click_option_with_its_declared_range():
    declared = {name: k for name, (_, k) in knobs(SweepOptions).items() if not k.command_only}
    assert set(WORKLOAD) == set(declared)
    for name, (decls, jobs, attrs) in WORKLOAD.items():
        k = declared[name]
        assert jobs == k.jobs and attrs.get("help", "") == k.help
        if k.choices is not None:
            assert tuple(attrs["type"].choices) == k.choices
        elif k.low is not None and k.parse is None:
            assert attrs["type"].min == k.low and attrs["type"].max == k.high


@pytest.mark.parametrize(
    "kw,message",
    [
        (dict(seed=2**32), "--seed must be <= 4294967295, got 4294967296"),
        (dict(lr=0.0), "--lr must be > 0, got 0"),
        (dict(num_classes=1), "--num-classes must be >= 2, got 1"),
        (dict(timeout=0.0), "--timeout must be > 0, got 0"),
        (dict(noisy_cv=float("nan")), "--noisy-cv must be a finite number, got nan"),
        (dict(target_ci=1.5), "--target-ci must be a percentage in [0, 100), got 150%"),
        (dict(device="tpu"), "--device must be one of auto, cuda, cpu, got 'tpu'"),
    ],
)
def test_a_value_outside_the_declaration_names_the_flag(kw, message):
    with pytest.raises(BadInput) as info:
        SweepOptions(gpus=(1,), **kw)
    assert str(info.value) == message


def test_the_cli_refuses_the_same_values_with_a_one_line_error(capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert main(["scale", "--gpus", "1", "--momentum", "1.5"]) == 2
    err = capsys.readouterr().err
    assert err == "Error: Invalid value for '--momentum': 1.5 is not in the range 0<=x<=1.\n"
    assert "Traceback" not in err


def test_identity_is_declared_per_field():
    workload = {f.name for f in dataclasses.fields(Workload)}
    assert "seed" in workload and "seed" not in IDENTITY  # a knob, but not what makes a point different
    assert {"model", "device", "precision", "lr", "momentum", "tf32"} <= set(IDENTITY)
    assert not {f.name for f in dataclasses.fields(Measurement)} & set(IDENTITY)
    assert set(LOADER_FIELDS) == {"loader_workers", "prefetch", "pin_memory"}
    cfg = dict(point_config("ddp", 2, per_device_batch=4).to_dict())
    assert point_key("ddp", {**cfg, "steps": 99, "seed": 7, "warmup": 9}) == point_key("ddp", cfg)
    assert point_key("ddp", {**cfg, "lr": 0.1}) != point_key("ddp", cfg)


def test_a_sweep_flag_reaches_the_points_and_their_identity():
    base = dict(gpus=(1, 2), model="resnet18", strategies=("ddp",), device="cpu", add_baselines=False)
    default, changed = (make_plan(SweepOptions(**base, **kw), visible_gpus=0) for kw in ({}, {"momentum": 0.5}))
    assert {p.config.momentum for p in changed.points} == {0.5}
    assert {p.config.momentum for p in default.points} == {0.9}
    keys = lambda plan: {point_key(p.strategy.name, p.config.to_dict()) for p in plan.points}  # noqa: E731
    assert not keys(default) & keys(changed)


def test_device_defaults_fill_only_what_was_not_given():
    plan = make_plan(SweepOptions(gpus=(2,), model="resnet18", strategies=("ddp",), device="cpu"), visible_gpus=0)
    cfg = next(p.config for p in plan.points if p.strategy.name == "ddp")
    assert (cfg.steps, cfg.warmup, cfg.max_time_s, cfg.per_device_batch, cfg.image_size) == (
        device_default("steps", "cpu"),
        device_default("warmup", "cpu"),
        device_default("max_time", "cpu"),
        device_default("batch_size", "cpu", SweepOptions),
        64,
    )
    given = make_plan(
        SweepOptions(gpus=(2,), model="resnet18", strategies=("ddp",), device="cpu", steps=4, batch_size=2),
        visible_gpus=0,
    )
    cfg = next(p.config for p in given.points if p.strategy.name == "ddp")
    assert (cfg.steps, cfg.per_device_batch) == (4, 2)


TRAINING_COMMANDS = ("scale", "run", "slurm", "k8s", "verify", "converge")


def test_every_command_that_trains_takes_the_training_section_whole():
    from distbench.core.workload import OPTIMIZER

    assert {"seed", "lr", "momentum"} <= set(OPTIMIZER)
    for name in TRAINING_COMMANDS:
        params = {p.name for p in cli.commands[name].params}
        assert set(OPTIMIZER) <= params, name


def test_converge_points_take_the_training_section_from_its_options():
    from distbench.converge.plan import ConvergeOptions
    from distbench.core.strategies import parse_strategies
    from tests.builders import converge_point_configs

    section = {"seed": 7, "lr": 0.02, "momentum": 0.5}
    opts = ConvergeOptions(
        model="mlp",
        strategies=tuple(parse_strategies(("torch,ddp",))),
        gpus=(1, 2),
        seeds=1,
        target_accuracy=0.9,
        batch_size=16,
        lr_scaling="none",
        warmup_epochs=0.0,
        max_epochs=1,
        max_steps=None,
        max_time_s=None,
        eval_every_epochs=1.0,
        stop_at_target=False,
        **section,
    )
    configs = [
        c for _, c in converge_point_configs(opts, device="cpu", cores=2, cache="/c", image_size=8, num_classes=3)
    ]
    assert [(c.seed, c.lr, c.momentum) for c in configs] == [(7, 0.02, 0.5)] * 3
    assert {c.num_classes for c in configs} == {3} and not any(c.tf32 for c in configs)
