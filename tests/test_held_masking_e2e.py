"""A held rank on one node never masks a silent hang on another.

Real parts: an upstream sidecar on TLS with a pinned certificate and the
token, relay nodes as real sidecar processes, real hooked ranks
(tests/workers/gil_hang.py) that really hang silently (a C call holding the
GIL: their reporters are silent, their kernel shows them sleeping, not held),
a real ptrace stop (tests/workers/tracer.py), and a rogue ``Relay`` stream
built here on grpc itself.

Node A runs ranks 0 and 1 of a 3-rank job; both hang. Rank 2 is:

- ``absent``: the control;
- ``made-up``: a token holder's own Relay stream vouches for rank 2 with a
  pid that does not exist and says, every 0.5 s, that the kernel stops it;
- ``traced``: a real rank on node B, stopped by a debugger (``ptrace``).

Before, the upstream took the node's silence about ranks 0 and 1 for no word
at all, and rank 2's word for the whole job: "every live rank is held ... the
job is paused", and nothing was killed in 40 s. Now a relayed rank whose node
had its time to speak and said nothing runs: ranks 0 and 1 are killed once
their patience (4 s) is spent, as in the control: by the first action, or,
beside the made-up stopped rank (killed at once, its order going to the liar's
stream), by the sweep of the ranks stuck beside it. ``--job-kill-grace-s 60``
keeps the job's ordinary sweep out of the way: a kill within 40 s is never
that. The debugger stops rank 2 before ranks 0 and 1 hang, as a person looking
at one rank would (ptrace needs root or Yama's ptrace_scope 0: skipped else).
"""

from __future__ import annotations

import contextlib
import queue
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from tests.support import PYTHON, SidecarProcess, child_env, free_port, short_tmpdir, wait_for
from tests.test_relay_trust import RELAY, TOKEN, self_signed
from trainprobe.proto import PROTOCOL_VERSION, bearer_metadata, probe_pb2

pytestmark = pytest.mark.slow

WORKERS = Path(__file__).parent / "workers"
FLAGS = ("--stall-timeout-s", "2", "--heartbeat-timeout-s", "2", "--hang-patience-s", "4")
FLAGS += ("--kill-grace-s", "0.5", "--job-kill-grace-s", "60", "--tick-interval-ms", "50")
#: A pid no process can have (above Linux's PID_MAX_LIMIT).
MADE_UP_PID = 4_194_305


class HeldLiar:
    """A token holder's Relay stream over TLS: one Hello for ``rank`` of ``job``,
    vouched for a made-up pid, then ``HeldWorker(STOPPED)`` every 0.5 s."""

    def __init__(self, port: int, cert: bytes, job: str, rank: int, world: int) -> None:
        creds = grpc.ssl_channel_credentials(root_certificates=cert)
        self._channel = grpc.secure_channel(f"127.0.0.1:{port}", creds)
        call = self._channel.stream_stream(
            RELAY,
            request_serializer=probe_pb2.RelayBatch.SerializeToString,
            response_deserializer=probe_pb2.RelayCommand.FromString,
        )
        self._out: queue.Queue[probe_pb2.RelayBatch | None] = queue.Queue()
        self.got: list[probe_pb2.RelayCommand] = []
        self._call = call(iter(self._out.get, None), metadata=bearer_metadata(TOKEN))
        self._stop = threading.Event()
        threading.Thread(target=self._read, daemon=True).start()
        hello = probe_pb2.Hello(
            protocol_version=PROTOCOL_VERSION,
            hook_version="liar",
            job_id=job,
            rank=rank,
            world_size=world,
            host="node-c",
            pid=MADE_UP_PID,
            interval_ms=100,
        )
        item = probe_pb2.RelayItem(
            stream_id=1, message=probe_pb2.WorkerMessage(hello=hello).SerializeToString()
        )
        item.vouch.pid, item.vouch.start_ticks = MADE_UP_PID, 12345
        self._out.put(probe_pb2.RelayBatch(items=[item], interval_ms=100))
        threading.Thread(target=self._lie, daemon=True).start()

    def _lie(self) -> None:
        word = probe_pb2.HeldWorker(stream_id=1, how=probe_pb2.HELD_STOPPED, age_ms=0)
        while not self._stop.wait(0.5):
            self._out.put(probe_pb2.RelayBatch(held=[word], interval_ms=100))

    def _read(self) -> None:
        with contextlib.suppress(grpc.RpcError):
            for cmd in self._call:
                self.got.append(cmd)

    def close(self) -> None:
        self._stop.set()
        self._out.put(None)
        self._call.cancel()
        self._channel.close()


def _rank(job: str, rank: int, target: str, trigger: Path) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [PYTHON, str(WORKERS / "gil_hang.py"), job, str(rank), "3", str(trigger)],
        stdout=subprocess.PIPE,
        text=True,
        env=child_env(TRAINPROBE_TARGET=target),
    )


@contextlib.contextmanager
def _killed_after(*procs: subprocess.Popen[str]) -> Iterator[None]:
    try:
        yield
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
            p.wait(10)


def _stepping(up: SidecarProcess, job: str, ranks: set[int]) -> bool:
    rows = list(up.status(job).workers)
    return {r.rank for r in rows if r.step > 5 and r.verified} >= ranks


def _records(up: SidecarProcess, job: str, kind: str) -> list[dict]:
    return up.incidents(kind, job=job)


@pytest.mark.parametrize("rank2", ["absent", "made-up", "traced"])
def test_a_silent_hang_is_killed_with_a_held_rank_elsewhere_as_without(rank2: str) -> None:
    wd = short_tmpdir("hmask-")
    cert, _, cert_file = self_signed(wd, "upstream")
    token = wd / "token"
    token.write_text(TOKEN + "\n")
    token.chmod(0o600)
    port = free_port()
    tls = ("--token-file", str(token), "--tls-cert-file", str(cert_file))
    up = SidecarProcess(
        short_tmpdir("hmup-"),
        *FLAGS,
        "--listen",
        f"tcp://127.0.0.1:{port}",
        *tls,
        "--tls-key-file",
        str(wd / "upstream.key"),
    )
    relay = ("--relay-to", f"tcp://127.0.0.1:{port}", "--token-file", str(token))
    relay += ("--relay-tls-cert-file", str(cert_file))
    node_a, node_b = (SidecarProcess(short_tmpdir(f"hm{n}-"), *relay) for n in "ab")
    job = f"hmask-{rank2}"
    trigger = wd / "hang-now"
    with contextlib.ExitStack() as stack:
        stack.enter_context(up)
        stack.enter_context(node_a)
        hung = [_rank(job, r, node_a.target, trigger) for r in (0, 1)]
        stack.enter_context(_killed_after(*hung))
        if rank2 == "traced":
            stack.enter_context(node_b)
            tracee = _rank(job, 2, node_b.target, wd / "never")
            stack.enter_context(_killed_after(tracee))
        wait_for(lambda: _stepping(up, job, {0, 1, 2} if rank2 == "traced" else {0, 1}), 60)
        if rank2 == "made-up":
            stack.enter_context(contextlib.closing(HeldLiar(port, cert, job, 2, 3)))
        if rank2 == "traced":
            # The debugger first: rank 2 is held before its peers on node A hang.
            tracer = subprocess.Popen(
                [PYTHON, str(WORKERS / "tracer.py"), str(tracee.pid)],
                stdout=subprocess.PIPE,
                text=True,
            )
            stack.enter_context(_killed_after(tracer))
            assert tracer.stdout is not None
            said = tracer.stdout.readline().strip()
            if said.startswith("ptrace") and "not permitted" in said:
                pytest.skip(f"this machine forbids attaching a debugger: {said}")
            assert said == "traced", said
            time.sleep(0.5)
        trigger.touch()
        for p in hung:
            assert p.stdout is not None and p.stdout.readline().strip() == "hung"
        onset = time.monotonic()
        for p in hung:
            with contextlib.suppress(subprocess.TimeoutExpired):
                p.wait(max(0.1, onset + 40 - time.monotonic()))
        took = time.monotonic() - onset
        assert [p.poll() for p in hung] != [None, None], (
            f"ranks 0 and 1 still alive {took:.0f}s after they hung: "
            f"{[(d['rule'], d['why']) for d in _records(up, job, 'decision')]}"
        )
        assert all(p.poll() is not None and p.poll() < 0 for p in hung), "one of them lives"
        paused = [d for d in _records(up, job, "decision") if d["rule"] == "paused"]
        assert not paused, paused
        print(f"rank 2 {rank2}: ranks 0 and 1 killed {took:.1f}s after they hung")
