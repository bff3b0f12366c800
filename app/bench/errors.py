"""The one user error of the bench area: bad input or a missing model, said in one line."""


class BenchError(Exception):
    """A benchmark or evaluation that cannot run as asked; the message says what to change."""
