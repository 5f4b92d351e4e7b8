"""Domain errors. The CLI turns them into one-line messages with the right exit code."""


class DistbenchError(Exception):
    """A failure the user should see as one line, exit code 1."""

    exit_code = 1


class BadInput(DistbenchError):
    """Bad user input: one line, exit code 2."""

    exit_code = 2
