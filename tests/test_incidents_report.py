"""``trainprobe incidents`` and ``trainprobe report`` on a real hang, and the demos' lines.

Two real gloo ranks train with ``--watch-ddp``; rank 1 sleeps inside a step
(its peer waits in the allreduce). The sidecar names it at once and kills it
after a 6 s patience. Meanwhile ``trainprobe report`` samples the sidecar;
afterwards the incident log tells the story. The page is opened in a real
headless Chromium (Debian's), which screenshots it and dumps its DOM.
"""

from __future__ import annotations

import functools
import importlib.util
import json
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from tests import support
from tests.support import (
    PYTHON,
    REPO,
    SidecarProcess,
    Workers,
    child_env,
    short_tmpdir,
    wait_for,
)

pytestmark = pytest.mark.slow
JOB = "rep"
CHROMIUM = "/usr/bin/chromium"


#: ``trainprobe ARGS``; a report renders its plots, which takes a while on 2 busy cores.
ctl = functools.partial(support.ctl, timeout=120)


@dataclass
class Run:
    sc: SidecarProcess
    log: Path
    incident: dict[str, Any]
    report_dir: Path
    report: subprocess.CompletedProcess[str]


@pytest.fixture(scope="module")
def run() -> Iterator[Run]:
    work = short_tmpdir()
    sc = SidecarProcess(work, "--stall-timeout-s", "3", "--hang-patience-s", "6")
    out = work / "report"
    args = ["--steps", "100000", "--step-s", "0.05", "--watch-ddp"]
    with (
        sc,
        Workers(
            2, sc.target, work, job_id=JOB, args=[*args, "--hang-rank", "1", "--hang-at", "60"]
        ),
    ):
        wait_for(lambda: len(sc.status(JOB).workers) == 2, 60, what="both ranks")
        cmd = ["report", "--target", sc.target, "--job", JOB, "--log", str(sc.incident_log)]
        cmd += ["--out", str(out), "--watch-s", "25", "--interval-s", "0.5"]
        report = subprocess.Popen(
            [PYTHON, "-m", "trainprobe.sidecar.cli.ctl", *cmd],
            env=child_env(),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        wait_for(
            lambda: [a for a in sc.incidents("action") if a["job_id"] == JOB], 90, what="the kill"
        )
        stdout, stderr = report.communicate(timeout=120)
        done = subprocess.CompletedProcess(report.args, report.returncode, stdout, stderr)
        incident = next(i for i in sc.incidents() if i["job_id"] == JOB and i["verdict"] == "HUNG")
        yield Run(sc, sc.incident_log, incident, out, done)


def test_the_incident_names_culprit_and_waiting_apart(run: Run) -> None:
    inc = run.incident
    assert inc["culprits"] == [1], inc
    assert 1 not in inc["waiting"]
    assert "ddp_worker.py" in inc["diagnosis"]["where"]["1"]


def test_incidents_lists_one_line_per_incident(run: Run) -> None:
    r = ctl("incidents", "--log", str(run.log))
    assert r.returncode == 0, r.stderr
    assert r.stderr == ""
    (line,) = [x for x in r.stdout.splitlines() if run.incident["id"] in x]
    assert f"job {JOB}" in line and "HUNG" in line
    assert "culprit rank 1 at ddp_worker.py:" in line
    assert "decision patience" in line and "kill: rank 1 exited" in line
    assert f"verdict {run.incident['detection_latency_s']:.1f}s" in line
    rows = json.loads(ctl("incidents", "--json", "--log", str(run.log)).stdout)
    (row,) = [x for x in rows if x["id"] == run.incident["id"]]
    assert row["culprits"] == [1] and row["decision"] == "patience" and row["action"] == "kill"
    # Killed after the 6 s patience: the action comes after the verdict, by at least that.
    assert row["action_after_s"] >= 6.0 > row["verdict_after_s"]
    other = ctl("incidents", "--job", "nope", "--log", str(run.log))
    assert other.returncode == 0 and "no incidents" in other.stdout
    recent = ctl("incidents", "--since", "1h", "--log", str(run.log))
    assert run.incident["id"] in recent.stdout
    future = time.strftime("%Y-%m-%dT%H:%M", time.localtime(time.time() + 7200))
    later = ctl("incidents", "--since", future, "--log", str(run.log))
    assert run.incident["id"] not in later.stdout
    bad = ctl("incidents", "--since", "yesterday", "--log", str(run.log))
    assert bad.returncode == 2 and "use a duration (90s, 30m, 2h, 1d)" in bad.stderr


def test_one_incident_timeline_has_verdict_evidence_decision_action(run: Run) -> None:
    r = ctl("incidents", run.incident["id"], "--log", str(run.log))
    assert r.returncode == 0, r.stderr
    text = r.stdout
    assert text.splitlines()[0].startswith(f"incident {run.incident['id']}  job {JOB}")
    for part in (
        "  verdict   HUNG",
        "culprit (",
        "  decision  act by patience",
        "  action    kill done",
    ):
        assert part in text, text
    assert "    rank 1: " in text and "samples" in text  # the evidence the decision was made on
    assert text.index("verdict") < text.index("act by patience") < text.index("kill done")
    missing = ctl("incidents", "nope-1", "--log", str(run.log))
    assert missing.returncode == 1 and "no incident 'nope-1'" in missing.stderr


def test_torn_and_foreign_lines_are_named_and_lose_nothing_else(run: Run, tmp_path: Path) -> None:
    lines = run.log.read_text().splitlines()
    bad = tmp_path / "incidents.jsonl"
    torn = lines[0][: len(lines[0]) // 2]
    bad.write_text("\n".join([torn, *lines, '{"hello": "world"}', "[1, 2]", "not json", ""]))
    r = ctl("incidents", "--log", str(bad))
    assert r.returncode == 0, r.stderr
    warnings = r.stderr.splitlines()
    assert len(warnings) == 4, r.stderr
    assert warnings[0].startswith(f"trainprobe: warning: {bad}:1: not a JSON record")
    assert "a torn write?" in warnings[0]
    assert f"{bad}:{len(lines) + 2}: not an incident-log record" in warnings[1]
    good = ctl("incidents", "--log", str(run.log))
    assert r.stdout == good.stdout  # every incident is still there
    none = ctl("incidents", "--log", str(tmp_path / "absent.jsonl"))
    assert none.returncode == 1 and "no incident log at" in none.stderr


def _module(path: Path) -> ModuleType:
    spec = importlib.util.spec_from_file_location(path.stem, path)
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    sys.modules[path.stem] = mod
    spec.loader.exec_module(mod)
    return mod


def test_the_demos_plain_output_names_the_culprit(run: Run) -> None:
    inc = run.incident
    demo = _module(REPO / "examples" / "demo.py")
    (line,) = [x for x in demo.incident_lines(inc) if x.lstrip().startswith("culprit")]
    assert "culprit (straggler): rank 1" in line, line
    assert "stuck at ddp_worker.py:" in line
    ray_demo = _module(REPO / "examples" / "ray_demo.py")
    described = ray_demo.describe(inc, inc["time"] - 5)
    assert any("culprit" in x and "rank 1" in x and "stuck at" in x for x in described), described
    told = ray_demo.summary([inc], [], None, RuntimeError("x"), 10, inc["time"] - 5)
    assert any("culprit" in x and "rank 1" in x for x in told), told


def test_report_page_in_a_real_headless_browser(run: Run, tmp_path: Path) -> None:
    assert run.report.returncode == 0, run.report.stderr
    page = run.report_dir / "report.html"
    assert page.exists() and (run.report_dir / "heatmap.png").exists()
    assert (run.report_dir / "timeline.png").exists()
    html = page.read_text()
    assert "src='data:image/png;base64," in html  # one self-contained file
    if not Path(CHROMIUM).exists() and shutil.which("chromium") is None:
        pytest.skip("chromium is not installed (apt-get install chromium; make test does as root)")
    browser = CHROMIUM if Path(CHROMIUM).exists() else str(shutil.which("chromium"))
    flags = [
        "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
        "--disable-background-networking", "--disable-component-update", "--disable-sync",
    ]  # fmt: skip
    shot = tmp_path / "shot.png"
    profile = tmp_path / "profile"
    profile.mkdir()
    subprocess.run(
        [browser, *flags, f"--user-data-dir={profile}", f"--screenshot={shot}",
         "--window-size=1200,1800", page.as_uri()],
        capture_output=True, timeout=120, check=False,
    )  # fmt: skip
    assert shot.exists(), "chromium wrote no screenshot"
    import matplotlib.image
    import numpy as np

    pixels = np.asarray(matplotlib.image.imread(shot))[..., :3]
    colours = np.unique((pixels * 255).astype(np.uint8).reshape(-1, 3), axis=0)
    assert len(colours) > 50, f"a blank page: {len(colours)} colours"
    assert pixels.std() > 0.05
    profile2 = tmp_path / "profile2"
    profile2.mkdir()
    dom = subprocess.run(
        [browser, *flags, f"--user-data-dir={profile2}", "--dump-dom", page.as_uri()],
        capture_output=True, text=True, timeout=120, check=False,
    ).stdout  # fmt: skip
    assert run.incident["id"] in dom
    culprit = dom[dom.index('id="culprit"') :].split("</p>")[0]
    assert "Culprit: rank 1 stuck at ddp_worker.py:" in culprit, culprit
    # Above the pictures, in words: who, where, what was done, and whether it resumed.
    story = dom[dom.index('id="story"') :].split("</p>")[0]
    assert "Rank 1 stopped making progress at ddp_worker.py:" in story, story
    assert "rank(s) [0] waited for it" in story and "Action: kill: rank 1 exited" in story
    assert "No resumed training was seen" in story  # its peer's allreduce failed: it ended
    assert dom.index('id="story"') < dom.index("<img")
    assert f"job {JOB}" in dom


def test_report_after_the_fact_from_the_log_alone(run: Run, tmp_path: Path) -> None:
    gone = f"unix://{tmp_path}/none.sock"
    r = ctl(
        "report",
        "--target",
        gone,
        "--job",
        JOB,
        "--log",
        str(run.log),
        "--out",
        str(tmp_path / "o"),
    )
    assert r.returncode == 0, r.stderr
    html = (tmp_path / "o" / "report.html").read_text()
    assert run.incident["id"] in html and "the sidecar was not reached" in html
    assert "Culprit: rank 1 stuck at" in html


def test_a_finished_job_has_no_step_time(run: Run, tmp_path: Path) -> None:
    """Sampled after it ended, a job's 'step time' was the time since it ended."""
    wait_for(
        lambda: all(w.state != "connected" for w in run.sc.status(JOB).workers),
        60,
        what="both ranks to end",
    )
    out = tmp_path / "after"
    r = ctl(
        "report", "--target", run.sc.target, "--job", JOB, "--log", str(run.log),
        "--out", str(out), "--watch-s", "2", "--interval-s", "0.5",
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert "samples)" in r.stdout and " 0 samples" not in r.stdout, r.stdout
    assert not (out / "heatmap.png").exists(), "a heatmap of a job that ran no step"
    html = (out / "report.html").read_text()
    assert "Culprit: rank 1 stuck at" in html and (out / "timeline.png").exists()
    assert "no rank of this job ran while sampled (it had ended): no heatmap" in html
