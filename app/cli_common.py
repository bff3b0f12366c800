"""What every `hexrag` command shares: typed errors become `error: ...` and exit 1, never a traceback."""

from __future__ import annotations

import functools
import sys

import click
from pydantic import ValidationError

from app.bench.errors import BenchError
from app.bundle import BundleError
from app.errors import DOMAIN_ERRORS
from build_scripts.errors import BuildError

# the library's typed errors (the API maps the same table to status codes) and the CLI's own
USER_ERRORS = (*DOMAIN_ERRORS, BuildError, BenchError, BundleError, OSError)


def friendly(fn):
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except USER_ERRORS as e:
            click.echo(f"error: {e}", err=True)
            sys.exit(1)
        except ValidationError as e:  # a HEXRAG_* setting (or a typed record) with a bad value
            click.echo(f"error: {invalid(e)}", err=True)
            sys.exit(1)
        except KeyboardInterrupt:
            click.echo("interrupted", err=True)
            sys.exit(130)

    return wrapper


def invalid(e: ValidationError) -> str:
    """One line for a pydantic error; a setting is named by its environment variable."""
    first = e.errors()[0]
    field = ".".join(str(part) for part in first["loc"])
    name = f"HEXRAG_{field.upper()}" if e.title.endswith("Settings") else f"{e.title}.{field}"
    return f"{name}: {first['msg']} (got {first.get('input')!r})"


def given_settings(**options):
    """Settings from a command's options: an option not given (None) keeps its HEXRAG_* value or default."""
    from app.settings import Settings

    return Settings(**{k: v for k, v in options.items() if v is not None})
