"""A model directory is written whole or not at all: every build step writes into a staging
directory next to its output, which replaces the output only when the step succeeded."""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path


@contextlib.contextmanager
def staged_directory(out: Path) -> Iterator[Path]:
    """Yield a temp dir next to `out`; on success it replaces `out`, on failure it is removed (a failed
    run leaves `out` as it was)."""
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.", suffix=".building", dir=out.parent))
    tmp.chmod(0o755)  # mkdtemp makes it private; a model directory is meant to be shared
    try:
        yield tmp
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    old = out.with_name(f".{out.name}.old")
    if out.exists():
        shutil.rmtree(old, ignore_errors=True)
        os.replace(out, old)
    os.replace(tmp, out)
    shutil.rmtree(old, ignore_errors=True)
