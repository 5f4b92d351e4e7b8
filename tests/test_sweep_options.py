"""SweepOptions is the one options object from flag to plan: click options named after its fields, checked
once (BadInput naming the flag), stored whole with the sweep and replayed whole by --resume."""

import dataclasses
import json

import pytest

from distbench.cli import main
from distbench.commands.options import WORKLOAD
from distbench.commands.scale import _execute, run, scale
from distbench.commands.slurm import slurm
from distbench.core.errors import BadInput
from distbench.kinds.measure import NOISY_CV
from distbench.kinds.sweep import stored_options
from distbench.results.store import Store
from distbench.run.plan import SweepOptions

FIELDS = {f.name: f for f in dataclasses.fields(SweepOptions)}
COMMAND_ONLY = {"gpus", "nodes", "add_baselines"}  # each command declares these itself (own defaults and help)

# Non-default values for the fields whose type gives none by itself (bool: flipped, int: +1, float: doubled, or
# 0.5 where it is 0).
EXAMPLES = {
    "gpus": (2, 4),
    "nodes": (1, 2),
    "model": "resnet18",
    "strategies": ("ddp", "mirrored", "ray-ddp", "fsdp-hybrid"),
    "shard_group": 2,
    "batch_size": (4, 8),
    "scaling": "strong",
    "image_size": 32,
    "precision": "bf16",
    "data": "disk",
    "steps": 2,
    "warmup": 1,
    "device": "cpu",
    "max_time": 5.0,
    "momentum": 0.5,
    "ray_address": "ray://head:10001",
}
LEFT_AT_DEFAULT = {
    "seq_len",
    "model_size",
    "activation_checkpointing",
}  # token/decoder options: the image model refuses them


def _changed(f: dataclasses.Field):
    if f.name in EXAMPLES:
        return EXAMPLES[f.name]
    if isinstance(f.default, bool):
        return not f.default
    if isinstance(f.default, (int, float)):
        return f.default + 1 if isinstance(f.default, int) else f.default * 2 or 0.5
    raise AssertionError(f"add a non-default example value for the new SweepOptions field {f.name!r} to EXAMPLES")


def test_click_options_are_named_after_fields_and_default_to_theirs():
    assert set(WORKLOAD) == set(FIELDS) - COMMAND_ONLY
    for command in (scale, run):
        ctx = command.make_context(command.name, [])
        workload = {k: v for k, v in ctx.params.items() if k in WORKLOAD}
        assert set(workload) == set(WORKLOAD)
        if command is run:  # one point: one strategy, ddp unless named
            assert workload.pop("strategies") == ("ddp",)
        assert SweepOptions(gpus="1", **workload) == SweepOptions(gpus="1")  # click's defaults are the fields'
    slurm_names = {p.name for p in slurm.params}
    assert {name for name, (_, in_slurm, _) in WORKLOAD.items() if in_slurm} <= slurm_names
    assert not {name for name, (_, in_slurm, _) in WORKLOAD.items() if not in_slurm} & slurm_names - {"device"}
    assert FIELDS["noisy_cv"].default == NOISY_CV


@pytest.mark.parametrize(
    "kw,message",
    [
        (dict(precision="fp8"), "--precision must be one of fp32, amp, bf16, got 'fp8'"),
        (dict(warmup=0), "--warmup must be >= 1, got 0"),  # the same bound as the CLI's
        (dict(scaling="linear"), "--scaling must be one of weak, strong, got 'linear'"),
        (dict(gpus="1,x"), "--gpus value 'x' is not a whole number"),
        (dict(nodes="0"), "--nodes value '0' must be a positive node count"),
        (dict(batch_size=(8, 8)), "--batch-size 8,8 has a duplicated value"),
        (dict(strategies=("ddp",), xla=True), "--xla does not apply to the selected strategies (ddp): XLA is"),
    ],
)
def test_bad_options_name_their_flag(kw, message):
    with pytest.raises(BadInput) as info:
        SweepOptions(**{"gpus": (1,), **kw})
    assert str(info.value).startswith(message)


def test_resume_replays_every_option(tmp_path, monkeypatch):
    """A sweep started with every field away from its default resumes with exactly those options."""
    from distbench.commands import scale as scale_cmd
    from distbench.core import datasets
    from distbench.kinds import sweep
    from distbench.run import raycluster

    # --ray-address plans from the cluster's nodes: one node of 8 CPUs and 8 GPUs answers here
    node = {"node_id": "n1", "address": "10.0.0.1", "CPU": 8.0, "GPU": 8.0}
    monkeypatch.setattr(raycluster, "cluster_nodes", lambda address, **kw: (node,))

    monkeypatch.setenv("SLURM_JOB_NODELIST", "node[1-2]")  # --nodes 1,2 plans inside an allocation
    monkeypatch.setattr(datasets, "ensure_dataset", lambda *a, **kw: None)  # --data disk: nothing to write
    monkeypatch.setattr(sweep, "run_points", lambda *a, **kw: [])  # plan and store, run nothing
    seen = []
    real_run_plan = scale_cmd.run_plan
    monkeypatch.setattr(
        scale_cmd,
        "run_plan",
        lambda plan, store, *, options, **kw: (seen.append(options), real_run_plan(plan, store, options=options, **kw))[
            1
        ],
    )

    values = {name: _changed(f) for name, f in FIELDS.items() if name not in LEFT_AT_DEFAULT}
    opts = SweepOptions(**values)
    assert all(getattr(opts, name) != f.default for name, f in FIELDS.items() if name not in LEFT_AT_DEFAULT)
    db = str(tmp_path / "r.db")
    _execute(opts, results=db, records_dir=None, fmt="json")
    with Store(db) as store:
        [sweep_id] = [s["id"] for s in store.sweeps(1)]
        assert set(json.loads(store.sweep(sweep_id)["options_json"])["sweep_options"]) == set(FIELDS)
        assert stored_options(store, sweep_id) == opts

    assert main(["scale", "--resume", "latest", "--results", db, "--format", "json"]) == 0
    assert seen == [opts, opts]
    assert main(["scale", "--resume", "latest", "--results", db, "--format", "json", "--timeout", "5"]) == 0
    assert seen[-1] == dataclasses.replace(opts, timeout=5.0)  # only a --timeout given again replaces the stored one


def test_sweeps_stored_before_sweep_options_still_resume(tmp_path):
    replay = {
        "gpus_text": "1,2",
        "nodes_text": "1",
        "add_baselines": True,
        "model": "resnet18",
        "strategy": ["ddp"],
        "batch_size": 4,
        "compile_": True,
        "precision": "bf16",
        "timeout": 60.0,
    }
    with Store(tmp_path / "r.db") as store:
        sweep_id = store.start_sweep(
            command="distbench scale",
            version="0",
            git_sha=None,
            env={},
            options={"model": "resnet18", "replay": replay},
            notes=[],
        )
        assert stored_options(store, sweep_id) == SweepOptions(
            gpus=(1, 2),
            model="resnet18",
            strategies=("ddp",),
            batch_size=(4,),
            compile=True,
            precision="bf16",
            timeout=60.0,
        )
        other = store.start_sweep(command="distbench comm", version="0", git_sha=None, env={}, options={}, notes=[])
        with pytest.raises(BadInput, match=f"sweep {other} was not made by `distbench scale`"):
            stored_options(store, other)
