"""Impostors: fake clients with hand-built Hellos must never aim the sidecar.

Issue 13's table, rows 1-7, one test each, against a real sidecar process,
with real sacrificial processes that record every signal they are sent
(tests/workers/sacrifice.py) and fake clients speaking raw gRPC
(tests/workers/impostor.py). The suite's goal: no process other than a
verified worker is ever signalled. Nothing is faked.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support import PYTHON, SidecarProcess, child_env, free_port, short_tmpdir, wait_for
from trainprobe.proto import PROTOCOL_VERSION

WORKERS = Path(__file__).parent / "workers"
#: Fast verdicts: silent for 1 s is UNRESPONSIVE, and its action runs at once.
FAST = ("--heartbeat-timeout-s", "1", "--kill-grace-s", "0.5", "--tick-interval-ms", "50")
# The kill decision at the verdict (no hang patience): these tests are about whom it may hit.
FAST += ("--hang-patience-s", "0")
TOKEN = "impostor-test-token"


class Recorder:
    """A sacrificial process that records every signal it gets."""

    def __init__(self, workdir: Path, name: str, cmd: list[str] | None = None) -> None:
        self.record = workdir / f"{name}.signals"
        self.proc = subprocess.Popen(
            [*(cmd or []), PYTHON, str(WORKERS / "sacrifice.py"), str(self.record)],
            env=child_env(),
        )
        wait_for(lambda: self.record.exists() and "ready" in self.record.read_text(), 20)

    @property
    def pid(self) -> int:
        return self.proc.pid

    def signals(self) -> list[str]:
        lines = self.record.read_text().split() if self.record.exists() else []
        return [s for s in lines if s != "ready"]

    def assert_untouched(self) -> None:
        assert self.signals() == [], f"pid {self.pid} was signalled: {self.signals()}"
        os.kill(self.pid, 0)  # raises if gone
        state = proc_state(self.pid)
        assert state not in ("Z", "T", "t", "X"), f"pid {self.pid} is in state {state}"

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(10)


class Impostor:
    """tests/workers/impostor.py: a hand-built Hello, N reports, then silence."""

    def __init__(
        self,
        workdir: Path,
        target: str,
        name: str,
        *,
        ticket: bool = False,
        record: bool = False,
        token: str = "",
        reports: int = 1,
        total_steps: int = 3,
        **hello: object,
    ) -> None:
        fields: dict[str, object] = dict(
            protocol_version=PROTOCOL_VERSION,
            hook_version="impostor",
            job_id="impostor",
            rank=0,
            local_rank=0,
            world_size=1,
            host=os.uname().nodename,
            interval_ms=100,
        )
        fields.update(hello)
        self.out = workdir / f"{name}.out"
        self.record = workdir / f"{name}.signals"
        cmd = [PYTHON, str(WORKERS / "impostor.py"), target, json.dumps(fields)]
        cmd += ["--reports", str(reports), "--total-steps", str(total_steps)]
        if ticket:
            cmd.append("--ticket")
        if record:
            cmd += ["--record", str(self.record)]
        if token:
            cmd += ["--token", token]
        with open(self.out, "wb") as out:
            self.proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=child_env())
        wait_for(lambda: "ticket" in self.output(), 20, what="impostor start")

    @property
    def pid(self) -> int:
        return self.proc.pid

    def output(self) -> str:
        return self.out.read_text(errors="replace") if self.out.exists() else ""

    def signals(self) -> list[str]:
        lines = self.record.read_text().split() if self.record.exists() else []
        return [s for s in lines if s != "ready"]

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(10)


def proc_state(pid: int) -> str:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return "X"
    return stat[stat.rfind(")") + 2 :].split()[0]


@pytest.fixture
def workdir() -> Path:
    return short_tmpdir("imp-")


@contextlib.contextmanager
def running(*things: object) -> Iterator[None]:
    try:
        yield
    finally:
        for t in reversed(things):
            t.close()  # type: ignore[attr-defined]


def actions(sc: SidecarProcess, job: str) -> list[dict]:
    return sc.incidents("action", job=job)


def wait_action(sc: SidecarProcess, job: str, timeout_s: float = 20.0) -> dict:
    """The first action record of ``job`` that acted (or logged a dry run)."""
    return wait_for(lambda: next(iter(actions(sc, job)), None), timeout_s, what=f"action on {job}")


def outcome(record: dict) -> dict:
    outcomes = record.get("outcomes") or {}
    assert outcomes, record
    return next(iter(outcomes.values()))


def assert_not_signalled(record: dict) -> None:
    """An action on an unverified worker: the Abort command, no signal, and why."""
    out = outcome(record)
    assert out["method"] == "abort-command", out
    assert out["signals"] == [], out
    assert "not verified" in out["not_signalled"], out


# -- row 1: the pid of an unrelated process -----------------------------------------


@pytest.mark.parametrize("transport", ["unix", "tcp"])
def test_claimed_pid_of_unrelated_process_is_never_signalled(workdir: Path, transport: str) -> None:
    port = free_port()
    flags = [*FAST, "--listen", f"tcp://127.0.0.1:{port}", "--token", TOKEN]
    with SidecarProcess(workdir, *flags) as sc:
        victim = Recorder(workdir, "victim")
        target = sc.target if transport == "unix" else f"127.0.0.1:{port}"
        token = TOKEN if transport == "tcp" else ""
        fake = Impostor(workdir, target, "fake", token=token, pid=victim.pid, job_id="row1")
        with running(victim, fake):
            record = wait_action(sc, "row1")
            assert_not_signalled(record)
            assert [w.verified for w in sc.status("row1").workers] == [False]
            time.sleep(1.0)  # what a SIGTERM-then-SIGKILL would have taken
            victim.assert_untouched()
            assert "(unverified)" in sc.log_text()


def test_relayed_claim_of_unrelated_pid_is_never_signalled(workdir: Path) -> None:
    """Relay mode: the node verifies its workers; for a Hello it could not verify
    it refuses the upstream's kill order, and the upstream asks the worker to
    abort over its relayed stream instead."""
    up = SidecarProcess(short_tmpdir("impup-"), *FAST)
    node = SidecarProcess(workdir, "--relay-to", up.target)
    with up, node:
        victim = Recorder(workdir, "victim")
        fake = Impostor(workdir, node.target, "fake", pid=victim.pid, job_id="row1r")
        with running(victim, fake):
            record = wait_action(up, "row1r")
            out = outcome(record)
            assert out["method"] == "abort-command", out
            assert "not verified by the relaying node" in out["relay_error"], out
            time.sleep(1.0)
            victim.assert_untouched()
            assert "refused: pid not verified" in node.log_text()


# -- row 2: the sidecar's own pid ---------------------------------------------------------


def test_claimed_pid_of_the_sidecar_itself_is_never_signalled(workdir: Path) -> None:
    with SidecarProcess(workdir, *FAST) as sc:
        assert sc.proc is not None
        fake = Impostor(workdir, sc.target, "fake", pid=sc.proc.pid, job_id="row2")
        with running(fake):
            record = wait_action(sc, "row2")
            assert_not_signalled(record)
            time.sleep(1.0)
            assert sc.proc.poll() is None, "the sidecar signalled itself"
            assert sc.status().workers  # and still serves


# -- row 3: pid 1 -----------------------------------------------------------------------


def test_claimed_pid_1_is_never_signalled(workdir: Path) -> None:
    """A real pid 1: the sidecar runs in a new PID namespace (``unshare``, as in a
    container) whose init is a signal-recording process; the host's own init is
    not a safe target for a test that must fail before the fix."""
    if subprocess.run(["unshare", "--pid", "--fork", "true"], check=False).returncode != 0:
        pytest.skip("cannot create a PID namespace here (needs root or user namespaces)")
    record = workdir / "init.signals"
    wrap = ["unshare", "--pid", "--fork", "--kill-child", "--mount-proc"]
    wrap += [PYTHON, str(WORKERS / "sacrifice.py"), str(record)]
    sc = SidecarProcess(workdir, *FAST, wrap=wrap)
    with sc:
        wait_for(lambda: record.exists() and "ready" in record.read_text(), 20)
        fake = Impostor(workdir, sc.target, "fake", pid=1, job_id="row3")
        with running(fake):
            action = wait_action(sc, "row3")
            assert_not_signalled(action)
            time.sleep(1.0)
            got = [s for s in record.read_text().split() if s != "ready"]
            assert got == [], f"pid 1 of the sidecar's namespace was signalled: {got}"
            assert sc.proc is not None and sc.proc.poll() is None


# -- row 4: a replayed identity of a real worker -----------------------------------------


def test_replayed_identity_of_a_real_worker_is_not_its_reconnect(workdir: Path) -> None:
    with SidecarProcess(workdir, *FAST) as sc:
        worker = subprocess.Popen(
            [PYTHON, str(WORKERS / "hang.py"), "row4", "1000000", "0.05"],
            stdout=subprocess.PIPE,
            env=child_env(TRAINPROBE_TARGET=sc.target),
        )
        try:
            wait_for(lambda: any(w.step > 3 for w in sc.status("row4").workers), 30)
            fake = Impostor(
                workdir, sc.target, "fake", pid=worker.pid, job_id="row4", total_steps=10**12
            )
            with running(fake):
                wait_for(lambda: "ended" in fake.output(), 10, what="the impostor refused")
                assert "ALREADY_EXISTS" in fake.output()
                time.sleep(3.0)  # the impostor's silence was killing the real worker by now
                assert worker.poll() is None, "the real worker was killed"
                (row,) = sc.status("row4").workers
                assert row.pid == worker.pid and row.verdict == "OK", row
                assert row.verified
                assert actions(sc, "row4") == []
        finally:
            worker.kill()
            worker.wait(10)


# -- row 5: the stack signal in a dry run, and for observe verdicts -------------------------


@pytest.mark.parametrize(
    "flags", [("--dry-run",), ("--on-unresponsive", "observe", "--on-hung", "observe")]
)
def test_no_stack_signal_when_no_action_is_allowed(workdir: Path, flags: tuple[str, ...]) -> None:
    """The Hello's own process (verified: it took a ticket) announces signal 34,
    which it never armed; a dry run or an observe verdict must not send it."""
    with SidecarProcess(workdir, *FAST, "--py-spy", "off", *flags) as sc:
        fake = Impostor(
            workdir,
            sc.target,
            "fake",
            ticket=True,
            record=True,
            pid="self",
            job_id="row5",
            stack_signal=34,
            stack_file="self",
            stack_dir=str(workdir),
        )
        with running(fake):
            incident = sc.wait_incident(lambda r: r.get("job_id") == "row5", 20)
            time.sleep(1.5)
            assert fake.signals() == [], f"signalled: {fake.signals()}"
            assert fake.proc.poll() is None
            stacks = incident["diagnosis"]["stacks"]["0"]
            errors = {a["method"]: a["error"] for a in stacks["attempts"]}
            assert "no action is allowed" in errors["faulthandler"], stacks
            assert "(verified, uid" in sc.log_text()


# -- row 6: a FIFO as the stack file ---------------------------------------------------------


def test_fifo_stack_file_blocks_nothing(workdir: Path) -> None:
    """A verified client whose stack file is a FIFO: opening it must not block
    the sidecar, and a real hang afterwards is still detected and killed."""
    with SidecarProcess(workdir, *FAST, "--py-spy", "off", "--stall-timeout-s", "2") as sc:
        fake = Impostor(
            workdir,
            sc.target,
            "fake",
            ticket=True,
            pid="self",
            job_id="row6",
            stack_signal=40,
            stack_file="self",
            stack_dir=str(workdir),
            fifo=True,
        )
        with running(fake):
            incident = sc.wait_incident(lambda r: r.get("job_id") == "row6", 20)
            stacks = incident["diagnosis"]["stacks"]["0"]
            errors = {a["method"]: a["error"] for a in stacks["attempts"]}
            assert "not a regular file" in errors["faulthandler"], stacks
            t0 = time.monotonic()
            assert sc.status() is not None  # the event loop still runs
            assert time.monotonic() - t0 < 3.0
            hung = subprocess.Popen(
                [PYTHON, str(WORKERS / "hang.py"), "row6-real", "20", "0.05"],
                stdout=subprocess.PIPE,
                env=child_env(TRAINPROBE_TARGET=sc.target),
            )
            try:
                assert hung.stdout is not None
                assert hung.stdout.readline().strip() == b"hung"
                onset = time.monotonic()
                hung.wait(20)  # killed by the sidecar: SIGTERM
                assert hung.returncode is not None and hung.returncode < 0
                assert time.monotonic() - onset < 2.0 + 8.0
                action = wait_action(sc, "row6-real")
                assert outcome(action)["method"] == "signal"
            finally:
                if hung.poll() is None:
                    hung.kill()
                hung.wait(10)


# -- row 7: a squatter ---------------------------------------------------------------------


def test_squatter_cannot_lock_out_the_real_worker(workdir: Path) -> None:
    """Rule: a verified process takes a (job, rank) from an unverified holder at
    once. The squatter claims rank 0 of the job and keeps reporting; the real
    worker starts after it and must be serving within a heartbeat (1 s here,
    plus its start)."""
    with SidecarProcess(workdir, *FAST) as sc:
        victim = Recorder(workdir, "bystander")
        squatter = Impostor(
            workdir, sc.target, "squatter", pid=victim.pid, job_id="row7", reports=10**6
        )
        with running(victim, squatter):
            wait_for(lambda: sc.status("row7").workers, 10)
            worker = subprocess.Popen(
                [PYTHON, str(WORKERS / "hang.py"), "row7", "1000000", "0.05"],
                stdout=subprocess.PIPE,
                env=child_env(TRAINPROBE_TARGET=sc.target),
            )
            try:
                wait_for(
                    lambda: any(
                        w.pid == worker.pid and w.step > 3 for w in sc.status("row7").workers
                    ),
                    30,
                    what="the real worker serving rank 0",
                )
                assert "ALREADY_EXISTS" in squatter.output() or "ended" in squatter.output()
                assert worker.poll() is None
                victim.assert_untouched()
            finally:
                worker.kill()
                worker.wait(10)


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q"]))
