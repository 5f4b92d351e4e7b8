"""What the commands share: click types with an allowed range (a value outside it is a one-line error naming
the flag and the range, exit 2), options declared alike, consoles, `new_sweep`; and WORKLOAD, the click side
of SweepOptions."""

from __future__ import annotations

import contextlib
import dataclasses
import math
import sys
import tempfile
from pathlib import Path

import click
from rich.console import Console
from rich.markup import escape

from distbench.errors import BadInput
from distbench.launch import run_point
from distbench.output import table  # noqa: F401 - the commands' one table builder (opt.table)
from distbench.record import base_record
from distbench.plan import INSTALL_HINT, MAX_BATCH, SweepOptions, _missing_modules, flag, parse_counts
from distbench.store import DEFAULT_PATH, Store
from distbench.sweep import command_line, recorded_sweep
from distbench.workload import Knob, knobs


class FiniteFloatRange(click.FloatRange):
    """click.FloatRange that also refuses nan (which passes every comparison) and infinities."""

    def convert(self, value, param, ctx):
        number = super().convert(value, param, ctx)
        if not math.isfinite(number):
            self.fail(f"{number} is not in the range {self._describe_range()}.", param, ctx)
        return number


SECONDS = FiniteFloatRange(0, 7 * 86400, min_open=True)
WARMUP = click.IntRange(1, 100_000)  # at least 1: tracing and compilation must not land in a measured step
"""(Both also the ranges of the sweep's --timeout and --warmup knobs, distbench.workload.)"""
BATCH = click.IntRange(1, MAX_BATCH)


def batch_list(ctx, param, value):
    """--batch-size '16,32,64' -> (16, 32, 64) (one value is a list of one); None stays None."""
    return None if value is None else tuple(parse_counts(str(value), "--batch-size", "batch size", MAX_BATCH))


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


def results_option(help: str = "SQLite results store."):
    return option("--results", type=click.Path(dir_okay=False), default=str(DEFAULT_PATH), help=help)


def format_option(help: str):
    return option("--format", "fmt", type=click.Choice(["table", "json"]), default="table", help=help)


def err_console() -> Console:
    return Console(stderr=True, highlight=False, soft_wrap=True)


def out_console() -> Console:
    return Console(highlight=False, width=None if sys.stdout.isatty() else 160)


def print_notes(err: Console, notes) -> None:
    for note in notes:
        err.print(f"[dim]note:[/] {escape(note)}")


@dataclasses.dataclass
class NewSweep:
    store: Store
    id: str
    workdir: Path
    """A fresh scratch folder for the points' work."""
    records: list[dict] = dataclasses.field(default_factory=list)

    def keep(self, record: dict) -> None:
        """Commit `record` as a point of this sweep and collect it in `records`."""
        record["sweep_id"] = self.id
        record["point_id"] = self.store.add_point(self.id, record)
        self.records.append(record)


@contextlib.contextmanager
def new_sweep(results: str, kind: str, options: dict, notes: list[str]):
    """A new sweep in the --results store for the duration of a `with` block (see recorded_sweep)."""
    with Store(results) as store, recorded_sweep(store, command=command_line(), options=options, notes=notes) as sid:
        yield NewSweep(store, sid, Path(tempfile.mkdtemp(prefix=f"distbench-{kind}-{sid}-")))


def run_or_skip(strategy, cfg, workdir: Path, timeout_s: float, skip: str | None, telemetry_interval_s=0.0) -> dict:
    """run_point, or a 'skipped' record with the reason `skip` when that is set."""
    if skip:
        return base_record(
            cfg.to_dict(), strategy=strategy.name, framework=strategy.framework, status="skipped", reason=skip
        )
    return run_point(strategy, cfg, workdir, timeout_s, telemetry_interval_s)


def checked(fn, *args, **kwargs):
    """fn(...) with a ValueError from it (the library's message, naming the flag) raised as BadInput."""
    try:
        return fn(*args, **kwargs)
    except ValueError as exc:
        raise BadInput(str(exc)) from None


def not_installed(strategy) -> str | None:
    """Why `strategy` cannot run here: the modules it needs that are missing (None: none is)."""
    missing = _missing_modules(strategy)
    return f"{', '.join(missing)} is not installed: {INSTALL_HINT}" if missing else None


def _click_attrs(f: dataclasses.Field, k: Knob) -> dict:
    """A knob's click attributes, from its declaration (distbench.workload): help, type or range, parsing."""
    attrs = {"help": k.help} if k.help else {}
    if k.parse == "percent":
        attrs["callback"] = percent
    elif k.parse == "counts":
        attrs["callback"] = batch_list
    elif k.choices is not None:
        attrs["type"] = click.Choice(k.choices)
    elif k.low is not None:
        attrs["type"] = (
            FiniteFloatRange(k.low, k.high, min_open=k.low_open)
            if "float" in str(f.type)
            else click.IntRange(int(k.low), None if k.high is None else int(k.high))
        )
    return {**attrs, **k.cli}


WORKLOAD = {
    name: ((k.flag,) if k.flag else (), k.jobs, _click_attrs(f, k))
    for name, (f, k) in knobs(SweepOptions).items()
    if not k.command_only
}
"""The click option of each SweepOptions knob a user sets (field name -> its declared flags (default:
--name-in-kebab-case), whether `distbench slurm` and `k8s` take it too, click attributes), generated from
the declaration in distbench.workload and plan.SweepOptions. It defaults to the field's default."""


def workload_option(name: str, **attrs):
    """The WORKLOAD option of field `name` (`attrs` override its click attributes)."""
    decls, _, spec = WORKLOAD[name]
    return option(*(decls or [flag(name)]), name, **{"default": _DEFAULTS[name], **spec, **attrs})


_DEFAULTS = {f.name: f.default for f in dataclasses.fields(SweepOptions)}


def workload_options(*, slurm: bool = False):
    """Decorator: the WORKLOAD options (only those marked for Slurm jobs when `slurm`), in field order, so
    `scale`, `run` and `slurm` accept them with the same names, defaults and help."""
    chosen = [name for name in _DEFAULTS if name in WORKLOAD and (WORKLOAD[name][1] or not slurm)]

    def decorate(fn):
        for name in reversed(chosen):  # click lists options in the order their decorators are written
            fn = workload_option(name)(fn)
        return fn

    return decorate
