"""``trainprobe incidents`` and ``report`` over hostile, rotated and large incident logs.

- Table-driven: every hostile shape found so far (a known type and id, an
  unexpected shape) is skipped with exactly one line on stderr, and every
  other record, before and after it, is still shown; no traceback, ever.
- A rule of ``$\\undefinedmacro$`` reaches matplotlib as text, not maths.
- Memory: the commands stream the log; their peak RSS does not grow with it
  (the 1 GB figure is bench/bench_incident_log.py's).
- ``incidents --json | head`` ends quietly.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.support import PYTHON, child_env
from trainprobe.sidecar.cli import ctl
from trainprobe.sidecar.cli.incidents.log_stream import MAX_LINE_BYTES, OPEN_STORIES, stream_stories
from trainprobe.sidecar.cli.incidents.record_shape import shape_problem
from trainprobe.sidecar.cli.incidents.story import culprit_line, summary_line
from trainprobe.sidecar.cli.incidents.timeline import timeline
from trainprobe.sidecar.cli.report.page import ReportData
from trainprobe.sidecar.cli.report.story import events, main_story, what_happened

JOB = "hostile"
NOWHERE = "unix:///nonexistent/trainprobe-test.sock"


def incident(key: str, **fields: Any) -> dict[str, Any]:
    rec = {
        "type": "incident", "id": key, "time": 1_780_000_000.0, "job_id": JOB,
        "rule": "stall", "verdict": "HUNG", "ranks": [0, 1], "pids": [10, 11],
        "culprits": [1], "waiting": [0], "action": "kill", "detection_latency_s": 3.0,
        "diagnosis": {"kind": "straggler", "text": "rank 1 stalled", "where": {"1": "a.py:3"}},
    }  # fmt: skip
    rec.update(fields)
    return rec


def later(kind: str, key: str, **fields: Any) -> dict[str, Any]:
    return {"type": kind, "incident_id": key, **fields}


#: Each hostile record, as it is written in the log (raw text where JSON cannot say it).
HOSTILE: list[str] = [
    json.dumps(incident("h-culprits-int", culprits=5)),
    json.dumps(incident("h-culprits-str", culprits="x")),
    json.dumps(incident("h-culprit-object", culprits=[{}])),
    json.dumps(incident("h-culprits-null", culprits=None)),
    json.dumps(incident("h-waiting-null", waiting=None)),
    json.dumps(incident("h-diagnosis-str", diagnosis="x")),
    json.dumps(incident("h-where-int", diagnosis={"where": 5})),
    json.dumps(incident("h-where-object", diagnosis={"where": {"1": {"a": 1}}})),
    json.dumps(incident("h-time-str", time="x")),
    json.dumps(incident("h-time-nan", time=float("nan"))),  # NaN, as Python writes it
    json.dumps(incident("h-time-inf", time=1.0)).replace('"time": 1.0', '"time": 1e400'),
    json.dumps(incident("h-time-huge", time=1e300)),
    json.dumps(incident("h-time-negative", time=-5e12)),
    json.dumps(incident("h-latency-str", detection_latency_s="x")),
    json.dumps(incident("h-ranks-str", ranks="abc")),
    json.dumps(incident("h-pids-int", pids=5)),
    json.dumps(incident("h-ranks-lists", ranks=[[1]], pids=[[2]])),
    json.dumps(incident("h-job-object", job_id={"a": 1})),
    json.dumps(incident("h-decision-str", decision="x")),
    json.dumps(incident("h-evidence-list", decision={"evidence": [1, 2]})),
    json.dumps(incident("h-evidence-object", decision={"evidence": {"0": {"label": {}}}})),
    json.dumps(incident("h-deep", extra=json.loads("[" * 40 + "]" * 40))),
    '{"type": "incident", "id": "h-deeper", "x": ' + "[" * 100_000 + "]" * 100_000 + "}",
    '{"type": "incident", "id": "h-bigint", "time": 1' + "0" * 5000 + "}",
    json.dumps(later("decision", "good-1", decided_after_s="x", act=True)),
    json.dumps(later("decision", "good-1", evidence=5)),
    json.dumps(later("decision", "good-1", evidence={"1": {"stack_same": []}})),
    json.dumps(later("action", "good-1", outcomes={"1": 5})),
    json.dumps(later("action", "good-1", outcomes=[1, 2])),
    json.dumps(later("action", "good-1", outcomes={"1": {"signals": 5}})),
    json.dumps(later("action", "good-1", outcomes={"1": {"signals": [{}], "seconds": "x"}})),
    json.dumps(later("recovery", "good-1", resumed_after_s="soon")),
    json.dumps(later("recovery", "good-1", resumed_after_s=9.2e18)),
    json.dumps(later("action", "good-1", outcomes={"1": {"method": 1.0}})),
    json.dumps(later("incident_update", "good-1", ranks=7)),
]
#: Lines that are no record at all: skipped with one line each, as before.
FOREIGN = ["not json", "[1, 2]", "5", "null", '{"type": "incident", "id": 5}', "\udcff\udcfe"]
#: Well-formed records, around the hostile ones; a ``$...$`` rule among them.
GOOD = [
    json.dumps(incident("good-1", rule="$\\undefinedmacro$")),
    json.dumps(later("decision", "good-1", act=True, rule="confirmed", decided_after_s=4.0)),
    json.dumps(
        later("action", "good-1", action="kill", outcomes={"1": {"exited": True, "pid": 11}})
    ),
    json.dumps(incident("good-2", time=1_780_000_100.0, verdict="UNRESPONSIVE")),
]


def write_log(path: Path) -> None:
    lines = [GOOD[0], *HOSTILE[:10], *GOOD[1:3], *FOREIGN, *HOSTILE[10:], GOOD[3]]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8", errors="surrogateescape")


def run_ctl(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = ctl.main(list(argv))
    return code, out.getvalue(), err.getvalue()


def warnings_in(stderr: str) -> list[str]:
    return [x for x in stderr.splitlines() if x.startswith("trainprobe: warning: ")]


@pytest.fixture()
def log(tmp_path: Path) -> Path:
    path = tmp_path / "incidents.jsonl"
    write_log(path)
    return path


def test_incidents_skip_each_hostile_record_with_one_line(log: Path) -> None:
    code, out, err = run_ctl("incidents", "--log", str(log))
    assert code == 0, err
    assert "Traceback" not in out + err
    assert len(warnings_in(err)) == len(HOSTILE) + len(FOREIGN), err
    assert err.count("has an unexpected shape") + err.count("nested deeper") >= len(HOSTILE) - 2
    lines = out.splitlines()
    assert [x.split()[2] for x in lines] == ["good-1", "good-2"], out
    assert "rank 1 exited" in lines[0] and "decision confirmed" in lines[0], out
    for flags in (("--json",), ("good-1",), ("good-1", "--json"), ("--job", JOB)):
        code, out, err = run_ctl("incidents", "--log", str(log), *flags)
        assert code == 0 and "Traceback" not in out + err, err
        assert len(warnings_in(err)) == len(HOSTILE) + len(FOREIGN), err
    shown = json.loads(run_ctl("incidents", "--json", "--log", str(log))[1])
    assert [s["id"] for s in shown] == ["good-1", "good-2"]
    assert shown[0]["rule"] == "$\\undefinedmacro$"


def report(log: Path, out_dir: Path) -> tuple[int, str, str]:
    return run_ctl(
        "report", "--target", NOWHERE, "--job", JOB, "--log", str(log),
        "--watch-s", "0", "--out", str(out_dir),
    )  # fmt: skip


def test_report_skips_each_hostile_record_with_one_line(log: Path, tmp_path: Path) -> None:
    code, out, err = report(log, tmp_path / "page")
    assert code == 0, err
    assert "Traceback" not in out + err
    assert len(warnings_in(err)) == len(HOSTILE) + len(FOREIGN), err
    assert "2 incident(s)" in out
    page = (tmp_path / "page" / "report.html").read_text()
    assert "incident good-1" in page and "incident good-2" in page


def test_report_draws_dollar_signs_as_text(tmp_path: Path) -> None:
    log = tmp_path / "incidents.jsonl"
    log.write_text("\n".join(GOOD) + "\n")
    code, _, err = report(log, tmp_path / "page")
    assert code == 0 and not err, err  # matplotlib raised on the macro it tried to parse
    assert "$\\undefinedmacro$" in (tmp_path / "page" / "report.html").read_text()
    assert (tmp_path / "page" / "timeline.png").stat().st_size > 0


def big_log(path: Path, mb: float) -> None:
    """Sidecar-like records (incident, decision, action), ``mb`` megabytes of them."""
    with open(path, "w") as f:
        n = 0
        while f.tell() < mb * 1e6:
            key = f"i{n:08d}"
            f.write(
                json.dumps(incident(key, time=1.78e9 + n)) + "\n"
                + json.dumps(later("decision", key, act=True, rule="confirmed")) + "\n"
                + json.dumps(later("action", key, outcomes={"1": {"exited": True}})) + "\n"
            )  # fmt: skip
            n += 1


def peak_rss_mb(*argv: str) -> float:
    """The kernel's peak RSS of ``trainprobe argv``, its output thrown away."""
    with open(os.devnull, "w") as null:
        proc = subprocess.Popen(
            [PYTHON, "-m", "trainprobe.sidecar.cli.ctl", *argv],
            stdout=null,
            stderr=subprocess.PIPE,
            env=child_env(),
        )
        err = proc.stderr.read() if proc.stderr else b""
        _, status, usage = os.wait4(proc.pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0, err
    return usage.ru_maxrss / 1024


def test_memory_does_not_grow_with_the_log(tmp_path: Path) -> None:
    """1 MB and 12 MB logs: the same peak (3.5 GB for 100 MB, before it streamed)."""
    small, large = tmp_path / "small.jsonl", tmp_path / "large.jsonl"
    big_log(small, 1)
    big_log(large, 12)
    for argv in (("incidents", "--json"), ("incidents",)):
        grew = peak_rss_mb(*argv, "--log", str(large)) - peak_rss_mb(*argv, "--log", str(small))
        assert grew < 16, f"{argv}: {grew:.1f} MB more for 11 MB more log"


def test_incidents_json_into_a_closed_pipe_ends_quietly(tmp_path: Path) -> None:
    log = tmp_path / "incidents.jsonl"
    big_log(log, 1)  # far more than a pipe's buffer of output
    head = subprocess.run(
        f"{PYTHON} -m trainprobe.sidecar.cli.ctl incidents --json --log {log} | head -3",
        shell=True,
        env=child_env(),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert head.stdout.count("\n") == 3
    assert head.stderr == "", head.stderr  # no BrokenPipeError traceback, no warning


_JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=3), inner, max_size=3)
    ),
    max_leaves=8,
)
#: Every field a reader reads, of each record type; each drawn with any JSON value.
_FIELDS = {
    "incident": [
        "time", "job_id", "job_name", "rule", "verdict", "culprits", "waiting", "ranks",
        "pids", "diagnosis", "decision", "action", "action_reason", "detection_latency_s",
    ],
    "decision": ["act", "rule", "decided_after_s", "stalled_s", "paused_s", "why", "evidence"],
    "action": ["action", "dry_run", "outcomes"],
    "recovery": ["rank", "new_pid", "first_step", "resumed_after_s"],
    "incident_update": ["verdict", "rule", "ranks"],
}  # fmt: skip
_NESTED = {
    "diagnosis": ["where", "culprits", "waiting", "text", "summary", "kind"],
    "decision": ["act", "why", "evidence", "rule"],
    "outcomes": ["exited", "pid_gone", "signals", "method", "seconds", "pid", "error"],
    "evidence": ["label", "state", "cpu_ratio", "stack_same", "samples", "where"],
}


@st.composite
def _record(draw: st.DrawFn, kind: str) -> dict[str, Any]:
    base = incident("fz") if kind == "incident" else later(kind, "fz")
    for name in draw(st.lists(st.sampled_from(_FIELDS[kind]), max_size=3, unique=True)):
        inner = _NESTED.get(name)
        if name == "outcomes" or name == "evidence":  # rank -> object of known fields
            value: Any = {"1": draw(st.dictionaries(st.sampled_from(_NESTED[name]), _JSON))}
        elif inner and draw(st.booleans()):
            value = draw(st.dictionaries(st.sampled_from(inner), _JSON, max_size=3))
        else:
            value = draw(_JSON)
        base[name] = value
    return base


@settings(max_examples=300, deadline=None)
@given(records=st.lists(st.sampled_from(list(_FIELDS)).flatmap(_record), min_size=1, max_size=4))
def test_every_record_the_shape_check_passes_can_be_shown(records: list[dict[str, Any]]) -> None:
    """Not the last guard (``shown``): the shape check alone keeps every reader whole."""
    kept = [(r, 1) for r in [incident("fz"), *records] if shape_problem(r) is None]
    for story in stream_stories(kept, warn=lambda line: None):
        summary_line(story)
        timeline(story)
        culprit_line(story.incident)
        json.dumps(story.to_json())
        data = ReportData(job_id=JOB, stories=[story])
        data.culprit()
        events([story])
        main_story([story])
        what_happened([story])


def test_the_window_keeps_each_story_whole_and_in_log_order() -> None:
    """Past OPEN_STORIES incidents, stories leave the window in log order, each with
    its later records (here written 100 incidents after it, as a slow kill would)."""
    n, lag = OPEN_STORIES * 3, 100
    records: list[tuple[dict[str, Any], int]] = []
    for i in range(n + lag):
        if i < n:
            records.append((incident(f"w{i}"), 300))
        if i >= lag:
            records.append((later("action", f"w{i - lag}", action="kill"), 100))
    got = list(stream_stories(records, warn=lambda line: pytest.fail(line)))
    assert [s.id for s in got] == [f"w{i}" for i in range(n)]
    assert all(len(s.later) == 1 for s in got)


def test_a_line_past_the_bound_is_skipped_unread(tmp_path: Path) -> None:
    log = tmp_path / "incidents.jsonl"
    huge = json.dumps(incident("huge", text="x" * (MAX_LINE_BYTES + 10)))
    log.write_text("\n".join([GOOD[0], huge, GOOD[3]]) + "\n")
    code, out, err = run_ctl("incidents", "--log", str(log))
    assert code == 0 and [x.split()[2] for x in out.splitlines()] == ["good-1", "good-2"]
    assert warnings_in(err) == [f"trainprobe: warning: {log}:2: a line over 16 MiB: skipped"]
