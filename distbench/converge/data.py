"""The data of `distbench converge`: read once from what users have, decoded into one cache file both
frameworks read, split into training and held-out validation samples, and the seeded order every rank
takes its shard from.

Sources (--data):
  * none (or `shapes`): 18,000 40x40 images of ten shapes drawn by code (distbench.converge.shapes: nothing is
    downloaded), the default: a small CNN spends 20-40 CPU-seconds (one core) to reach its target;
  * `digits`: scikit-learn's bundled 8x8 handwritten digits (1,797 images, 10 classes; UCI "optdigits" test
    set, shipped inside the scikit-learn package: nothing is downloaded), the earlier default (an MLP reaches
    0.9 in about 20 steps: too fast to time);
  * an image-folder tree: one subdirectory per class, the images in it (any format Pillow decodes), all
    of one size;
  * a .npz file with arrays `x` (N, H, W) or (N, H, W, C) and `y` (N,) integer classes, or a folder
    holding x.npy and y.npy.

The cache (one .npz under DISTBENCH_DATA/converge, keyed by the source's files, sizes and mtimes) holds
float32 NHWC images standardized with the training split's mean and std, int64 labels, and the split.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
from pathlib import Path

import numpy as np

from distbench.converge import shapes
from distbench.core.datasets import DEFAULT_ROOT
from distbench.core.errors import BadInput

CACHE_VERSION = 1
VAL_FRACTION = 0.2
SPLIT_SEED = 12345
"""The train/validation split is fixed (not the run's seed): every seed and strategy is scored on the same
held-out samples."""
IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".bmp", ".gif", ".tif", ".tiff", ".webp", ".ppm", ".pgm")
DIGITS = "sklearn-digits"
SHAPES = f"synthetic-shapes-v{shapes.VERSION}-{shapes.SIDE}px-{shapes.SAMPLES}"
BUILTIN = {"digits": DIGITS, "shapes": SHAPES}
"""--data names of the built-in sources (no file or folder of that name is looked up)."""
DIGITS_NOTE = (
    "scikit-learn's bundled 8x8 handwritten digits (1,797 images, 10 classes; the UCI optdigits test set, "
    "shipped inside the scikit-learn package)"
)


def _bad(text: str) -> BadInput:
    return BadInput(f"--data {text}")


def _digits() -> tuple[np.ndarray, np.ndarray]:
    """The digits as sklearn.datasets.load_digits reads them (its bundled digits.csv.gz: 64 pixel values 0..16
    and the class per row), read here without importing scikit-learn (and SciPy), a few seconds on a loaded
    machine; load_digits itself where the file has moved."""
    spec = importlib.util.find_spec("sklearn")
    if spec is None or not spec.submodule_search_locations:
        raise BadInput(
            "the default data (scikit-learn's digits) needs scikit-learn: run `make install`, or pass --data"
        )
    path = Path(spec.submodule_search_locations[0]) / "datasets" / "data" / "digits.csv.gz"
    if path.exists():
        raw = np.loadtxt(path, delimiter=",")
        images, target = raw[:, :-1].reshape(-1, 8, 8), raw[:, -1]
    else:  # pragma: no cover - a scikit-learn that stores it elsewhere
        from sklearn.datasets import load_digits

        d = load_digits()
        images, target = d.images, d.target
    return (images / 16.0).astype(np.float32)[..., None], target.astype(np.int64)


def _arrays(x: np.ndarray, y: np.ndarray, where: str) -> tuple[np.ndarray, np.ndarray]:
    if x.ndim == 3:
        x = x[..., None]
    if x.ndim != 4:
        raise _bad(f"{where}: x must be (N, H, W) or (N, H, W, C) images, got shape {x.shape}")
    if y.ndim != 1 or len(y) != len(x):
        raise _bad(f"{where}: y must be (N,) labels for the {len(x)} images, got shape {y.shape}")
    if not np.issubdtype(y.dtype, np.integer):
        raise _bad(f"{where}: y must hold integer class ids, got {y.dtype}")
    if len(x) and (y.min() < 0):
        raise _bad(f"{where}: y has negative class ids")
    if not (np.issubdtype(x.dtype, np.integer) or np.issubdtype(x.dtype, np.floating)):
        raise _bad(f"{where}: x must be numeric, got {x.dtype}")
    x = x.astype(np.float32)
    if not np.isfinite(x).all():
        raise _bad(f"{where}: x holds NaN or infinite values")
    if x.max(initial=0) > 1.0:  # 8-bit images
        x = x / 255.0
    return x, y.astype(np.int64)


def _npz(path: Path) -> tuple[np.ndarray, np.ndarray]:
    try:
        with np.load(path, allow_pickle=False) as z:
            missing = [k for k in ("x", "y") if k not in z.files]
            if missing:
                raise _bad(f"{path}: needs arrays 'x' and 'y', it has {', '.join(z.files) or 'none'}")
            return _arrays(z["x"], z["y"], str(path))
    except (OSError, ValueError) as exc:
        raise _bad(f"{path}: not a readable .npz file ({exc})") from None


def _npy_pair(folder: Path) -> tuple[np.ndarray, np.ndarray]:
    try:
        x, y = np.load(folder / "x.npy", allow_pickle=False), np.load(folder / "y.npy", allow_pickle=False)
    except (OSError, ValueError) as exc:
        raise _bad(f"{folder}: x.npy / y.npy are not readable .npy arrays ({exc})") from None
    return _arrays(x, y, str(folder))


def _image_folder(folder: Path, channels: int) -> tuple[np.ndarray, np.ndarray, list[str]]:
    from PIL import Image, UnidentifiedImageError

    classes = sorted(p.name for p in folder.iterdir() if p.is_dir() and not p.name.startswith("."))
    if not classes:
        raise _bad(f"{folder}: no class subdirectories (expected DIR/<class>/<image>, one folder per class)")
    xs, ys, size = [], [], None
    for label, name in enumerate(classes):
        files = sorted(f for f in (folder / name).iterdir() if f.is_file() and not f.name.startswith("."))
        if not files:
            raise _bad(f"{folder}: class folder {name!r} holds no images")
        for f in files:
            if f.suffix.lower() not in IMAGE_SUFFIXES:
                raise _bad(f"{f}: not an image file (expected one of {', '.join(IMAGE_SUFFIXES)})")
            try:
                with Image.open(f) as im:
                    arr = np.asarray(im.convert("L" if channels == 1 else "RGB"), dtype=np.uint8)
            except (UnidentifiedImageError, OSError, ValueError) as exc:
                raise _bad(f"{f}: cannot decode the image ({type(exc).__name__})") from None
            if size is None:
                size = arr.shape[:2]
            elif arr.shape[:2] != size:
                raise _bad(f"{f}: image is {arr.shape[1]}x{arr.shape[0]}, the others {size[1]}x{size[0]} (one size)")
            xs.append(arr if arr.ndim == 3 else arr[..., None])
            ys.append(label)
    if len(classes) < 2:
        raise _bad(f"{folder}: one class folder ({classes[0]!r}); classification needs at least 2")
    x, y = _arrays(np.stack(xs), np.array(ys, dtype=np.int64), str(folder))
    return x, y, classes


def _fingerprint(path: Path) -> str:
    """Names, sizes and mtimes of every file of the source: a changed file makes a new cache entry."""
    h = hashlib.sha1(f"v{CACHE_VERSION}".encode())
    files = [path] if path.is_file() else sorted(p for p in path.rglob("*") if p.is_file())
    for f in files:
        st = f.stat()
        h.update(f"{f.relative_to(path) if f != path else f.name}:{st.st_size}:{st.st_mtime_ns}\n".encode())
    return h.hexdigest()[:12]


def load_source(data: str | None, channels: int) -> tuple[np.ndarray, np.ndarray, dict]:
    """(images float32 NHWC in [0, 1], labels int64, description) from --data (None: the shapes)."""
    if data is None or data == "shapes":
        x, y = shapes.generate()
        return x, y, {"source": SHAPES, "note": shapes.NOTE, "classes": list(shapes.CLASSES)}
    if data == "digits":
        x, y = _digits()
        return x, y, {"source": DIGITS, "note": DIGITS_NOTE, "classes": [str(i) for i in range(10)]}
    path = Path(data)
    if not path.exists():
        raise _bad(f"{data}: no such file or folder")
    if path.is_file():
        if path.suffix != ".npz":
            raise _bad(f"{data}: a file must be a .npz with arrays x and y (or pass a folder)")
        x, y = _npz(path)
        classes = None
    elif (path / "x.npy").exists() or (path / "y.npy").exists():
        x, y = _npy_pair(path)
        classes = None
    else:
        if not any(path.iterdir()):
            raise _bad(f"{data}: the folder is empty (expected DIR/<class>/<image>, or x.npy and y.npy)")
        x, y, classes = _image_folder(path, channels)
    if len(x) < 10:
        raise _bad(f"{data}: {len(x)} samples; converge needs at least 10 (training and validation)")
    if len(np.unique(y)) < 2:
        raise _bad(f"{data}: every sample has the same label; classification needs at least 2 classes")
    return x, y, {"source": str(path.resolve()), "classes": classes}


def split(n: int) -> tuple[np.ndarray, np.ndarray]:
    """(training indices, validation indices): a fixed seeded permutation, VAL_FRACTION held out."""
    perm = np.random.default_rng(SPLIT_SEED).permutation(n)
    n_val = max(1, int(round(n * VAL_FRACTION)))
    return np.sort(perm[n_val:]), np.sort(perm[:n_val])


def ensure_cache(data: str | None, channels: int, root: str | os.PathLike | None = None) -> Path:
    """Decode the source once into a cache file (atomically) under `root` (default: DISTBENCH_DATA) and return
    its path."""
    root = DEFAULT_ROOT if root is None else root
    if data is None or data in BUILTIN:
        key = BUILTIN[data or "shapes"]
    else:
        key = f"{Path(data).name}-{_fingerprint(Path(data))}" if Path(data).exists() else None
    if key is None:
        raise _bad(f"{data}: no such file or folder")
    out = Path(root) / "converge" / f"{key}-c{channels}-v{CACHE_VERSION}.npz"
    if out.exists():
        return out
    x, y, meta = load_source(data, channels)
    if x.shape[-1] != channels:
        if x.shape[-1] == 1:
            x = np.repeat(x, channels, axis=-1)
        elif channels == 1:
            x = x.mean(axis=-1, keepdims=True)
        else:
            raise _bad(f"{data}: images have {x.shape[-1]} channels, the model takes {channels}")
    tr, va = split(len(x))
    mean, std = float(x[tr].mean()), float(x[tr].std()) or 1.0
    meta.update(
        samples=len(x),
        train=len(tr),
        val=len(va),
        num_classes=int(y.max()) + 1,
        image_size=int(x.shape[1]),
        width=int(x.shape[2]),
        channels=channels,
        mean=mean,
        std=std,
        split_seed=SPLIT_SEED,
        val_fraction=VAL_FRACTION,
    )
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(out.stem + f".tmp{os.getpid()}.npz")
    xs = (x - mean) / std
    np.savez(tmp, x_train=xs[tr], y_train=y[tr], x_val=xs[va], y_val=y[va], meta=np.array(json.dumps(meta)))
    os.replace(tmp, out)
    return out


def read_cache(path: str | os.PathLike) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, dict]:
    """(x_train, y_train, x_val, y_val, meta): images float32 NHWC, standardized; labels int64."""
    with np.load(path, allow_pickle=False) as z:
        return z["x_train"], z["y_train"], z["x_val"], z["y_val"], json.loads(str(z["meta"]))


# ---- the order of the training samples: the same in both frameworks, a shard per rank


def steps_per_epoch(train_samples: int, global_batch: int) -> int:
    """Full global batches per epoch (the last partial one is dropped, as DistributedSampler(drop_last))."""
    return train_samples // global_batch


def epoch_order(train_samples: int, seed: int, epoch: int) -> np.ndarray:
    """The training samples' order in `epoch`: a permutation seeded by (seed, epoch), numpy's PCG64, so torch
    and TensorFlow workers compute the same one."""
    return np.random.default_rng([seed, epoch]).permutation(train_samples)


def rank_batch(order: np.ndarray, step: int, rank: int, world: int, per_device: int) -> np.ndarray:
    """Indices of `rank`'s batch at `step` of the epoch: its slice of the step's global batch, so the N
    shards of a step are exactly the single-device run's global batch, and in an epoch no sample is seen
    twice, by any rank."""
    start = step * world * per_device + rank * per_device
    return order[start : start + per_device]
