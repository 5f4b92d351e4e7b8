"""What the commands share: click types with an allowed range (a value outside it is a one-line error naming
the flag and the range, exit 2), options declared alike, consoles; and WORKLOAD, the click side
of SweepOptions."""

from __future__ import annotations

import dataclasses
import math
import os
import shutil
import sys
import textwrap
from pathlib import Path

import click
from rich.console import Console
from rich.markup import escape

from distbench.analysis.output import table_width
from distbench.core.errors import BadInput
from distbench.core.workload import OPTIMIZER, Knob, Workload, knobs
from distbench.results.store import DEFAULT_PATH
from distbench.run.devices import parse_counts
from distbench.run.plan import MAX_BATCH, SweepOptions, flag


class FiniteFloatRange(click.FloatRange):
    """click.FloatRange that also refuses nan (which passes every comparison) and infinities."""

    def convert(self, value, param, ctx):
        number = super().convert(value, param, ctx)
        if not math.isfinite(number):
            self.fail(f"{number} is not in the range {self._describe_range()}.", param, ctx)
        return number


BATCH = click.IntRange(1, MAX_BATCH)


def batch_list(ctx, param, value):
    """--batch-size '16,32,64' -> (16, 32, 64) (one value is a list of one); None stays None."""
    return None if value is None else tuple(parse_counts(str(value), "--batch-size", "batch size", MAX_BATCH))


MAX_SEQ_LEN = 65536


def length_list(ctx, param, value):
    """--seq-len '128' -> 128, '128,256' -> (128, 256) (a sweep's axis; one value stays a number); None stays None."""
    if value is None:
        return None
    lengths = parse_counts(str(value), "--seq-len", "sequence length", MAX_SEQ_LEN)
    return lengths[0] if len(lengths) == 1 else tuple(lengths)


def percent(ctx, param, value):
    """--target-ci '2%' (or '2') -> 0.02."""
    text = str(value).strip()
    try:
        number = float(text.rstrip("%"))
    except ValueError:
        raise click.BadParameter(f"{text!r} is not a percentage such as 2%") from None
    if not 0 <= number < 100:
        raise click.BadParameter(f"{text!r} must be between 0% and 100%")
    return number / 100.0


def option(*decls: str, **attrs):
    """click.option that shows its default in --help."""
    return click.option(*decls, **{"show_default": True, **attrs})


RESULTS_ENV = "DISTBENCH_RESULTS"
"""The environment variable naming the results store when --results is not given (else DEFAULT_PATH, relative to
the working directory)."""


def _store_file(ctx: click.Context, param: click.Parameter, value):
    """--results (or its environment variable) must name the store file, not a folder: one line that blames
    whichever of the two gave it."""
    if value is not None and Path(value).is_dir():
        env = ctx.get_parameter_source(param.name) is click.core.ParameterSource.ENVIRONMENT
        given = f"${RESULTS_ENV}={value}" if env else f"--results {value}"
        raise click.UsageError(
            f"{given} is a folder, not a results store: name the .db file, e.g. {Path(value) / DEFAULT_PATH.name}"
        )
    return value


def results_option(help: str = "SQLite results store."):
    return option(
        "--results",
        type=click.Path(),
        default=str(DEFAULT_PATH),
        envvar=RESULTS_ENV,
        show_envvar=True,
        callback=_store_file,
        help=f"{help} Relative to the working directory; ${RESULTS_ENV} sets it for every command.",
    )


def format_option(help: str):
    return option("--format", "fmt", type=click.Choice(["table", "json"]), default="table", help=help)


def note_width() -> int | None:
    """The width stderr's notes wrap at: COLUMNS when set, else the terminal's when stderr is one; None (one line a
    note, so grep and log readers find it whole) when stderr goes to a pipe or a file without COLUMNS."""
    columns = os.environ.get("COLUMNS", "")
    if columns.isdigit() and int(columns) > 0:
        return int(columns)
    return shutil.get_terminal_size((120, 24)).columns if sys.stderr.isatty() else None


def err_console() -> Console:
    """stderr's console: notes and progress lines wrapped at words to note_width (not wrapped where it is None)."""
    width = note_width()
    if width is None:
        return Console(stderr=True, highlight=False, soft_wrap=True)
    return Console(stderr=True, highlight=False, width=width)


def echo_err(text: str) -> None:
    """One message on stderr, wrapped at words to note_width (a word longer than that stays whole)."""
    width = note_width()
    if width is None:
        click.echo(text, err=True)
        return
    lines = textwrap.wrap(text, width=width, break_long_words=False, break_on_hyphens=False) or [""]
    click.echo("\n".join(lines), err=True)


def out_console() -> Console:
    """stdout's console, as wide as the tables: COLUMNS, else the terminal's width, else 120 (output.table_width)."""
    return Console(highlight=False, width=table_width())


def print_notes(err: Console, notes) -> None:
    for note in notes:
        err.print(f"[dim]note:[/] {escape(note)}")


def checked(fn, *args, **kwargs):
    """fn(...) with a ValueError from it (the library's message, naming the flag) raised as BadInput."""
    try:
        return fn(*args, **kwargs)
    except ValueError as exc:
        raise BadInput(str(exc)) from None


def _click_attrs(f: dataclasses.Field, k: Knob) -> dict:
    """A knob's click attributes, from its declaration (distbench.core.workload): help, type or range, parsing."""
    attrs = {"help": k.help} if k.help else {}
    if k.parse == "percent":
        attrs["callback"] = percent
    elif k.parse == "counts":
        attrs["callback"] = batch_list
    elif k.parse == "lengths":
        attrs["callback"] = length_list
    elif k.choices is not None:
        attrs["type"] = click.Choice(k.choices)
    elif k.low is not None:
        attrs["type"] = (
            FiniteFloatRange(k.low, k.high, min_open=k.low_open)
            if "float" in str(f.type)
            else click.IntRange(int(k.low), None if k.high is None else int(k.high))
        )
    return {**attrs, **k.cli}


def _help_rank(name: str) -> int:
    """--help lists the sweep's own axes first (--strategy, --batch-size, ...), then the Workload, then how it
    is measured."""
    return 0 if name in SweepOptions.__annotations__ else 1 if name in Workload.__annotations__ else 2


WORKLOAD = {
    name: ((k.flag,) if k.flag else (), k.jobs, _click_attrs(f, k))
    for name, (f, k) in sorted(knobs(SweepOptions).items(), key=lambda item: _help_rank(item[0]))
    if not k.command_only
}
"""The click option of each SweepOptions knob a user sets (field name -> its declared flags (default:
--name-in-kebab-case), whether `distbench slurm` and `k8s` take it too, click attributes), generated from
the declaration in distbench.core.workload and plan.SweepOptions. It defaults to the field's default."""

SECONDS = WORKLOAD["timeout"][2]["type"]
"""Seconds, as the sweep's --timeout declares them (other commands' timeouts and budgets)."""
WARMUP = WORKLOAD["warmup"][2]["type"]
"""Warmup steps, as the sweep's --warmup declares them (at least 1: tracing and compilation must not land in a
measured step)."""


def workload_option(name: str, **attrs):
    """The WORKLOAD option of field `name` (`attrs` override its click attributes)."""
    decls, _, spec = WORKLOAD[name]
    return option(*(decls or [flag(name)]), name, **{"default": _DEFAULTS[name], **spec, **attrs})


_DEFAULTS = {f.name: f.default for f in dataclasses.fields(SweepOptions)}


def knob_options(*names: str, **overrides: dict):
    """Decorator: the WORKLOAD options of the knobs `names`, in that order (`overrides`: knob name -> click
    attributes to change, e.g. a command's own default), so every command that takes a knob takes it with its
    declared flag, type, range and help."""

    def decorate(fn):
        for name in reversed(names):  # click lists options in the order their decorators are written
            fn = workload_option(name, **overrides.get(name, {}))(fn)
        return fn

    return decorate


def optimizer_options(**overrides: dict):
    """Decorator: the training section's options (core.workload.OPTIMIZER: seed, lr, momentum, ...), whole, for the
    commands that take it as one part of their Workload (`verify`, `converge`); `overrides` as in knob_options."""
    return knob_options(*OPTIMIZER, **overrides)


def workload_options(*, slurm: bool = False, **overrides: dict):
    """Decorator: the WORKLOAD options (only those cluster jobs take when `slurm`), in WORKLOAD's order, so
    `scale`, `run`, `slurm` and `k8s` accept them with the same names, defaults and help (`overrides`: knob
    name -> click attributes a command changes, e.g. `run`'s single --strategy)."""
    chosen = [name for name, (_, jobs, _) in WORKLOAD.items() if jobs or not slurm]

    def decorate(fn):
        for name in reversed(chosen):  # click lists options in the order their decorators are written
            fn = workload_option(name, **overrides.get(name, {}))(fn)
        return fn

    return decorate
