"""Every command of the README's "Main commands" table and its "Where results go" block runs and exits 0.

The commands are read from README.md, so the README and this test cannot drift apart. On a machine without
GPUs each command gets the flags in CPU_FLAGS appended (a later flag overrides the README's: the smallest
model, input and step counts that still run the command's real code), and the README lists those flags.
A measuring command must also store at least one ok point. The cases share one store (later rows read the
first row's sweep); a case run alone runs the first row first. The real-process test is marked slow; the
fast test checks that every README command has its entry here."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
from pathlib import Path

import pytest

from distbench.results.store import Store
from tests.conftest import DISTBENCH, quick

README = Path(__file__).resolve().parent.parent / "README.md"

TINY_POINT = quick(timeout=600)
"""resnet18 at 32 px, batch 2, 2 steps after 1 warmup, fixed length, no no-sync variant, no telemetry."""

CPU_FLAGS: dict[str, list[str]] = {
    "distbench scale --gpus 1,2,4 --model resnet50": ["--gpus", "1,2", "--strategy", "ddp", *TINY_POINT],
    "distbench run --strategy ddp --gpus 2": TINY_POINT,
    # At N=2 only (with the N=1 baselines): tests/test_wrappers.py and tests/test_sharded.py run each wrapper and
    # each of fsdp and deepspeed-zero1/2/3 at N=1 and N=2 with their own checks; this row checks the command.
    "distbench scale --gpus 1,2 --strategy ddp,wrappers,sharded": ["--gpus", "2", *TINY_POINT],
    # --strategy adds to a command's list (it replaces nothing), so this row runs its five strategies; at N=1 and
    # N=2, since the predict row after it fits `latest` (this sweep), which needs two N per strategy.
    "distbench scale --model llama --model-size 350m --strategy ddp,fsdp,deepspeed --gpus 1,8": [
        "--model-size",
        "tiny",
        "--gpus",
        "1,2",
        *TINY_POINT[4:],
    ],
    "distbench profile --strategy torch,tf --model resnet18 --image-size 32": [
        "--batch-size",
        "2",
        "--steps",
        "2",
        "--warmup",
        "1",
    ],
    "distbench verify --model resnet18 --gpus 2": ["--strategy", "ddp", "--image-size", "32", "--steps", "2"],
    "distbench converge --strategy torch,ddp --gpus 1,2 --seeds 3": [
        "--strategy",
        "torch",
        "--gpus",
        "1",
        "--seeds",
        "1",
        "--max-steps",
        "20",
        "--target-accuracy",
        "0.2",
    ],
    "distbench fit --strategy ddp,fsdp --gpus 2": [
        "--model",
        "resnet18",
        "--image-size",
        "32",
        "--start",
        "2",
        "--max-batch",
        "4",
    ],
    "distbench comm --gpus 2,4 --sizes 1K:64M": ["--gpus", "2", "--sizes", "1K:64K"],
    "distbench infer --model resnet50 --batch-sizes 1,8,32": ["--batch-sizes", "1", "--image-size", "32"],
    "distbench predict latest --gpus 16,32 --gpus-per-node 8 --link nvlink4 --link ib-ndr": ["--gpus", "2"],
    "distbench compare SWEEP_A SWEEP_B": ["--allow-undecided"],
    "distbench slurm ...": [],
    "distbench k8s ...": [],
    "distbench models": [],
    "distbench results list": [],
    "distbench results show latest": [],
    "distbench results export latest --csv points.csv": [],
    "distbench report latest --out report.html": [],
    "distbench scale --resume latest": [],
}
"""README command -> the flags appended on a CPU machine."""


def readme_commands() -> list[str]:
    """The commands of the "Main commands" table (its first column, several per cell where given) and of the
    "Where results go" block, as written."""
    text = README.read_text()
    table = text.split("## Main commands", 1)[1].split("\n## ", 1)[0]
    out = []
    for row in table.splitlines():
        if row.startswith("| `distbench"):
            out += re.findall(r"`(distbench [^`]+)`", row.split(" | ")[0])
    where = text.split("## Where results go", 1)[1].split("```", 2)[1]
    out += [line.split("#")[0].strip() for line in where.splitlines() if line.strip().startswith("distbench")]
    return out


def test_every_readme_command_has_its_cpu_flags():
    commands = readme_commands()
    assert len(commands) == len(CPU_FLAGS) and set(commands) == set(CPU_FLAGS), set(commands) ^ set(CPU_FLAGS)
    text = README.read_text()
    assert "tests/test_readme_commands.py" in text  # the README says which flags a CPU machine adds
    listed = " ".join(text.split("`tests/test_readme_commands.py` runs", 1)[1].split("## ", 1)[0].split())
    assert f"--timeout {TINY_POINT[TINY_POINT.index('--timeout') + 1]}" in listed


def argv(command: str, sweeps: list[str]) -> list[str]:
    """The command as run here: '...' commands as --help, SWEEP_A SWEEP_B as the first sweep twice."""
    words = shlex.split(command)[1:]
    if "..." in words:
        return [w for w in words if w != "..."] + ["--help"]
    words = [sweeps[0] if w in ("SWEEP_A", "SWEEP_B") else w for w in words]
    return words + CPU_FLAGS[command]


MEASURING = ("scale", "run", "profile", "verify", "converge", "fit", "comm", "infer")
"""The commands that measure: each must store at least one ok point (a sweep whose every point failed exits 0)."""


def _sweeps(store: str) -> list[dict]:
    if not Path(store).exists():
        return []
    with Store(store) as opened:
        return opened.sweeps_with_counts(1000)


def _run(command: str, shared: dict) -> subprocess.CompletedProcess:
    env = dict(os.environ, DISTBENCH_NO_LOCAL_SLURM="1", DISTBENCH_RESULTS=shared["store"])
    return subprocess.run(
        [*DISTBENCH, *argv(command, shared["sweeps"])],
        capture_output=True,
        text=True,
        timeout=1700,
        env=env,
        cwd=shared["folder"],
        stdin=subprocess.DEVNULL,
    )


@pytest.fixture(scope="module")
def shared(tmp_path_factory) -> dict:
    """One store and working folder for the commands, in the README's order (later rows read earlier sweeps)."""
    folder = tmp_path_factory.mktemp("readme")
    return {"folder": folder, "store": str(folder / "distbench.db"), "sweeps": []}


def first_sweep(shared: dict) -> None:
    """The README's first row run once, so that a case that reads a sweep (compare's SWEEP_A, `latest`) has
    one whether the cases run in order or alone (`-k compare`)."""
    if shared["sweeps"]:
        return
    first = readme_commands()[0]
    proc = _run(first, shared)
    assert proc.returncode == 0, f"{first}: exit {proc.returncode}: {proc.stderr.strip()[-1500:]}"
    made = _sweeps(shared["store"])[:1]
    assert made and made[0]["points_ok"] >= 1, f"{first}: {made}"
    shared["sweeps"].append(made[0]["id"])


@pytest.mark.slow
@pytest.mark.timeout(1800)  # the wrappers row runs 11 strategies at N = 2 on a shared 2-core machine
@pytest.mark.parametrize("command", readme_commands())
def test_every_readme_command_runs_on_cpu(command, shared):
    """Exit 0; a measuring command also stores at least one ok point (in its new sweep, or in the sweep it
    resumed), since a sweep whose every point failed exits 0 too."""
    first_sweep(shared)
    if command == readme_commands()[0]:
        return  # first_sweep ran it, checked
    before = {row["id"] for row in _sweeps(shared["store"])}
    proc = _run(command, shared)
    args = argv(command, shared["sweeps"])
    assert proc.returncode == 0, f"{shlex.join(args)}: exit {proc.returncode}: {proc.stderr.strip()[-1500:]}"
    if args[0] in MEASURING and "--help" not in args:
        after = _sweeps(shared["store"])
        made = [row for row in after if row["id"] not in before] or after[:1]  # --resume adds to its sweep
        assert made and all(row["points_ok"] >= 1 for row in made), f"{shlex.join(args)}: {made}"
    for written in {"results export": "points.csv", "report": "report.html"}.items():
        if command.startswith(f"distbench {written[0]}"):
            assert (shared["folder"] / written[1]).exists()
