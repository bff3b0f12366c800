"""Data flows one way: what each layer may import, read from the sources (no import is executed)."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _imports(folder: str) -> dict[str, set[str]]:
    """module path -> the modules it imports (at any depth: imports inside functions count too)."""
    out = {}
    for path in (ROOT / folder).rglob("*.py"):
        names = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                names |= {a.name for a in node.names}
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                names.add(node.module)
        out[str(path.relative_to(ROOT))] = names
    return out


def _offending(folder: str, forbidden: tuple[str, ...]) -> list[str]:
    return sorted(f"{path} imports {name}" for path, names in _imports(folder).items() for name in names
                  if name.startswith(forbidden))


def test_the_answer_engine_knows_no_http():
    assert not _offending("app/answer", ("app.schemas", "app.routers", "app.state", "app.deps", "fastapi",
                                         "starlette", "app.settings"))


def test_lower_layers_never_import_upper_ones():
    assert not _offending("runtime", ("app", "knowledge", "build_scripts"))
    assert not _offending("models", ("app", "knowledge", "runtime", "build_scripts"))
    assert not _offending("knowledge", ("app", "build_scripts"))
