"""Hints for a mistyped name: the closest valid one (the bottom floor: it imports nothing of distbench)."""

from __future__ import annotations

import difflib
from typing import Iterable


def did_you_mean(name: str, choices: Iterable[str]) -> str:
    """' (did you mean 'resnet18'?)' for the closest of `choices` to a mistyped `name` (case ignored), else ''."""
    by_lower = {c.lower(): c for c in choices}
    close = difflib.get_close_matches(name.lower(), list(by_lower), n=1, cutoff=0.6)
    return f" (did you mean {by_lower[close[0]]!r}?)" if close else ""
