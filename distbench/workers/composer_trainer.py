"""Strategy `composer`: MosaicML Composer's Trainer. It cannot run with distbench's pinned torch: the
current Composer release (mosaicml 0.32.1) requires torch<2.7.1, and distbench pins torch 2.13.0 (torch
is never downgraded for one wrapper). This worker checks the installed torch against that requirement
and records the point `skipped` with the conflict named; it imports neither torch nor Composer.
"""

from __future__ import annotations

from importlib import metadata

from distbench.workers import common

FRAMEWORK = "torch"
RELEASE, TORCH_REQUIREMENT = "0.32.1", "<2.7.1"
"""The newest mosaicml release and the torch range it declares (its Requires-Dist on PyPI)."""


def conflict() -> str:
    """Why Composer's points are skipped: the installed torch against the newest release's requirement."""
    from packaging.specifiers import SpecifierSet
    from packaging.version import Version

    try:
        torch = metadata.version("torch")
    except metadata.PackageNotFoundError:
        torch = None
    if torch is None or Version(Version(torch).base_version) in SpecifierSet(TORCH_REQUIREMENT):
        return (
            f"distbench has no Composer Trainer worker: mosaicml {RELEASE} (the newest Composer) requires "
            f"torch{TORCH_REQUIREMENT} and distbench pins torch 2.13.0, so none could be written and tested"
        )
    return (
        f"version conflict: mosaicml {RELEASE} (the newest Composer) requires torch{TORCH_REQUIREMENT}, "
        f"the installed torch is {torch} (distbench pins torch 2.13.0 and never downgrades it for a wrapper)"
    )


def body(cfg, out_path):
    common.emit(cfg, out_path, framework=FRAMEWORK, status="skipped", reason=conflict())
