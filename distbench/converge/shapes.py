"""`distbench converge`'s default data: ten classes of shapes drawn by code (nothing is downloaded), each image a
randomly placed, sized, rotated and shaded shape with Gaussian pixel noise and stray-pixel clutter.

The classes (a shape each, in the shape's own rotated frame u, v): disk, ring, filled square, square outline,
plus, triangle, two parallel bars, ellipse outline, L, T. Rotation makes some pairs alike (a square outline
turned 45 degrees, a plus and an X), noise and clutter blur thin strokes: a small CNN needs a few epochs to
tell them apart well, which is the point (the bundled digits reached 0.9 in 22 steps, too fast to time).
The images are a function of (SHAPES_SEED, the sample count): every run, rank and framework reads the same
ones.
"""

from __future__ import annotations

import numpy as np

SHAPES_SEED = 20261127
VERSION = 2
"""Part of the cache key with SIDE and SAMPLES: bump it when the drawing changes."""
SIDE = 40
"""40 px (the shapes scaled with it): about 31 ms of CPU per step of the cnn at batch 32 on one thread, against
about 9 at 20 px, so one core spends tens of CPU seconds to the default target (docs/convergence.md)."""
SAMPLES = 18_000
"""18,000 (14,400 for training: 450 steps per epoch at batch 32), so the default 5-epoch budget holds the
steps a 40 px run needs to the target with room to spare."""
CLASSES = ("disk", "ring", "square", "square outline", "plus", "triangle", "bars", "ellipse", "L", "T")
NOISE = 0.15
"""Standard deviation of the Gaussian pixel noise (the shape's intensity is 0.5 to 1)."""
NOTE = (
    f"synthetic shapes drawn by code (distbench/converge/shapes.py: {len(CLASSES)} classes, {SIDE}x{SIDE} grayscale, "
    f"random position, size, rotation and intensity, pixel noise sd {NOISE}, clutter; seed {SHAPES_SEED})"
)


def _masks(label: np.ndarray, u: np.ndarray, v: np.ndarray, r: np.ndarray, t: np.ndarray) -> np.ndarray:
    """Boolean (n, H, W) shape masks; u, v: each pixel's coordinates in the shape's rotated frame."""
    au, av, half = np.abs(u), np.abs(v), t / 2
    rho = np.sqrt(u**2 + v**2)
    box = np.maximum(au, av)
    shapes = [
        rho <= r,
        np.abs(rho - r) <= half,
        box <= r * 0.8,
        np.abs(box - r * 0.8) <= half,
        ((au <= half) & (av <= r)) | ((av <= half) & (au <= r)),
        (v >= -0.5 * r) & (v <= r) & (au <= (r - v) * 0.577),
        ((np.abs(v - r / 2) <= half) | (np.abs(v + r / 2) <= half)) & (au <= r),
        np.abs(np.sqrt(u**2 + (2 * v) ** 2) - r) <= t,
        ((u >= -r) & (u <= -r + t) & (av <= r)) | ((v >= r - t) & (v <= r) & (au <= r)),
        ((v >= -r) & (v <= -r + t) & (au <= r)) | ((au <= half) & (av <= r)),
    ]
    out = np.zeros(u.shape, dtype=bool)
    for k, mask in enumerate(shapes):
        out |= mask & (label == k)
    return out


def generate(n: int = SAMPLES, seed: int = SHAPES_SEED, side: int = SIDE) -> tuple[np.ndarray, np.ndarray]:
    """(images float32 (n, side, side, 1) in [0, 1], labels int64 (n,)), balanced classes in a seeded order; the
    shapes' size and stroke scale with side (4-8 px and 2-3 px at 20)."""
    rng = np.random.default_rng(seed)
    label = rng.permutation(np.arange(n) % len(CLASSES)).astype(np.int64)
    scale = side / 20
    r = rng.uniform(4.0, 8.0, n) * scale
    t = rng.uniform(2.0, 3.0, n) * scale
    cx, cy = rng.uniform(r, side - 1 - r), rng.uniform(r, side - 1 - r)
    theta = rng.uniform(0, 2 * np.pi, n)
    level = rng.uniform(0.5, 1.0, n)
    images = np.empty((n, side, side), dtype=np.float32)
    ys, xs = np.mgrid[0:side, 0:side].astype(np.float32)
    for lo in range(0, n, 1000):  # in chunks: a few MB at a time
        s = slice(lo, min(n, lo + 1000))

        def col(a):
            return a[s, None, None].astype(np.float32)

        dx, dy, c, sn = xs - col(cx), ys - col(cy), np.cos(col(theta)), np.sin(col(theta))
        u, v = dx * c + dy * sn, -dx * sn + dy * c
        mask = _masks(col(label), u, v, col(r), col(t))
        img = mask * col(level) + rng.normal(0.0, NOISE, mask.shape).astype(np.float32)
        clutter = rng.random(mask.shape) < 0.03
        img[clutter] += rng.uniform(0.5, 1.0, int(clutter.sum())).astype(np.float32)
        images[s] = np.clip(img, 0.0, 1.0)
    return images[..., None], label
