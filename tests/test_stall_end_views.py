"""When a stall ends, every view names the one culprit, and --job takes the job's name.

Two real gloo ranks train with ``--watch-ddp`` under the shipped patience
(90 s): rank 1 sleeps 8 s before a backward, rank 0 waits in the gradient
allreduce. The sidecar names rank 1 and watches; the stall ends by itself,
and rank 0 reports an 8 s allreduce. That wait was rank 1's doing: no
incident may blame rank 0 for it (a ``DEGRADED (sync_latency)`` against the
waiter was what a new user's report headlined as "Culprit: rank 0").
``status``, ``diagnose``, ``top``, ``incidents``, ``report``, the sidecar's
log lines and the OTel incident spans must agree, each asked with the job's
human name (spaces and markup in it), as a user copies it from ``status``.
"""

from __future__ import annotations

import functools
import json
import re
from pathlib import Path
from typing import Any

import pytest

from tests import support
from tests.support import Workers, short_tmpdir, sidecar, wait_for

pytestmark = pytest.mark.slow

JOB = "stallend"
NAME = "nightly <b>run</b> & co"
ARGS = ["--steps", "100000", "--step-s", "0.02", "--interval-ms", "100", "--watch-ddp"]
DELAY = ["--delay-backward-rank", "1", "--delay-backward-at", "20", "--delay-backward-s", "8"]


ctl = functools.partial(support.ctl, timeout=120, COLUMNS="200")


def spans(traces: Path) -> list[dict[str, Any]]:
    """Every exported span's attributes (OTLP/JSON lines)."""
    out = []
    for line in traces.read_text().splitlines():
        for rs in json.loads(line)["resourceSpans"]:
            for ss in rs["scopeSpans"]:
                for span in ss["spans"]:
                    out.append(
                        {
                            a["key"]: next(iter(a["value"].values()), None)
                            for a in span.get("attributes", [])
                        }
                    )
    return out


@pytest.mark.timeout(240)
def test_the_end_of_a_stall_blames_no_waiting_rank_in_any_view() -> None:
    with (
        sidecar("--stall-timeout-s", "3") as sc,
        Workers(
            2, sc.target, short_tmpdir(), job_id=JOB, env={"TRAINPROBE_JOB_NAME": NAME},
            args=[*ARGS, *DELAY],
        ) as w,
    ):  # fmt: skip
        hang = sc.wait_incident(lambda r: r["job_id"] == JOB, timeout_s=90)
        assert hang["verdict"] == "HUNG" and hang["culprits"] == [1], hang
        assert hang["job_name"] == NAME
        wait_for(
            lambda: [d for d in sc.incidents("decision") if d.get("rule") == "resumed"],
            60,
            what="the stall to end by itself",
        )
        # The waiter's 8 s allreduce is reported and judged within a few reports.
        past = w.max_step(0) + 40
        wait_for(lambda: min(w.max_step(0), w.max_step(1)) > past, 60, what="training on")
        log = sc.log_text()

        # The incident log: one culprit, and never the waiter.
        incidents = [i for i in sc.incidents() if i["job_id"] == JOB]
        assert [(i["verdict"], i["culprits"]) for i in incidents] == [("HUNG", [1])], incidents
        assert not [u for u in sc.incidents("incident_update") if 0 in u.get("culprits", [])]

        # status and diagnose, by the job's name.
        status = ctl("status", "--target", sc.target, "--job", NAME, "--json")
        assert status.returncode == 0, status.stderr
        rows = json.loads(status.stdout)["workers"]
        assert {r["rank"]: r["verdict"] for r in rows} == {0: "OK", 1: "OK"}, rows
        assert {r["jobId"] for r in rows} == {JOB}
        diag = ctl("diagnose", "--target", sc.target, "--job", NAME, "--json")
        assert diag.returncode == 0, diag.stderr
        found = json.loads(diag.stdout)
        assert found["job_id"] == JOB and 0 not in found["culprits"], found

        # top, by name: rank 0 is neither a culprit nor a suspect.
        top = ctl("top", "--target", sc.target, "--job", NAME, "--once")
        assert top.returncode == 0, top.stderr
        row0 = next(x for x in top.stdout.splitlines() if x.split()[:1] == ["0"])
        assert "CULPRIT" not in row0 and "SUSPECT" not in row0, top.stdout
        assert NAME in top.stdout

        # incidents, by name: the one hang, rank 1, and the name shown.
        listed = ctl("incidents", "--log", str(sc.incident_log), "--job", NAME)
        assert listed.returncode == 0, listed.stderr
        (line,) = listed.stdout.splitlines()
        assert f"job {NAME} (id {JOB})" in line and "culprit rank 1" in line, line
        assert "kill: not needed (resumed)" in line, line

        # report, by name, after the fact: rank 1 in the headline, training resumed.
        out = short_tmpdir() / "report"
        report = ctl(
            "report", "--target", sc.target, "--job", NAME, "--log", str(sc.incident_log),
            "--out", str(out), "--watch-s", "0",
        )  # fmt: skip
        assert report.returncode == 0, report.stderr
        assert "(1 incident(s)" in report.stdout, report.stdout
        page = (out / "report.html").read_text()
        assert "Culprit: rank 1" in page and "Culprit: rank 0" not in page
        story = page[page.index("id='story'") :].split("</p>")[0]
        assert "Rank 1 stopped making progress" in story and "Training resumed at" in story

        # The sidecar's log lines: the hang names rank 1; nothing DEGRADED.
        lines = [x for x in log.splitlines() if re.search(rf"incident \S+: job {JOB} ", x)]
        assert lines and all("culprits [1]" in x for x in lines), lines
        assert "DEGRADED" not in log

    # The OTel incident spans: the same single culprit, no sync_latency span.
    sc.stop()
    mine = [
        a for a in spans(sc.state_dir / "traces.otlp.jsonl")
        if a.get("trainprobe.incident.id") and a.get("trainprobe.job.id", JOB) == JOB
    ]  # fmt: skip
    assert mine, "no incident span"
    assert not [a for a in mine if "sync_latency" in json.dumps(a)], mine
    for a in mine:
        if "trainprobe.diagnosis" in a:
            assert json.loads(a["trainprobe.diagnosis"])["culprits"] == [1]
