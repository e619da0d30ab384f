"""Every script that injects a hang takes the same three flags, ``--hang-rank``,
``--hang-at`` and ``--hang-how``: a user who ran one example runs the next with
the same words, and the tests' own workers (tests/workers/ddp_worker.py, the
Hugging Face and Lightning workers) speak as the examples do."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

import pytest

from tests.support import REPO

EXAMPLES = REPO / "examples"
#: The flag's old spelling, assembled so that this file is no caller of it.
OLD = "--hang-" + "mode"


def example(name: str, monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    """examples/NAME imported as ``python examples/NAME`` runs it: examples/ on the path."""
    monkeypatch.syspath_prepend(str(EXAMPLES))
    spec = importlib.util.spec_from_file_location(name.removesuffix(".py"), EXAMPLES / name)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_torchrun_example_takes_the_fault_flags_the_ddp_examples_take(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    faults = ["--hang-rank", "1", "--hang-at", "13", "--hang-how", "stop"]
    torchrun = example("torchrun_train.py", monkeypatch).parse_args(["--ckpt-dir", "c", *faults])
    ddp = example("_faults.py", monkeypatch).demo_args(None, faults)
    for args in (torchrun, ddp):
        assert (args.hang_rank, args.hang_at, args.hang_how) == (1, 13, "stop")


def test_no_script_or_page_still_spells_the_fault_flag_the_old_way() -> None:
    roots = ["examples", "tests", "bench", "docs", "deploy", "tools"]
    files = [p for d in roots for p in (REPO / d).rglob("*") if p.suffix in (".py", ".md", ".sh")]
    files += [REPO / "README.md", REPO / "Makefile"]
    callers = [str(p.relative_to(REPO)) for p in files if OLD in _text(p)]
    assert callers == [], f"{OLD} is --hang-how everywhere now: {callers}"


def _text(path: Path) -> str:
    return path.read_text(errors="replace") if path.is_file() else ""
