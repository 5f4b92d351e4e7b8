"""Domain errors. The CLI turns them into one-line messages with the right exit code."""

INSTALL_HINT = "run `make install` (creates .venv with torch, TensorFlow and Horovod)"
"""How to get a missing framework: the worker's 'skipped' record and the parent's skip rule say the same."""


class DistbenchError(Exception):
    """A failure the user should see as one line, exit code 1."""

    exit_code = 1


class BadInput(DistbenchError):
    """Bad user input: one line, exit code 2."""

    exit_code = 2
