"""Click types for the numeric options of every command: each has an allowed range, and a value
outside it is a one-line error naming the flag and the range (exit 2)."""
from __future__ import annotations

import math

import click

from distbench.plan import MAX_BATCH, parse_counts


class FiniteFloatRange(click.FloatRange):
    """click.FloatRange that also refuses nan (which passes every comparison) and infinities."""

    def convert(self, value, param, ctx):
        number = super().convert(value, param, ctx)
        if not math.isfinite(number):
            self.fail(f"{number} is not in the range {self._describe_range()}.", param, ctx)
        return number


SECONDS = FiniteFloatRange(0, 7 * 86400, min_open=True)
"""--timeout and the like: more than 0 s, at most a week."""
STEPS = click.IntRange(1, 1_000_000)
WARMUP = click.IntRange(1, 100_000)  # at least 1: tracing and compilation must not land in a measured step
IMAGE_SIZE = click.IntRange(1, 8192)
SEQ_LEN = click.IntRange(1, 65536)
NUM_CLASSES = click.IntRange(2, 1_000_000)
BATCH = click.IntRange(1, MAX_BATCH)
SEED = click.IntRange(0, 2**32 - 1)


def batch_list(ctx, param, value):
    """--batch-size '16,32,64' -> (16, 32, 64) (one value is a list of one); None stays None."""
    return None if value is None else tuple(parse_counts(str(value), "--batch-size", "batch size", MAX_BATCH))
