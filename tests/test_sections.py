"""PointConfig's typed sections (distbench.core.sections): a config's JSON keeps them under `extra`, as every
older record has them, so a stored record of any version reads into the typed fields and writes back the same."""

from __future__ import annotations

import json

import pytest

from distbench.core.config import PointConfig
from distbench.core.sections import CommSection, ConvergeSection, InferSection, ProfileSection, RaySection
from distbench.results.kind import RecordKind, record_kind
from distbench.results.store import Store
from tests.builders import point_config

OLD_EXTRAS = {
    "converge": {
        "converge": {
            "target_accuracy": 0.8,
            "max_epochs": 5,
            "max_steps": None,
            "max_time_s": 60.0,
            "eval_every_epochs": 0.25,
            "stop_at_target": False,
            "lr": {"rule": "linear", "base_lr": 0.05, "peak_lr": 0.1},
            "cache": "/tmp/shapes.npz",
            "distribution": "torch_ddp",
        }
    },
    "comm": {"backend": "gloo", "sizes": [1024, 2048], "iters": 20, "warmup": 3, "max_time_per_size": 2.0},
    "infer": {"batch_sizes": [1, 8]},
    "profile": {"profile": {"steps": 3, "trace_dir": None}},
    "ray": {"not_applicable": ["--compile"], "ray_address": "h:6379", "ray_placement": {"nodes": 1, "cpus": 2}},
    "segments": {"two_stage": True, "tiny_collective": True},
    "none": {},
}


def _old_config(extra: dict) -> dict:
    """A config dict as an older distbench stored it: every field flat, the kind's settings in `extra`."""
    doc = point_config("ddp", 2).to_dict()
    return {**doc, "extra": json.loads(json.dumps(extra))}


@pytest.mark.parametrize("name", OLD_EXTRAS)
def test_an_old_records_extra_reads_into_the_typed_sections_and_writes_back_the_same(name):
    stored = _old_config(OLD_EXTRAS[name])
    cfg = PointConfig.from_dict(stored)
    assert json.loads(json.dumps(cfg.to_dict())) == stored
    assert PointConfig.from_json(cfg.to_json()) == cfg


def test_each_section_is_read_through_its_typed_field():
    read = {name: PointConfig.from_dict(_old_config(extra)) for name, extra in OLD_EXTRAS.items()}
    converge = read["converge"].converge
    assert isinstance(converge, ConvergeSection)
    assert converge.lr["peak_lr"] == 0.1 and converge.distribution == "torch_ddp" and converge.max_steps is None
    assert read["comm"].comm_bench == CommSection(
        backend="gloo", sizes=(1024, 2048), iters=20, warmup=3, max_time_per_size=2.0
    )
    assert read["infer"].infer == InferSection(batch_sizes=(1, 8))
    assert read["profile"].profiling == ProfileSection(steps=3, trace_dir=None)
    assert read["ray"].ray == RaySection(address="h:6379", placement={"nodes": 1, "cpus": 2})
    assert read["ray"].not_applicable == ("--compile",)
    assert read["segments"].two_stage and read["segments"].tiny_collective
    none = read["none"]
    assert (none.converge, none.comm_bench, none.infer, none.profiling, none.ray) == (None,) * 5
    assert not (none.two_stage or none.tiny_collective or none.not_applicable)


def test_an_unknown_extra_key_is_named():
    with pytest.raises(ValueError, match="unknown config extra keys: mystery"):
        PointConfig.from_dict(_old_config({"mystery": 1}))


def test_an_old_converge_record_in_a_store_reads_back_as_converge(tmp_path, capsys):
    from distbench.cli import main
    from distbench.core.sections import from_extra
    from tests.builders import add_sweep, point

    records = [point(s, n, 0.1, config={"extra": OLD_EXTRAS["converge"]}) for s, n in (("torch", 1), ("ddp", 2))]
    db = tmp_path / "r.db"
    with Store(db) as store:
        sweep = add_sweep(store, records, command="distbench converge", options={"kind": "converge"})
        back = store.points(sweep)
    assert [record_kind(r) for r in back] == [RecordKind.CONVERGE] * 2
    assert from_extra(back[1]["config"]["extra"])["converge"].target_accuracy == 0.8
    assert main(["results", "show", sweep, "--results", str(db), "--format", "json"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert "torch" in json.dumps(shown) and "ddp" in json.dumps(shown)
