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


def test_the_sample_kb_is_named_by_data_not_code():
    """Which sample files are documents, profile and calibration text lives in samples/sample_kb.json;
    no product module names one of them, so no code belongs to one KB's content."""
    from knowledge.sample_kb import sample_kb

    sample = sample_kb()
    assert all(p.is_file() for p in [*sample.document_paths(), *sample.calibration_paths()])
    assert sample.answer_profile().assistant and not any("questions" in name for name in sample.documents)
    root = Path(__file__).resolve().parents[1]
    named = {*sample.documents, *sample.calibration, sample.profile}
    for package in ("app", "models", "knowledge", "runtime", "build_scripts"):
        for module in (root / package).rglob("*.py"):
            text = module.read_text(encoding="utf-8")
            assert not [n for n in named if f'"{n}"' in text], module
