"""A record's kind and a sweep's kind are read in one place (distbench.results.kind); records and sweeps stored
before the runner stamped them read the same."""

from __future__ import annotations

import json
import signal

import pytest

from distbench.analysis import Sweep
from distbench.cli import interrupted_message
from distbench.core.strategies import STRATEGIES
from distbench.results.kind import RecordKind, Status, record_kind, sweep_kind
from distbench.run import runner, signals
from distbench.run.plan import PlannedPoint
from tests.builders import tiny_config


@pytest.mark.parametrize(
    "record, kind",
    [
        ({"strategy": "ddp", "config": {"world_size": 2}}, RecordKind.TRAINING),
        ({"strategy": "comm-torch-gloo", "config": {}}, RecordKind.COMM),
        ({"strategy": "torch", "busbw_gbps": 1.0}, RecordKind.COMM),
        ({"strategy": "ddp", "config": {"verify": True}}, RecordKind.VERIFY),
        ({"strategy": "ddp", "kind": "inference"}, RecordKind.INFERENCE),
        ({"strategy": "ddp", "config": {"extra": {"converge": {"target_accuracy": 0.9}}}}, RecordKind.CONVERGE),
        ({"strategy": "ddp", "converge": {"curve": []}}, RecordKind.CONVERGE),
        ({"strategy": "torch", "config": {"baseline_threads": 1}}, RecordKind.BASELINE_REFERENCE),
        ({"strategy": "torch", "baseline_threads": 2}, RecordKind.BASELINE_REFERENCE),  # a config itself
    ],
)
def test_a_record_stored_without_a_kind_is_known_by_the_fields_it_had(record, kind):
    assert record_kind(record) is kind


def test_a_stamped_kind_is_read_as_it_is_stored():
    assert record_kind({"strategy": "comm-x", "kind": "verify"}) is RecordKind.VERIFY
    assert record_kind({"strategy": "ddp", "kind": "no such kind"}) is RecordKind.TRAINING


def test_kinds_and_statuses_are_their_stored_text():
    assert [k.value for k in RecordKind] == [
        "training",
        "baseline-reference",
        "fit",
        "verify",
        "comm",
        "inference",
        "converge",
    ]
    assert Status.OK == "ok" and "timeout" == Status.TIMEOUT and Status("oom") is Status.OOM
    assert json.dumps({"status": Status.SKIPPED, "kind": RecordKind.COMM}) == '{"status": "skipped", "kind": "comm"}'


@pytest.mark.parametrize(
    "options, kind",
    [
        ({"kind": "training", "sweep_options": {}}, RecordKind.TRAINING),
        ({"sweep_options": {"gpus": "1,2"}}, RecordKind.TRAINING),  # a scale/run sweep stored before the stamp
        ({"replay": {"gpus_text": "1"}}, RecordKind.TRAINING),  # older still
        ({"kind": "fit", "sweep_options": {}}, RecordKind.FIT),
        ({"kind": "comm", "sizes": []}, RecordKind.COMM),
        ({"model": "resnet50"}, None),
    ],
)
def test_a_sweeps_kind_comes_from_its_stored_options(options, kind):
    assert sweep_kind(options) is kind


def test_the_runner_stamps_its_kind_on_every_record(tmp_path):
    def measure(point, workdir):
        return {"strategy": point.strategy.name, "status": "ok", "config": point.config.to_dict()}

    point = PlannedPoint(STRATEGIES["ddp"], tiny_config("ddp", 2))
    baseline = PlannedPoint(STRATEGIES["torch"], tiny_config("torch", 1, baseline_threads=1))
    comm = runner.Kind(measure, record_kind=RecordKind.COMM)
    assert [r["kind"] for r in runner.run_points([point], None, None, comm, workdir=tmp_path)] == ["comm"]
    training = runner.Kind(measure)
    done = runner.run_points([point, baseline], None, None, training, workdir=tmp_path)
    assert [r["kind"] for r in done] == ["training", "baseline-reference"]
    sweep = Sweep(info={}, points=done)
    assert sweep.scaling_points == done[:1]


@pytest.mark.parametrize(
    "kind, how",
    [
        (RecordKind.TRAINING, "finish it with: distbench scale --resume s1 --results r.db"),
        (RecordKind.COMM, "run the command again to measure the rest: distbench comm --gpus 2"),
        (None, "run the command again to measure the rest: distbench comm --gpus 2"),
    ],
)
def test_an_interrupted_sweep_is_resumable_when_its_stored_kind_is_training(kind, how):
    exc = signals.Interrupted(signal.SIGINT)
    exc.sweep = ("s1", "r.db", "distbench comm --gpus 2", kind)
    assert interrupted_message(exc) == (
        f"Interrupted by SIGINT: every finished point is kept in sweep s1 (r.db), marked 'interrupted'; {how}"
    )
