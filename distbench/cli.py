"""The `distbench` command: a thin click group. Commands live in distbench/commands/*.py.

Every error reaches the user as one line on stderr with a non-zero exit: 2 for bad input
(including click's own usage errors), 1 for other failures. No traceback.
"""
from __future__ import annotations

import sys

import click

from distbench import __version__
from distbench.commands import comm as comm_cmd
from distbench.commands import infer as infer_cmd
from distbench.commands import models as models_cmd
from distbench.commands import results as results_cmd
from distbench.commands import scale as scale_cmd
from distbench.commands import slurm as slurm_cmd
from distbench.commands import verify as verify_cmd
from distbench.errors import DistbenchError


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
cli.add_command(verify_cmd.verify)


def main(argv: list[str] | None = None) -> int:
    try:
        rv = cli.main(args=argv, prog_name="distbench", standalone_mode=False)
    except click.exceptions.Exit as exc:
        return exc.exit_code
    except (click.exceptions.Abort, KeyboardInterrupt):  # click turns Ctrl-C into Abort
        click.echo("Interrupted: finished points are kept in the store; the sweep is marked 'interrupted'.",
                   err=True)
        return 130
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
