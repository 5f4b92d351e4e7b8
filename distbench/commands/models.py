"""`distbench models`: list the model zoo."""
from __future__ import annotations

import click

from distbench.models.specs import MODEL_SPECS


@click.command()
def models():
    """List the models every strategy can train, with reference parameter counts.

    Example: distbench models
    """
    for spec in MODEL_SPECS.values():
        click.echo(f"{spec.name:<12} {spec.reference_params:>13,d} params  "
                   f"input {spec.channels}x{spec.default_image_size}x{spec.default_image_size}  {spec.description}")
