"""What the worker side shares with the parent side, so that no worker imports the parent's modules (launch,
launchers, plan, strategies): small pure helpers and constants. The parent imports them from here."""

from __future__ import annotations

import json
import socket
from typing import Sequence

ACCELERATE_PRECISION = {"fp32": "no", "bf16": "bf16", "amp": "fp16"}
"""--precision -> Accelerate's mixed_precision (`accelerate launch` and the Accelerator)."""


def free_port() -> int:
    """A TCP port free on this host now (the OS picks it)."""
    with socket.socket() as s:
        s.bind(("", 0))
        return s.getsockname()[1]


def tf_config(workers: Sequence[str], index: int) -> str:
    """TF_CONFIG of worker `index` in a cluster of `workers` ('host:port' each)."""
    if not 0 <= index < len(workers):
        raise ValueError(f"worker index {index} is outside the cluster of {len(workers)} workers")
    return json.dumps({"cluster": {"worker": list(workers)}, "task": {"type": "worker", "index": index}})
