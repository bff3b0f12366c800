"""What every `hexrag` command shares: typed errors become `error: ...` and exit 1, never a traceback;
the `--llm`, `--embedder` and `--kb` options, declared once."""

from __future__ import annotations

import functools
import sys
from pathlib import Path

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


def given(**options) -> dict:
    """The options a command was given (an option not given is None, and keeps its HEXRAG_* value or default)."""
    return {k: v for k, v in options.items() if v is not None}


def given_settings(**options):
    """Settings from a command's options: an option not given (None) keeps its HEXRAG_* value or default."""
    from app.settings import Settings

    return Settings(**given(**options))


# the directories a command may be given, with the setting an option left out falls back to
_DIRS = {"llm": ("LLM model directory", "HEXRAG_LLM"), "embedder": ("Embedder model directory", "HEXRAG_EMBEDDER"),
         "kb": ("Knowledge-base directory", "HEXRAG_KB")}


def dir_options(*names: str, required: bool = False, dest: str = "{}", **helps: str):
    """`--llm`, `--embedder`, `--kb` (those named, in that order). Optional ones fall back to their
    HEXRAG_* setting (given_settings; the help says which); required ones must exist. `dest`: the
    parameter name, "{}" standing for the option's name ("{}_dir": kb_dir); `helps`: a command's own
    help for an option (what the directory is for there)."""
    def decorate(fn):
        for name in reversed(names):
            what, env = _DIRS[name]
            default = f"{what}." if required else f"{what}.  [env {env}]"
            fn = click.option(f"--{name}", dest.format(name), required=required, help=helps.get(name, default),
                              type=click.Path(path_type=Path, exists=required, file_okay=False))(fn)
        return fn
    return decorate
