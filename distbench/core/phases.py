"""Which phase a point's worker was in when the point overran or was stopped (issue 30, defect 1).

Rank 0 of a worker marks each phase it enters (mark: a small JSON list in DISTBENCH_RANK_DIR, replaced
atomically); before the first mark the point is in "launch and imports" (the launcher, interpreters, imports,
the rank guard, process-group setup). The parent reads the marks (during) for a timeout's or a signal's
one-line reason and the record's `stopped_phase`."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

LAUNCH = "launch and imports"
PHASES = (LAUNCH, "model build", "warmup", "measuring", "teardown")
FILE = "phases.json"


def mark(phase: str, env: dict | None = None, now: float | None = None) -> None:
    """Rank 0 enters `phase` (one of PHASES); nothing where no parent gave a rank folder or on other ranks."""
    from distbench.core.rankguard import rank_of

    env = os.environ if env is None else env
    folder = env.get("DISTBENCH_RANK_DIR")
    if not folder or phase not in PHASES or rank_of(env) != 0:
        return
    path = Path(folder) / FILE
    try:
        seen = json.loads(path.read_text()) if path.exists() else []
        seen.append([phase, time.time() if now is None else now])
        tmp = path.with_name(FILE + ".tmp")
        tmp.write_text(json.dumps(seen))
        tmp.replace(path)
    except (OSError, ValueError):
        pass  # a mark only helps explain an overrun: it is never a reason for the point to fail


def during(rank_dir: str | os.PathLike, started: float, now: float | None = None) -> tuple[str, str]:
    """(the phase at `now`, 'during warmup, 21 s into it (launch and imports 14 s, model build 3 s)'): the
    seconds each earlier phase took, summed per phase (in-process variants enter warmup and measuring again)."""
    now = time.time() if now is None else now
    try:
        seen = [(str(p), float(t)) for p, t in json.loads((Path(rank_dir) / FILE).read_text())]
    except (OSError, ValueError, TypeError):
        seen = []
    marks = [(LAUNCH, started), *seen]
    spent: dict[str, float] = {}
    for (phase, t0), (_, t1) in zip(marks, marks[1:]):
        spent[phase] = spent.get(phase, 0.0) + max(0.0, t1 - t0)
    phase, since = marks[-1]
    done = ", ".join(f"{p} {s:.0f} s" for p, s in spent.items())
    return phase, f"during {phase}, {max(0.0, now - since):.0f} s into it" + (f" ({done})" if done else "")


PROGRESS = "progress.json"


def progress(doc: dict, env: dict | None = None) -> None:
    """Rank 0's latest progress inside a long run (converge: each evaluation), for the parent to show while the
    run goes on; replaced atomically, nothing where no parent gave a rank folder or on other ranks."""
    from distbench.core.rankguard import rank_of

    env = os.environ if env is None else env
    folder = env.get("DISTBENCH_RANK_DIR")
    if not folder or rank_of(env) != 0:
        return
    path = Path(folder) / PROGRESS
    try:
        tmp = path.with_name(PROGRESS + ".tmp")
        tmp.write_text(json.dumps(doc))
        tmp.replace(path)
    except (OSError, ValueError):
        pass  # progress is for the eye only


def read_progress(rank_dir: str | os.PathLike) -> dict | None:
    """The last progress a run's rank 0 wrote (progress), or None."""
    try:
        doc = json.loads((Path(rank_dir) / PROGRESS).read_text())
    except (OSError, ValueError):
        return None
    return doc if isinstance(doc, dict) else None
