"""The standard gRPC health service, as a kubelet probe sees it.

Real sidecar process, real hooked worker that hangs, the real grpc health
client (``grpc_health.v1``) over the sidecar's token-protected TCP listener,
sending no token, as kubelet gRPC probes do.
"""

from __future__ import annotations

import contextlib
import subprocess
import threading
import time
from collections.abc import Iterator

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from tests.support import (
    PYTHON,
    REPO,
    SidecarProcess,
    child_env,
    free_port,
    short_tmpdir,
    sidecar,
    wait_for,
)
from trainprobe.proto import DOOMED_DIR_NAME, liveness_command, probe_pb2, probe_pb2_grpc
from trainprobe.sidecar import SidecarThread, load_settings
from trainprobe.sidecar.transport.health import MIN_NOT_SERVING_S

WORKER = REPO / "tests" / "workers" / "hang_after.py"
SERVING = health_pb2.HealthCheckResponse.SERVING
NOT_SERVING = health_pb2.HealthCheckResponse.NOT_SERVING


def check(stub: health_pb2_grpc.HealthStub, service: str) -> int:
    return stub.Check(health_pb2.HealthCheckRequest(service=service), timeout=2).status


@pytest.fixture
def tcp_sidecar() -> Iterator[tuple]:
    port = free_port()
    flags = ("--listen", f"tcp://127.0.0.1:{port}", "--token", "s3cret")
    rules = ("--stall-timeout-s", "2", "--kill-grace-s", "4", "--engine-stall-s", "2")
    rules += ("--hang-patience-s", "0")  # the kill decision at the verdict: what is probed
    with sidecar(*flags, *rules) as sc, grpc.insecure_channel(f"127.0.0.1:{port}") as ch:
        yield sc, ch


def start_worker(target: str, job: str, *flags: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [PYTHON, str(WORKER), job, "40", *flags],
        env=child_env(TRAINPROBE_TARGET=target),
        stdout=subprocess.PIPE,
        text=True,
    )


def test_workers_service_turns_not_serving_at_the_kill_decision_without_a_token(
    tcp_sidecar: tuple,
) -> None:
    sc, channel = tcp_sidecar
    stub = health_pb2_grpc.HealthStub(channel)
    # The token guards the sidecar's own service on this listener...
    with pytest.raises(grpc.RpcError) as denied:
        probe_pb2_grpc.SidecarStub(channel).GetStatus(probe_pb2.StatusRequest(), timeout=2)
    assert denied.value.code() == grpc.StatusCode.UNAUTHENTICATED
    # ...but not Health, which kubelets ask without one.
    wait_for(lambda: check(stub, "") == SERVING, 10, what="engine ticking")
    assert check(stub, "trainprobe.workers") == SERVING
    with pytest.raises(grpc.RpcError) as unknown:
        check(stub, "no.such.service")
    assert unknown.value.code() == grpc.StatusCode.NOT_FOUND

    # SIGTERM ignored: the process lives until the SIGKILL kill_grace_s later.
    worker = start_worker(sc.target, "health-hang", "--ignore-term")
    try:
        assert worker.stdout.readline().startswith("hang")
        seen: list[tuple[float, int]] = []
        deadline = time.monotonic() + 60
        while worker.poll() is None and time.monotonic() < deadline:
            seen.append((time.time(), check(stub, "trainprobe.workers")))
            if seen[-1][1] == NOT_SERVING:
                break
            time.sleep(0.05)
        inc = sc.wait_incident(lambda r: r["job_id"] == "health-hang", timeout_s=10)
        assert inc["action"] == "kill" and inc["targets"] == [0]
        first_bad = next(t for t, s in seen if s == NOT_SERVING)
        # Every probe before the decision said SERVING (a suspect is no target).
        assert all(s == SERVING for t, s in seen if t < inc["time"] - 0.2)
        # Speed lives in bench/bench_health.py; this only rules out "never" or "at the kill".
        assert first_bad - inc["time"] < 3.0
        # The sidecar itself stays SERVING while it deals with the worker.
        assert check(stub, "") == SERVING
        # Once the SIGKILL has taken the process, the replacement must not be
        # killed by the kubelet again: SERVING.
        worker.wait(30)
        wait_for(lambda: check(stub, "trainprobe.workers") == SERVING, 10, what="SERVING again")
    finally:
        worker.kill()
        worker.wait()


def test_the_host_a_verified_worker_names_is_not_what_counts(tcp_sidecar: tuple) -> None:
    """The kernel's word, not the client's: a worker whose pid this sidecar
    verified is one it signals, whatever host it names (TRAINPROBE_HOST), so
    its kill flips trainprobe.workers while the process lives."""
    sc, channel = tcp_sidecar
    stub = health_pb2_grpc.HealthStub(channel)
    worker = subprocess.Popen(
        [PYTHON, str(WORKER), "health-remote", "40", "--ignore-term"],
        env=child_env(TRAINPROBE_TARGET=sc.target, TRAINPROBE_HOST="node-b"),
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert worker.stdout.readline().startswith("hang")
        wait_for(lambda: check(stub, "trainprobe.workers") == NOT_SERVING, 60, what="the flip")
        assert worker.poll() is None  # SIGTERM ignored: alive until the SIGKILL
        assert [w.verified for w in sc.status("health-remote").workers] == [True]
    finally:
        worker.kill()
        worker.wait()


def test_dry_run_decides_nothing_so_workers_stay_serving() -> None:
    port = free_port()
    flags = ("--listen", f"tcp://127.0.0.1:{port}", "--insecure", "--dry-run")
    with (
        sidecar(*flags, "--stall-timeout-s", "2") as sc,
        grpc.insecure_channel(f"127.0.0.1:{port}") as channel,
    ):
        stub = health_pb2_grpc.HealthStub(channel)
        worker = start_worker(sc.target, "health-dry")
        try:
            assert worker.stdout.readline().startswith("hang")
            inc = sc.wait_incident(lambda r: r["job_id"] == "health-dry", timeout_s=30)
            assert inc["dry_run"] and inc["action"] == "kill"
            for _ in range(10):
                assert check(stub, "trainprobe.workers") == SERVING
                time.sleep(0.1)
        finally:
            worker.kill()
            worker.wait()


def test_watch_streams_both_changes_of_the_workers_service(tcp_sidecar: tuple) -> None:
    """Watch, the other half of the protocol: NOT_SERVING at the decision, SERVING after."""
    sc, channel = tcp_sidecar
    stub = health_pb2_grpc.HealthStub(channel)
    watch = stub.Watch(health_pb2.HealthCheckRequest(service="trainprobe.workers"), timeout=60)
    assert next(watch).status == SERVING
    worker = start_worker(sc.target, "health-watch", "--ignore-term")
    try:
        assert next(watch).status == NOT_SERVING
        assert next(watch).status == SERVING  # the SIGKILL after kill_grace_s
    finally:
        watch.cancel()
        worker.kill()
        worker.wait()


def test_sidecar_service_is_not_serving_once_the_engine_stops(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """Service "": the engine task really ends (cancelled on the sidecar's own
    loop); the servers keep answering, the health service says the rules stopped."""
    port = free_port()
    settings = load_settings(
        cli={
            "listen": [f"unix://{tmp_path}/s.sock", f"tcp://127.0.0.1:{port}"],
            "token": "s3cret",
            "state_dir": str(tmp_path),
            "engine_stall_s": "1",
            "telemetry": False,
        }
    )
    with SidecarThread(settings) as st, grpc.insecure_channel(f"127.0.0.1:{port}") as ch:
        stub = health_pb2_grpc.HealthStub(ch)
        wait_for(lambda: check(stub, "") == SERVING, 10, what="engine ticking")
        st.call(lambda: st.sidecar._engine_task.cancel())
        t0 = time.monotonic()
        wait_for(lambda: check(stub, "") == NOT_SERVING, 10, what="NOT_SERVING")
        assert time.monotonic() - t0 >= 0.5  # not before engine_stall_s has passed
        assert check(stub, "trainprobe.workers") == SERVING


def test_relay_node_serves_health_for_the_kills_it_carries_out() -> None:
    """In relay mode the upstream decides and the node kills: the node's
    trainprobe.workers is NOT_SERVING from the kill order until the process is gone."""
    port = free_port()
    up = SidecarProcess(
        short_tmpdir("tpup-"),
        "--stall-timeout-s",
        "2",
        "--kill-grace-s",
        "3",
        "--hang-patience-s",
        "0",
    )
    node = SidecarProcess(
        short_tmpdir("tpnode-"),
        "--relay-to",
        up.target,
        "--listen",
        f"tcp://127.0.0.1:{port}",
        "--token",
        "s3cret",
    )
    with up, node, grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
        stub = health_pb2_grpc.HealthStub(channel)
        assert check(stub, "") == SERVING and check(stub, "trainprobe.workers") == SERVING
        worker = start_worker(node.target, "health-relay", "--ignore-term")
        try:
            assert worker.stdout.readline().startswith("hang")
            wait_for(
                lambda: check(stub, "trainprobe.workers") == NOT_SERVING, 30, what="NOT_SERVING"
            )
            # The trainer's exec probe reads the same decision beside the node's socket.
            exec_probe = liveness_command(str(node.workdir))
            assert subprocess.run(exec_probe, timeout=10).returncode == 1
            assert worker.poll() is None  # seen while the process still lives
            inc = up.wait_incident(lambda r: r["job_id"] == "health-relay", timeout_s=10)
            assert inc["action"] == "kill"
            worker.wait(30)  # the node's SIGKILL after kill_grace_s
            wait_for(lambda: check(stub, "trainprobe.workers") == SERVING, 10, what="SERVING")
            assert subprocess.run(exec_probe, timeout=10).returncode == 0
            assert check(stub, "") == SERVING
        finally:
            worker.kill()
            worker.wait()


# -- only a verified worker's kill moves trainprobe.workers --------------------------


class Prober:
    """The real grpc health client asking ``trainprobe.workers`` every ``period_s``,
    as a kubelet's ``periodSeconds`` does, in a thread; every answer is kept."""

    def __init__(self, stub: health_pb2_grpc.HealthStub, period_s: float) -> None:
        self.stub, self.period_s = stub, period_s
        self.seen: list[tuple[float, int]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            with contextlib.suppress(grpc.RpcError):
                self.seen.append((time.monotonic(), check(self.stub, "trainprobe.workers")))
            self._stop.wait(self.period_s)

    def stop(self) -> list[tuple[float, int]]:
        self._stop.set()
        self._thread.join(10)
        return self.seen


def test_unverified_clients_naming_this_host_never_flip_the_workers_service() -> None:
    """A TCP client with the token and a Unix client without an identity ticket
    each name this host and a real local pid, then go silent: both are judged and
    killed (asked to abort), and trainprobe.workers stays SERVING throughout.
    Then a verified client does the same in the same sidecar, and it does flip:
    the check is about who is verified, not a service that never flips."""
    from tests.test_impostors import FAST, TOKEN, Impostor, Recorder, actions

    workdir = short_tmpdir("hlt-")
    port = free_port()
    flags = [*FAST, "--listen", f"tcp://127.0.0.1:{port}", "--token", TOKEN]
    with (
        SidecarProcess(workdir, *flags) as sc,
        grpc.insecure_channel(f"127.0.0.1:{port}") as channel,
    ):
        stub = health_pb2_grpc.HealthStub(channel)
        wait_for(lambda: check(stub, "") == SERVING, 10, what="engine ticking")
        prober = Prober(stub, 0.1)
        victim = Recorder(workdir, "victim")
        fakes = [
            Impostor(
                workdir, f"127.0.0.1:{port}", "tcp", token=TOKEN, pid=victim.pid, job_id="h-tcp"
            ),
            Impostor(workdir, sc.target, "unix", pid=victim.pid, job_id="h-unix"),
        ]
        try:
            for job in ("h-tcp", "h-unix"):
                wait_for(lambda job=job: actions(sc, job), 30, what=f"the kill of {job}")
            # Past the time a flip would last at least, and past the abort's grace.
            time.sleep(MIN_NOT_SERVING_S + 1.0)
            seen = prober.stop()
            assert len(seen) > 20
            assert all(s == SERVING for _, s in seen), [s for _, s in seen]
            victim.assert_untouched()
            # Nor does the trainer's exec probe see a decision: none was written down.
            probe = liveness_command(str(workdir))
            assert not any((workdir / DOOMED_DIR_NAME).iterdir())
            assert subprocess.run(probe, timeout=10).returncode == 0
            # The control: a verified client of this sidecar that goes silent flips it.
            real = Impostor(
                workdir, sc.target, "real", ticket=True, record=True, pid="self", job_id="h-real"
            )
            fakes.append(real)
            wait_for(
                lambda: check(stub, "trainprobe.workers") == NOT_SERVING, 30, what="the real flip"
            )
            assert real.proc.poll() is None
            wait_for(lambda: subprocess.run(probe, timeout=10).returncode == 1, 10)
        finally:
            prober.stop()
            for f in fakes:
                f.close()
            victim.close()


def test_a_probe_every_second_sees_a_real_hang_killed_at_once(tcp_sidecar: tuple) -> None:
    """The red team's miss: a verified worker that hangs is killed within
    milliseconds of the decision (SIGTERM, not caught), between two probes.
    trainprobe.workers holds NOT_SERVING for MIN_NOT_SERVING_S, so the real
    grpc health client polling every 1 s sees it, and is SERVING again after."""
    sc, channel = tcp_sidecar
    stub = health_pb2_grpc.HealthStub(channel)
    wait_for(lambda: check(stub, "") == SERVING, 10, what="engine ticking")
    prober = Prober(stub, 1.0)
    worker = start_worker(sc.target, "health-1s")
    try:
        assert worker.stdout.readline().startswith("hang")
        worker.wait(60)  # the sidecar's SIGTERM
        action = wait_for(
            lambda: next((r for r in sc.incidents("action") if r["job_id"] == "health-1s"), None),
            10,
            what="the kill's record",
        )
        assert action["outcomes"]["0"]["exited"] and action["outcomes"]["0"]["signals"]
        time.sleep(MIN_NOT_SERVING_S + 2.5)
        seen = prober.stop()
        statuses = [s for _, s in seen]
        assert NOT_SERVING in statuses, statuses
        assert statuses[-1] == SERVING, statuses  # over once the process is gone
    finally:
        prober.stop()
        worker.kill()
        worker.wait()


def test_workers_service_holds_not_serving_until_the_process_is_gone(tcp_sidecar: tuple) -> None:
    """SIGTERM ignored: the process lives until the SIGKILL kill_grace_s (4 s)
    later, well past the minimum; every probe in between says NOT_SERVING."""
    sc, channel = tcp_sidecar
    stub = health_pb2_grpc.HealthStub(channel)
    worker = start_worker(sc.target, "health-until", "--ignore-term")
    try:
        assert worker.stdout.readline().startswith("hang")
        wait_for(lambda: check(stub, "trainprobe.workers") == NOT_SERVING, 60, what="the flip")
        t0 = time.monotonic()
        while worker.poll() is None:
            status = check(stub, "trainprobe.workers")
            if worker.poll() is not None:
                break
            assert status == NOT_SERVING, f"SERVING {time.monotonic() - t0:.2f}s after the flip"
            time.sleep(0.1)
        assert time.monotonic() - t0 > MIN_NOT_SERVING_S  # the process outlived the minimum
        wait_for(lambda: check(stub, "trainprobe.workers") == SERVING, 10, what="SERVING again")
    finally:
        worker.kill()
        worker.wait()


def listening_addresses(port: int) -> list[str]:
    """The local addresses of the TCP sockets listening on ``port`` (/proc/net/tcp{,6})."""
    out = []
    for name in ("tcp", "tcp6"):
        with contextlib.suppress(OSError), open(f"/proc/net/{name}") as fh:
            for line in fh.readlines()[1:]:
                local, state = line.split()[1], line.split()[3]
                addr, _, hexport = local.partition(":")
                if state == "0A" and int(hexport, 16) == port:
                    out.append(addr)
    return out


def test_metrics_bind_loopback_by_default() -> None:
    port = free_port()
    with sidecar("--metrics-port", str(port)) as sc:
        wait_for(lambda: listening_addresses(port), 30, what="the Prometheus listener")
        assert listening_addresses(port) == ["0100007F"], listening_addresses(port)  # 127.0.0.1
        assert f"127.0.0.1:{port}" in sc.log_text()
