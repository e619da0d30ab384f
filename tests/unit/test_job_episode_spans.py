"""A summary-mode upstream's job episodes as spans: the pure part, on a fake clock.

What the upstream's hub holds (job -> its episode note or None) goes in at
each poll; the spans of the episodes that ended come out.
"""

from __future__ import annotations

import re

from trainprobe.sidecar.core.job.view import EpisodeNote
from trainprobe.sidecar.otel.traces.ids import episode_trace_id
from trainprobe.sidecar.otel.traces.job_episodes import (
    ALL_BURST,
    ALL_PER_S,
    CULPRITS_LISTED,
    JOB_BURST,
    JOB_REFILL_S,
    MAX_OPEN,
    JobEpisodeSpans,
    episode_changes,
)

WMM = 1_000.0  # the wall clock minus the monotonic one
NS = 1_000_000_000
CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\u202a-\u202e]")


def _note(eid: str = "inc-1", job: str = "j", culprits: tuple[int, ...] = (), **kw) -> EpisodeNote:
    kw = {"opened_by": "node-b", "verdict": "HUNG", "rule": "stall", **kw}
    return EpisodeNote(eid, job, culprits=culprits, **kw)


def test_episode_changes_names_the_episodes_that_came_and_went() -> None:
    held = {"a": "1", "b": "2", "c": "3"}
    seen = {"a": "1", "b": "9", "d": "4"}
    opened, went = episode_changes(held, seen)
    assert sorted(opened) == ["b", "d"]  # b: another episode; d: a new one
    assert sorted(went) == ["b", "c"]  # c: closed or its job gone
    assert episode_changes({}, {}) == ([], [])
    assert episode_changes(held, held) == ([], [])


def test_an_episode_is_one_span_from_first_seen_to_its_close_with_its_last_note() -> None:
    spans = JobEpisodeSpans()
    assert spans.poll({"j": None}, 5.0, WMM) == []
    assert spans.poll({"j": _note()}, 10.0, WMM) == []  # open: nothing exported yet
    # The culprit and where it is stuck come later (a follower's place too).
    later = _note(culprits=(1,), kind="straggler", text="rank 1 stopped", where={1: "step()"})
    assert spans.poll({"j": later}, 11.0, WMM) == []
    assert len(spans) == 1
    [span] = spans.poll({"j": None}, 15.0, WMM)
    assert span.name == "job episode HUNG stall"
    assert span.trace_id == episode_trace_id("j", "inc-1") and span.parent_id is None
    assert (span.start_ns, span.end_ns) == ((10 + WMM) * NS, (15 + WMM) * NS)
    a = span.attributes
    assert a["trainprobe.job_id"] == "j" and a["trainprobe.episode.id"] == "inc-1"
    assert a["trainprobe.episode.opened_by"] == "node-b"
    assert (a["trainprobe.verdict"], a["trainprobe.rule"]) == ("HUNG", "stall")
    assert a["trainprobe.culprits"] == [1] and a["trainprobe.culprits.count"] == 1
    assert a["trainprobe.episode.kind"] == "straggler"
    assert a["trainprobe.episode.text"] == "rank 1 stopped"
    assert a["trainprobe.episode.where"] == "1: step()"
    assert a["trainprobe.episode.end"] == "closed"
    assert "trainprobe.episodes.suppressed" not in a
    assert span.error == "HUNG (stall): culprits [1]"
    assert len(spans) == 0 and spans.poll({"j": None}, 16.0, WMM) == []


def test_an_episode_ends_when_replaced_when_its_job_ends_and_when_the_upstream_stops() -> None:
    spans = JobEpisodeSpans()
    spans.poll({"a": _note("1", "a"), "b": _note("2", "b"), "c": _note("3", "c")}, 1.0, WMM)
    out = spans.poll({"a": _note("9", "a", verdict="DEGRADED"), "c": _note("3", "c")}, 2.0, WMM)
    ends = {s.attributes["trainprobe.job_id"]: s.attributes["trainprobe.episode.end"] for s in out}
    assert ends == {"a": "replaced", "b": "job ended"}
    [a, c] = sorted(spans.close_all(3.0, WMM, "upstream stopped"), key=lambda s: s.name)
    assert a.attributes["trainprobe.episode.id"] == "9" and a.error is None  # not a stop
    assert a.name == "job episode DEGRADED stall"
    assert c.attributes["trainprobe.episode.end"] == "upstream stopped"
    assert c.start_ns == (1 + WMM) * NS and c.end_ns == (3 + WMM) * NS
    assert len(spans) == 0


def test_a_hostile_note_reaches_the_span_escaped_and_bounded() -> None:
    evil = "\x1b[31mred\x07\u202e" + "x" * 4090
    many = tuple(range(256))
    note = EpisodeNote(
        id="\x1b]0;title\x07" + "i" * 240, job_id="j\n", opened_by="evil\r\n", verdict="HUNG",
        rule="stall\x00" * 40, kind=evil[:256], culprits=many, text=evil,
        where={r: evil for r in many},
    )  # fmt: skip
    spans = JobEpisodeSpans()
    spans.poll({"j\n": note}, 1.0, WMM)
    [span] = spans.poll({}, 2.0, WMM)
    a = span.attributes
    for key, value in [*a.items(), ("name", span.name), ("error", span.error)]:
        assert not isinstance(value, str) or not CONTROL.search(value), (key, value)
    assert a["trainprobe.job_id"] == "j\\n" and a["trainprobe.episode.opened_by"] == "evil\\r\\n"
    assert a["trainprobe.episode.text"].startswith("\\x1b[31mred\\x07\\u202exxx")
    assert len(a["trainprobe.episode.text"]) <= 512
    assert all(len(v) <= 1024 for v in a.values() if isinstance(v, str))
    assert a["trainprobe.culprits"] == list(range(CULPRITS_LISTED))
    assert a["trainprobe.culprits.count"] == 256
    assert a["trainprobe.episode.where"].startswith("0: \\x1b[31mred")
    assert span.name == "job episode HUNG"  # a rule that is not a word names nothing
    assert span.error is not None and span.error.startswith("HUNG (stall\\x00stall")
    assert span.error.endswith(",15...]") and len(span.error) < 200


def test_a_node_flapping_episode_ids_gets_a_few_spans_and_a_count() -> None:
    spans = JobEpisodeSpans()
    out = []
    for t in range(600):  # a new episode id at every poll for ten minutes
        out += spans.poll({"j": _note(f"e{t}")}, float(t), WMM)
    out += spans.close_all(600.0, WMM, "upstream stopped")
    assert JOB_BURST <= len(out) <= JOB_BURST + 600 / JOB_REFILL_S + 1, len(out)
    # Each span after the burst says how many episodes of the job went untraced.
    told = sum(s.attributes.get("trainprobe.episodes.suppressed", 0) for s in out)
    last = max(int(s.attributes["trainprobe.episode.id"][1:]) for s in out)
    assert told == last + 1 - len(out) and told > 500  # all but those after the last span
    assert spans.suppressed == 600 - len(out)


def test_job_ids_churned_by_nodes_are_bounded_by_the_rate_for_all_jobs() -> None:
    spans = JobEpisodeSpans()
    out = []
    for t in range(100):  # 50 new jobs a second, each with an episode
        jobs = {f"j{t}-{i}": _note("e", f"j{t}-{i}") for i in range(50)}
        out += spans.poll(jobs, float(t), WMM)
    assert len(out) <= ALL_BURST + 100 * ALL_PER_S + 1, len(out)
    assert len(spans._jobs) <= 4 * MAX_OPEN  # what it remembers per job stays bounded


def test_at_most_max_open_episodes_are_held() -> None:
    spans = JobEpisodeSpans()
    jobs = {f"j{i}": _note("e", f"j{i}") for i in range(MAX_OPEN + 50)}
    spans.poll(jobs, 1.0, WMM)
    assert len(spans) == MAX_OPEN and spans.suppressed >= 50


def test_an_episode_closed_between_two_syncs_is_one_span_at_the_poll_that_finds_it() -> None:
    from dataclasses import replace

    spans = JobEpisodeSpans()
    ended = replace(_note(culprits=(1,)), closed=True)
    [span] = spans.poll({"j": None}, 10.0, WMM, [("j", ended)])
    assert span.start_ns == span.end_ns == (10 + WMM) * NS
    a = span.attributes
    assert a["trainprobe.culprits"] == [1] and a["trainprobe.episode.end"] == "closed"
    assert span.error == "HUNG (stall): culprits [1]" and len(spans) == 0
    # Held open after all (the same id): its span is the open one's, at its end.
    assert spans.poll({"j": _note("inc-2")}, 11.0, WMM, [("j", _note("inc-2"))]) == []
    assert len(spans) == 1
    # The job's rate holds for these too: a node flapping them gets a count.
    flaps = [("j", replace(ended, id=f"f{i}")) for i in range(JOB_BURST + 2)]
    out = spans.poll({"j": _note("inc-2")}, 12.0, WMM, flaps)
    assert len(out) == JOB_BURST - 2 and spans.suppressed == 4
