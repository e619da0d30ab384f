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


def test_fault_matrix_goals_count_false_kills_and_wrong_culprits() -> None:
    from bench_faults import summarize_results
    from report_faults import faults_section

    def trial(tool: str, case: str, **kw: object) -> dict:
        healthy = case == "stall8"
        base = {"tool": tool, "case": case, "ranks": 2, "healthy": healthy, "false_kill": False}
        if not healthy:
            base |= {"verdict_s": 5.0, "named_s": 5.0, "culprit_dead_s": 5.5, "all_dead_s": 6.0}
            base |= {"culprit_right": True, "where": True}
        else:
            base["verdicts"] = 0
        return base | kw

    trials = [
        trial("tp_watch", "sleep"),
        trial("tp", "sleep", named_s=None, culprit_right=False),
        trial("tp_watch", "stall8", false_kill=True, verdicts=1),
        trial("tp", "stall8"),
        trial("gloo", "stall8", false_kill=True, verdicts=1),
    ]
    params = {"ranks": [2], "trials": 1, "baseline_trials": 1, "parallel": 1, "cap_s": 150}
    machine = {"cpus": 2, "loadavg_at_start": [1.0]}
    r = {"params": params, "trials": trials, "command": "python bench/bench_faults.py"}
    r |= {"finished_at": "now", "wall_s": 1.0, "machine": machine, **summarize_results(trials)}
    text = "\n".join(faults_section(r))
    assert "| 0 false kills in healthy cases | 1 in 2 jobs | **missed** |" in text
    assert "| culprit right in ≥ 95 % of fault trials | 1 of 2 (50%) | **missed** |" in text
    assert "| one rank stalls 8 s (read) | 2 | gloo 5 s + torchrun | 1 | 1 | 1 |" in text
