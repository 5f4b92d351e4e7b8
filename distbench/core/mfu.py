"""Model FLOPs utilization (MFU): the FLOP/s a point achieved per device against the device's peak.

GPUs: NVIDIA's published dense peaks per GPU model, form factor and math type, found from the device
name. A GPU or math type not in the table gets no MFU and the record says why: never a fallback peak.
CPU workers: the peak is measured, a float32 GEMM on the same threads per worker, run by every worker
at once after the timed loop (measure_cpu_gemm).

Achieved FLOP/s = the model's FLOPs (matmuls, convolutions and attention; a multiply-add is 2 FLOPs)
x 3 for a training step (the usual MFU convention: backward ~ 2x forward) x samples/s / devices:
elementwise work, recomputation and the optimizer are not counted.
"""

from __future__ import annotations

import math
import re
import statistics
import time
from dataclasses import dataclass

TRAIN_FLOPS_PER_FORWARD = 3
"""Training-step FLOPs per forward FLOP: forward + backward (gradients for inputs and weights)."""


@dataclass(frozen=True)
class GpuPeak:
    label: str
    tflops: dict
    """Dense (no structured sparsity) peak TFLOP/s per math type: 'fp32' on CUDA cores, 'tf32', 'fp16'
    and 'bf16' on tensor cores (FP32 accumulate). A math type left out has no published peak."""
    source: str
    tf32_units: bool = True
    """False before Ampere: the TF32 setting changes nothing there and float32 runs on CUDA cores."""


_V100 = "https://images.nvidia.com/content/technologies/volta/pdf/volta-v100-datasheet-update-us-1165301-r5.pdf"
_A100 = (
    "https://www.nvidia.com/content/dam/en-zz/Solutions/Data-Center/a100/pdf/"
    "nvidia-a100-datasheet-us-nvidia-1758950-r4-web.pdf"
)
_H100 = "https://resources.nvidia.com/en-us-tensor-core/nvidia-tensor-core-gpu-datasheet"
_H200 = "https://nvdam.widen.net/s/nb5zzzsjdf/hpc-datasheet-sc23-h200-datasheet-3002446"
_L40S = "https://resources.nvidia.com/en-us-l40s/l40s-datasheet-28413"
_A10 = "https://www.nvidia.com/content/dam/en-zz/Solutions/Data-Center/a10/pdf/datasheet-new/nvidia-a10-datasheet.pdf"
_T4 = "https://www.nvidia.com/content/dam/en-zz/Solutions/Data-Center/tesla-t4/t4-tensor-core-datasheet-951643.pdf"
_ADA = "https://images.nvidia.com/aem-dam/Solutions/geforce/ada/nvidia-ada-gpu-architecture.pdf"
_L4 = "https://www.nvidia.com/en-us/data-center/l4/"
_HALF = "the datasheet's figure is with 2:4 sparsity; dense is half of it, as its footnote says"

GPU_PEAKS: dict[str, GpuPeak] = {
    # Volta: FP32 on CUDA cores and FP16 tensor cores only (no TF32, no BF16).
    "V100 SXM2": GpuPeak("Tesla V100 SXM2", {"fp32": 15.7, "fp16": 125.0}, _V100, tf32_units=False),
    "V100 PCIe": GpuPeak("Tesla V100 PCIe", {"fp32": 14.0, "fp16": 112.0}, _V100, tf32_units=False),
    "V100S PCIe": GpuPeak("Tesla V100S PCIe", {"fp32": 16.4, "fp16": 130.0}, _V100, tf32_units=False),
    # Ampere A100: the datasheet gives the same peaks for SXM4 and PCIe, 40 GB and 80 GB.
    "A100 SXM": GpuPeak("A100 SXM4", {"fp32": 19.5, "tf32": 156.0, "fp16": 312.0, "bf16": 312.0}, _A100),
    "A100 PCIe": GpuPeak("A100 PCIe", {"fp32": 19.5, "tf32": 156.0, "fp16": 312.0, "bf16": 312.0}, _A100),
    # Hopper: datasheet tensor figures are with sparsity (H100 SXM TF32 989, BF16/FP16 1,979;
    # H100 PCIe 756 / 1,513; H100 NVL and H200 NVL 835 / 1,671); dense = half (_HALF).
    "H100 SXM": GpuPeak("H100 SXM5", {"fp32": 67.0, "tf32": 494.5, "fp16": 989.5, "bf16": 989.5}, f"{_H100} ({_HALF})"),
    "H100 PCIe": GpuPeak(
        "H100 PCIe", {"fp32": 51.0, "tf32": 378.0, "fp16": 756.5, "bf16": 756.5}, f"{_H100} ({_HALF})"
    ),
    "H100 NVL": GpuPeak("H100 NVL", {"fp32": 60.0, "tf32": 417.5, "fp16": 835.5, "bf16": 835.5}, f"{_H100} ({_HALF})"),
    "H200 SXM": GpuPeak("H200 SXM", {"fp32": 67.0, "tf32": 494.5, "fp16": 989.5, "bf16": 989.5}, f"{_H200} ({_HALF})"),
    "H200 NVL": GpuPeak("H200 NVL", {"fp32": 60.0, "tf32": 417.5, "fp16": 835.5, "bf16": 835.5}, f"{_H200} ({_HALF})"),
    # Ada and Ampere PCIe cards: the datasheets list dense | sparse; dense taken.
    "L40S": GpuPeak("L40S", {"fp32": 91.6, "tf32": 183.0, "fp16": 362.05, "bf16": 362.05}, _L40S),
    "A10": GpuPeak("A10", {"fp32": 31.2, "tf32": 62.5, "fp16": 125.0, "bf16": 125.0}, _A10),
    # Ada L4: the tensor figures (TF32 120, FP16/BF16 242) are with sparsity only.
    "L4": GpuPeak("L4", {"fp32": 30.3, "tf32": 60.0, "fp16": 121.0, "bf16": 121.0}, f"{_L4} ({_HALF})"),
    # Turing T4: FP32 and FP16 tensor cores ("mixed precision FP16/FP32") only.
    "T4": GpuPeak("Tesla T4", {"fp32": 8.1, "fp16": 65.0}, _T4, tf32_units=False),
    # GeForce RTX 4090 (Ada whitepaper, appendix table): tensor cores with FP32 accumulate, which is
    # what autocast uses, run at half the FP16-accumulate rate on GeForce cards.
    "RTX 4090": GpuPeak(
        "GeForce RTX 4090",
        {"fp32": 82.6, "tf32": 82.6, "fp16": 165.2, "bf16": 165.2},
        f"{_ADA} (dense, FP32 accumulate)",
    ),
}

_NAMES: tuple[tuple[str, str], ...] = (
    # NVML / torch.cuda.get_device_name spellings, lower-cased. Only names that say the form factor
    # (or have one) match: e.g. 'Tesla V100-SXM3-32GB' (DGX-2 clocks) or 'NVIDIA A10G' are not in the table.
    (r"\bv100-sxm2\b", "V100 SXM2"),
    (r"\bv100-pcie\b", "V100 PCIe"),
    (r"\bv100s-pcie\b", "V100S PCIe"),
    (r"\ba100-sxm", "A100 SXM"),
    (r"\ba100(-| \d+gb )pcie\b", "A100 PCIe"),
    (r"\bh100 80gb hbm3$|\bh100 sxm", "H100 SXM"),  # 'NVIDIA H100 80GB HBM3' is the SXM5 board
    (r"\bh100 pcie$", "H100 PCIe"),
    (r"\bh100 nvl$", "H100 NVL"),
    (r"(?<!g)\bh200$|(?<!g)\bh200 sxm", "H200 SXM"),  # 'NVIDIA H200'; not GH200
    (r"(?<!g)\bh200 nvl$", "H200 NVL"),
    (r"\bl40s$", "L40S"),
    (r"^(nvidia )?a10$", "A10"),
    (r"^(nvidia )?l4$", "L4"),
    (r"^(tesla|nvidia) t4$", "T4"),
    (r"\brtx 4090$", "RTX 4090"),
)


def identify_gpu(name: str | None) -> str | None:
    """The GPU_PEAKS key of a device name as NVML reports it, or None when it is not in the table."""
    text = " ".join(str(name or "").lower().split())
    return next((key for pattern, key in _NAMES if re.search(pattern, text)), None)


def math_type(precision: str, tf32: bool | None) -> str:
    """The peak a point's math is compared with: amp -> fp16, bf16 -> bf16, fp32 -> tf32 if TF32 was on."""
    return {"amp": "fp16", "bf16": "bf16"}.get(precision, "tf32" if tf32 else "fp32")


def gpu_peak(name: str | None, kind: str) -> tuple[float | None, str]:
    """(peak FLOP/s of one GPU for this math type, where it comes from) or (None, why there is none)."""
    key = identify_gpu(name)
    if key is None:
        return None, f"no peak known for {name or 'an unnamed GPU'!r} (not in distbench.core.mfu.GPU_PEAKS)"
    entry = GPU_PEAKS[key]
    if kind == "tf32" and not entry.tf32_units:
        kind = "fp32"
    if kind not in entry.tflops:
        return None, f"{entry.label} has no published dense {kind} peak"
    return entry.tflops[kind] * 1e12, f"{entry.label} dense {kind} peak {entry.tflops[kind]:g} TFLOP/s ({entry.source})"


def train_flops_per_sample(config: dict) -> tuple[int | None, str]:
    """Model FLOPs of one sample's training step for a point's config, or (None, why). Decoders (gpt2,
    llama) use the standard count per token, x the sequence length (models.decoders.train_flops_per_token)."""
    from distbench.models import decoders

    if config.get("model") in decoders.FAMILIES:
        try:
            shape = decoders.decoder_shape(config["model"], config.get("model_size"))
        except ValueError as exc:
            return None, f"model FLOPs not counted: {exc}"
        seq = config.get("seq_len") or shape.max_positions
        return seq * decoders.train_flops_per_token(shape, seq), (
            f"(6 x {decoders.matmul_parameters(shape):,} matmul parameters + 12 x {shape.layers} layers x "
            f"{shape.hidden} hidden x {seq} sequence) FLOPs per token x {seq} tokens per sample "
            "(PaLM appendix B; recomputation not counted)"
        )
    try:
        from distbench.models.torch_models import forward_flops_per_sample  # cached per arguments

        forward = forward_flops_per_sample(
            config["model"],
            config.get("image_size"),
            config.get("seq_len"),
            num_classes=config.get("num_classes"),
            model_size=config.get("model_size"),
        )
    except ImportError as exc:
        return None, f"model FLOPs are counted with torch, which is not installed ({exc.name})"
    except (KeyError, ValueError) as exc:
        return None, f"model FLOPs not counted: {exc}"
    return TRAIN_FLOPS_PER_FORWARD * forward, (
        "3 x forward FLOPs per sample (matmuls, convolutions and attention; multiply-add = 2)"
    )


def mfu_fields(record: dict) -> dict:
    """achieved_flops_per_device (FLOP/s), peak_flops_per_device, mfu (a fraction) and mfu_note (where
    the peak comes from, or why there is no MFU) for a successful point: the record's `mfu` build stage
    (distbench.results.record.build_record merges it; the record is read, not changed)."""
    out = dict.fromkeys(
        ("model_flops_per_sample", "achieved_flops_per_device", "peak_flops_per_device", "mfu", "mfu_note")
    )
    config = record.get("config") or {}
    throughput = record.get("throughput")
    if record.get("status") != "ok" or not throughput:
        out["mfu_note"] = "no measured throughput"
        return out
    flops, how = train_flops_per_sample(config)
    if flops is None:
        out["mfu_note"] = how
        return out
    achieved = throughput * flops / (record.get("world_size") or 1)
    out.update(model_flops_per_sample=flops, achieved_flops_per_device=achieved)
    if record.get("device") == "cuda":
        tf32 = (record.get("math_mode") or {}).get("tf32")
        name = record.get("gpu_name") or (record.get("runtime") or {}).get("gpu_name")
        key = identify_gpu(name)
        precision = config.get("precision", "fp32")
        if precision == "fp32" and not isinstance(tf32, bool) and key and GPU_PEAKS[key].tf32_units:
            # float32 on a GPU with TF32 units: the peak is 8x apart between the two, so never guess
            peak = None
            note = (
                f"TF32 {'not recorded' if tf32 is None else repr(tf32)} for this point: "
                "no peak to compare float32 math with"
            )
        else:
            peak, note = gpu_peak(name, math_type(precision, tf32 is True))
    else:
        gemm = record.get("cpu_gemm_peak") or {}
        peak = gemm.get("flops_per_s")
        note = (
            f"measured float32 GEMM peak: {gemm['size']}x{gemm['size']} torch.matmul on "
            f"{gemm['threads']} thread(s) per worker, every worker at once"
            if peak
            else f"no CPU GEMM peak: {gemm.get('error') or 'not measured for this point'}"
        )
        if peak and config.get("precision") == "bf16":
            note += " (the point ran bfloat16 autocast: compared with the float32 GEMM peak)"
    out.update(peak_flops_per_device=peak, mfu=achieved / peak if peak else None, mfu_note=f"{how}; {note}")
    return out


GEMM_SIZE = 1024
GEMM_SECONDS = 0.3


def physical_cores(logical: int, machine_logical: int | None = None, machine_physical: int | None = None) -> int:
    """Physical cores among `logical` usable CPUs (the affinity mask's): with SMT two logical CPUs share one
    core's execution units, so perfect scaling is counted on cores, not hyperthreads. psutil's machine-wide
    counts scale the mask (cores are assumed evenly threaded); an unknown count keeps `logical`."""
    if machine_logical is None or machine_physical is None:
        import psutil

        machine_logical, machine_physical = psutil.cpu_count(logical=True), psutil.cpu_count(logical=False)
    if not machine_logical or not machine_physical:
        return max(1, logical)
    return max(1, round(logical * machine_physical / machine_logical))


def gemm_size(threads: int) -> int:
    """The GEMM's side: GEMM_SIZE up to 4 threads, then grown so each thread keeps at least a 512 x 512
    share of the output (a 1024 GEMM split over many threads runs below their peak, overstating MFU)."""
    return GEMM_SIZE * math.ceil(math.sqrt(max(threads, 1) / 4))


def measure_cpu_gemm(threads: int, gather, size: int | None = None, seconds: float = GEMM_SECONDS) -> dict:
    """The float32 GEMM peak of one CPU worker: size x size torch.matmul on `threads` threads, repeated
    for about `seconds` after one warmup, best repeat kept. Every rank runs it at once, as they trained
    (gather: the strategy's collective, a barrier and to collect the results). Returns the median of
    the ranks' peaks with size, threads, repeats and seconds; or {'error': ...} without torch."""
    try:
        import torch
    except ImportError:  # then no rank has it: none of them reaches the collectives below
        return {"error": "torch is not installed"}
    size = size or gemm_size(threads)
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    a, b = (torch.rand(size, size, dtype=torch.float32) for _ in range(2))
    torch.matmul(a, b)  # warmup: allocation, thread pool start
    gather(None)
    times: list[float] = []
    start = time.perf_counter()
    while len(times) < 3 or time.perf_counter() - start < seconds:
        t0 = time.perf_counter()
        torch.matmul(a, b)
        times.append(time.perf_counter() - t0)
    torch.set_num_threads(before)
    mine = {"flops_per_s": 2 * size**3 / min(times), "seconds": sum(times), "repeats": len(times)}
    return {"size": size, "dtype": "float32", "threads": threads, "library": "torch.matmul", **_combine(gather(mine))}


def _combine(per_rank: list[dict]) -> dict:
    peaks = [r["flops_per_s"] for r in per_rank if r.get("flops_per_s")]
    if not peaks:
        return {}
    return {
        "flops_per_s": statistics.median(peaks),
        "per_rank_flops_per_s": peaks,
        "seconds": max(r["seconds"] for r in per_rank),
        "repeats": min(r["repeats"] for r in per_rank),
    }
