"""Unverified claims never move a verified worker (relay mode, and direct TCP).

Each test replays one attack of a red team against real sidecars (a relay node
and its upstream as real processes), real hook processes
(tests/workers/hang.py) and fake clients speaking raw gRPC
(tests/workers/impostor.py, and a rogue ``Relay`` stream or a fake upstream
built here on grpc itself). The goal: 0 stray signals, and 0 kill orders to a
stream that does not own the rank.
"""

from __future__ import annotations

import contextlib
import os
import queue
import subprocess
import threading
import time
from collections.abc import Iterator
from concurrent import futures
from pathlib import Path
from typing import Any

import grpc
import pytest

from tests.support import PYTHON, SidecarProcess, child_env, free_port, short_tmpdir, wait_for
from tests.test_impostors import Impostor, actions, running
from trainprobe.proto import PROTOCOL_VERSION, probe_pb2

WORKERS = Path(__file__).parent / "workers"
TOKEN = "relay-trust-test-token"
#: A stalled step is HUNG after 2 s and killed at the verdict: what a poisoned
#: session would get a healthy worker killed by, fast.
FAST = ("--stall-timeout-s", "2", "--hang-patience-s", "0", "--kill-grace-s", "0.5")
FAST += ("--tick-interval-ms", "50")
RELAY = "/trainprobe.v1.Sidecar/Relay"


def _hook(job: str, target: str, steps: int = 10**6, **env: str) -> subprocess.Popen[bytes]:
    """A real hook process stepping every 0.05 s (then hanging after ``steps``)."""
    return subprocess.Popen(
        [PYTHON, str(WORKERS / "hang.py"), job, str(steps), "0.05"],
        stdout=subprocess.PIPE,
        env=child_env(TRAINPROBE_TARGET=target, **env),
    )


@contextlib.contextmanager
def _proc(p: subprocess.Popen[bytes]) -> Iterator[subprocess.Popen[bytes]]:
    try:
        yield p
    finally:
        if p.poll() is None:
            p.kill()
        p.wait(10)


def _row(sc: SidecarProcess, job: str) -> Any:
    rows = list(sc.status(job).workers)
    return rows[0] if len(rows) == 1 else None


def _stepping(sc: SidecarProcess, job: str, pid: int, above: int) -> bool:
    row = _row(sc, job)
    return bool(
        row is not None and row.pid == pid and row.step > above and row.state == "connected"
    )


def _assert_keeps_training(sc: SidecarProcess, job: str, worker: subprocess.Popen[bytes]) -> None:
    """For longer than the stall threshold plus a kill: the worker is alive, its
    session steps on, verified, and nothing was decided against it."""
    row = _row(sc, job)
    assert row is not None
    step = row.step
    time.sleep(5.0)
    assert worker.poll() is None, f"the real worker ended: {worker.returncode}"
    row = wait_for(lambda: _stepping(sc, job, worker.pid, step + 20) and _row(sc, job), 10)
    assert row.verdict == "OK", row
    assert row.step < 10**6, row  # no poisoned step count
    assert actions(sc, job) == []
    assert sc.incidents(job=job) == []


# -- 1. the poison: one Hello with the worker's job, rank, pid and host ------------------


@pytest.mark.parametrize("attacker", ["via-node", "at-upstream"])
def test_a_claim_of_a_relayed_workers_pid_cannot_poison_its_session(attacker: str) -> None:
    up = SidecarProcess(short_tmpdir("rtup-"), *FAST)
    node = SidecarProcess(short_tmpdir("rtnode-"), "--relay-to", up.target)
    wd = short_tmpdir("rt-")
    with up, node, _proc(_hook("poison", node.target)) as worker:
        wait_for(lambda: _stepping(up, "poison", worker.pid, 5), 30, what="worker upstream")
        row = _row(up, "poison")
        target = node.target if attacker == "via-node" else up.target
        fake = Impostor(
            wd, target, "fake", pid=worker.pid, host=row.host, job_id="poison", total_steps=10**7
        )
        with running(fake):
            wait_for(lambda: "ended" in fake.output(), 15, what="the claim refused")
            assert "ALREADY_EXISTS" in fake.output(), fake.output()
        # The attacker is gone (disconnected): the real worker must not fall into its session.
        _assert_keeps_training(up, "poison", worker)
        assert _row(up, "poison").verified, "the node vouches for the worker it verified"


def test_the_poison_over_plain_tcp_does_not_make_the_hook_abort() -> None:
    """Direct TCP: both sessions are unverified, so a reconnect must prove more than
    a pid and a host; before, the poisoned session made the hook abort itself."""
    port = free_port()
    flags = (*FAST, "--listen", f"tcp://127.0.0.1:{port}", "--token", TOKEN)
    wd = short_tmpdir("rt-")
    target = f"127.0.0.1:{port}"
    with (
        SidecarProcess(wd, *flags) as sc,
        _proc(_hook("tcppoison", target, TRAINPROBE_TOKEN=TOKEN)) as worker,
    ):
        wait_for(lambda: _stepping(sc, "tcppoison", worker.pid, 5), 30, what="worker")
        row = _row(sc, "tcppoison")
        fake = Impostor(
            wd,
            target,
            "fake",
            token=TOKEN,
            pid=worker.pid,
            host=row.host,
            job_id="tcppoison",
            total_steps=10**7,
        )
        with running(fake):
            wait_for(lambda: "ended" in fake.output(), 15, what="the claim refused")
            assert "ALREADY_EXISTS" in fake.output(), fake.output()
        row = _row(sc, "tcppoison")
        step = row.step
        time.sleep(6.0)
        assert worker.poll() is None, "the hook aborted its own process"
        row = wait_for(
            lambda: _stepping(sc, "tcppoison", worker.pid, step + 20) and _row(sc, "tcppoison"),
            10,
        )
        assert row.step < 10**6 and row.verdict == "OK", row
        assert actions(sc, "tcppoison") == []


# -- 2. a squatter that keeps reporting must not mask a real hang -------------------------


@pytest.mark.parametrize("attacker", ["via-node", "at-upstream"])
def test_a_squatter_does_not_mask_a_relayed_hang(attacker: str) -> None:
    up = SidecarProcess(short_tmpdir("rtup-"), *FAST)
    node = SidecarProcess(short_tmpdir("rtnode-"), "--relay-to", up.target)
    wd = short_tmpdir("rt-")
    with up, node, _proc(_hook("mask", node.target, steps=60)) as worker:
        wait_for(lambda: _stepping(up, "mask", worker.pid, 5), 30, what="worker upstream")
        row = _row(up, "mask")
        target = node.target if attacker == "via-node" else up.target
        # Reports every 0.1 s, steps advancing, for as long as the test runs.
        squatter = Impostor(
            wd, target, "squat", pid=worker.pid, host=row.host, job_id="mask", reports=10**6
        )
        with running(squatter):
            assert worker.stdout is not None
            assert worker.stdout.readline().strip() == b"hung"
            worker.wait(30)  # the real hang, killed by its node: SIGTERM
            assert worker.returncode is not None and worker.returncode < 0
            (record,) = wait_for(lambda: actions(up, "mask"), 10, what="the kill record")
            out = next(iter(record["outcomes"].values()))
            assert out["method"] == "relay-signal" and out["exited"], out
            assert out["pid"] == worker.pid
            assert "ALREADY_EXISTS" in squatter.output(), squatter.output()


# -- 3. a rogue Relay stream claims another node's rank ---------------------------------


class RogueRelay:
    """A Relay stream of its own (the token is all it needs over TCP; a Unix
    socket here): it claims a rank, vouching for it as a node would, then goes
    silent with the stream open, and records everything the upstream sends."""

    def __init__(self, target: str, hello: probe_pb2.Hello) -> None:
        self.got: list[probe_pb2.RelayCommand] = []
        self._out: queue.Queue[probe_pb2.RelayBatch | None] = queue.Queue()
        self._channel = grpc.insecure_channel(target)
        call = self._channel.stream_stream(
            RELAY,
            request_serializer=probe_pb2.RelayBatch.SerializeToString,
            response_deserializer=probe_pb2.RelayCommand.FromString,
        )
        self._call = call(iter(self._out.get, None))
        threading.Thread(target=self._read, daemon=True).start()
        item = probe_pb2.RelayItem(
            stream_id=1, message=probe_pb2.WorkerMessage(hello=hello).SerializeToString()
        )
        if "vouch" in probe_pb2.RelayItem.DESCRIPTOR.fields_by_name:  # claims verified, too
            item.vouch.pid, item.vouch.start_ticks = hello.pid, 12345
        now = time.monotonic_ns()
        report = probe_pb2.Report(
            seq=1, mono_ns=now, has_step=True, last_step=1, last_step_mono_ns=now, total_steps=1
        )
        rep = probe_pb2.RelayItem(
            stream_id=1, message=probe_pb2.WorkerMessage(report=report).SerializeToString()
        )
        self._out.put(probe_pb2.RelayBatch(items=[item, rep], interval_ms=100))

    def _read(self) -> None:
        with contextlib.suppress(grpc.RpcError):
            for cmd in self._call:
                self.got.append(cmd)

    def kinds(self) -> list[str]:
        return [str(c.WhichOneof("kind")) for c in self.got]

    def close(self) -> None:
        self._out.put(None)
        self._call.cancel()
        self._channel.close()


def test_a_rogue_relay_stream_cannot_take_a_rank_nor_get_its_kill_order() -> None:
    up = SidecarProcess(short_tmpdir("rtup-"), *FAST, "--heartbeat-timeout-s", "1")
    node = SidecarProcess(short_tmpdir("rtnode-"), "--relay-to", up.target)
    with up, node, _proc(_hook("rogue", node.target)) as worker:
        wait_for(lambda: _stepping(up, "rogue", worker.pid, 5), 30, what="worker upstream")
        row = _row(up, "rogue")
        hello = probe_pb2.Hello(
            protocol_version=PROTOCOL_VERSION,
            hook_version="rogue",
            job_id="rogue",
            rank=0,
            world_size=1,
            host=row.host,
            pid=worker.pid,
            interval_ms=100,
        )
        rogue = RogueRelay(up.target, hello)
        with running(rogue):
            wait_for(lambda: rogue.got, 10, what="the upstream's answer to the rogue")
            assert rogue.kinds() == ["reject"], rogue.got
            assert rogue.got[0].reject.code == "ALREADY_EXISTS", rogue.got
            # Silent rogue, heartbeat 1 s: before, its session was judged and its kill
            # order went to the rogue. Now the rank stays the real worker's.
            _assert_keeps_training(up, "rogue", worker)
            assert "kill" not in rogue.kinds(), rogue.got


# -- 4. a fake upstream at the --relay-to address ----------------------------------------


class FakeUpstream:
    """A gRPC server at the node's upstream address that records the bearer tokens
    sent to it and orders stream 1 (the node's first worker) killed."""

    def __init__(self, port: int, tls: tuple[bytes, bytes] | None) -> None:
        self.tokens: list[str] = []
        self.server = grpc.server(futures.ThreadPoolExecutor(4))
        handler = grpc.stream_stream_rpc_method_handler(
            self._relay,
            request_deserializer=probe_pb2.RelayBatch.FromString,
            response_serializer=probe_pb2.RelayCommand.SerializeToString,
        )
        generic = grpc.method_handlers_generic_handler("trainprobe.v1.Sidecar", {"Relay": handler})
        self.server.add_generic_rpc_handlers((generic,))
        address = f"127.0.0.1:{port}"
        if tls is None:
            self.server.add_insecure_port(address)
        else:
            self.server.add_secure_port(address, grpc.ssl_server_credentials([(tls[1], tls[0])]))
        self.server.start()

    def _relay(self, batches: Any, context: Any) -> Iterator[probe_pb2.RelayCommand]:
        self.tokens += [v for k, v in context.invocation_metadata() if k == "authorization"]
        context.send_initial_metadata((("trainprobe-relay-accepted", "1"),))
        next(batches, None)
        for sid in range(1, 4):
            yield probe_pb2.RelayCommand(
                stream_id=sid, kill=probe_pb2.RelayKill(kill_id=sid, grace_s=0.5)
            )
        for _ in batches:
            pass

    def close(self) -> None:
        self.server.stop(0)


def self_signed(workdir: Path, name: str) -> tuple[bytes, bytes, Path]:
    """A self-signed certificate for 127.0.0.1 and localhost: (cert, key, cert file),
    made as docs/SECURITY.md says (``openssl req -x509``), here with ``cryptography``."""
    import datetime
    import ipaddress

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
    now = datetime.datetime.now(datetime.timezone.utc)
    san = x509.SubjectAlternativeName(
        [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]
    )
    cert = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(san, critical=False)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    cert_pem = cert.public_bytes(serialization.Encoding.PEM)
    key_pem = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    (workdir / f"{name}.crt").write_bytes(cert_pem)
    (workdir / f"{name}.key").write_bytes(key_pem)
    os.chmod(workdir / f"{name}.key", 0o600)
    return cert_pem, key_pem, workdir / f"{name}.crt"


def _token_file(workdir: Path) -> Path:
    path = workdir / "token"
    path.write_text(TOKEN + "\n")
    os.chmod(path, 0o600)
    return path


@pytest.mark.parametrize("fake_tls", ["plain", "another-cert"])
def test_a_fake_upstream_gets_no_token_and_its_kill_order_signals_nothing(fake_tls: str) -> None:
    wd = short_tmpdir("rtfake-")
    _, _, real_cert_file = self_signed(wd, "upstream")
    other = self_signed(wd, "impostor")
    port = free_port()
    fake = FakeUpstream(port, None if fake_tls == "plain" else (other[0], other[1]))
    node = SidecarProcess(
        short_tmpdir("rtnode-"),
        "--relay-to",
        f"tcp://127.0.0.1:{port}",
        "--token-file",
        str(_token_file(wd)),
        "--relay-tls-cert-file",
        str(real_cert_file),
    )
    with running(fake), node, _proc(_hook("fake", node.target)) as worker:
        wait_for(lambda: "relay to" in node.log_text(), 20, what="the node's refusal")
        time.sleep(3.0)  # several reconnect attempts
        assert fake.tokens == [], "the node sent its token to an upstream it did not authenticate"
        assert worker.poll() is None, "the fake upstream's kill order was carried out"
        assert "killed worker" not in node.log_text()
        assert "relay to" in node.log_text() and "is down" in node.log_text()


def test_a_node_relays_over_tls_to_the_upstream_it_pinned() -> None:
    wd = short_tmpdir("rttls-")
    _, _, cert_file = self_signed(wd, "upstream")
    port = free_port()
    token = str(_token_file(wd))
    up = SidecarProcess(
        short_tmpdir("rtup-"),
        *FAST,
        "--listen",
        f"tcp://127.0.0.1:{port}",
        "--token-file",
        token,
        "--tls-cert-file",
        str(cert_file),
        "--tls-key-file",
        str(wd / "upstream.key"),
    )
    node = SidecarProcess(
        short_tmpdir("rtnode-"),
        "--relay-to",
        f"tcp://127.0.0.1:{port}",
        "--token-file",
        token,
        "--relay-tls-cert-file",
        str(cert_file),
    )
    with up, node, _proc(_hook("tls", node.target, steps=60)) as worker:
        wait_for(lambda: _stepping(up, "tls", worker.pid, 5), 30, what="worker over TLS")
        assert _row(up, "tls").verified
        # The CLI over the same TLS listener, pinning the same certificate.
        tcp = f"tcp://127.0.0.1:{port}"
        ctl = [PYTHON, "-m", "trainprobe.sidecar.cli.ctl", "status", "--target", tcp]
        ctl += ["--token-file", token, "--json"]
        out = subprocess.run(
            [*ctl, "--tls-cert-file", str(cert_file)],
            capture_output=True,
            text=True,
            env=child_env(),
        )
        assert out.returncode == 0 and '"tls"' in out.stdout, out.stderr
        plain = subprocess.run(ctl, capture_output=True, text=True, env=child_env())
        assert plain.returncode != 0 and "Traceback" not in plain.stderr, plain.stderr
        worker.wait(30)  # hangs after 60 steps: its node kills it on the upstream's order
        assert worker.returncode is not None and worker.returncode < 0
        (record,) = wait_for(lambda: actions(up, "tls"), 10, what="the kill record")
        assert next(iter(record["outcomes"].values()))["method"] == "relay-signal"
