"""torchft in one process: a real lighthouse, a real Manager, ProcessGroupGloo.

The comm hook's error path (torchft 0.2.0's own fails with AttributeError and
breaks DDP's reducer for good), and what watch_torchft puts into Hello and reports.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest

torch = pytest.importorskip("torch")
torchft = pytest.importorskip("torchft")

import torch.distributed as dist  # noqa: E402
from torchft.coordination import LighthouseServer  # noqa: E402

from trainprobe.hooks import LivenessProbeHook  # noqa: E402
from trainprobe.hooks import torchft as tp_ft  # noqa: E402


class Replica:
    def __init__(self, lighthouse: Any, replica_id: str) -> None:
        self.store = dist.TCPStore("localhost", 0, is_master=True, wait_for_workers=False)
        torch.manual_seed(0)
        self.model = torch.nn.Linear(2, 1)
        self.opt = torch.optim.SGD(self.model.parameters(), lr=0.1)
        self.manager = torchft.Manager(
            pg=torchft.ProcessGroupGloo(timeout=timedelta(seconds=10)),
            min_replica_size=1,
            load_state_dict=self.model.load_state_dict,
            state_dict=self.model.state_dict,
            store_addr="localhost",
            store_port=self.store.port,
            rank=0,
            world_size=1,
            lighthouse_addr=lighthouse.address(),
            replica_id=replica_id,
            timeout=timedelta(seconds=10),
        )
        self.optim = torchft.Optimizer(self.manager, self.opt)

    def step(self, ddp: Any, fail: bool = False) -> None:
        self.optim.zero_grad()
        if fail:  # a peer failed this step: the Manager errored before the allreduce
            self.manager.report_error(RuntimeError("a peer replica failed"))
        ddp(torch.ones(4, 2)).sum().backward()
        self.optim.step()


@pytest.fixture
def lighthouse() -> Iterator[Any]:
    lh = LighthouseServer(bind="[::]:0", min_replicas=1)
    yield lh
    lh.shutdown()


@pytest.fixture
def replica(lighthouse: Any) -> Iterator[Replica]:
    r = Replica(lighthouse, "train_3")
    yield r
    r.manager.shutdown(wait=False)


def test_the_tests_output_has_torchfts_warnings_not_its_every_quorum(
    capfd: pytest.CaptureFixture[str], replica: Replica
) -> None:
    """torchft's Rust side (lighthouse, Manager) logs every quorum and commit at
    info, which buried a failing test's own output; the tests run it at
    RUST_LOG=warn (tests/conftest.py) unless the user set RUST_LOG."""
    if os.environ.get("RUST_LOG", "warn") != "warn":
        pytest.skip(f"RUST_LOG={os.environ['RUST_LOG']} set by the user")
    ddp = tp_ft.DistributedDataParallel(replica.manager, replica.model)
    replica.step(ddp)
    replica.step(ddp)
    assert replica.manager.current_step() == 2  # two quorums and commits happened
    out, err = capfd.readouterr()
    assert "[INFO]" not in out + err, (out + err)[-2000:]


def test_torchft_own_comm_hook_fails_on_its_error_path(replica: Replica) -> None:
    """The upstream bug we carry a fix for: if this stops failing, torchft fixed it."""
    ddp = torchft.DistributedDataParallel(replica.manager, replica.model)
    replica.step(ddp)
    with pytest.raises(AttributeError, match="_fut"):
        replica.step(ddp, fail=True)
    with pytest.raises(RuntimeError):  # and DDP's reducer is broken from then on
        replica.step(ddp)


def test_our_comm_hook_discards_the_errored_step_and_goes_on(replica: Replica) -> None:
    ddp = tp_ft.DistributedDataParallel(replica.manager, replica.model)
    assert isinstance(ddp, torchft.DistributedDataParallel)
    replica.step(ddp)
    assert replica.manager.current_step() == 1
    before = [p.detach().clone() for p in replica.model.parameters()]
    replica.step(ddp, fail=True)
    assert replica.manager.current_step() == 1  # not committed
    for a, b in zip(before, replica.model.parameters(), strict=True):
        assert torch.equal(a, b)  # the optimizer did not step on it
    replica.step(ddp)
    replica.step(ddp)
    assert replica.manager.current_step() == 3
    after = list(replica.model.parameters())
    assert not torch.equal(before[0], after[0])


def test_watch_torchft_reports_the_replica(replica: Replica) -> None:
    hook = LivenessProbeHook(
        target="unix:///nonexistent/tp.sock", job_id="ft", rank=None, world_size=None, start=False
    )
    try:
        assert hook.watch_torchft(replica.manager, num_replicas=4)
        # torchrun-like identity (group rank 0 of 1): the job-wide rank is torchft's.
        assert (hook.identity.rank, hook.identity.world_size) == (3, 4)
        hello = hook._make_hello()
        assert hello.HasField("replica")
        assert hello.replica.replica_id == "train_3"
        assert (hello.replica.group_rank, hello.replica.group_world_size) == (0, 1)
        assert (hello.rank, hello.world_size) == (3, 4)
        ddp = tp_ft.DistributedDataParallel(replica.manager, replica.model)
        replica.step(ddp)
        replica.step(ddp)
        hook.on_step_end(replica.manager.current_step())
        report = hook._make_report()
        assert report.HasField("replica")
        assert report.replica.step == 2
        assert report.replica.quorum_id >= 1
        assert report.replica.participants == 1
        assert report.replica.waiting == ""
        assert not report.replica.errored
        # The replicated allreduce is counted like a DDP bucket, in group "torchft".
        groups = {g.group: g for g in report.sync.groups}
        assert groups["torchft"].issued == 2 and groups["torchft"].completed == 2
    finally:
        hook.close()


def test_a_wait_inside_torchft_is_reported(replica: Replica) -> None:
    hook = LivenessProbeHook(target="unix:///nonexistent/tp.sock", job_id="ft", start=False)
    try:
        hook.watch_torchft(replica.manager)
        watch = replica.manager._trainprobe_replica_watch
        prev = watch.enter(tp_ft.QUORUM)
        t0 = time.monotonic_ns()
        report = hook._make_report()
        assert report.replica.waiting == "quorum"
        assert 0 < report.replica.waiting_since_mono_ns <= t0
        watch.leave(prev)
        assert hook._make_report().replica.waiting == ""
        # The Manager's own waits are marked too (the wrapper is on the instance).
        replica.optim.zero_grad()
        replica.manager.wait_quorum()
        assert watch.state == ("", 0)
    finally:
        hook.close()


def test_an_eviction_notice_makes_the_manager_discard_the_step(replica: Replica) -> None:
    from trainprobe.proto import probe_pb2

    hook = LivenessProbeHook(target="unix:///nonexistent/tp.sock", job_id="ft", start=False)
    try:
        hook.watch_torchft(replica.manager)
        ddp = tp_ft.DistributedDataParallel(replica.manager, replica.model)
        replica.step(ddp)
        replica.optim.zero_grad()
        cmd = probe_pb2.Command(
            id=7,
            notice=probe_pb2.Notice(
                incident_id="i-1",
                job_id="ft",
                killed_ranks=[1],
                verdict="HUNG",
                rule="stall",
                evicted_replica="train_1",
                replicas_left=1,
            ),
        )
        result = hook._on_command(cmd)
        assert result is not None and result.ok and result.method == "report_error"
        assert "evicted replica train_1" in str(replica.manager.errored().original_exception)
        ddp(torch.ones(4, 2)).sum().backward()
        replica.optim.step()
        assert replica.manager.current_step() == 1  # discarded
    finally:
        hook.close()


def test_an_eviction_notice_is_answered_while_the_allreduce_still_waits(replica: Replica) -> None:
    """torchft's abort drops the group, whose destructor waits for the allreduce in
    flight: that ends only once the evicted replica is killed, and the sidecar kills
    it after this answer (or its 0.25 s timeout, on every eviction)."""
    import threading

    from trainprobe.proto import probe_pb2

    store = dist.TCPStore("localhost", 0, is_master=True, wait_for_workers=False)
    addr = f"localhost:{store.port}/ring"
    # A group of two in this process; the second member never joins the allreduce.
    groups = [torchft.ProcessGroupGloo(timeout=timedelta(seconds=8)) for _ in range(2)]
    joins = [
        threading.Thread(target=g.configure, args=(addr, f"r{i}", i, 2))
        for i, g in enumerate(groups)
    ]
    for t in joins:
        t.start()
    for t in joins:
        t.join(30)
    hook = LivenessProbeHook(target="unix:///nonexistent/tp.sock", job_id="ft", start=False)
    try:
        hook.watch_torchft(replica.manager)
        replica.manager._pg = groups[0]
        watch = replica.manager._trainprobe_replica_watch
        prev = watch.enter(tp_ft.ALLREDUCE)
        work = groups[0].allreduce([torch.ones(4)], dist.AllreduceOptions())
        cmd = probe_pb2.Command(
            id=8, notice=probe_pb2.Notice(incident_id="i-2", evicted_replica="train_1")
        )
        t0 = time.monotonic()
        result = hook._on_command(cmd)
        took = time.monotonic() - t0
        assert result is not None and result.method == "report_error"
        assert took < 4, f"answered only when the allreduce ended, {took:.1f} s"
        assert groups[0]._pg is None  # aborted: the group closes once its work ends
        groups.pop().abort()  # the peer goes: the allreduce fails now, not at its timeout
        t0 = time.monotonic()
        with pytest.raises(RuntimeError):
            work.wait()
        assert time.monotonic() - t0 < 4
        watch.leave(prev)
    finally:
        hook.close()
