"""Strategy `tf`: the plain single-device TensorFlow custom training step (the TF baseline)."""

from __future__ import annotations

import sys

from distbench.workers import common

FRAMEWORK = "tf"


def body(cfg, out_path):
    from distbench.workers import tf_common as tfc

    tfc.run(cfg, out_path, tfc.Distribution())


if __name__ == "__main__":
    sys.exit(common.run_worker(FRAMEWORK, body))
