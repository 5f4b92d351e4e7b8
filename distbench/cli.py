"""The `distbench` command: a thin click group. Commands live in distbench/commands/*.py.

Every error reaches the user as one line on stderr with a non-zero exit: 2 for bad input
(including click's own usage errors), 1 for other failures. No traceback.
"""

from __future__ import annotations

import shlex
import sys

import click

from distbench import __version__, signals
from distbench.commands import comm as comm_cmd
from distbench.commands import fit as fit_cmd
from distbench.commands import infer as infer_cmd
from distbench.commands import models as models_cmd
from distbench.commands import predict as predict_cmd
from distbench.commands import results as results_cmd
from distbench.commands import scale as scale_cmd
from distbench.commands import slurm as slurm_cmd
from distbench.commands import verify as verify_cmd
from distbench.errors import DistbenchError
from distbench.slurm.job import slurm_job


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="distbench")
def cli():
    """Compare distributed-training strategies (DataParallel, DDP, MirroredStrategy, Horovod) on the
    same workload and measure throughput, speedup and scaling efficiency.

    Example: distbench scale --gpus 1,2,4 --model resnet50
    """


cli.add_command(scale_cmd.scale)
cli.add_command(scale_cmd.run)
cli.add_command(models_cmd.models)
cli.add_command(results_cmd.results)
cli.add_command(results_cmd.report)
cli.add_command(results_cmd.compare)
cli.add_command(comm_cmd.comm)
cli.add_command(infer_cmd.infer)
cli.add_command(slurm_cmd.slurm)
cli.add_command(slurm_cmd.collect)
cli.add_command(slurm_job)  # hidden: the steps inside a generated Slurm job
cli.add_command(verify_cmd.verify)
cli.add_command(predict_cmd.predict)
cli.add_command(fit_cmd.fit)


def interrupted_message(exc: BaseException) -> str:
    """One line: which signal, what is kept, and how to finish the sweep."""
    cause = signals.interruption(exc)
    name = cause.name if cause else "SIGINT"
    sweep = cause.sweep if cause else None
    if not sweep:
        return f"Interrupted by {name}: no sweep was running; nothing was lost."
    sweep_id, store, command = sweep
    if command.startswith("distbench scale"):
        how = f"finish it with: distbench scale --resume {sweep_id} --results {shlex.quote(store)}"
    else:
        how = f"run the command again to measure the rest: {command}"
    return (
        f"Interrupted by {name}: every finished point is kept in sweep {sweep_id} ({store}), "
        f"marked 'interrupted'; {how}"
    )


def main(argv: list[str] | None = None) -> int:
    try:
        with signals.handled():
            rv = cli.main(args=argv, prog_name="distbench", standalone_mode=False)
    except click.exceptions.Exit as exc:
        return exc.exit_code
    except (click.exceptions.Abort, KeyboardInterrupt) as exc:  # click turns Ctrl-C into Abort
        click.echo(interrupted_message(exc), err=True)
        return 128 + signals.signal_of(exc)
    except click.UsageError as exc:
        click.echo(f"Error: {exc.format_message()}", err=True)
        return 2
    except click.ClickException as exc:
        click.echo(f"Error: {exc.format_message()}", err=True)
        return exc.exit_code
    except DistbenchError as exc:
        click.echo(f"Error: {exc}", err=True)
        return exc.exit_code
    return rv if isinstance(rv, int) else 0


if __name__ == "__main__":
    sys.exit(main())
