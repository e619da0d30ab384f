"""Verified identity: the session rule (fake clock), tickets over a real
identity socket, the pids never signalled, and client-supplied stack files."""

from __future__ import annotations

import asyncio
import os
import subprocess
import threading
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest

from tests.core_builders import hello, report
from tests.support import short_tmpdir
from trainprobe.proto import fetch_ticket, ident_socket_path
from trainprobe.sidecar.act.procs import proc_start_ticks, protected_pid
from trainprobe.sidecar.act.stacks import open_stack_file
from trainprobe.sidecar.core.session import Registry, RegistryError, VerifiedProcess
from trainprobe.sidecar.transport.listen.identity import Peer, TicketDesk

T0 = 100.0


def me(pid: int = 10, start: int = 500) -> VerifiedProcess:
    return VerifiedProcess(pid=pid, uid=1000, start_ticks=start)


# -- the session rule ------------------------------------------------------------------


def test_same_verified_process_resumes_its_session() -> None:
    reg = Registry(takeover_after_s=10.0)
    w = reg.open(hello(pid=10), T0, me())
    reg.apply(w, report(T0 + 1, step=7), T0 + 1)
    again = reg.open(hello(pid=10), T0 + 2, me())
    assert again is w and again.last_step == 7 and again.verified


def test_replayed_identity_of_a_verified_worker_is_refused() -> None:
    """An unverified Hello naming a verified worker's pid is not its reconnect."""
    reg = Registry(takeover_after_s=10.0)
    w = reg.open(hello(pid=10), T0, me())
    with pytest.raises(RegistryError) as err:
        reg.open(hello(pid=10), T0 + 1)
    assert err.value.code == "ALREADY_EXISTS"
    assert "verified pid 10" in str(err.value)
    assert reg.get(w.key) is w and w.connected


def test_another_process_with_a_reused_pid_is_not_a_reconnect() -> None:
    reg = Registry(takeover_after_s=10.0)
    reg.open(hello(pid=10), T0, me(start=500))
    with pytest.raises(RegistryError):
        reg.open(hello(pid=10), T0 + 1, me(start=501))


def test_verified_worker_evicts_an_unverified_squatter_at_once() -> None:
    reg = Registry(takeover_after_s=10.0)
    squatter = reg.open(hello(pid=99), T0)
    reg.apply(squatter, report(T0 + 0.5, step=1), T0 + 0.5)
    real = reg.open(hello(pid=10), T0 + 1, me())
    assert reg.get(real.key) is real and real.verified
    assert not squatter.connected and squatter.ended == "rejected"
    assert real.generation > squatter.generation
    # The squatter's stream ending later changes nothing.
    assert not reg.close(squatter, squatter.generation, "vanished", T0 + 2, None)
    assert real.connected


def test_silent_unverified_holder_loses_its_rank_after_a_heartbeat() -> None:
    reg = Registry(takeover_after_s=10.0)
    holder = reg.open(hello(pid=10), T0)
    with pytest.raises(RegistryError):
        reg.open(hello(pid=11), T0 + 9.9)
    taker = reg.open(hello(pid=11), T0 + 10.1)
    assert reg.get(taker.key) is taker and not holder.connected
    # A relayed holder whose node batches every 5 s is silent only after 3 batches.
    reg = Registry(takeover_after_s=10.0)
    holder = reg.open(hello(pid=10), T0)
    holder.relay_interval_ms = 5000
    with pytest.raises(RegistryError):
        reg.open(hello(pid=11), T0 + 14.9)
    assert reg.open(hello(pid=11), T0 + 15.1).connected


def test_a_silent_verified_holder_is_judged_not_replaced() -> None:
    """A verified worker's silence is a verdict to reach (UNRESPONSIVE, its kill),
    never a vacancy: a squatter reporting in its place would mask a real hang."""
    reg = Registry(takeover_after_s=10.0)
    holder = reg.open(hello(pid=10), T0, me())
    for newcomer in (hello(pid=11), hello(pid=10)):  # any pid, unverified
        with pytest.raises(RegistryError) as err:
            reg.open(newcomer, T0 + 1000)
        assert err.value.code == "ALREADY_EXISTS"
    with pytest.raises(RegistryError):
        reg.open(hello(pid=11), T0 + 1000, me(pid=11))  # verified, another process
    assert reg.get(holder.key) is holder and holder.connected


def test_an_unverified_claim_never_poisons_a_verified_session() -> None:
    """The red team's attack: a Hello with the worker's job, rank, pid and host,
    a report of 10^7 steps, gone. The worker's session keeps its own history,
    live or ended."""
    reg = Registry(takeover_after_s=10.0)
    w = reg.open(hello(pid=10), T0, me())
    reg.apply(w, report(T0 + 1, step=7), T0 + 1)
    with pytest.raises(RegistryError):
        reg.open(hello(pid=10), T0 + 2)
    reg.close(w, w.generation, "vanished", T0 + 3, True)
    fake = reg.open(hello(pid=10), T0 + 4)  # while the worker is away: a fresh session
    assert fake is not w and not fake.verified and fake.last_step == 0
    reg.apply(fake, report(T0 + 4.5, step=10**7), T0 + 4.5)
    reg.close(fake, fake.generation, "vanished", T0 + 5, True)
    back = reg.open(hello(pid=10), T0 + 6, me())  # the worker: not into the fake's session
    assert back is not fake and back.verified and back.total_steps == 0


def test_unverified_sessions_resume_only_with_their_session_secret() -> None:
    """Remote workers (no identity socket) keep their history across a blip, if
    the Hello carries the secret their hook drew; a pid and a host are public."""
    reg = Registry(takeover_after_s=10.0)
    w = reg.open(hello(pid=10, secret=b"s" * 16), T0)
    reg.apply(w, report(T0 + 0.5, step=3), T0 + 0.5)
    assert reg.open(hello(pid=10, secret=b"s" * 16), T0 + 1) is w and not w.verified
    for other in (b"", b"t" * 16):
        with pytest.raises(RegistryError) as err:
            reg.open(hello(pid=10, secret=other), T0 + 2)
        assert err.value.code == "ALREADY_EXISTS"
    reg.close(w, w.generation, "vanished", T0 + 3, None)
    fresh = reg.open(hello(pid=10, secret=b""), T0 + 4)  # an older hook: a new session
    assert fresh is not w and fresh.last_step == 0
    with pytest.raises(RegistryError):
        reg.open(hello(pid=10, secret=b"s" * 16), T0 + 5)  # the fresh one holds, reporting


def test_a_vouched_rank_is_bound_to_the_node_stream_that_owns_it() -> None:
    reg = Registry(takeover_after_s=10.0)
    node_a, node_b = object(), object()
    w = reg.open(hello(pid=10), T0, me(), node=node_a)
    assert w.verified and w.node is node_a
    # Another stream vouching for the same process, even silent for long: refused.
    with pytest.raises(RegistryError) as err:
        reg.open(hello(pid=10), T0 + 1000, me(), node=node_b)
    assert err.value.code == "ALREADY_EXISTS" and "another relay stream" in str(err.value)
    # Its own stream: a reconnect of the worker to its node.
    assert reg.open(hello(pid=10), T0 + 1000, me(), node=node_a) is w
    # Once that stream has ended (relay_lost), the node's new stream resumes it.
    reg.close(w, w.generation, "relay_lost", T0 + 1001, None)
    assert reg.open(hello(pid=10), T0 + 1002, me(), node=node_b) is w and w.node is node_b


def test_a_verified_process_of_another_uid_cannot_join_a_job() -> None:
    """With --socket-access group/all another local user's process is verified for
    its own pid; joining a job of another uid would change how that job's ranks
    are judged (a whole-job stop made a kill: tests/test_security_jobs.py)."""
    reg = Registry(takeover_after_s=10.0)
    reg.open(hello(rank=0, pid=10), T0, me(pid=10))
    other = VerifiedProcess(pid=20, uid=1001, start_ticks=7)
    with pytest.raises(RegistryError) as err:
        reg.open(hello(rank=1, pid=20), T0 + 1, other)
    assert err.value.code == "PERMISSION_DENIED"
    assert "uid 1001" in str(err.value) and "uid 1000" in str(err.value)
    assert reg.open(hello(rank=1, pid=11), T0 + 1, me(pid=11)).verified  # its own uid
    assert reg.open(hello(rank=0, job="theirs", pid=20), T0 + 1, other).uid == 1001
    assert not reg.open(hello(rank=2, pid=30), T0 + 1).verified  # unverified: judged as before
    # Another node's vouched rank (another kernel's uid) is not compared.
    far = VerifiedProcess(pid=40, uid=1001, start_ticks=7)
    assert reg.open(hello(rank=3, pid=40), T0 + 1, far, node=object()).verified
    # Once the job's ranks of uid 1000 have ended, another uid may use its name.
    for w in reg.workers():
        if w.uid == 1000:
            reg.close(w, w.generation, "goodbye", T0 + 2, False)
    assert reg.open(hello(rank=1, pid=20), T0 + 3, other).uid == 1001


def test_a_refusal_quotes_the_holders_host_escaped() -> None:
    """The refused hook logs the refusal to its training's stderr; the holder's
    host is that client's word (tried: an OSC title and a screen clear reached
    the refused hook's terminal raw)."""
    reg = Registry(takeover_after_s=10.0)
    h = hello(pid=10, host="h\x1b]0;pwned\x07\x1b[2J")
    reg.open(h, T0, me())
    with pytest.raises(RegistryError) as err:
        reg.open(hello(pid=11), T0 + 1)
    assert err.value.code == "ALREADY_EXISTS"
    assert "\x1b" not in str(err.value) and "\x07" not in str(err.value)
    assert "on h\\x1b]0;pwned\\x07\\x1b[2J" in str(err.value)


# -- tickets ------------------------------------------------------------------------------


def test_ticket_is_single_use_bound_to_its_pid_and_expires() -> None:
    now = [0.0]
    desk = TicketDesk(ttl_s=30.0, clock=lambda: now[0])
    pid = os.getpid()
    peer = Peer(pid, os.getuid(), os.getgid(), proc_start_ticks(pid))
    ticket = desk.issue(peer)
    assert desk.redeem(ticket, pid + 1) is None  # another pid: spent, not verified
    assert desk.redeem(ticket, pid) is None
    ticket = desk.issue(peer)
    assert desk.redeem(ticket, pid) == peer
    assert desk.redeem(ticket, pid) is None  # single use
    ticket = desk.issue(peer)
    now[0] = 31.0
    assert desk.redeem(ticket, pid) is None
    # One outstanding ticket per pid: a flood from one process holds one slot.
    first, second = desk.issue(peer), desk.issue(peer)
    assert desk.redeem(first, pid) is None and desk.redeem(second, pid) is not None


def test_ticket_of_a_process_that_exited_is_refused() -> None:
    child = subprocess.Popen(["sleep", "30"])
    try:
        desk = TicketDesk()
        ticket = desk.issue(Peer(child.pid, 0, 0, proc_start_ticks(child.pid)))
    finally:
        child.kill()
        child.wait()
    assert desk.redeem(ticket, child.pid) is None


def ticket_from_a_desk(
    fetch: Callable[[str], Awaitable[bytes]],
) -> tuple[str, bytes, TicketDesk]:
    """A real identity socket served on this loop; ``fetch`` takes a ticket from it."""
    grpc_path = str(short_tmpdir("id-") / "sidecar.sock")

    async def run() -> tuple[bytes, TicketDesk]:
        desk = TicketDesk()
        await desk.listen(Path(ident_socket_path(grpc_path)))
        try:
            return await fetch(f"unix://{grpc_path}"), desk
        finally:
            await desk.close()

    ticket, desk = asyncio.run(run())
    return grpc_path, ticket, desk


def test_identity_socket_names_the_connecting_process() -> None:
    # The hook's call blocks its (reporter) thread: here, a worker thread.
    grpc_path, ticket, desk = ticket_from_a_desk(lambda t: asyncio.to_thread(fetch_ticket, t))
    assert len(ticket) == 16
    peer = desk.redeem(ticket, os.getpid())
    assert peer is not None and peer.uid == os.getuid()
    assert not Path(ident_socket_path(grpc_path)).exists()
    # No identity socket (an older sidecar) or a TCP target: no ticket, no error.
    assert fetch_ticket(f"unix://{grpc_path}") == b""
    assert fetch_ticket("127.0.0.1:1") == b""


# -- pids never signalled ----------------------------------------------------------------


def test_protected_pids() -> None:
    for pid in (-1, 0, 1, os.getpid(), os.getppid()):
        assert protected_pid(pid), pid
    child = subprocess.Popen(["sleep", "30"])
    try:
        assert protected_pid(child.pid) == ""
    finally:
        child.kill()
        child.wait()


# -- stack files -------------------------------------------------------------------------


def test_stack_file_must_be_a_regular_file_of_the_worker_in_the_runtime_dir() -> None:
    folder = short_tmpdir("sf-")
    good = folder / "stacks-1.txt"
    good.write_text("x")
    fd = open_stack_file(str(good), os.getuid(), [folder])
    os.close(fd)
    fifo = folder / "stacks-2.txt"
    os.mkfifo(fifo)
    with pytest.raises(PermissionError, match="not a regular file"):
        open_stack_file(str(fifo), os.getuid(), [folder])  # returns at once: O_NONBLOCK
    link = folder / "stacks-3.txt"
    link.symlink_to(good)
    with pytest.raises(OSError):
        open_stack_file(str(link), os.getuid(), [folder])  # O_NOFOLLOW
    with pytest.raises(PermissionError, match="owned by uid"):
        open_stack_file(str(good), os.getuid() + 1, [folder])
    with pytest.raises(PermissionError, match="runtime directory"):
        open_stack_file(str(good), os.getuid(), [short_tmpdir("other-")])


def test_a_sidecar_slow_to_answer_still_gives_a_ticket() -> None:
    """A loaded sidecar's event loop answered after more than the old 1 s wait
    (fault matrix, load 50): the session then ran unverified, unkillable."""

    async def busy_loop(target: str) -> bytes:
        got: list[bytes] = []
        hook = threading.Thread(target=lambda: got.append(fetch_ticket(target)))
        hook.start()
        time.sleep(1.5)  # the loop is busy elsewhere while the hook waits
        await asyncio.to_thread(hook.join)
        return got[0]

    _, ticket, desk = ticket_from_a_desk(busy_loop)
    assert len(ticket) == 16 and desk.redeem(ticket, os.getpid()) is not None
