"""bench/report.py rewrites only its own block of docs/PERFORMANCE.md."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

from report import BEGIN, END, splice

DOC = "# Performance\n\nIntro.\n\n## Issue 4: Ray\n\nHand-written figures.\n"


def test_block_goes_after_the_intro_and_keeps_other_sections() -> None:
    out = splice(DOC, f"{BEGIN}\nfirst\n{END}")
    assert out.index("Intro.") < out.index(BEGIN) < out.index("## Issue 4")
    assert "Hand-written figures." in out


def test_block_is_replaced_in_place_on_the_next_run() -> None:
    once = splice(DOC, f"{BEGIN}\nfirst\n{END}")
    twice = splice(once + "\n## GPU\n\nKept.\n", f"{BEGIN}\nsecond\n{END}")
    assert "first" not in twice and twice.count(BEGIN) == 1
    assert "second" in twice and "Hand-written figures." in twice and "Kept." in twice
