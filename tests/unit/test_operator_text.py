"""The escaping function, the log formatter, and an incident's culprits and waiting ranks."""

from __future__ import annotations

import io
import logging

from trainprobe.sidecar.core.incident import Incident
from trainprobe.sidecar.core.session import Verdict
from trainprobe.sidecar.core.text import SafeLogFormatter, printable
from trainprobe.sidecar.otel.traces.incident_spans import incident_attributes


class Key:
    def __str__(self) -> str:
        return "job\nrank0"


def test_printable_escapes_controls_and_invisible_format_characters() -> None:
    assert (
        printable("a\x1b[31mb\x07\nc\r\t\x00\x7f\x9b")
        == "a\\x1b[31mb\\x07\\nc\\r\\t\\x00\\x7f\\x9b"
    )
    # Bidi overrides and zero-width characters reorder or hide text.
    assert printable("x\u202ey\u200bz\u2028") == "x\\u202ey\\u200bz\\u2028"
    assert printable('[/]{"q": "\\"}é 漢') == '[/]{"q": "\\"}é 漢'  # visible text stays
    assert printable(Key()) == "job\\nrank0"  # not a str: its str(), escaped


def _logged(msg: str, *args: object) -> str:
    """What one warning becomes through the formatter."""
    out = io.StringIO()
    handler = logging.StreamHandler(out)
    handler.setFormatter(SafeLogFormatter("%(message)s"))
    log = logging.getLogger("test_operator_text")
    log.addHandler(handler)
    log.propagate = False
    try:
        log.warning(msg, *args)
    finally:
        log.removeHandler(handler)
    return out.getvalue()


def test_log_formatter_escapes_arguments_not_the_format() -> None:
    out = _logged("job %s rank %d after %.1fs\n  %s", "x\nFORGED\x1b", 3, 1.25, ValueError("e\x07"))
    assert out == "job x\\nFORGED\\x1b rank 3 after 1.2s\n  e\\x07\n"


def test_a_long_list_in_a_log_line_is_cut_with_its_count() -> None:
    """An incident over 10,000 ranks (a partition silences them all) logged every
    rank: a 60 KB line, per log call. A list says its first items and how many."""
    out = _logged("culprits %s waiting %s", list(range(10_000)), [1, 2])
    first = ", ".join(str(i) for i in range(32))
    assert out == f"culprits [{first}, ... 9,968 more] waiting [1, 2]\n"


def _incident(rule: str, ranks: list[int], diagnosis: dict | None = None) -> Incident:
    return Incident(
        id="1-1",
        time=0.0,
        detected_at=1.0,
        job_id="j",
        rule=rule,
        verdict=Verdict.HUNG,
        ranks=ranks,
        pids=[100 + r for r in ranks],
        hosts=[],
        evidence={},
        onset_at=0.0,
        diagnosis=diagnosis,
    )


def test_culprits_and_waiting_mean_one_thing_under_every_rule() -> None:
    # Before a diagnosis: sync_inflight flags the ranks waiting in a collective...
    waiting = _incident("sync_inflight", [0, 2])
    assert (waiting.culprits, waiting.waiting) == ([], [0, 2])
    # ...stall flags the ranks that stopped stepping.
    stalled = _incident("stall", [1])
    assert (stalled.culprits, stalled.waiting) == ([1], [])
    # Diagnosed: the diagnosis says who is at fault and who waits, whatever the rule.
    diag = {"kind": "straggler", "culprits": [1], "waiting": [0, 2]}
    for rule in ("sync_inflight", "stall"):
        inc = _incident(rule, [0, 2], diag)
        rec = inc.to_record()
        assert (rec["culprits"], rec["waiting"], rec["ranks"]) == ([1], [0, 2], [0, 2])
        attrs = incident_attributes(inc, 7)
        assert (attrs["trainprobe.culprits"], attrs["trainprobe.waiting"]) == ([1], [0, 2])
    assert _incident("stall", [0, 1], {"kind": "inconclusive"}).culprits == []


def test_a_kill_that_waits_for_evidence_or_patience_does_not_read_as_done() -> None:
    """The live log line's action says when: a new user read 'action kill on [1]'
    as a kill while it was still waiting on the patience (and the stall ended)."""
    import dataclasses

    inc = dataclasses.replace(_incident("stall", [1]), action="kill", targets=[1])
    assert inc.action_when() == ""  # nothing decided yet
    waiting = {"act": False, "rule": "", "patience_s": 90.0}
    assert (
        dataclasses.replace(inc, decision=waiting).action_when()
        == " once sure (definitive evidence, or 90s stalled)"
    )
    now = {"act": True, "rule": "stopped", "patience_s": 90.0}
    assert dataclasses.replace(inc, decision=now).action_when() == " now (stopped)"
    observing = dataclasses.replace(inc, action="observe", decision=waiting)
    assert observing.action_when() == ""


def test_incidents_says_what_became_of_a_kill() -> None:
    from trainprobe.sidecar.cli.incidents.story import _act

    def act(outcome: str | None, decision: str | None, action: str = "kill") -> str:
        return _act({"action": action, "outcome": outcome, "decision": decision})

    assert act("ok", "stopped") == "kill: ok"
    assert act(None, "resumed") == "kill: not needed (resumed)"
    assert act(None, None) == "kill: not done"
    assert act(None, None, action="observe") == "observe"


def test_incidents_says_a_pending_kill_is_pending() -> None:
    """While the patience runs, 'kill: not done' read as final: it is pending."""
    from trainprobe.sidecar.cli.incidents.story import _act

    j = {"action": "kill", "outcome": None, "decision": None, "patience_s": 90.0}
    j["onset"] = 1000.0
    pending = "kill: pending (once sure: definitive evidence, or 90s stalled)"
    assert _act(j, now=1030.0) == pending
    assert _act(j, now=1200.0) == "kill: not done"  # the patience ran out long ago
    assert _act({**j, "decision": "resumed"}, now=1030.0) == "kill: not needed (resumed)"
    assert _act({**j, "outcome": "rank 1 exited"}, now=1030.0) == "kill: rank 1 exited"
