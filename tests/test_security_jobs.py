"""A job belongs to the uid of its verified ranks: another local user cannot join it.

With ``--socket-access group`` or ``all`` the sidecar takes Hellos from
processes of other uids (a trainer container of another UID). Each is
verified for its own pid, so it can never be signalled in another's place;
but a rank of another uid that joins a job changes how the job's other ranks
are judged. Tried for real: a job of two gloo ranks (the sidecar's uid)
SIGSTOPped as a whole is a pause, never a kill; a process of uid 1001 that
joins that job as a third rank and reports on, running, made the same pause a
hang and the sidecar SIGKILLed both stopped ranks, processes uid 1001 could
never signal itself. Now a verified process of another uid is refused the job
(``PERMISSION_DENIED``; core/session/session_rule.py ``other_uid``).
"""

from __future__ import annotations

import os
import signal
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest

from tests.raw_client import connect
from tests.support import (
    PYTHON,
    SidecarProcess,
    Workers,
    child_env,
    short_tmpdir,
    sidecar,
    wait_for,
)
from trainprobe.proto import PROTOCOL_VERSION, probe_pb2

needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="needs root: a real second uid")

OTHER_UID = 1001
TRAIN = ["--steps", "100000", "--step-s", "0.05", "--interval-ms", "100"]
#: Patience 0: any judgement but "paused" kills at once.
FLAGS = ("--hang-patience-s", "0", "--kill-grace-s", "2")


def as_uid(uid: int) -> list[str]:
    return ["setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups"]


def records(sc: SidecarProcess, job: str, kind: str) -> list[dict]:
    return sc.incidents(kind, job=job)


def stepping(w: Workers, past: int) -> None:
    wait_for(lambda: all(w.max_step(r) > past for r in range(w.n)), 120, what=f"steps > {past}")


def _other_uid_rank(
    target: str, job: str, rank: int, world: int, seconds: float
) -> subprocess.Popen[str]:
    """A hooked process of another uid that says it is ``rank`` of ``job`` and steps."""
    home = short_tmpdir("tp-home-")
    os.chown(home, OTHER_UID, OTHER_UID)
    code = (
        "import time, sys; from trainprobe.hooks import LivenessProbeHook as H; "
        f"h = H(interval_ms=100, job_id={job!r}, rank={rank}, world_size={world}); "
        f"[h.on_step_end(i) or time.sleep(0.1) for i in range({int(seconds * 10)})]; h.close()"
    )
    return subprocess.Popen(
        [*as_uid(OTHER_UID), PYTHON, "-c", code],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=child_env(TRAINPROBE_TARGET=target, HOME=str(home)),
    )


@needs_root
def test_another_uid_joining_a_paused_job_does_not_make_its_pause_a_kill() -> None:
    job = "uidpause"
    with (
        sidecar(*FLAGS, "--socket-access", "all") as sc,
        Workers(2, sc.target, short_tmpdir(), job_id=job, args=TRAIN) as w,
    ):
        stepping(w, 10)
        intruder = _other_uid_rank(sc.target, job, 2, 3, 40.0)
        try:
            wait_for(  # its Hello is in: refused, or (before) a rank of the job
                lambda: (
                    "cannot join" in sc.log_text() or 2 in {r.rank for r in sc.status(job).workers}
                ),
                30,
                what="the other uid's Hello",
            )
            for pid in w.pids:
                os.kill(pid, signal.SIGSTOP)
            try:
                wait_for(
                    lambda: (
                        any(d["rule"] == "paused" for d in records(sc, job, "decision"))
                        or records(sc, job, "action")
                    ),
                    30,
                    what="a pause or a kill",
                )
                time.sleep(2.0)  # patience 0: a kill would have come by now
                assert records(sc, job, "action") == [], records(sc, job, "action")
                assert all(p.poll() is None for p in w.procs), "a stopped rank was killed"
            finally:
                for pid in w.pids:
                    os.kill(pid, signal.SIGCONT)
        finally:
            intruder.kill()
            intruder.communicate(timeout=10)
        assert "PERMISSION_DENIED" in sc.log_text() and "uid 1001 cannot join" in sc.log_text()
        assert 2 not in {r.rank for r in sc.status(job).workers}


OSC = "\x1b]0;pwned\x07"
CLEAR = "\x1b[2J\x1b[H"


def _reports_then_hangs(
    job: str, host: str, hang: threading.Event
) -> Iterator[probe_pb2.WorkerMessage]:
    """An unverified client: rank 1 of ``job`` on ``host``, 20 reports, then silent
    with its stream open until ``hang`` is set."""
    yield probe_pb2.WorkerMessage(
        hello=probe_pb2.Hello(
            protocol_version=PROTOCOL_VERSION,
            hook_version="v",
            job_id=job,
            rank=1,
            local_rank=1,
            world_size=2,
            host=host,
            pid=os.getpid(),
            interval_ms=100,
        )
    )
    for seq in range(1, 21):
        now = time.monotonic_ns()
        report = probe_pb2.Report(
            seq=seq, mono_ns=now, wall_ns=time.time_ns(), has_step=True, last_step=seq,
            last_step_mono_ns=now, total_steps=seq,
        )  # fmt: skip
        yield probe_pb2.WorkerMessage(report=report)
        time.sleep(0.1)
    hang.wait(60)


def test_a_kill_notice_carries_no_raw_client_string_to_the_survivors() -> None:
    """The notice that tells a job's other ranks whom trainprobe killed quotes the
    diagnosis, which quotes the culprit's own word (its host). An unverified
    client whose host was an OSC title change and a screen clear hung in a job:
    before, both reached the healthy rank's stderr raw (its terminal)."""
    job = "noticeesc"
    code = (
        "import logging, time; logging.basicConfig(); "
        "from trainprobe.hooks import LivenessProbeHook as H; "
        f"h = H(interval_ms=100, job_id={job!r}, rank=0, world_size=2); "
        "[h.on_step_end(i) or time.sleep(0.1) for i in range(600)]"
    )
    hang = threading.Event()
    with sidecar("--hang-patience-s", "0", "--kill-grace-s", "1") as sc:
        rank0 = subprocess.Popen(
            [PYTHON, "-c", code],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            env=child_env(TRAINPROBE_TARGET=sc.target),
        )
        try:
            wait_for(lambda: 0 in {r.rank for r in sc.status(job).workers}, 30, what="rank 0")
            client = threading.Thread(
                target=connect,
                args=(sc.target, _reports_then_hangs(job, f"h{OSC}{CLEAR}", hang)),
                daemon=True,
            )
            client.start()
            wait_for(
                lambda: sc.incidents("action", job=job),
                60,
                what="the kill of rank 1",
            )
            time.sleep(1.0)  # the notice was acknowledged before the kill; its log line is out
        finally:
            hang.set()
            rank0.kill()
            _, err = rank0.communicate(timeout=10)
    text = err.decode(errors="replace")
    (line,) = [x for x in text.splitlines() if "trainprobe killed rank 1" in x]
    assert "\x1b" not in text and "\x07" not in text, repr(line)
    assert "h\\x1b]0;pwned\\x07\\x1b[2J" in line, line


#: A client of another uid that sends no identity ticket: rank 2 of a job, reporting.
UNVERIFIED = """
import os, sys, threading
from tests.raw_client import connect, stepping
from trainprobe.proto import PROTOCOL_VERSION, probe_pb2
hello = probe_pb2.Hello(
    protocol_version=PROTOCOL_VERSION, hook_version="v", job_id=sys.argv[2], rank=2,
    local_rank=2, world_size=3, host="x", pid=os.getpid(), interval_ms=100,
)
connect(sys.argv[1], stepping(hello, threading.Event()))
"""


@needs_root
def test_an_opened_socket_takes_no_unverified_worker() -> None:
    """The same intruder with no ticket would be unverified, and an unverified
    rank that reports runs: tried, it made the same whole-job stop a kill of
    both ranks. On a socket opened to other users (``--socket-access``), a
    Connect must carry its own pid's ticket."""
    job = "unvjob"
    home = short_tmpdir("tp-home-")
    os.chown(home, OTHER_UID, OTHER_UID)
    with sidecar("--socket-access", "all") as sc:
        intruder = subprocess.Popen(
            [*as_uid(OTHER_UID), PYTHON, "-c", UNVERIFIED, sc.target, job],
            cwd=str(Path(__file__).parents[1]),
            env=child_env(HOME=str(home)),
        )
        try:
            wait_for(
                lambda: (
                    "needs the identity ticket" in sc.log_text()
                    or 2 in {r.rank for r in sc.status(job).workers}
                ),
                30,
                what="the unverified Hello",
            )
            assert 2 not in {r.rank for r in sc.status(job).workers}
            assert "PERMISSION_DENIED" in sc.log_text()
        finally:
            intruder.kill()
            intruder.wait(10)


def _first_answer(target: str, method: str, request: Any, reply: Any) -> grpc.RpcError | None:
    """Open a stream of ``method`` over ``target``, send ``request``, and read
    until it ends: the error it ended with, or None if it was served."""
    with grpc.insecure_channel(target) as ch:
        call = ch.stream_stream(
            f"/trainprobe.v1.Sidecar/{method}",
            request_serializer=type(request).SerializeToString,
            response_deserializer=reply.FromString,
        )
        it = call(iter([request]), timeout=5)
        try:
            for _ in it:
                pass
        except grpc.RpcError as e:
            return e
    return None


def test_an_opened_socket_takes_no_relay_or_job_sync_stream() -> None:
    """A Relay stream vouches for the ranks it carries (another kernel's word,
    bound to no uid) and a JobSync stream speaks for a node's ranks: tried, a
    process of another uid opening a Relay stream on a socket opened with
    ``--socket-access all`` vouched for a made-up rank of a job of uid 0 that
    reported on, and made a whole-job SIGSTOP a kill of both ranks. The gRPC
    socket cannot tell who connected, so on a socket open to other users both
    are refused: relay nodes and job sync come over TCP with the token."""
    hello = probe_pb2.Hello(
        protocol_version=PROTOCOL_VERSION, hook_version="x", job_id="relayjob", rank=2,
        world_size=3, host="node-c", pid=4_194_305, interval_ms=100,
    )  # fmt: skip
    item = probe_pb2.RelayItem(
        stream_id=1, message=probe_pb2.WorkerMessage(hello=hello).SerializeToString()
    )
    item.vouch.pid, item.vouch.start_ticks, item.vouch.uid = 4_194_305, 12345, 0
    batch = probe_pb2.RelayBatch(items=[item], interval_ms=100)
    up = probe_pb2.JobSyncUp(node_id="intruder", refresh_s=3.0)
    with sidecar("--socket-access", "all") as sc:
        for method, request, reply in (
            ("Relay", batch, probe_pb2.RelayCommand),
            ("JobSync", up, probe_pb2.JobSyncDown),
        ):
            err = _first_answer(sc.target, method, request, reply)
            assert err is not None, f"{method} was served on an opened socket"
            assert err.code() == grpc.StatusCode.PERMISSION_DENIED, (method, err)
            assert "--socket-access" in (err.details() or ""), err.details()
        assert 2 not in {r.rank for r in sc.status("relayjob").workers}
    # The same streams on a socket of the sidecar's own uid are served as before.
    with sidecar() as sc:
        err = _first_answer(sc.target, "Relay", batch, probe_pb2.RelayCommand)
        assert err is None or err.code() != grpc.StatusCode.PERMISSION_DENIED, err
