"""Strategy `tf`: the plain single-device TensorFlow custom training step (the TF baseline)."""

from __future__ import annotations

import sys

from distbench.launchers import common

STRATEGY, FRAMEWORK = "tf", "tf"


def body(cfg, out_path):
    from distbench.launchers import tf_common as tfc

    tfc.run(cfg, out_path, STRATEGY, tfc.Distribution())


if __name__ == "__main__":
    sys.exit(common.run_worker(STRATEGY, FRAMEWORK, body))
