"""Prediction of the decoders: their bucket layout from models/decoders.py (gradient tensors in backward
order, DDP's 1 MiB + 25 MiB rule), ready times from their per-layer FLOPs, and fsdp's 1.5x traffic."""

from __future__ import annotations

import json

import pytest

from distbench.cli import main
from distbench.models import decoders
from distbench.predict import layers
from tests.test_predict import write_csv

DDP_CAP = 25 * 2**20


@pytest.mark.parametrize("family,size", [("gpt2", "124m"), ("llama", "125m"), ("llama", "350m"), ("gpt2", "tiny")])
def test_the_timeline_holds_the_decoders_buckets(family, size):
    shape = decoders.decoder_shape(family, size)
    buckets = decoders.gradient_buckets(shape)
    tl = layers.decoder_timeline(family, size, DDP_CAP, seq_len=64)
    tl.check()
    assert tl.buckets == len(buckets)
    assert tl.shares == pytest.approx([b / sum(buckets) for b in buckets])
    assert list(tl.ready) == sorted(tl.ready) and tl.ready[-1] == pytest.approx(1.0)
    assert f"{family} {size}" in tl.source
    one = layers.flops_timeline(family, None, seq_len=64, model_size=size)
    assert one.buckets == 1  # no bucket size: one message


def test_longer_sequences_weigh_the_blocks_more():
    """The attention term (4 d T per token and layer) grows with T, the output projection's does not: the
    first block gradients are ready later in backward at T=1024 than at T=64 for the same buckets."""
    short = layers.decoder_timeline("gpt2", "124m", DDP_CAP, seq_len=64)
    long = layers.decoder_timeline("gpt2", "124m", DDP_CAP, seq_len=1024)
    assert short.shares == long.shares and long.ready[1] < short.ready[1]


def test_predict_on_a_gpt2_sweep_reads_its_buckets_and_fsdps_traffic(tmp_path, capsys):
    params = decoders.parameter_count(decoders.decoder_shape("gpt2", "124m"))
    assert params == 124_439_808
    grad = 4 * params
    header = "strategy,model,model_size,seq_len,world_size,per_device_batch,throughput,grad_bytes"
    rows = [f"{s},gpt2,124m,1024,1,8,40,{grad}" for s in ("ddp", "fsdp")]
    csv = write_csv(tmp_path / "gpt2.csv", rows, header)
    base = ["predict", "--csv", csv, "--link", "nvlink3", "--gpus", "2,8", "--gpus-per-node", "8"]
    assert main([*base, "--format", "json"]) == 0
    doc = {s["strategy"]: s for s in json.loads(capsys.readouterr().out)["series"]}
    ddp, fsdp = doc["ddp"]["parameters"], doc["fsdp"]["parameters"]
    assert ddp["buckets"] == len(decoders.gradient_buckets(decoders.decoder_shape("gpt2", "124m")))
    # the traffic figure: gradient bytes x the strategy's factor (1 for DDP; FSDP 1.5: all-gather in forward,
    # all-gather in backward, reduce-scatter)
    assert ddp["traffic_factor"] == 1.0 and fsdp["traffic_factor"] == 1.5
    assert ddp["bucket_mib"] * ddp["buckets"] == pytest.approx(grad / 2**20)
    assert fsdp["bucket_mib"] * fsdp["buckets"] == pytest.approx(1.5 * grad / 2**20)
    comm = {s: {p["n"]: p["exposed_comm_s"] for p in doc[s]["predicted"]} for s in doc}
    assert all(comm["fsdp"][n] > comm["ddp"][n] > 0 for n in (2, 8))
    assert main(base) == 0
    assert "ready times: model FLOPs (gpt2 124m" in " ".join(capsys.readouterr().out.split())
