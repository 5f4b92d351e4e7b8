"""--seq-len as a sweep axis (like --batch-size): one point per (sequence length, N, strategy), its value in
the point key (--resume), the tables and the JSON; bad lists refused with one line naming the flag."""

from __future__ import annotations

import dataclasses
import json
import re

import pytest
from rich.console import Console

from distbench.analysis.output import json_document, results_table
from distbench.analysis.records import token_fields
from distbench.cli import main
from distbench.core.config import point_key
from distbench.run.plan import SweepOptions, make_plan


def _cli(capsys, args):
    code = main(args)
    out = capsys.readouterr()
    return code, out.out, out.err


def _gpt2(**kw) -> SweepOptions:
    return SweepOptions(**{"model": "gpt2", "gpus": (1, 2), "strategies": ("ddp", "fsdp"), "device": "cpu", **kw})


def test_one_point_per_sequence_length_n_and_strategy():
    plan = make_plan(_gpt2(seq_len=(64, 32)), visible_gpus=0)
    swept = {(p.strategy.name, p.config.world_size, p.config.seq_len) for p in plan.points if not p.auto_added}
    assert swept == {(s, n, q) for s in ("ddp", "fsdp") for n in (1, 2) for q in (32, 64)}
    baselines = {p.config.seq_len for p in plan.points if p.strategy.name == "torch"}
    assert baselines == {32, 64}  # each sequence length has its own baseline for speedup
    keys = [point_key(p.strategy.name, dataclasses.asdict(p.config)) for p in plan.points]
    assert len(set(keys)) == len(keys)  # the sequence length tells points apart (--resume's key)
    assert any("sequence lengths 32,64" in note for note in plan.notes)


def test_one_value_is_a_list_of_one_and_the_options_round_trip_for_resume():
    assert _gpt2(seq_len=32).seq_len == (32,)
    stored = json.loads(json.dumps(_gpt2(seq_len=(32, 64)).to_dict()))
    assert SweepOptions.from_dict(stored).seq_len == (32, 64)
    plan = make_plan(_gpt2(), visible_gpus=0)
    assert {p.config.seq_len for p in plan.points} == {64}  # the CPU default when none is given


@pytest.mark.parametrize(
    "args,message",
    [
        (
            ["--model", "gpt2", "--seq-len", "32,2048"],
            "Error: --seq-len 2048 is too large for gpt2: the maximum is 1024\n",
        ),
        (
            ["--model", "gpt2", "--model-size", "tiny", "--seq-len", "64,300"],
            "Error: --seq-len 300 is too large for gpt2: the maximum is 256\n",
        ),
        (["--model", "gpt2", "--seq-len", "512"], "Error: --seq-len 512 is too large for gpt2: the maximum is 256\n"),
        (["--model", "gpt2", "--seq-len", "0"], "Error: --seq-len value '0' must be a positive sequence length\n"),
        (["--model", "gpt2", "--seq-len", "32,-8"], "Error: --seq-len value '-8' must be a positive sequence length\n"),
        (
            ["--model", "gpt2", "--seq-len", "32,,64"],
            "Error: --seq-len '32,,64' has an empty entry: give a comma list such as 1,2,4\n",
        ),
        (["--model", "gpt2", "--seq-len", "32,32"], "Error: --seq-len value '32' is duplicated\n"),
        (
            ["--model", "resnet18", "--seq-len", "32,64"],
            "Error: --seq-len does not apply to resnet18 (an image model): use --image-size\n",
        ),
    ],
)
def test_bad_sequence_lengths_exit_2_with_one_line(capsys, args, message):
    code, out, err = _cli(capsys, ["scale", "--gpus", "1", "--strategy", "ddp", "--device", "cpu", *args])
    assert (code, err, out) == (2, message, "")


@pytest.mark.parametrize(
    "command",
    [
        ["fit", "--strategy", "ddp", "--gpus", "1"],
        ["verify", "--strategy", "ddp", "--gpus", "2"],
        ["run", "--strategy", "ddp", "--gpus", "2"],
    ],
)
def test_a_list_where_one_length_is_taken_exits_2(capsys, command):
    code, out, err = _cli(capsys, [*command, "--model", "gpt2", "--device", "cpu", "--seq-len", "32,64"])
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and "--seq-len" in err and ("one sequence length" in err or "takes one value" in err)


def _record(seq: int, throughput: float) -> dict:
    return {
        "strategy": "ddp",
        "world_size": 2,
        "status": "ok",
        "device": "cpu",
        "throughput": throughput,
        "mfu": 0.125,
        "config": {"model": "gpt2", "seq_len": seq, "per_device_batch": 4, "world_size": 2},
    }


def test_json_gives_tokens_per_second_in_total_and_per_device_with_the_mfu():
    doc = json.loads(json_document([_record(64, 10.0), {"strategy": "ddp", "world_size": 2, "config": {}}]))
    assert doc[0]["tokens_per_s"] == 640.0 and doc[0]["tokens_per_s_per_device"] == 320.0
    assert doc[0]["seq_len"] == 64 and doc[0]["mfu"] == 0.125
    assert "tokens_per_s" not in doc[1]  # an image model's point has no tokens
    assert token_fields({"config": {"model": "resnet50"}, "throughput": 5.0}) == {}


def test_the_table_names_the_sequence_length_when_there_are_several():
    console = Console(width=200, record=True)
    console.print(results_table([_record(32, 20.0), _record(64, 10.0)]))
    text = console.export_text()
    assert "ddp seq 32" in text and "ddp seq 64" in text
    console = Console(width=200, record=True)
    console.print(results_table([_record(32, 20.0)]))
    assert "seq 32" not in console.export_text()


def test_the_reports_batch_tables_keep_each_sequence_length_apart(tmp_path):
    from distbench.analysis import load_sweep
    from distbench.report.tables import batch_fit_table, batch_series, batch_table
    from distbench.results.store import Store
    from tests.builders import add_sweep, point

    def gpt2(batch, seq, step=None, status="ok"):
        return point("ddp", 2, step, model="gpt2", batch=batch, status=status, config={"seq_len": seq})

    # at seq 32 batches 2 and 4 fit; at seq 64 batch 4 runs out of memory
    records = [gpt2(2, 32, 0.1), gpt2(4, 32, 0.15), gpt2(2, 64, 0.2), gpt2(4, 64, status="oom")]
    with Store(tmp_path / "r.db") as store:
        sweep = load_sweep(store, add_sweep(store, records))
    series = batch_series(sweep)
    assert {label: [r["config"]["per_device_batch"] for r in pts] for label, pts in series.items()} == {
        "ddp N=2 seq 32": [2, 4],
        "ddp N=2 seq 64": [2, 4],
    }
    assert batch_fit_table(sweep)[1] == [["ddp N=2 seq 32", "4", "-"], ["ddp N=2 seq 64", "2", "4"]]
    rows = batch_table(sweep)[1]
    assert [row[:3] for row in rows] == [
        ["ddp N=2 seq 32", "2", "ok"],
        ["ddp N=2 seq 32", "4", "ok"],
        ["ddp N=2 seq 64", "2", "ok"],
        ["ddp N=2 seq 64", "4", "oom"],
    ]
    assert [row[3] for row in rows] == ["40.00", "53.33", "20.00", "-"]  # samples/s: 2 devices x batch / step


def test_compare_keys_name_the_sequence_length():
    from distbench.analysis.compare import key_label
    from distbench.analysis.records import record_key

    short, long = record_key(_record(32, 20.0)), record_key(_record(64, 10.0))
    assert short != long
    assert "seq=32" in key_label(short) and "seq=64" in key_label(long)


@pytest.mark.slow
def test_a_sweep_over_two_lengths_records_both_and_resume_keeps_them(capsys, tmp_path):
    pytest.importorskip("torch")
    db = str(tmp_path / "r.db")
    args = ["scale", "--model", "gpt2", "--seq-len", "16,32", "--gpus", "1", "--strategy", "ddp", "--device", "cpu"]
    args += ["--batch-size", "2", "--steps", "3", "--warmup", "1", "--target-ci", "0", "--results", db]
    assert main(args) == 0
    out = " ".join(capsys.readouterr().out.split())  # lines wrap at the width
    for length in (16, 32):  # each length's wrapper cost against its own baseline, named by its length
        assert re.search(
            rf"1-device wrapper cost: ddp at N=1 \(seq {length}\) is \d+\.\d% (slower|faster) than", out
        ), out
    assert main(["results", "show", "latest", "--results", db, "--format", "json"]) == 0
    points = json.loads(capsys.readouterr().out)["points"]
    ddp = {p["config"]["seq_len"]: p for p in points if p["strategy"] == "ddp"}
    assert set(ddp) == {16, 32} and all(p["status"] == "ok" for p in ddp.values())
    assert all(p["tokens_per_s"] == pytest.approx(p["throughput"] * q) for q, p in ddp.items())
    assert main(["scale", "--resume", "latest", "--results", db]) == 0
    err = capsys.readouterr().err
    assert "ddp N=1 seq 16: kept from sweep" in err and "ddp N=1 seq 32: kept from sweep" in err
