"""examples/ray_replicated.py's ``train_func`` is examples/ddp_replicated.py's
``main`` (examples/ddp_train.py's with 3 changed lines) with three lines Ray
Train's way: the count docs/RECOVERY.md gives."""

from __future__ import annotations

import difflib
import re

from tests.support import REPO

EXAMPLES = REPO / "examples"


def code(name: str, func: str | None = None) -> list[str]:
    """The file's code lines (``func``'s alone if named), comments and blank lines aside."""
    text = (EXAMPLES / name).read_text()
    text = text[text.index('"""', 3) + 3 :]  # the module docstring aside
    if func is not None:
        start = text.index(f"def {func}(")
        text = text[start : text.index("\n\n\n", start)]
    lines = [re.sub(r"\s+#.*$", "", ln) for ln in text.splitlines()]
    return [ln for ln in lines if ln.strip() and not ln.lstrip().startswith("#")]


def test_the_ray_train_func_is_the_replicated_main_with_three_lines_rays_way() -> None:
    plain, ray = code("ddp_replicated.py", "main"), code("ray_replicated.py", "train_func")
    changed = [ln[2:].strip() for ln in difflib.ndiff(plain, ray) if ln[:2] in ("+ ", "- ")]
    assert changed == [
        "def main() -> None:",
        "def train_func(config: dict[str, Any]) -> None:",
        "args = demo_args(__doc__)",
        'args = demo_args(__doc__, config["argv"])',
        'dist.init_process_group("gloo")',  # Ray Train made the replica group's
    ], changed
    # The replicated lines themselves are the launcher script's, the import too.
    replicated = [ln for ln in code("ddp_replicated.py") if "replicate" in ln]
    assert replicated and replicated == [ln for ln in code("ray_replicated.py") if ln in replicated]
