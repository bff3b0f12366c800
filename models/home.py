"""Where hexrag keeps its files on this machine: one home directory, moved with `HEXRAG_HOME`.

    $HEXRAG_HOME          default platformdirs.user_data_dir("hexrag"), e.g. ~/.local/share/hexrag
    ├── models/<name>/    the builds `hexrag quickstart` makes and every command uses by default
    ├── kb/               the default knowledge base                   ($HEXRAG_KB overrides)
    └── cache/            what can be made again                       ($HEXRAG_CACHE overrides)
        ├── weights/      downloaded weight packages
        └── eval-kbs/     the answer evals' knowledge bases (`hexrag eval answers --domain`)

`$HEXRAG_LLM`, `$HEXRAG_EMBEDDER` and `$HEXRAG_SECOND_EMBEDDER` name model directories outright.
Nothing else reads these variables for a default location: `knowledge` (KB, embedders),
`build_scripts.fetch` (weights) and the app's `Settings` (which also takes them as the env twins of
its fields) all ask here. The module sits in `models/` because every layer may import that package
without importing one another.
"""

from __future__ import annotations

import functools
import logging
import os
from collections.abc import Mapping
from pathlib import Path

from platformdirs import user_cache_dir, user_data_dir

log = logging.getLogger(__name__)

# what `hexrag quickstart` builds, in the order a default prefers them: the 1.5B where it was
# built, else the tiny preset
DEFAULT_LLMS = ("qwen2.5-coder-1.5b-instruct", "smollm2-135m-instruct")
# the English embedder, else the multilingual one quickstart builds for a KB mostly in Chinese
DEFAULT_EMBEDDERS = ("all-minilm-l6-v2", "multilingual-e5-small")
DEFAULT_EMBEDDER, MULTILINGUAL_EMBEDDER = DEFAULT_EMBEDDERS

Env = Mapping[str, str]


def _given(env: Env, name: str) -> Path | None:
    value = env.get(name)
    return Path(value).expanduser() if value else None


def home_dir(env: Env = os.environ) -> Path:
    return _given(env, "HEXRAG_HOME") or Path(user_data_dir("hexrag"))


def models_dir(env: Env = os.environ) -> Path:
    return home_dir(env) / "models"


def kb_dir(env: Env = os.environ) -> Path:
    return _given(env, "HEXRAG_KB") or home_dir(env) / "kb"


def cache_dir(env: Env = os.environ) -> Path:
    """What can be made again: downloaded weights, the knowledge bases of the answer evals."""
    return _given(env, "HEXRAG_CACHE") or home_dir(env) / "cache"


def weights_dir(env: Env = os.environ) -> Path:
    return cache_dir(env) / "weights"


def earlier_weights_dir(env: Env = os.environ) -> Path | None:
    """Where versions before the home kept downloads (the per-user cache), unless $HEXRAG_CACHE
    names the cache: reused there rather than downloaded again (1.2 GB for the default model)."""
    return None if "HEXRAG_CACHE" in env else Path(user_cache_dir("hexrag")) / "weights"


def llm_dir(env: Env = os.environ) -> Path:
    return _given(env, "HEXRAG_LLM") or model_dir(*DEFAULT_LLMS, env=env)


def embedder_dir(env: Env = os.environ) -> Path:
    return _given(env, "HEXRAG_EMBEDDER") or model_dir(*DEFAULT_EMBEDDERS, env=env)


def second_embedder_dir(env: Env = os.environ) -> Path | None:
    """$HEXRAG_SECOND_EMBEDDER, else the multilingual embedder where it was built: what reads the
    queries the first cannot, for a KB that holds its vectors (KnowledgeBase.embed_second)."""
    given = _given(env, "HEXRAG_SECOND_EMBEDDER")
    built = models_dir(env) / MULTILINGUAL_EMBEDDER
    return given or (built if is_built(built) else None)


def is_built(path: Path) -> bool:
    return (path / "manifest.json").is_file()


def model_dir(*names: str, env: Env = os.environ) -> Path:
    """The first of `names` built in the home, else one built in a checkout's ./models by an earlier
    version, else where the first one is built in the home (it does not exist yet)."""
    home = models_dir(env)
    for path in [home / n for n in names]:
        if is_built(path):
            return path
    for path in [p for n in names for p in _earlier_dirs(n)]:
        if is_built(path):
            _note_earlier(path, home)
            return path
    return home / names[0]


def _earlier_dirs(name: str) -> list[Path]:
    # Earlier versions built into ./models of the directory `hexrag quickstart` ran in, which the
    # set-up commands make the checkout: beside this package. Using such a build where the home has
    # none (rather than asking for a move or a rebuild) keeps an upgraded checkout working, from any
    # directory, and the log says once where the build is and how to move it.
    beside_package = Path(__file__).resolve().parent / name
    in_cwd = (Path.cwd() / "models" / name).resolve()
    return [beside_package] if in_cwd == beside_package else [beside_package, in_cwd]


@functools.cache
def _note_earlier(path: Path, home: Path) -> None:
    log.info("hexrag: using %s, built by an earlier version (%s has no build; `mv %s %s/` moves it into the home)",
             path, home, path, home)
