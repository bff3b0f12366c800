"""The README's two set-up commands, what CI runs, and the pins both install from stay one story."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _bash_blocks(text: str) -> list[str]:
    return [b.strip() for b in re.findall(r"```bash\n(.*?)```", text, re.S)]


def _name(requirement: str) -> str:
    return re.match(r"[A-Za-z0-9_.-]+", requirement).group(0).lower().replace("_", "-")


def test_ci_runs_the_readmes_test_command():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    section = readme.split("## Two commands", 1)[1].split("\n## ", 1)[0]
    install, tests = _bash_blocks(section)[:2]
    ci = re.search(r'^README_TEST_COMMAND="(.*)"$', (ROOT / ".ci/run").read_text(encoding="utf-8"), re.M).group(1)
    assert tests == ci
    for command in (install, tests):
        assert command.startswith("pip install -c constraints.txt -e "), command


def test_every_dependency_is_pinned():
    """A dependency added to pyproject.toml without a known-good version would let a new machine resolve
    whatever was released last: constraints.txt pins each one the two commands install."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    pins = {}
    for line in (ROOT / "constraints.txt").read_text(encoding="utf-8").splitlines():
        if line.strip() and not line.startswith("#"):
            name, _, version = line.partition("==")
            assert version and re.fullmatch(r"[\w.+!-]+", version.strip()), f"not an exact pin: {line!r}"
            pins[_name(name)] = version.strip()
    declared = [*project["dependencies"], *project["optional-dependencies"]["test"]]
    missing = sorted({_name(r) for r in declared} - set(pins))
    assert not missing, f"constraints.txt has no pin for {missing}: run .ci/refresh-constraints"
