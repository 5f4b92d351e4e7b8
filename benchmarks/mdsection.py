"""Replace (or append) one '## ' section of a markdown file, so each benchmark owns its section."""

from pathlib import Path


def write_section(path: str, text: str) -> None:
    heading = text.splitlines()[0]
    out = Path(path)
    existing = out.read_text() if out.exists() else "# Benchmarks\n\n"
    start = existing.find(heading)
    if start >= 0:
        end = existing.find("\n## ", start + 1)
        existing = existing[:start] + existing[end + 1 :] if end >= 0 else existing[:start]
    out.write_text(existing.rstrip() + "\n\n" + text)
