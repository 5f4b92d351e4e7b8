"""THE worker entry point of every strategy: `python -m distbench.workers MODULE --config C.json --out R.json`.

MODULE is a worker module under distbench.workers (its short name, Strategy.module) or a full dotted path (a
test's worker); it defines FRAMEWORK and body(cfg, out_path), and may define prepare() (run first, e.g. to set
the rank from the cluster's TF_CONFIG). common.run_worker turns its failures into records and exit statuses."""

from __future__ import annotations

import importlib
import sys

USAGE = "usage: python -m distbench.workers MODULE --config CONFIG.json --out RECORD.json"


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if not argv or argv[0].startswith("-"):
        print(USAGE, file=sys.stderr)
        return 2
    name = argv[0] if "." in argv[0] else f"distbench.workers.{argv[0]}"
    try:
        module = importlib.import_module(name)
    except ModuleNotFoundError as exc:
        if exc.name != name:  # a module the worker itself imports: run_worker's error, not this one
            raise
        print(f"{sys.executable}: No module named {name}", file=sys.stderr)  # as `python -m` says it
        return 1
    from distbench.workers import common

    if hasattr(module, "prepare"):
        module.prepare()
    return common.run_worker(module.FRAMEWORK, module.body, argv[1:])


if __name__ == "__main__":
    sys.exit(main())
