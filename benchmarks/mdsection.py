"""Replace (or append) one '## ' section of a markdown file, so each benchmark owns its section."""

import time
from pathlib import Path


def write_section(path: str, text: str) -> None:
    """The section whose heading is `text`'s first line, replaced where it stands (appended when new), so the
    file's order does not depend on the order the benchmarks ran."""
    heading = text.splitlines()[0]
    out = Path(path)
    existing = out.read_text() if out.exists() else "# Benchmarks\n\n"
    start = existing.find("\n" + heading + "\n") + 1  # the whole heading line: one heading may begin another
    start = start if start > 0 else -1
    if start < 0:
        out.write_text(existing.rstrip() + "\n\n" + text.rstrip() + "\n")
        return
    end = existing.find("\n## ", start + 1)
    rest = existing[end + 1 :] if end >= 0 else ""
    out.write_text(existing[:start] + text.rstrip() + "\n" + ("\n" + rest if rest else ""))


def emit(text: str, out: str | None) -> None:
    """Print the section; with --out, write it into that markdown file too."""
    print(text)
    if out:
        write_section(out, text)


def run_line(command: str, start: float) -> str:
    """'Run <date>, `<command>`, <seconds> s on a shared 2-core machine.' for a section's end."""
    return (
        f"Run {time.strftime('%Y-%m-%d', time.gmtime())}, `{command}`, {time.time() - start:.0f} s on a shared "
        "2-core machine."
    )
