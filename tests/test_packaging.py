"""Layout and generated code: the package list and the gencode stay in sync."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from tests.support import REPO

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

ROOTS = {"proto": "trainprobe.proto", "hooks": "trainprobe.hooks", "sidecar": "trainprobe.sidecar"}


def declared() -> tuple[set[str], dict[str, str]]:
    data = tomllib.loads((REPO / "pyproject.toml").read_text())
    tool = data["tool"]["setuptools"]
    return set(tool["packages"]), tool["package-dir"]


def test_every_package_folder_is_declared() -> None:
    packages, package_dir = declared()
    found = set()
    for root, top in ROOTS.items():
        assert package_dir[top] == f"{root}/{top.replace('.', '/')}"
        base = REPO / root / "trainprobe"
        assert not (base / "__init__.py").exists(), "trainprobe must stay a namespace package"
        for init in base.rglob("__init__.py"):
            found.add(".".join(init.parent.relative_to(REPO / root).parts))
    assert found == packages


def test_no_top_level_hooks_or_sidecar_module() -> None:
    for root in ROOTS:
        names = {p.name for p in (REPO / root).iterdir()}
        assert names <= {"trainprobe", "__pycache__"}, f"{root}/ holds {names}"


def test_committed_gencode_is_fresh() -> None:
    """Regenerate with the pinned grpcio-tools and compare byte for byte."""
    python = os.environ.get("TRAINPROBE_PROTOC_PYTHON")
    if not python:
        gen = REPO / ".venv-proto" / "bin" / "python"
        python = str(gen) if gen.exists() else ""
    if not python:
        pytest.skip("no generator venv: run `make proto` once (make test sets it up)")
    with tempfile.TemporaryDirectory() as out:
        subprocess.run([python, str(REPO / "tools" / "gen_proto.py"), out], check=True)
        fresh = Path(out) / "trainprobe" / "proto"
        committed = REPO / "proto" / "trainprobe" / "proto"
        names = sorted(p.name for p in fresh.iterdir())
        assert names == ["probe_pb2.py", "probe_pb2.pyi", "probe_pb2_grpc.py"]
        for name in names:
            assert (fresh / name).read_bytes() == (committed / name).read_bytes(), (
                f"{name} is stale: run `make proto` and commit"
            )
