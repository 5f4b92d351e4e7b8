"""On-disk synthetic datasets for `--data disk`: written once to a cache folder, then read every step
through a real input pipeline (DataLoader / tf.data), so users see when the input pipeline limits scaling.

A dataset folder: meta.json (shapes, dtypes, sample count); x/000000.bin ... (one raw input per file:
uint8 HWC images like decoded JPEGs, which the pipeline converts and normalizes, or int32 tokens); y.bin
(all targets: int32 class / token ids, or float16 maps).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
from pathlib import Path

import numpy as np

from distbench.models.specs import get_spec

DEFAULT_ROOT = Path(os.environ.get("DISTBENCH_DATA", Path.home() / ".cache" / "distbench" / "data"))
FORMAT_VERSION = 1


def dataset_key(model: str, image_size: int | None, seq_len: int | None, num_classes: int, samples: int) -> str:
    spec = get_spec(model)
    shape = f"s{seq_len or spec.default_seq_len}" if spec.kind == "tokens" else f"i{image_size}"
    raw = f"v{FORMAT_VERSION}-{spec.kind}-{spec.loss}-{model}-{shape}-c{num_classes}-n{samples}"
    return f"{model}-{shape}-c{num_classes}-n{samples}-{hashlib.sha1(raw.encode()).hexdigest()[:8]}"


def ensure_dataset(
    model: str,
    *,
    image_size: int | None,
    seq_len: int | None,
    num_classes: int,
    samples: int = 512,
    root: Path | str = DEFAULT_ROOT,
    seed: int = 0,
) -> Path:
    """Write the dataset once (atomically: a half-written folder is never used) and return its path."""
    spec = get_spec(model)
    folder = Path(root) / dataset_key(model, image_size, seq_len, num_classes, samples)
    if (folder / "meta.json").exists():
        return folder
    tmp = folder.with_name(folder.name + f".tmp{os.getpid()}")
    (tmp / "x").mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    if spec.kind == "tokens":
        seq = seq_len or spec.default_seq_len
        xs = rng.integers(0, spec.vocab_size, size=(samples, seq), dtype=np.int32)
        if spec.loss == "lm_cross_entropy":
            y = rng.integers(0, spec.vocab_size, size=(samples, seq), dtype=np.int32)
        else:
            y = rng.integers(0, num_classes, size=(samples,), dtype=np.int32)
    else:
        xs = rng.integers(0, 256, size=(samples, image_size, image_size, spec.channels), dtype=np.uint8)
        if spec.kind == "keypoints":
            side = image_size // spec.output_stride
            y = rng.random((samples, side, side, spec.num_classes), dtype=np.float32).astype(np.float16)
        else:
            y = rng.integers(0, num_classes, size=(samples,), dtype=np.int32)
    for i, x in enumerate(xs):
        x.tofile(tmp / "x" / f"{i:06d}.bin")
    y.tofile(tmp / "y.bin")
    meta = {
        "format": FORMAT_VERSION,
        "model": model,
        "kind": spec.kind,
        "samples": samples,
        "x_shape": list(xs.shape[1:]),
        "x_dtype": str(xs.dtype),
        "y_shape": list(y.shape[1:]),
        "y_dtype": str(y.dtype),
    }
    (tmp / "meta.json").write_text(json.dumps(meta, indent=1))
    try:
        os.rename(tmp, folder)
    except OSError:  # another process wrote it first
        shutil.rmtree(tmp, ignore_errors=True)
    return folder


def load_meta(folder: str | Path) -> dict:
    return json.loads((Path(folder) / "meta.json").read_text())


def sample_paths(folder: str | Path) -> list[str]:
    meta = load_meta(folder)
    return [str(Path(folder) / "x" / f"{i:06d}.bin") for i in range(meta["samples"])]


def load_targets(folder: str | Path) -> np.ndarray:
    meta = load_meta(folder)
    return np.fromfile(Path(folder) / "y.bin", dtype=meta["y_dtype"]).reshape(meta["samples"], *meta["y_shape"])


def page_cache_status(folder: str | Path) -> dict:
    """Whether reading the dataset is likely served from the page cache rather than the disk: its size
    against the memory available now, and how much of it is resident now where `fincore` exists."""
    import psutil

    files = [*sample_paths(folder), str(Path(folder) / "y.bin")]
    sizes = [os.path.getsize(f) for f in files]
    size = sum(sizes)
    available = psutil.virtual_memory().available
    resident = _resident_bytes(files, sizes)
    fits = size < available
    if resident is not None:
        frac = resident / size if size else 1.0
        verdict = "page cache" if frac >= 0.99 else "likely page cache after the first epoch" if fits else "disk"
        how = f"{frac:.0%} of its {size / 1e6:.1f} MB resident in the page cache (fincore)"
    else:
        frac, verdict = None, "likely page cache" if fits else "disk (larger than the available memory)"
        how = f"{size / 1e6:.1f} MB against {available / 1e9:.1f} GB available memory; residency not measured (no fincore)"
    return {
        "reads_from": verdict,
        "detail": how,
        "dataset_bytes": size,
        "mem_available_bytes": available,
        "resident_fraction": frac,
    }


def _resident_bytes(files: list[str], sizes: list[int], chunk: int = 1000) -> int | None:
    """Bytes of `files` in the page cache by util-linux's fincore (whole pages: capped at each file's
    size); None where it is unavailable."""
    if not shutil.which("fincore"):
        return None
    total = 0
    for i in range(0, len(files), chunk):
        proc = subprocess.run(
            ["fincore", "--bytes", "--noheadings", "--raw", "--output", "RES", *files[i : i + chunk]],
            capture_output=True,
            text=True,
        )
        if proc.returncode != 0:
            return None
        total += sum(min(int(v), n) for v, n in zip(proc.stdout.split(), sizes[i : i + chunk]))
    return total
