"""Domain errors. The CLI turns them into one-line messages with the right exit code."""

import difflib
from typing import Iterable


class DistbenchError(Exception):
    """A failure the user should see as one line, exit code 1."""

    exit_code = 1


class BadInput(DistbenchError):
    """Bad user input: one line, exit code 2."""

    exit_code = 2


def did_you_mean(name: str, choices: Iterable[str]) -> str:
    """' (did you mean 'resnet18'?)' for the closest of `choices` to a mistyped `name` (case ignored), else ''."""
    by_lower = {c.lower(): c for c in choices}
    close = difflib.get_close_matches(name.lower(), list(by_lower), n=1, cutoff=0.6)
    return f" (did you mean {by_lower[close[0]]!r}?)" if close else ""
