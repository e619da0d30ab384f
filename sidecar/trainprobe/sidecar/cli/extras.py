"""How to install what an optional command needs.

trainprobe is not on PyPI, so ``pip install 'trainprobe[report]'`` fails for
every user; the extra's own requirements install anywhere. They are read from
the installed distribution's metadata: pyproject.toml stays their one source.
"""

from __future__ import annotations

from importlib import metadata

__all__ = ["install_hint"]


def install_hint(extra: str) -> str:
    """``pip install 'matplotlib>=3.8' (trainprobe's report extra)``."""
    try:
        declared = metadata.requires("trainprobe") or []
    except metadata.PackageNotFoundError:  # run from a source tree, not installed
        declared = []
    marker = f'extra == "{extra}"'
    wanted = [r.split(";", 1)[0].strip() for r in declared if marker in r]
    if not wanted:
        return f"install trainprobe's {extra} extra"
    return "pip install " + " ".join(f"'{r}'" for r in wanted) + f" (trainprobe's {extra} extra)"
