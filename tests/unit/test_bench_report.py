"""docs/PERFORMANCE.md is what bench/render.py makes of the committed results.

The page is generated whole: a figure edited by hand, a result file changed
without re-rendering, or a renderer change not rendered, all fail here. The
markdown is rendered without matplotlib; the plots it links must exist.
"""

from __future__ import annotations

import json
import re
import shutil
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bench"))

import render  # noqa: E402

DOC = ROOT / "docs" / "PERFORMANCE.md"


def test_the_committed_page_is_what_the_committed_results_render() -> None:
    assert DOC.read_text() == render.markdown(render.RESULTS), (
        "docs/PERFORMANCE.md is stale: run `python bench/render.py` and commit the result"
    )


def test_the_page_is_a_short_reference() -> None:
    text = DOC.read_text()
    # 400 until the replicated-recovery section (28 lines), +1 for the sessions table's
    # relayed telemetry-off row, +4 for the Ray Train survivors (headline, 2 rows, command),
    # +91 for restarts beside replicas (section 44 with the quiet machine's rows, 6
    # headlines), the starved sidecar (20, 1) and the large incident log (19, 1), +32 for
    # what a sidecar receives under Ray (section 30, 2 headlines), +27 for summary mode's
    # upstream (section 27: this machine's rows, the 16-core machine's before the fix), +23
    # for four replica groups and the start-up hang under Ray Train (section 23), +4 for
    # summary mode at 100,000 ranks after the fix (3 headlines, the merged runs' note), +6
    # for the same runs on a second 16-core host (2 headlines, 3 rows, its note)
    assert text.count("\n") <= 618
    assert not re.search(r"\b[Ii]ssues? \d", text), "no issue numbers in user docs"
    assert not re.search(r"\b20\d\d-\d\d-\d\d\b", text), "no dates: a footnote gives the machine"


def test_every_plot_it_links_is_committed() -> None:
    linked = re.findall(r"\]\((perf/[\w.]+\.png)\)", DOC.read_text())
    assert len(linked) >= 10
    for rel in linked:
        assert (DOC.parent / rel).stat().st_size > 1000, rel


def test_every_section_gives_its_command() -> None:
    sections = DOC.read_text().split("\n## ")[2:]  # after the intro and the headline table
    assert sections
    for body in sections:
        assert "```bash\npython bench/" in body, body.splitlines()[0]


def test_a_missing_result_is_said_so_not_filled_in(tmp_path: Path) -> None:
    results = tmp_path / "results"
    shutil.copytree(render.RESULTS, results)
    (results / "detection.json").unlink()
    text = render.markdown(results)
    assert "*No result file `bench/results/detection.json` yet: run `python bench/" in text
    assert "hang killed, auto thresholds" not in text  # its headline row is gone too


def test_headline_figures_follow_the_results(tmp_path: Path) -> None:
    results = tmp_path / "results"
    shutil.copytree(render.RESULTS, results)
    hook = json.loads((results / "hook_memory.json").read_text())
    hook["per_call"] |= {"net_median_ns": 1500.0, "goal_met": False}
    (results / "hook_memory.json").write_text(json.dumps(hook))
    row = next(r for r in render.markdown(results).splitlines() if r.startswith("| [hook cost"))
    assert "1.50 µs" in row and row.endswith("**missed** |")


def test_restart_and_replica_rows_follow_the_results(tmp_path: Path) -> None:
    results = tmp_path / "results"
    shutil.copytree(render.RESULTS, results)
    restart = json.loads((results / "restart.json").read_text())
    plain = restart["stacks"]["plain/stop"]["summary"]
    plain |= {"failed_restarts": 1, "stepping_again_s_median": None, "steps_redone_median": None}
    (results / "restart.json").write_text(json.dumps(restart))
    rep = json.loads((results / "replicated.json").read_text())
    for fault in rep["summary"]["faults"].values():
        fault |= {"evicted_stepping_s": 14.0, "goal_evicted_s": 15.0}
    (results / "replicated.json").write_text(json.dumps(rep))
    lines = render.markdown(results).splitlines()

    def line(start: str) -> str:
        return next(r for r in lines if r.startswith(start))

    failed = line("| [restarts that failed]")
    assert f"| 1 of {sum(g['summary']['trials'] for g in restart['stacks'].values())}" in failed
    assert failed.endswith("**missed** |")
    assert line("| [replicated: the evicted replica").endswith("**met** |")
    assert line("| plain script, torchrun | SIGSTOP | **none stepped again**").endswith(
        "**missed** |"
    )


def test_four_group_and_start_up_rows_follow_the_results(tmp_path: Path) -> None:
    results = tmp_path / "results"
    shutil.copytree(render.RESULTS, results)

    def edit(name: str, change: object) -> None:
        doc = json.loads((results / f"{name}.json").read_text())
        change(doc["summary"])  # type: ignore[operator]
        (results / f"{name}.json").write_text(json.dumps(doc))

    def rows() -> list[str]:
        return [r for r in render.markdown(results).splitlines() if r.startswith("| ")]

    def line(start: str) -> str:
        return next(r for r in rows() if r.startswith(start))

    launcher, ray = "| 4 groups, `trainprobe run", "| 4 groups, Ray Train"
    startup = "| Ray Train, a rank of the restarted group hangs"
    edit("replicated_4groups", lambda sm: sm["faults"]["stop"].update(survivor_resumed_s=3.4))
    edit("torchft_ray_4groups", lambda sm: sm["ray"]["stop"].update(survivor_same_pid=False))
    edit("ray_startup", lambda sm: sm.update(named_s=11.0, named_s_max=12.5))
    assert "**3.40 s**" in line(launcher) and line(launcher).endswith("**missed** |")
    assert "same pids" not in line(ray) and line(ray).endswith("**missed** |")
    assert "named **11.00 s**" in line(startup) and line(startup).endswith("**missed** |")
    (results / "ray_startup.json").unlink()
    assert not any(r.startswith(startup) for r in rows())


def test_fault_matrix_goals_count_false_kills_and_wrong_culprits() -> None:
    from bench_faults import summarize_results

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
    text = "\n".join(render.faults_section(r))
    assert "| 0 false kills in healthy jobs | 1 in 2 jobs | **missed** |" in text
    assert "| culprit right in ≥ 95 % of fault trials | 1 of 2 (50%) | **missed** |" in text
    assert "| one rank stalls 8 s (read) | 1/1 (1) | 0/1 (0) | 1/1 (1) |" in text


def test_the_cli_check_says_current_or_stale(tmp_path: Path) -> None:
    import subprocess

    script = ROOT / "bench" / "render.py"

    def check(doc: Path) -> subprocess.CompletedProcess[str]:
        cmd = [sys.executable, str(script), "--check", "--doc", str(doc)]
        return subprocess.run(cmd, capture_output=True, text=True, timeout=120)

    ok = check(DOC)
    assert ok.returncode == 0 and "current" in ok.stdout, ok.stdout + ok.stderr
    stale = tmp_path / "PERFORMANCE.md"
    stale.write_text(DOC.read_text().replace("0 in 360 jobs", "0 in 36 jobs"))
    bad = check(stale)
    assert bad.returncode == 1 and "stale" in bad.stdout, bad.stdout + bad.stderr


def _ray_restart_copy(tmp_path: Path) -> tuple[Path, Callable[[], list[str]], dict[str, Any]]:
    """A copy of the results to edit, the page's lines as they render it, and
    the copy's ray_restart.json."""
    results = tmp_path / "results"
    shutil.copytree(render.RESULTS, results)
    ray = json.loads((results / "ray_restart.json").read_text())
    return results, lambda: render.markdown(results).splitlines(), ray


def test_ray_train_sigstop_restart_row_follows_its_result(tmp_path: Path) -> None:
    results, rows, ray = _ray_restart_copy(tmp_path)
    start = "| plain loop, Ray Train | SIGSTOP |"
    ray["summary"]["restart"]["ray_train/stop"] |= {"all_stepping_s": 25.0, "errors": ["x"]}
    (results / "ray_restart.json").write_text(json.dumps(ray))
    row = next(r for r in rows() if r.startswith(start))
    assert "every rank **25.00 s**" in row and "| 1 of " in row and "| ≤ 20 s |" in row
    assert row.endswith("**missed** |")
    headline = next(r for r in rows() if r.startswith("| [every rank steps again after a SIG"))
    assert "Ray Train 25.00 s" in headline and headline.endswith("**missed** |")
    (results / "ray_restart.json").unlink()
    assert not any(r.startswith(start) for r in rows())
    assert "Ray Train's restart after a SIGSTOP (goal ≤ 20 s) has no result yet." in rows()


def test_ray_train_sleep_restart_row_follows_ray_restart_json(tmp_path: Path) -> None:
    # Its sleep trials where ray_restart.json has them; torchft.json's restart section else.
    results, rows, ray = _ray_restart_copy(tmp_path)
    start = "| plain loop, Ray Train | sleep |"
    ray["summary"]["restart"]["ray_train"] |= {"all_stepping_s": 99.5, "trials": 7}
    (results / "ray_restart.json").write_text(json.dumps(ray))
    row = next(r for r in rows() if r.startswith(start))
    assert "every rank **99.50 s**" in row and "| 0 of 7 |" in row
    headline = next(r for r in rows() if r.startswith("| [every rank steps again after a sle"))
    assert "Ray Train 99.50 s" in headline
    assert any("ray_restart.json  # Ray Train's rows" in r for r in rows())
    del ray["summary"]["restart"]["ray_train"]
    (results / "ray_restart.json").write_text(json.dumps(ray))
    ft = json.loads((results / "torchft.json").read_text())["summary"]["restart"]["ray_train"]
    row = next(r for r in rows() if r.startswith(start))
    assert f"every rank **{ft['all_stepping_s']:.2f} s**" in row
