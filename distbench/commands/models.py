"""`distbench models`: list the model zoo."""

from __future__ import annotations

import json

import click

from distbench.analysis import output
from distbench.commands import options as opt
from distbench.commands.options import format_option
from distbench.models import decoders
from distbench.models.specs import MODEL_SPECS, input_shape


def _forward_gflops(name: str) -> float | None:
    """GFLOPs per sample (None when torch is not installed)."""
    try:
        from distbench.models.torch_models import forward_flops_per_sample
    except ImportError:
        return None
    return round(forward_flops_per_sample(name) / 1e9, 3)


def _sizes(family: str) -> dict[str, int]:
    """--model-size name -> exact parameter count (models.decoders)."""
    return {name: decoders.parameter_count(shape) for name, shape in decoders.SIZES[family].items()}


def _torch_installed() -> bool:
    import importlib.util

    return importlib.util.find_spec("torch") is not None


@click.command()
@format_option("table: aligned text; json: one object per model (FLOPs null when torch is missing).")
def models(fmt: str):
    """List the models every strategy can train: parameter count, input, forward GFLOPs, description.

    Example: distbench models --format json
    """
    if fmt == "table" and _torch_installed():  # the table's FLOPs take seconds: say so first
        click.echo("counting each model's forward FLOPs with torch (about 10 s on 2 cores)...", err=True)
    rows = [
        {
            "name": spec.name,
            "kind": spec.kind,
            "loss": spec.loss,
            "params": spec.reference_params,
            "params_verified_in": ["torch", "keras"],
            "params_reference": spec.reference,
            "num_classes": spec.num_classes,
            "input": input_shape(spec),
            "image_size": spec.default_image_size,
            "seq_len": spec.default_seq_len,
            "forward_gflops_per_sample": _forward_gflops(spec.name),
            "description": spec.description,
            **({"sizes": _sizes(spec.name)} if spec.sizes else {}),
        }
        for spec in MODEL_SPECS.values()
    ]
    if fmt == "json":
        click.echo(json.dumps(rows, indent=2))
        return
    out = opt.out_console()
    shown = output.table(None, ["model", "params", "input", "GFLOPs", "description"], right=["params", "GFLOPs"])
    for r in rows:
        gf = r["forward_gflops_per_sample"]
        shown.add_row(r["name"], f"{r['params']:,d}", r["input"], "-" if gf is None else f"{gf:.2f}", r["description"])
    output.print_table(
        out,
        shown,
        [
            "params: exact trainable-parameter count at the default head size and input; tests/test_models.py "
            "verifies the torch and the Keras model both have exactly this many",
            "GFLOPs: forward pass of one sample at the default input, counted by torch's FlopCounterMode (a "
            "multiply-add = 2 FLOPs; matmuls, convolutions and attention only)",
        ]
        + [
            f"{r['name']} --model-size: "
            + ", ".join(f"{name} {count:,}" for name, count in r["sizes"].items())
            + " parameters (or l<layers>-d<hidden>-h<heads>)"
            for r in rows
            if "sizes" in r
        ],
    )
