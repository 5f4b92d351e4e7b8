"""The `distbench` command (commands in distbench/commands/). Every error reaches the user as one line on
stderr with a non-zero exit: 2 for bad input (including click's own usage errors), 1 for other failures."""

from __future__ import annotations

import logging
import shlex
import sys

import click

from distbench import __version__
from distbench.commands import comm, converge, fit, infer, k8s, models, predict, results, scale, slurm, verify
from distbench.commands import profile as profile_cmd
from distbench.commands.k8s_job import k8s_job
from distbench.commands.slurm_job import slurm_job
from distbench.core.errors import DistbenchError
from distbench.core.strategies import strategy_names
from distbench.results.kind import RecordKind
from distbench.run import signals


class EchoErr(logging.Handler):
    """What the core modules log (the faults distbench.results.store survives) reaches the user as its one line on
    stderr: the store prints nothing itself."""

    def emit(self, record: logging.LogRecord) -> None:
        click.echo(record.getMessage(), err=True)


_log = logging.getLogger("distbench")
if not any(isinstance(h, EchoErr) for h in _log.handlers):
    _log.addHandler(EchoErr())
    _log.propagate = False  # one line, not a second copy through the root logger's handlers


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="distbench")
def cli():
    """Compare distributed-training strategies on the same workload and measure throughput, speedup and
    scaling efficiency.

    Example: distbench scale --gpus 1,2,4 --model resnet50
    """


cli.help = (cli.help or "").replace(
    "strategies on",
    f"strategies ({', '.join(strategy_names())}; each beside its framework's single-device baseline) on",
    1,
)


for command in (
    scale.scale,
    scale.run,
    models.models,
    results.results,
    results.report,
    results.compare,
    comm.comm,
    infer.infer,
    slurm.slurm,
    slurm.collect,
    slurm_job,  # hidden: the steps inside a generated Slurm job
    k8s.k8s,
    k8s_job,  # hidden: the step inside a generated Kubernetes job's pods
    verify.verify,
    predict.predict,
    fit.fit,
    converge.converge,
    profile_cmd.profile,
):
    cli.add_command(command)


def interrupted_message(exc: BaseException) -> str:
    """One line: which signal, what is kept, and how to finish the sweep."""
    cause = signals.interruption(exc)
    name, sweep = getattr(cause, "name", "SIGINT"), getattr(cause, "sweep", None)
    if not sweep:
        return f"Interrupted by {name}: no sweep was running; nothing was lost."
    sweep_id, store, command, kind = sweep
    if kind is RecordKind.TRAINING:  # a training sweep keeps its options whole: scale --resume replays them
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
    except click.ClickException as exc:  # a UsageError's exit code is 2
        click.echo(f"Error: {exc.format_message()}", err=True)
        return exc.exit_code
    except DistbenchError as exc:  # exit 3 is compare's verdict "could not judge", not an error
        click.echo(f"Error: {exc}" if exc.exit_code != 3 else str(exc), err=True)
        return exc.exit_code
    return rv if isinstance(rv, int) else 0


if __name__ == "__main__":
    sys.exit(main())
