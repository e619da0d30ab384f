"""The report's words and timeline marks: who, where, what was done, when training resumed."""

from __future__ import annotations

import re
from typing import Any

from trainprobe.sidecar.cli.incidents.story import IncidentStory
from trainprobe.sidecar.cli.report.page import ReportData
from trainprobe.sidecar.cli.report.story import events, what_happened

T = 1_800_000_000.0


def hang(later: list[dict[str, Any]], **kw: Any) -> IncidentStory:
    inc = {
        "type": "incident",
        "id": "i-1",
        "time": T,
        "job_id": "j",
        "rule": "stall",
        "verdict": "HUNG",
        "ranks": [1],
        "culprits": [1],
        "waiting": [0],
        "pids": [4242],
        "action": "kill",
        "detection_latency_s": 3.0,
        "diagnosis": {"culprits": [1], "where": {"1": "train.py:88 in step"}},
        "decision": {"act": False, "rule": "", "patience_s": 6.0},
        **kw,
    }
    return IncidentStory(inc, later)


KILLED = [
    {
        "type": "decision",
        "incident_id": "i-1",
        "act": True,
        "rule": "patience",
        "decided_after_s": 6.0,
    },
    {"type": "action", "incident_id": "i-1", "action": "kill", "outcomes": {"1": {"exited": True}}},
]


def test_a_kill_then_a_restarted_rank_says_who_where_what_and_when_it_resumed() -> None:
    story = hang(
        [*KILLED, {"type": "recovery", "rank": 1, "first_step": 61, "resumed_after_s": 9.0}]
    )
    marks = events([story])
    assert [k for _, _, k in marks] == ["incident", "decision", "action", "recovery"]
    assert marks[-1][0] == T - 3.0 + 6.0 + 9.0 and "rank 1 resumed (step 61)" in marks[-1][1]
    text = what_happened([story])
    assert text.startswith("Rank 1 stopped making progress at train.py:88 in step at ")
    assert "rank(s) [0] waited for it" in text and "HUNG (stall) 3.0 s after it began" in text
    assert "Action: kill: rank 1 exited, 6.0 s after it began." in text
    assert re.search(r"Training resumed at \d\d:\d\d:\d\d: rank 1 resumed \(step 61\)\.$", text)


def test_the_samples_give_the_recovery_point_when_the_log_has_none() -> None:
    story = hang(KILLED)
    times = [T - 4 + i for i in range(12)]
    steps: list[int | None] = [50, 50, 50, 50, 50, 50, 50, None, 50, 51, 53, 55]
    (back,) = [m for m in events([story], times, steps) if m[2] == "recovery"]
    assert back[0] == times[9] and "training resumed (step 51)" in back[1]


def test_a_stall_that_ended_by_itself_resumed_with_nothing_killed() -> None:
    ended = {
        "type": "decision",
        "incident_id": "i-1",
        "act": False,
        "rule": "resumed",
        "stalled_s": 8.0,
    }
    story = hang([ended])
    text = what_happened([story])
    assert "Action: kill: not needed (resumed)." in text and "Training resumed at " in text


def test_a_degraded_incident_never_outranks_the_hang_in_the_headline() -> None:
    slow = hang([], id="i-2", time=T + 20, rule="sync_latency", verdict="DEGRADED",
                ranks=[0], culprits=[0], waiting=[], diagnosis=None)  # fmt: skip
    data = ReportData("j", stories=[hang(KILLED), slow])
    assert data.culprit()[0] == [1]
    assert what_happened(data.stories).startswith("Rank 1 ")
