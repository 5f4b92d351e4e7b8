"""A sweep's files: the sbatch script (from the template job.sh.j2: shell, so every value that is not
distbench's own text goes through a quoting filter), its submit script and its manifest."""

from __future__ import annotations

import datetime as _dt
import json
import shlex
from pathlib import Path

import jinja2

from distbench import __version__
from distbench.core.errors import BadInput
from distbench.kinds.collect import MANIFEST_KIND
from distbench.run.commandline import build_env, shell_join
from distbench.slurm.plan import SlurmPlan, SlurmPoint, SlurmSettings
from distbench.slurm.submit import sbatch_argv, sbatch_value

SIGNAL_LEAD_S = 60
"""Slurm sends USR1 this long before --time runs out; the script then writes an 'interrupted' record."""
TEMPLATE = "job.sh.j2"


def _comment(text: str) -> str:
    """Text for a `#` comment line: control characters escaped, so nothing can end the comment."""
    return "".join(c if ord(c) >= 32 and ord(c) != 127 else repr(c)[1:-1] for c in str(text))


def _env(point: SlurmPoint) -> str:
    """The point's environment as `export` words, less the thread counts (set after `slurm-job prepare`)."""
    env = build_env(point.config, base={})
    return " ".join(
        f"{k}={shlex.quote(v)}" for k, v in sorted(env.items()) if k not in ("OMP_NUM_THREADS", "MKL_NUM_THREADS")
    )


JINJA = jinja2.Environment(
    loader=jinja2.FileSystemLoader(Path(__file__).parent),
    autoescape=False,
    undefined=jinja2.StrictUndefined,
    trim_blocks=True,
    lstrip_blocks=True,
    keep_trailing_newline=True,
)
JINJA.filters.update(
    q=lambda v: shlex.quote(str(v)),
    sh=lambda v: shell_join([v]),
    sbatch=sbatch_value,
    comment=_comment,
    env=_env,
    launch=lambda p: shell_join(p.launcher.sbatch_step(p.strategy, p.config)),
)


def render(**context) -> str:
    return JINJA.get_template(TEMPLATE).render(signal_lead_s=SIGNAL_LEAD_S, **context)


def render_point(point: SlurmPoint) -> str:
    """The point's shell variables, as a sweep script's `case` holds them."""
    template = JINJA.get_template(TEMPLATE)
    return "".join(template.blocks["point"](template.new_context({"p": point})))


def render_script(plan: SlurmPlan, settings: SlurmSettings) -> str:
    resources = {}
    for pts in plan.shapes().values():
        argv = sbatch_argv(pts, settings)
        for p in pts:
            resources[p.index] = " ".join(a for a in argv if a.startswith(("--nodes", "--ntasks", "--gres")))
    return render(
        mode="sweep",
        s=settings,
        points=plan.points,
        resources=resources,
        shape=None,
        python=settings.python,
        records=str(settings.records_dir),
        generated=_now(),
    )


def render_submit(plan: SlurmPlan, settings: SlurmSettings) -> str:
    q = shlex.quote
    lines = [
        "#!/bin/bash",
        f"# Submit the distbench sweep {q(str(settings.script))}: one job array per resource shape.",
        "# Prints one job id per array.",
        "set -euo pipefail",
        f"mkdir -p {q(str(settings.records_dir / 'logs'))}",
    ]
    for pts in plan.shapes().values():
        lines += [f"# points {', '.join(p.key for p in pts)}", shlex.join(sbatch_argv(pts, settings))]
    return "\n".join(lines) + "\n"


def _now() -> str:
    return _dt.datetime.now().astimezone().isoformat(timespec="seconds")


def manifest(plan: SlurmPlan, settings: SlurmSettings) -> dict:
    return {
        "kind": MANIFEST_KIND,
        "version": __version__,
        "script": str(settings.script),
        "generated": _now(),
        "command": settings.command,
        "points": [
            {
                "index": p.index,
                "key": p.key,
                "strategy": p.strategy.name,
                "world_size": p.config.world_size,
                "nodes": p.nodes,
                "launcher": p.launcher.name,
            }
            for p in plan.points
        ],
    }


def write_sweep(plan: SlurmPlan, settings: SlurmSettings) -> list[Path]:
    try:
        for sub in ("logs", "work"):
            (settings.records_dir / sub).mkdir(parents=True, exist_ok=True)
        settings.script.parent.mkdir(parents=True, exist_ok=True)
        settings.script.write_text(render_script(plan, settings))
        settings.submit_script.write_text(render_submit(plan, settings))
        settings.submit_script.chmod(0o755)
        settings.manifest.write_text(json.dumps(manifest(plan, settings), indent=1) + "\n")
    except OSError as exc:
        raise BadInput(f"cannot write the sweep: {exc.strerror}: {exc.filename}") from None
    return [settings.script, settings.submit_script, settings.manifest]
