"""Where the KB and the embedder live unless told otherwise (flag > environment > default)."""

from __future__ import annotations

import os
from pathlib import Path

import platformdirs

DEFAULT_EMBEDDER_DIR = Path("models/all-minilm-l6-v2")  # built by `hexrag quickstart`


def default_kb_dir() -> Path:
    env = os.environ.get("HEXRAG_KB")
    return Path(env).expanduser() if env else Path(platformdirs.user_data_dir("hexrag")) / "kb"


def default_embedder_dir() -> Path:
    env = os.environ.get("HEXRAG_EMBEDDER")
    return Path(env).expanduser() if env else DEFAULT_EMBEDDER_DIR
