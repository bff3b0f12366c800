"""What every `hexrag` command shares: typed errors become `error: ...` and exit 1, never a traceback."""

from __future__ import annotations

import functools
import sys

import click

from app.bench.errors import BenchError
from app.bundle import BundleError
from build_scripts.errors import BuildError
from knowledge.errors import KnowledgeError
from models.manifest import ManifestError
from runtime.chat_template import ChatTemplateError
from runtime.errors import ContextOverflowError, RuntimeModelError

USER_ERRORS = (BuildError, ManifestError, RuntimeModelError, ContextOverflowError, KnowledgeError,
               ChatTemplateError, BenchError, BundleError, OSError)


def friendly(fn):
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except USER_ERRORS as e:
            click.echo(f"error: {e}", err=True)
            sys.exit(1)
        except KeyboardInterrupt:
            click.echo("interrupted", err=True)
            sys.exit(130)

    return wrapper
