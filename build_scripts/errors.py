"""Typed build errors: the CLI turns each into a one-line message and a non-zero exit."""


class BuildError(Exception):
    """A problem with the user's input (file, format, architecture, option)."""


class UnsupportedModelError(BuildError):
    """The weights are readable but use an architecture or tensor type hexrag cannot build."""
