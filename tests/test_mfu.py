"""MFU (issue 10 item 11): the GPU peak table looked up by the names NVML reports, no MFU for an
unknown GPU, and on CPU workers a measured GEMM peak with an MFU between 0 and 1 on a real run."""

from __future__ import annotations

import pytest

from distbench.core import mfu
from tests.builders import point_config
from tests.conftest import require, run_json


@pytest.mark.parametrize(
    "name,key",
    [
        ("NVIDIA H100 80GB HBM3", "H100 SXM"),
        ("NVIDIA H100 PCIe", "H100 PCIe"),
        ("NVIDIA H100 NVL", "H100 NVL"),
        ("NVIDIA H200", "H200 SXM"),
        ("NVIDIA H200 NVL", "H200 NVL"),
        ("NVIDIA A100-SXM4-40GB", "A100 SXM"),
        ("NVIDIA A100-SXM4-80GB", "A100 SXM"),
        ("A100-SXM4-40GB", "A100 SXM"),
        ("NVIDIA A100-PCIE-40GB", "A100 PCIe"),
        ("NVIDIA A100 80GB PCIe", "A100 PCIe"),
        ("Tesla V100-SXM2-16GB", "V100 SXM2"),
        ("Tesla V100-SXM2-32GB", "V100 SXM2"),
        ("Tesla V100-PCIE-32GB", "V100 PCIe"),
        ("Tesla V100S-PCIE-32GB", "V100S PCIe"),
        ("NVIDIA L40S", "L40S"),
        ("NVIDIA A10", "A10"),
        ("NVIDIA L4", "L4"),
        ("Tesla T4", "T4"),
        ("NVIDIA GeForce RTX 4090", "RTX 4090"),
    ],
)
def test_nvml_names_find_their_model_and_form_factor(name, key):
    assert mfu.identify_gpu(name) == key


@pytest.mark.parametrize(
    "name",
    [
        "NVIDIA GH200 480GB",
        "NVIDIA A10G",
        "NVIDIA L40",
        "NVIDIA H100",
        "Tesla V100-SXM3-32GB",
        "NVIDIA GeForce RTX 4090 D",
        "NVIDIA B200",
        "",
        None,
    ],
)
def test_unknown_or_ambiguous_gpus_are_not_guessed(name):
    assert mfu.identify_gpu(name) is None
    peak, why = mfu.gpu_peak(name, "bf16")
    assert peak is None and "no peak known" in why


def test_peaks_by_math_type_with_their_source():
    peak, source = mfu.gpu_peak("NVIDIA H100 80GB HBM3", "tf32")
    assert peak == pytest.approx(494.5e12) and "dense" in source and "https://" in source
    assert mfu.gpu_peak("NVIDIA H100 PCIe", "bf16")[0] == pytest.approx(756.5e12)
    assert mfu.gpu_peak("NVIDIA A100-PCIE-40GB", "fp32")[0] == pytest.approx(19.5e12)
    # L4: the datasheet's tensor figures (TF32 120, BF16 242 TFLOP/s) are with sparsity
    assert mfu.gpu_peak("NVIDIA L4", "tf32")[0] == pytest.approx(60e12)
    assert mfu.gpu_peak("NVIDIA L4", "bf16")[0] == pytest.approx(121e12)
    assert mfu.gpu_peak("NVIDIA L4", "fp32")[0] == pytest.approx(30.3e12)
    # TF32 changes nothing on a V100 (no TF32 units): its float32 peak; bfloat16 has no published peak there
    assert mfu.gpu_peak("Tesla V100-SXM2-16GB", "tf32")[0] == pytest.approx(15.7e12)
    peak, why = mfu.gpu_peak("Tesla V100-SXM2-16GB", "bf16")
    assert peak is None and "no published dense bf16 peak" in why
    assert [mfu.math_type(p, t) for p, t in (("fp32", True), ("fp32", False), ("amp", True), ("bf16", False))] == [
        "tf32",
        "fp32",
        "fp16",
        "bf16",
    ]
    for entry in mfu.GPU_PEAKS.values():  # every number cites where it comes from
        assert entry.source.startswith("https://") and set(entry.tflops) <= {"fp32", "tf32", "fp16", "bf16"}


def _gpu_record(name, throughput=1000.0, precision="fp32", tf32=True):
    cfg = point_config(
        "ddp", 2, device="cuda", per_device_batch=32, image_size=32, precision=precision, tf32=bool(tf32)
    ).to_dict()
    return {
        "status": "ok",
        "device": "cuda",
        "world_size": 2,
        "throughput": throughput,
        "config": cfg,
        "math_mode": {"tf32": tf32},
        "runtime": {"gpu_name": name},
    }


@require("torch")
def test_gpu_mfu_from_counted_flops_and_no_mfu_for_an_unknown_gpu():
    from distbench.models.torch_models import forward_flops_per_sample

    fields = mfu.mfu_fields(_gpu_record("NVIDIA A100-SXM4-80GB"))
    flops = 3 * forward_flops_per_sample("resnet18", 32, None)
    assert fields["model_flops_per_sample"] == flops
    assert fields["achieved_flops_per_device"] == pytest.approx(1000.0 * flops / 2)
    assert fields["mfu"] == pytest.approx(1000.0 * flops / 2 / 156e12)  # TF32 on: the TF32 peak
    assert "A100 SXM4 dense tf32" in fields["mfu_note"]
    off = mfu.mfu_fields(_gpu_record("NVIDIA A100-SXM4-80GB", tf32=False))
    assert off["mfu"] == pytest.approx(1000.0 * flops / 2 / 19.5e12)
    unknown = mfu.mfu_fields(_gpu_record("NVIDIA B200"))
    assert unknown["mfu"] is None and unknown["peak_flops_per_device"] is None
    assert unknown["achieved_flops_per_device"] == pytest.approx(1000.0 * flops / 2)
    assert "no peak known for 'NVIDIA B200'" in unknown["mfu_note"]


@require("torch")
def test_float32_mfu_needs_the_recorded_tf32_setting():
    # TF32 and float32 peaks are 8x apart on an A100: a point whose TF32 setting is not recorded (or
    # differs between matmuls and convolutions) gets no MFU rather than the float32 one
    for tf32 in (None, "matmul on, convolutions off"):
        fields = mfu.mfu_fields(_gpu_record("NVIDIA A100-SXM4-80GB", tf32=tf32))
        assert fields["mfu"] is None and fields["peak_flops_per_device"] is None
        assert "no peak to compare float32 math with" in fields["mfu_note"]
        assert fields["achieved_flops_per_device"] > 0
    # without TF32 units the setting changes nothing: the float32 peak
    v100 = mfu.mfu_fields(_gpu_record("Tesla V100-SXM2-16GB", tf32=None))
    assert v100["peak_flops_per_device"] == pytest.approx(15.7e12)
    # bfloat16 does not depend on it
    bf16 = mfu.mfu_fields(_gpu_record("NVIDIA A100-SXM4-80GB", precision="bf16", tf32=None))
    assert bf16["peak_flops_per_device"] == pytest.approx(312e12)


def test_cpu_gemm_grows_with_the_threads_so_each_keeps_a_512_square_share():
    assert [mfu.gemm_size(t) for t in (1, 2, 4, 5, 16, 17, 64)] == [1024, 1024, 1024, 2048, 2048, 3072, 4096]
    for t in (1, 3, 8, 24, 64, 100):
        assert mfu.gemm_size(t) ** 2 / t >= 512**2


@require("torch")
def test_cpu_gemm_peak_is_measured_on_the_given_threads():
    import torch

    before = torch.get_num_threads()
    got = mfu.measure_cpu_gemm(1, lambda obj: [obj], size=256, seconds=0.05)
    assert torch.get_num_threads() == before
    assert got["threads"] == 1 and got["size"] == 256 and got["dtype"] == "float32"
    assert got["repeats"] >= 3 and got["seconds"] > 0 and got["flops_per_s"] > 1e8
    assert got["per_rank_flops_per_s"] == [got["flops_per_s"]]


@pytest.mark.slow
@require("torch")
def test_cpu_mfu_between_0_and_1_on_a_real_run(tmp_path):
    tiny = [
        "--model",
        "resnet18",
        "--image-size",
        "32",
        "--batch-size",
        "2",
        "--steps",
        "3",
        "--warmup",
        "1",
        "--target-ci",
        "0",
        "--no-comm",
        "--telemetry-interval",
        "0",
        "--timeout",
        "300",
        "--device",
        "cpu",
        "--results",
        str(tmp_path / "r.db"),
    ]
    _, points = run_json(["run", "--strategy", "ddp", "--gpus", "2", *tiny])
    (p,) = points
    gemm = p["cpu_gemm_peak"]
    threads = p["config"]["threads_per_worker"]
    assert gemm["size"] == mfu.gemm_size(threads) and gemm["threads"] == threads
    assert len(gemm["per_rank_flops_per_s"]) == 2 and gemm["seconds"] > 0
    assert p["peak_flops_per_device"] == gemm["flops_per_s"]
    assert p["achieved_flops_per_device"] == pytest.approx(p["throughput"] * p["model_flops_per_sample"] / 2)
    assert 0 < p["mfu"] < 1, p["mfu_note"]
    assert "measured float32 GEMM peak" in p["mfu_note"]
