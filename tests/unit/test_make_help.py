"""``make`` alone, or ``make help``, lists the targets and does nothing else: a new
user's first ``make`` used to create ./.venv with every test extra (minutes),
as the venv's rule came first in the Makefile."""

from __future__ import annotations

import re
import shutil
import subprocess

import pytest

from tests.support import REPO

MAKEFILE = REPO / "Makefile"

pytestmark = pytest.mark.skipif(shutil.which("make") is None, reason="no make")


def phony() -> list[str]:
    line = next(ln for ln in MAKEFILE.read_text().splitlines() if ln.startswith(".PHONY:"))
    return line.split(":", 1)[1].split()


@pytest.mark.parametrize("goal", [[], ["help"]], ids=["make", "make help"])
def test_make_alone_lists_every_target_and_runs_nothing(goal: list[str]) -> None:
    dry = subprocess.run(["make", "-n", *goal], cwd=REPO, capture_output=True, text=True)
    assert dry.returncode == 0, dry.stderr
    assert "venv" not in dry.stdout and "pip" not in dry.stdout, dry.stdout
    out = subprocess.run(["make", "-s", *goal], cwd=REPO, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    listed = re.findall(r"^  make (\S+) +\S", out.stdout, re.M)
    assert sorted(listed) == sorted(phony()), out.stdout
