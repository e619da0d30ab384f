"""Summary mode in ``trainprobe status``: the node's stream and the upstream's hub."""

from __future__ import annotations

from trainprobe.proto import Endpoint, probe_pb2
from trainprobe.sidecar.cli.ctl import format_status
from trainprobe.sidecar.core.job.digest import JobDigest
from trainprobe.sidecar.core.job.sync import SyncReply
from trainprobe.sidecar.core.job.uplink import Upload
from trainprobe.sidecar.core.job.view import JobView
from trainprobe.sidecar.core.judge.diagnosis import RankSummary
from trainprobe.sidecar.otel.metrics.measures import (
    JOB,
    SYNC_CONNECTED,
    SYNC_LOST,
    SYNC_NODES,
    SYNC_RANKS,
    JobSyncLoad,
    gauge_snapshot,
)
from trainprobe.sidecar.sync.link import LOST_AFTER_S, StreamTransport
from trainprobe.sidecar.sync.upstream import JobSyncUpstream


class Clock:
    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


def test_an_upstream_never_reached_is_down_then_lost_after_the_bound() -> None:
    clock = Clock()
    link = StreamTransport(
        Endpoint("unix", path="/nonexistent/up.sock"), None, None, "n", 10.0, JobView(), clock
    )
    first = link.status()
    assert first.upstream == "unix:///nonexistent/up.sock"
    assert not first.connected and not first.lost and first.last_answer_age_s == -1.0
    assert first.lost_after_s == LOST_AFTER_S
    clock.t += LOST_AFTER_S + 1
    later = link.status()
    assert later.lost and later.state_age_s == LOST_AFTER_S + 1
    text = format_status(probe_pb2.StatusReply(job_sync=later))
    assert "JOB SYNC to unix:///nonexistent/up.sock: LOST (down over 30s" in text, text


def test_an_error_from_the_upstream_is_escaped_in_status_text() -> None:
    reply = probe_pb2.StatusReply(
        job_sync=probe_pb2.JobSyncLinkStatus(
            upstream="tcp://up:7070", last_error="UNAVAILABLE: \x1b[31mred\nforged line"
        )
    )
    text = format_status(reply, wide=True)
    assert "\x1b" not in text and "forged line" in text
    assert not any(line.startswith("forged") for line in text.splitlines())


def test_the_upstream_shows_its_hub_once_a_node_tried_and_counts_only() -> None:
    up = JobSyncUpstream()
    assert up.status() is None  # nothing to show on a sidecar no node synced with
    up.hub.join("node\x1b-a")
    up.joined = 1
    hub = up.status()
    assert hub is not None and hub.nodes == 1 and hub.jobs == 0 and hub.ranks == 0
    text = format_status(probe_pb2.StatusReply(job_sync_hub=hub))
    assert "JOB SYNC UPSTREAM: 1 nodes connected, 0 jobs, 0 ranks held" in text
    assert format_status(probe_pb2.StatusReply()).find("JOB SYNC") == -1


def test_a_view_counts_jobs_held_in_detail_and_as_a_digest() -> None:
    view = JobView()
    assert view.held() == (0, 0)
    view.update("a", SyncReply(digest=JobDigest(ranks=8), detail=False), 1.0)
    view.update("b", SyncReply(digest=JobDigest(ranks=8)), 1.0)
    view.update("c", SyncReply(digest=JobDigest(ranks=8), detail=False), 1.0)
    assert view.held() == (1, 2)
    view.update("c", SyncReply(), 2.0)  # details asked and answered
    assert view.held() == (2, 1)


def test_summary_mode_gauges_are_per_job_at_most_and_absent_without_it() -> None:
    assert not gauge_snapshot([], 0.0).get(SYNC_NODES)
    sync = JobSyncLoad((False, True), (3, 1, 2), {"j1": 8, "j2": 16})
    snap = gauge_snapshot([], 0.0, None, sync)
    assert snap.get(SYNC_CONNECTED) == [(0.0, {})] and snap.get(SYNC_LOST) == [(1.0, {})]
    assert snap.get(SYNC_NODES) == [(3.0, {})]
    assert snap.get(SYNC_RANKS) == [(8.0, {JOB: "j1"}), (16.0, {JOB: "j2"})]


def test_the_upstreams_job_label_is_escaped() -> None:
    up = JobSyncUpstream()
    up.hub.join("n")
    summary = RankSummary(rank=0, world_size=1, step=1)
    up.hub.apply("n", [Upload("job\x1b[2J", (summary,))], 10.0, 1.0)
    assert up.ranks_by_job() == {"job\\x1b[2J": 1}
