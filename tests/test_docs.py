"""Every command shown in README.md and docs/*.md is a command distbench accepts.

Each `distbench ...` line of a fenced block is parsed by the real CLI, options and arguments converted and
checked by their callbacks, without running the command (a run takes minutes); `make TARGET` lines name a
target of the Makefile; `bash scripts/X` and `python benchmarks/X` lines name files that exist. The README's
one-minute first run is run for real in the slow tier (tests/test_docs.py::test_the_first_run_runs)."""

import re
import shlex
import subprocess
import sys
from pathlib import Path

import click
import pytest

from distbench.cli import cli

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
FENCE = re.compile(r"^```[^\n]*\n(.*?)^```", re.M | re.S)


def fenced_lines(path: Path) -> list[str]:
    lines = []
    for block in FENCE.findall(path.read_text()):
        for line in block.replace("\\\n", " ").splitlines():
            line = line.strip()
            if line.startswith("$ "):
                line = line[2:]
            if line.startswith((".venv/bin/distbench ", "distbench ", "make ", "bash scripts/", "python benchmarks/")):
                lines.append(line)
    return lines


def examples() -> list[tuple[str, str]]:
    return [(p.relative_to(ROOT).as_posix(), line) for p in DOCS for line in fenced_lines(p)]


def command_words(line: str) -> list[str]:
    """The words of the first command of a shell line: up to a pipe, redirection, `&&` or a comment."""
    words = []
    for word in shlex.split(line, comments=True):
        if word in {"|", "||", "&&", ";", ">", ">>", "2>&1", "<"} or word.startswith((">", "2>")):
            break
        words.append(word)
    return words


def parse(command: click.Command, args: list[str], parent=None, name="distbench") -> click.Context:
    """Parse `args` the way `distbench` would, down to the leaf command, without invoking it."""
    ctx = command.make_context(name, list(args), parent=parent)
    if isinstance(command, click.Group):
        rest = [*ctx._protected_args, *ctx.args]
        sub_name, sub, sub_args = command.resolve_command(ctx, rest)
        return parse(sub, sub_args, ctx, sub_name)
    return ctx


def makefile_targets() -> set[str]:
    return set(re.findall(r"^([A-Za-z][\w.-]*):", (ROOT / "Makefile").read_text(), re.M))


def test_the_docs_show_commands():
    found = examples()
    assert len(found) >= 30, found
    assert any(doc == "README.md" for doc, _ in found)


@pytest.mark.parametrize(("doc", "line"), examples())
def test_every_documented_command_is_accepted(doc, line):
    words = command_words(line)
    head = words[0]
    if head.endswith("distbench"):
        parse(cli, words[1:])
    elif head == "make":
        targets = [w for w in words[1:] if "=" not in w and not w.startswith("-")]
        assert set(targets) <= makefile_targets(), f"{doc}: {line}"
    else:
        script = words[1]
        assert (ROOT / script).is_file(), f"{doc}: {line}: {script} does not exist"


def first_run_line() -> str:
    text = (ROOT / "README.md").read_text()
    section = text.split("## First run", 1)[1]
    return fenced_lines_of(section)[0]


def fenced_lines_of(text: str) -> list[str]:
    return [line for block in FENCE.findall(text) for line in block.splitlines() if "distbench " in line]


@pytest.mark.slow
def test_the_first_run_runs(tmp_path):
    """The README's first run, as printed there, ends with a stored, ok sweep."""
    words = command_words(first_run_line())
    assert words[0].endswith("distbench")
    proc = subprocess.run(
        [sys.executable, "-m", "distbench.cli", *words[1:]],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert "results stored in" in proc.stdout + proc.stderr
    assert " ok" in proc.stdout


def help_examples() -> list[tuple[str, str]]:
    """Each command's `Example: distbench ...` line from its --help."""
    found = []

    def walk(command: click.Command, path: list[str]) -> None:
        if isinstance(command, click.Group):
            for name, sub in command.commands.items():
                walk(sub, [*path, name])
        for example in re.findall(r"Example:\s*(distbench[^\n]*)", command.help or ""):
            found.append((" ".join(path), example.strip()))

    walk(cli, [])
    return found


@pytest.mark.parametrize(("command", "example"), help_examples())
def test_every_help_example_is_accepted(command, example):
    parse(cli, command_words(example)[1:])


def test_help_examples_are_found():
    assert len(help_examples()) >= 15
