"""Summary mode end to end: two node sidecars judge their own ranks and share
summaries through one upstream sidecar (``--job-sync-to``), over gRPC.

Three real sidecar processes on private Unix sockets; two real gloo ranks of
one job, rank 0 reporting to node A and rank 1 to node B, as if on two hosts.
Then what the upstream traces of a job's episode (one node, both ranks).
"""

from __future__ import annotations

import json
import socket
import time
import urllib.request

import pytest
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.samples import Sample

from tests.otel_support import Span, file_spans
from tests.support import SidecarProcess, Workers, ctl, free_port, short_tmpdir, wait_for

pytestmark = pytest.mark.slow

FAST = ["--steps", "2000", "--step-s", "0.02", "--interval-ms", "100", "--watch-ddp"]
RULES = ("--heartbeat-timeout-s", "3", "--sync-timeout-s", "3", "--hang-patience-s", "0")


def _scrape(port: int) -> list[Sample]:
    """The summary-mode samples of a sidecar's Prometheus scrape."""
    body = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    families = text_string_to_metric_families(body)
    return [x for f in families if f.name.startswith("trainprobe_jobsync_") for x in f.samples]


def episode_spans(sc: SidecarProcess, job: str) -> list[Span]:
    """The job episode spans a sidecar exported so far (to its OTLP-JSON lines)."""
    spans = file_spans(sc.state_dir / "traces.otlp.jsonl")
    return [x for x in spans if x.name.startswith("job episode") and x.attributes.get(
        "trainprobe.job_id") == job]  # fmt: skip


def test_stopped_rank_on_one_node_is_named_and_only_its_node_kills() -> None:
    up_port, a_port = free_port(), free_port()
    up = SidecarProcess(short_tmpdir("tpup-"), "--metrics-port", str(up_port))
    metrics = ("--metrics-port", str(a_port))
    a = SidecarProcess(short_tmpdir("tpa-"), "--job-sync-to", up.target, *metrics, *RULES)
    b = SidecarProcess(short_tmpdir("tpb-"), "--job-sync-to", up.target, *RULES)
    args = [*FAST, "--hang-rank", "1", "--hang-at", "40", "--hang-how", "stop"]
    with (
        up,
        a,
        b,
        Workers(
            2,
            a.target,
            short_tmpdir(),
            job_id="js2",
            args=args,
            rank_env={1: {"TRAINPROBE_TARGET": b.target}},
        ) as w,
    ):
        wait_for(lambda: [x.rank for x in a.status("js2").workers] == [0], 60, what="rank 0")
        # Each rank says hello on its own: rank 1 may reach node B a moment later.
        wait_for(lambda: [x.rank for x in b.status("js2").workers] == [1], 30, what="rank 1")
        hang = wait_for(lambda: w.events("hang"), 90, what="rank 1 stopping itself")[0]
        kill = wait_for(lambda: b.incidents("action", job="js2"), 60, what="node B's kill")[0]
        assert list(kill["outcomes"]) == ["1"] and kill["outcomes"]["1"]["exited"], kill
        assert w.wait(30)[1] is not None  # the stopped rank is gone
        inc = b.incidents("incident", job="js2")[0]
        d = inc["diagnosis"]
        # Rank 0 reports to node A only: node B knows it waits from the upstream.
        assert d["culprits"] == [1] and d["waiting"] == [0], d
        assert inc["targets"] == [1], inc
        # Named within 5 s of the stop (wall clocks of one host).
        assert inc["time"] - hang["t"] <= 5.0, (inc["time"], hang["t"])
        # Node A blamed and signalled nothing of its own.
        time.sleep(1.0)
        assert a.incidents("action", job="js2") == []
        assert all(0 not in r.get("culprits", []) for r in a.incidents("incident", job="js2"))
        assert all(r.get("targets", []) == [] for r in a.incidents("incident", job="js2"))
        # Node B's episode opened and closed (its only rank killed) between two
        # syncs: B still tells it once, closed, and the upstream traces it,
        # which node A never follows (above: it did nothing).
        [ep] = wait_for(lambda: episode_spans(up, "js2"), 5, what="the upstream's episode span")
        attrs = ep.attributes
        assert attrs["trainprobe.culprits"] == [1] and attrs["trainprobe.episode.id"] == inc["id"]
        assert attrs["trainprobe.rule"] == inc["rule"], ep
        assert attrs["trainprobe.episode.end"] == "closed" and ep.status_code == 2, ep
        assert b.proc is not None
        assert attrs["trainprobe.episode.opened_by"] == f"{socket.gethostname()}:{b.proc.pid}"
        assert "syncing job summaries with" in a.log_text()
        assert "refused job sync" not in up.log_text()
        # What an operator reads on both ends: the node's stream, the upstream's hub.
        js = a.status("js2").job_sync
        assert js.connected and js.upstream == up.target and not js.lost, js
        assert js.sent > 0 and js.received > 0 and 0 <= js.last_answer_age_s < 5, js
        hub = json.loads(ctl("status", "--json", "--target", up.target, check=True).stdout)
        assert hub["jobSyncHub"]["nodes"] == 2 and hub["jobSyncHub"]["jobs"] == 1, hub
        assert hub["jobSyncHub"]["refused"] == "0", hub  # uint64: a string in proto3 JSON
        # Job-level series at the upstream (no node or rank label); the link's at the node.
        series = _scrape(up_port)
        assert [x.value for x in series if x.name == "trainprobe_jobsync_nodes"] == [2.0]
        ranks = [x for x in series if x.name == "trainprobe_jobsync_ranks"]
        assert [x.labels.get("trainprobe_job_id") for x in ranks] == ["js2"], ranks
        ours = {k for x in series for k in x.labels if not k.startswith("otel_scope_")}
        assert ours == {"trainprobe_job_id"}, series  # bounded: one series a job at most
        node = _scrape(a_port)
        assert [x.value for x in node if x.name == "trainprobe_jobsync_connected"] == [1.0]
        up.stop()
        down = wait_for(
            lambda: (s := a.status().job_sync).connected is False and s, 20, what="down"
        )
        assert down.last_error and not down.lost and down.state_age_s < 30, down
        assert "JOB SYNC to unix://" in ctl("status", "--target", a.target, check=True).stdout


def test_the_upstream_traces_the_jobs_episode_naming_its_culprit() -> None:
    """The upstream's own span of a job's episode: job-level attributes only.

    In dry-run, so that the episode stays open at its node (a node that kills
    its only rank of the episode closes the episode before its next sync, and
    the upstream never holds it): the node tells the upstream every sync.
    """
    up = SidecarProcess(short_tmpdir("tpup-"))
    b = SidecarProcess(short_tmpdir("tpb-"), "--job-sync-to", up.target, "--dry-run", *RULES)
    args = [*FAST, "--hang-rank", "1", "--hang-at", "20", "--hang-how", "stop"]
    with up, b:
        with Workers(2, b.target, short_tmpdir(), job_id="jse", args=args) as w:
            wait_for(lambda: w.events("hang"), 90, what="rank 1 stopping itself")
            wait_for(lambda: b.incidents("action", job="jse"), 30, what="the decision")
            inc = b.incidents("incident", job="jse")[0]
            time.sleep(1.0)  # a sync or two: the upstream holds the episode
            assert episode_spans(up, "jse") == []  # open: exported when it ends
        # The job's ranks are gone: its episode ends at the upstream, and its span goes out.
        [ep] = wait_for(lambda: episode_spans(up, "jse"), 30, what="the upstream's episode span")
        a = ep.attributes
        assert a["trainprobe.culprits"] == [1] and a["trainprobe.culprits.count"] == 1, ep
        assert a["trainprobe.episode.id"] == inc["id"], (ep, inc)
        assert (a["trainprobe.verdict"], a["trainprobe.rule"]) == (inc["verdict"], inc["rule"])
        assert ep.name == f"job episode {inc['verdict']} {inc['rule']}", ep
        assert a["trainprobe.episode.end"] in ("closed", "job ended"), ep
        assert b.proc is not None
        assert a["trainprobe.episode.opened_by"] == f"{socket.gethostname()}:{b.proc.pid}", ep
        assert ep.status_code == 2 and "culprits [1]" in ep.status_message, ep  # ERROR
        assert "trainprobe.rank" not in a and "process.pid" not in a, ep
        assert episode_spans(b, "jse") == []  # a node traces its own ranks, not this
