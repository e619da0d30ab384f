"""Every name that a benchmark, example or test imports from trainprobe exists.

Scripts under bench/ and examples/ run only by hand or in `make bench`, so a
moved module or class would otherwise break them silently.
"""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPTS = sorted(
    p for d in ("bench", "examples", "tests") for p in (ROOT / d).rglob("*.py") if p.is_file()
)


def trainprobe_imports(path: Path) -> list[tuple[str, str | None]]:
    out: list[tuple[str, str | None]] = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("trainprobe"):
            out.extend((node.module or "", a.name) for a in node.names)
        elif isinstance(node, ast.Import):
            out.extend((a.name, None) for a in node.names if a.name.startswith("trainprobe"))
    return out


@pytest.mark.parametrize("path", SCRIPTS, ids=lambda p: str(p.relative_to(ROOT)))
def test_its_trainprobe_imports_resolve(path: Path) -> None:
    for module, name in trainprobe_imports(path):
        try:
            mod = importlib.import_module(module)
        except ModuleNotFoundError as err:
            if (err.name or "").startswith("trainprobe"):
                raise
            continue  # an optional dependency of that module is not installed here
        if name is not None and not hasattr(mod, name):
            importlib.import_module(f"{module}.{name}")  # a submodule, or ImportError
