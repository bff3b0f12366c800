"""Where the KB and the embedder live unless told otherwise (flag > environment > the hexrag home)."""

from __future__ import annotations

from pathlib import Path

from models import home


def default_kb_dir() -> Path:
    """$HEXRAG_KB, else <hexrag home>/kb."""
    return home.kb_dir()


def default_embedder_dir() -> Path:
    """$HEXRAG_EMBEDDER, else the embedder `hexrag quickstart` built into <hexrag home>/models."""
    return home.embedder_dir()


def default_second_embedder_dir() -> Path | None:
    """$HEXRAG_SECOND_EMBEDDER, else the multilingual embedder `hexrag quickstart` built (None: none)."""
    return home.second_embedder_dir()
