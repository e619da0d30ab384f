"""Summary mode against a hostile node: a real upstream sidecar, a real node
sidecar with two healthy gloo ranks, and a client that holds the token (here:
may open the Unix socket) but lies. What it sends wrongly is refused with a
status that says why; what it may send (its own made-up rank, an episode it
opens naming the honest node's ranks) must not get a healthy rank signalled.
"""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest

from tests.otel_support import file_spans
from tests.support import SidecarProcess, Workers, free_port, short_tmpdir, wait_for
from trainprobe.proto import probe_pb2 as pb
from trainprobe.proto import probe_pb2_grpc
from trainprobe.sidecar.otel.traces.job_episodes import JOB_BURST

pytestmark = pytest.mark.slow

FAST = ["--steps", "1500", "--step-s", "0.02", "--interval-ms", "100", "--watch-ddp"]
RULES = ("--heartbeat-timeout-s", "3", "--sync-timeout-s", "3", "--hang-patience-s", "0")


def _send(target: str, msgs: list[pb.JobSyncUp]) -> grpc.RpcError:
    """Send ``msgs`` on one stream; the error that ended it."""
    with grpc.insecure_channel(target) as ch:
        call = probe_pb2_grpc.SidecarStub(ch).JobSync(iter(msgs), timeout=10)
        with pytest.raises(grpc.RpcError) as err:
            for _ in call:
                pass
    return err.value


#: What a terminal does with a hostile node's text: recolour, retitle, clear.
ESCAPES = "\x1b[31m\x1b]0;owned\x07\x1b[2J\u202e"
CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\u202a-\u202e]")


def _flap(target: str, seconds: float) -> None:
    """A node that opens a new episode at every message, in a job of its own."""

    def ups() -> Iterator[pb.JobSyncUp]:
        deadline, n = time.monotonic() + seconds, 0
        while time.monotonic() < deadline:
            note = pb.SyncedEpisode(
                id=f"flap-{n}", job_id="flap", opened_by="flapper", verdict="HUNG", rule="stall"
            )
            yield pb.JobSyncUp(node_id="flapper", refresh_s=3, jobs=[
                pb.JobUpload(job_id="flap", note=note)])  # fmt: skip
            n += 1
            time.sleep(0.2)

    with grpc.insecure_channel(target) as ch:
        for _ in probe_pb2_grpc.SidecarStub(ch).JobSync(ups(), timeout=30):
            pass


def _forged_rank(honest: pb.SyncedRank) -> pb.SyncedRank:
    """A rank of its own that waits, for a minute, in a collective the honest ranks
    never issued: as if they were the stragglers."""
    groups = [
        pb.SyncedGroup(
            group=g.group,
            issued=g.issued + 1000,
            completed=g.issued + 999,
            in_flight=True,
            inflight_age_s=60.0,
            inflight_op="allreduce",
            inflight_seq=g.issued + 1000,
        )
        for g in honest.groups
    ]
    return pb.SyncedRank(
        rank=2, world_size=3, host="evil", pid=1, reporting=True, has_step=True,
        step=honest.step, step_age_s=60.0, groups=groups, verdict="HUNG", verified=True,
    )  # fmt: skip


def test_a_hostile_node_is_refused_and_signals_no_healthy_rank() -> None:
    up = SidecarProcess(short_tmpdir("tpup-"))
    b = SidecarProcess(short_tmpdir("tpb-"), "--job-sync-to", up.target, *RULES)
    with up, b, Workers(2, b.target, short_tmpdir(), job_id="hj", args=FAST) as w:
        wait_for(lambda: w.max_step() >= 20, 90, what="steps")
        job = "hj"
        # Oversized, absurd and impersonating messages: each ends its stream, clearly.
        long_host = pb.SyncedRank(rank=5, world_size=8, host="h" * 100_000)
        err = _send(up.target, [pb.JobSyncUp(node_id="evil", refresh_s=3, jobs=[
            pb.JobUpload(job_id=job, ranks=[long_host], full=True)])])  # fmt: skip
        assert err.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert "host longer than 256 characters" in err.details()
        theirs = pb.SyncedRank(rank=0, world_size=2, verdict="HUNG", reporting=False)
        err = _send(up.target, [pb.JobSyncUp(node_id="evil", refresh_s=3, jobs=[
            pb.JobUpload(job_id=job, ranks=[theirs])])])  # fmt: skip
        assert err.code() == grpc.StatusCode.PERMISSION_DENIED
        assert "rank 0 of job hj is held by another node" in err.details()
        err = _send(up.target, [pb.JobSyncUp(node_id="x" * 300, refresh_s=3)])
        assert err.code() == grpc.StatusCode.INVALID_ARGUMENT
        many = [pb.SyncedRank(rank=r, world_size=4096) for r in range(1100)]
        err = _send(up.target, [pb.JobSyncUp(node_id="evil", refresh_s=3, jobs=[
            pb.JobUpload(job_id="other", ranks=many, full=True)])])  # fmt: skip
        assert err.code() == grpc.StatusCode.RESOURCE_EXHAUSTED

        # What it may send: learn the honest ranks, then claim a rank of its own
        # that "waits" for them, and open an episode naming them the culprits.
        learned: dict[str, Any] = {}
        got = threading.Event()

        def lies() -> Iterator[pb.JobSyncUp]:
            yield pb.JobSyncUp(node_id="evil", refresh_s=3, jobs=[
                pb.JobUpload(job_id=job, full=True, detail=True)])  # fmt: skip
            got.wait(10)
            note = pb.SyncedEpisode(
                id="evil-1", job_id=job, opened_by="evil", verdict="HUNG", rule="stall",
                kind="straggler", culprits=[0, 1], text=ESCAPES + "x" * 4000,
                where={0: ESCAPES + "in step()", 1: "y" * 4096},
            )  # fmt: skip
            forged = _forged_rank(learned["rank0"])
            deadline = time.monotonic() + 6
            while time.monotonic() < deadline:
                yield pb.JobSyncUp(node_id="evil", refresh_s=3, jobs=[
                    pb.JobUpload(job_id=job, ranks=[forged], note=note, detail=True)])  # fmt: skip
                time.sleep(0.5)

        flapper = threading.Thread(target=_flap, args=(up.target, 4.0))
        flapper.start()
        with grpc.insecure_channel(up.target) as ch:
            for down in probe_pb2_grpc.SidecarStub(ch).JobSync(lies(), timeout=30):
                for j in down.jobs:
                    for r in j.others:
                        if r.rank == 0 and "rank0" not in learned:
                            learned["rank0"] = r
                            got.set()
        assert learned, "the upstream never sent the honest ranks"
        # The honest node followed the forged episode and analysed the job with the
        # forged rank in it (which names ranks 0 and 1 stragglers), but its own
        # summaries of its own ranks win over hearsay, and a rank that steps
        # normally is never a culprit (judge/replicas.py): it signalled nothing.
        assert "following hang episode evil-1 of evil" in b.log_text()
        assert [r for r in b.incidents("action")] == []
        assert all(p.poll() is None for p in w.procs), [w.log_text(r)[-500:] for r in range(2)]
        before = w.max_step()
        wait_for(lambda: w.max_step() > before + 10, 30, what="still stepping")
        assert "refused job sync" in up.log_text()
        assert up.proc is not None and up.proc.poll() is None
        # Each refused message ended its stream, counted where the operator reads it.
        flapper.join(30)
        hub = up.status().job_sync_hub
        assert hub.refused >= 4 and hub.nodes == 1, hub  # the honest node only now
    # What the upstream traced of the hostile episodes (its spans flushed at its stop):
    # the forged one escaped and bounded, the flapping node's a few, not one each.
    spans = [x for x in file_spans(up.state_dir / "traces.otlp.jsonl") if x.name.startswith(
        "job episode")]  # fmt: skip
    [forged] = [x for x in spans if x.attributes["trainprobe.job_id"] == job]
    a = forged.attributes
    assert a["trainprobe.episode.opened_by"] == "evil" and a["trainprobe.culprits"] == [0, 1]
    for key, value in [*a.items(), ("name", forged.name), ("status", forged.status_message)]:
        assert not isinstance(value, str) or not CONTROL.search(value), (key, value)
        assert not isinstance(value, str) or len(value) <= 1024, (key, len(value))
    assert a["trainprobe.episode.text"].startswith("\\x1b[31m\\x1b]0;owned\\x07\\x1b[2J\\u202ex")
    assert len(a["trainprobe.episode.text"]) <= 512
    assert a["trainprobe.episode.where"].startswith("0: \\x1b[31m"), a
    flapped = [x for x in spans if x.attributes["trainprobe.job_id"] == "flap"]
    assert 1 <= len(flapped) <= JOB_BURST, [x.attributes for x in flapped]


def test_over_tcp_a_node_syncs_only_with_the_token_and_the_pinned_upstream() -> None:
    """As a relay node: TLS with the upstream's own certificate, then the token."""
    from tests.test_relay_trust import self_signed

    wd = short_tmpdir("jstls-")
    _, _, cert = self_signed(wd, "upstream")
    _, _, other = self_signed(wd, "impostor")
    good, bad = wd / "token", wd / "wrong"
    for path, text in ((good, "s3cret-token-0123456789"), (bad, "not-the-token-012345678")):
        path.write_text(text + "\n")
        path.chmod(0o600)
    tcp = f"tcp://127.0.0.1:{free_port()}"
    up = SidecarProcess(
        short_tmpdir("jsup-"), "--listen", tcp, "--token-file", str(good),
        "--tls-cert-file", str(cert), "--tls-key-file", str(wd / "upstream.key"),
    )  # fmt: skip

    def node(token: Path, pinned: Path) -> SidecarProcess:
        return SidecarProcess(
            short_tmpdir("jsn-"), "--job-sync-to", tcp, "--token-file", str(token),
            "--relay-tls-cert-file", str(pinned),
        )  # fmt: skip

    with up, node(good, cert) as ok, node(bad, cert) as wrong, node(good, other) as fooled:
        wait_for(lambda: "syncing job summaries with" in ok.log_text(), 20, what="sync")
        wait_for(lambda: "is down (UNAUTHENTICATED" in wrong.log_text(), 20, what="refusal")
        wait_for(lambda: "is down" in fooled.log_text(), 20, what="handshake failure")
        assert "syncing job summaries with" not in fooled.log_text()
        assert "syncing job summaries with" not in wrong.log_text() or (
            "UNAUTHENTICATED" in wrong.log_text()
        )
        # Status says the same: the refused node is down, and why.
        refused = wrong.status().job_sync
        assert not refused.connected and refused.last_error.startswith("UNAUTHENTICATED"), refused
        assert ok.status().job_sync.connected
