"""Strategy `tf`: the plain single-device TensorFlow custom training step (the TF baseline)."""

from __future__ import annotations

FRAMEWORK = "tf"


def body(cfg, out_path):
    from distbench.workers import tf_common as tfc

    tfc.run(cfg, out_path, tfc.Distribution())
