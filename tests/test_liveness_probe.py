"""The trainer's exec liveness probe: it fails on the sidecar's written
decision about a live process, and never because the sidecar is down.

Real shell (``sh -c`` with the shipped script), real processes and their
``/proc`` start times, a real sidecar that decides to kill a real hung
worker, and a real SIGSTOP of that sidecar while the kubelet's gRPC probe
(the real grpc health client, 1 s timeout as in deploy/) times out.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from tests.support import PYTHON, REPO, child_env, free_port, short_tmpdir, sidecar, wait_for
from trainprobe.proto import DOOMED_DIR_NAME, liveness_command
from trainprobe.sidecar.act.procs import proc_start_ticks
from trainprobe.sidecar.transport.doom_files import DoomFiles

WORKER = REPO / "tests" / "workers" / "hang_after.py"


def probe(socket_dir: Path) -> int:
    """The probe's exit status, as the kubelet's exec probe gets it."""
    return subprocess.run(liveness_command(str(socket_dir)), timeout=10).returncode


def _named_sleeper(name: bytes) -> subprocess.Popen[bytes]:
    """A process whose comm is ``name`` (prctl PR_SET_NAME), then sleeping."""
    code = (
        "import ctypes, time; "
        f"ctypes.CDLL(None).prctl(15, ctypes.c_char_p({name!r}), 0, 0, 0); "
        "print('ready', flush=True); time.sleep(60)"
    )
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE)
    assert proc.stdout is not None and proc.stdout.readline() == b"ready\n"
    return proc


#: Judged 2 s after the last step, the kill decided at the verdict; SIGKILL 4 s after SIGTERM.
RULES = ("--stall-timeout-s", "2", "--kill-grace-s", "4", "--hang-patience-s", "0")


def _worker(target: str, job: str, steps: int, *flags: str) -> subprocess.Popen[str]:
    """A real hooked worker that steps ``steps`` times (50 ms each), then hangs."""
    return subprocess.Popen(
        [PYTHON, str(WORKER), job, str(steps), *flags],
        env=child_env(TRAINPROBE_TARGET=target),
        stdout=subprocess.PIPE,
        text=True,
    )


def test_the_probe_fails_only_while_a_doomed_process_runs_with_its_start_time() -> None:
    d = short_tmpdir()
    assert probe(d) == 0  # no sidecar has written anything: healthy
    files = DoomFiles(d)
    assert (d / DOOMED_DIR_NAME).stat().st_mode & 0o777 == 0o755
    assert probe(d) == 0
    # A comm with ") " in it must not shift the fields the probe reads.
    victim = _named_sleeper(b"x) 1 2 3")
    try:
        ticks = proc_start_ticks(victim.pid)
        assert ticks is not None
        files.add(victim.pid, ticks + 1)  # another process that had the pid
        assert probe(d) == 0
        files.add(victim.pid, ticks)
        assert (d / DOOMED_DIR_NAME / str(victim.pid)).read_text() == str(ticks)
        assert probe(d) == 1
    finally:
        victim.kill()
        victim.wait()
    assert probe(d) == 0  # gone: its file is no evidence any more
    # A new sidecar (a restart) removes what names processes that are gone.
    DoomFiles(d)
    assert list((d / DOOMED_DIR_NAME).iterdir()) == []


def test_an_unknown_start_time_is_never_written() -> None:
    d = short_tmpdir()
    DoomFiles(d).add(os.getpid(), None)
    assert list((d / DOOMED_DIR_NAME).iterdir()) == []
    assert probe(d) == 0


def test_a_real_hang_fails_the_probe_until_gone_and_a_frozen_sidecar_never_does() -> None:
    port = free_port()
    flags = ("--listen", f"tcp://127.0.0.1:{port}", "--token", "s3cret")
    with sidecar(*flags, *RULES) as sc, grpc.insecure_channel(f"127.0.0.1:{port}") as ch:
        stub = health_pb2_grpc.HealthStub(ch)
        # SIGTERM ignored: the process lives until the SIGKILL 4 s later.
        hung = _worker(sc.target, "doomed", 40, "--ignore-term")
        try:
            assert hung.stdout is not None and hung.stdout.readline().startswith("hang")
            wait_for(lambda: probe(sc.workdir) == 1, 60, what="the probe to fail")
            assert hung.poll() is None  # it failed on a process that runs
            hung.wait(30)  # the sidecar's SIGKILL
            assert probe(sc.workdir) == 0
        finally:
            hung.kill()
            hung.wait()
        # A healthy worker; then the sidecar frozen past the kubelet's timeout.
        healthy = _worker(sc.target, "fine", 100_000)
        assert sc.proc is not None
        try:
            wait_for(lambda: sc.status("fine").workers, 30, what="the healthy worker")
            os.kill(sc.proc.pid, signal.SIGSTOP)
            try:
                request = health_pb2.HealthCheckRequest(service="trainprobe.workers")
                t0 = time.monotonic()
                try:
                    stub.Check(request, timeout=1)
                    raise AssertionError("a stopped sidecar answered")
                except grpc.RpcError as err:  # what the kubelet counts as a failure
                    assert err.code() == grpc.StatusCode.DEADLINE_EXCEEDED
                assert time.monotonic() - t0 >= 0.9
                for _ in range(3):  # failureThreshold probes: none fails
                    assert probe(sc.workdir) == 0
            finally:
                os.kill(sc.proc.pid, signal.SIGCONT)
            assert healthy.poll() is None
        finally:
            healthy.kill()
            healthy.wait()


def test_the_script_refuses_a_directory_it_could_not_quote() -> None:
    for bad in ('/run/a"b', "/run/$HOME", "/run/`id`", "/run/a\\b"):
        try:
            liveness_command(bad)
        except ValueError as err:
            assert "no quotes or $" in str(err)
        else:
            raise AssertionError(f"{bad!r} accepted")


def test_a_zombie_is_gone_for_the_probe_as_for_the_sidecar() -> None:
    """pid_alive takes a zombie (killed, not yet reaped) as gone: so does the probe."""
    d = short_tmpdir()
    child = subprocess.Popen(["sleep", "60"])
    try:
        ticks = proc_start_ticks(child.pid)
        DoomFiles(d).add(child.pid, ticks)
        assert probe(d) == 1
        os.kill(child.pid, signal.SIGKILL)
        wait_for(lambda: Path(f"/proc/{child.pid}/stat").read_text().split(") ")[1][0] == "Z", 10)
        assert probe(d) == 0
    finally:
        child.kill()
        child.wait()


def test_files_of_processes_gone_are_removed_while_the_sidecar_runs() -> None:
    """Without a gRPC Check asking (the shipped probes ask none), a decision's
    file goes once its process has: the directory stays small."""
    with sidecar(*RULES) as sc:
        hung = _worker(sc.target, "swept", 40)
        try:
            assert hung.stdout is not None and hung.stdout.readline().startswith("hang")
            doomed = sc.workdir / DOOMED_DIR_NAME
            wait_for(lambda: (doomed / str(hung.pid)).exists(), 60, what="the decision's file")
            hung.wait(30)
            wait_for(lambda: not any(doomed.iterdir()), 10, what="the file removed")
        finally:
            hung.kill()
            hung.wait()


def test_what_sits_in_the_directory_never_blocks_or_stops_the_sidecar() -> None:
    d = short_tmpdir()
    doomed = d / DOOMED_DIR_NAME
    doomed.mkdir()
    (doomed / "\u00b2").write_text("1")  # isdigit(), yet no int
    (doomed / "\u0661\u0662").write_text("1")  # Arabic-Indic digits: not a pid either
    os.mkfifo(doomed / f".{os.getpid()}.tmp")  # a writer that opened it would wait forever
    files = DoomFiles(d)  # starts
    assert (doomed / "\u00b2").exists()  # not ours to judge: left alone
    t0 = time.monotonic()
    files.add(os.getpid(), proc_start_ticks(os.getpid()))
    assert time.monotonic() - t0 < 1.0
    assert (doomed / str(os.getpid())).read_text() == str(proc_start_ticks(os.getpid()))
    assert probe(d) == 1  # this very process: doomed and running


def test_the_script_needs_an_absolute_directory() -> None:
    for bad in ("", "run/trainprobe", "./x"):
        try:
            liveness_command(bad)
        except ValueError as err:
            assert "absolute" in str(err)
        else:
            raise AssertionError(f"{bad!r} accepted")
