"""The conditions a Kubernetes pod gives the sidecar, made for real (as root).

A kubelet makes an emptyDir owned by root, mode 0777, and runs containers as
unprivileged UIDs that share one PID namespace (``shareProcessNamespace``).
Here: a root-owned 0777 directory made by this (root) test, the sidecar as
UID 1000 and trainers as UID 1000 or 1001 (``setpriv``), all in this test's
PID namespace, as the pod's containers are in the pod's. deploy/k8s-job.yaml
asks for exactly this layout: ``--listen unix://<emptyDir>/sidecar.sock``,
and the same path as the trainer's ``TRAINPROBE_TARGET``.

The sidecar listens in its own ``trainprobe-1000`` inside the emptyDir, and
a trainer aimed at ``<emptyDir>/sidecar.sock`` finds it there; a hung trainer
is verified and killed. A trainer of another UID needs the socket opened to it
(``--socket-access all``), the subdirectory's path, and ``CAP_KILL`` in the
sidecar. Impostors, in the emptyDir itself or squatting the subdirectory
under another UID, get no connection.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest

from tests.support import PYTHON, SidecarProcess, child_env, free_port, short_tmpdir, wait_for
from tests.test_socket_dir_clients import Impostor
from trainprobe.proto import liveness_command

SIDECAR_UID, TRAINER_UID, OTHER_UID = 1000, 1001, 1002
HANG = Path(__file__).parent / "workers" / "hang.py"
#: A hang found 2 s after the last step, killed at once (SIGTERM, SIGKILL 0.5 s later).
FAST = ("--heartbeat-timeout-s", "3", "--stall-timeout-s", "2", "--kill-grace-s", "0.5")
FAST += ("--hang-patience-s", "0", "--tick-interval-ms", "50", "--py-spy", "off")

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="needs root: real UIDs via setpriv")


def as_uid(uid: int, *caps: str, gid: int | None = None) -> list[str]:
    """Run as ``uid`` (group ``gid``, else the same number; no supplementary
    groups), with ambient ``caps``."""
    cmd = ["setpriv", f"--reuid={uid}", f"--regid={uid if gid is None else gid}", "--clear-groups"]
    if caps:
        add = ",".join(f"+{c}" for c in caps)
        cmd += [f"--inh-caps={add}", f"--ambient-caps={add}"]
    return cmd


def home_of(uid: int) -> Path:
    d = short_tmpdir(f"tp-home{uid}-")
    os.chown(d, uid, uid)
    return d


@pytest.fixture
def empty_dir() -> Iterator[Path]:
    """What a kubelet mounts: root's, mode 0777 (no sticky bit)."""
    d = short_tmpdir("tp-pod-")
    os.chmod(d, 0o777)
    assert os.lstat(d).st_uid == 0
    yield d


def sidecar_in(d: Path, *flags: str, caps: tuple[str, ...] = ()) -> SidecarProcess:
    return SidecarProcess(
        d, *FAST, *flags, env={"HOME": str(home_of(SIDECAR_UID))}, wrap=as_uid(SIDECAR_UID, *caps)
    )


def trainer(
    uid: int, target: str, job: str, steps: int = 20, gid: int | None = None
) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [*as_uid(uid, gid=gid), PYTHON, str(HANG), job, str(steps)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=child_env(TRAINPROBE_TARGET=target, HOME=str(home_of(uid))),
    )


def _killed_by_the_sidecar(sc: SidecarProcess, proc: subprocess.Popen[bytes], job: str) -> None:
    assert proc.stdout is not None
    assert proc.stdout.readline().strip() == b"hung"
    proc.wait(30)
    assert proc.returncode is not None and proc.returncode < 0, proc.returncode
    actions = wait_for(lambda: sc.incidents("action", job=job), 10, what="action")
    (out,) = actions[0]["outcomes"].values()
    assert out["method"] == "signal" and out["signals"], out
    assert f"(verified, uid {proc_uid_of(sc, job)}" in sc.log_text()


def proc_uid_of(sc: SidecarProcess, job: str) -> int:
    return TRAINER_UID if job.startswith("other") else SIDECAR_UID


def test_the_sample_pod_starts_and_its_trainer_is_verified_and_killed(empty_dir: Path) -> None:
    """Sidecar and trainer as UID 1000, both given <emptyDir>/sidecar.sock."""
    with sidecar_in(empty_dir) as sc:
        private = empty_dir / f"trainprobe-{SIDECAR_UID}"
        st = os.lstat(private)
        assert (st.st_uid, st.st_mode & 0o777) == (SIDECAR_UID, 0o700)
        assert (private / "sidecar.sock").is_socket()
        assert os.lstat(private / "sidecar.sock").st_mode & 0o777 == 0o600
        assert not (empty_dir / "sidecar.sock").exists()
        assert f"ready on unix://{private}/sidecar.sock" in sc.log_text()
        proc = trainer(SIDECAR_UID, sc.target, "same-uid")
        try:
            _killed_by_the_sidecar(sc, proc, "same-uid")
        finally:
            if proc.poll() is None:
                proc.kill()
            proc.wait(10)


@pytest.mark.parametrize(
    ("access", "dir_mode", "sock_mode", "gid"),
    [("all", 0o711, 0o666, TRAINER_UID), ("group", 0o710, 0o660, SIDECAR_UID)],
)
def test_a_trainer_of_another_uid_needs_the_socket_opened_and_cap_kill(
    empty_dir: Path, access: str, dir_mode: int, sock_mode: int, gid: int
) -> None:
    """Trainer as UID 1001 (in the sidecar's group 1000 for ``group``): the
    socket opened to it, CAP_KILL to end it."""
    with sidecar_in(empty_dir, "--socket-access", access, caps=("kill",)) as sc:
        private = empty_dir / f"trainprobe-{SIDECAR_UID}"
        assert os.lstat(private).st_mode & 0o777 == dir_mode
        for name in ("sidecar.sock", "sidecar.sock.id"):
            assert os.lstat(private / name).st_mode & 0o777 == sock_mode
        proc = trainer(TRAINER_UID, f"unix://{private}/sidecar.sock", "other-uid", gid=gid)
        try:
            _killed_by_the_sidecar(sc, proc, "other-uid")
        finally:
            if proc.poll() is None:
                proc.kill()
            proc.wait(10)


def test_without_cap_kill_another_uid_is_verified_but_not_killed(empty_dir: Path) -> None:
    """The kernel refuses the signal: the action says so, the trainer lives on
    (in a pod, the trainer's liveness probe on trainprobe.workers restarts it)."""
    with sidecar_in(empty_dir, "--socket-access", "all") as sc:
        private = empty_dir / f"trainprobe-{SIDECAR_UID}"
        proc = trainer(TRAINER_UID, f"unix://{private}/sidecar.sock", "other-nocap")
        try:
            assert proc.stdout is not None and proc.stdout.readline().strip() == b"hung"
            actions = wait_for(
                lambda: sc.incidents("action", job="other-nocap"),
                20,
                what="action",
            )
            assert f"(verified, uid {TRAINER_UID}" in sc.log_text()
            (out,) = actions[0]["outcomes"].values()
            assert out["method"] == "signal", out
            text = str(out).lower()
            assert "not permitted" in text or "eperm" in text or "permission" in text, out
            time.sleep(1.0)
            assert proc.poll() is None  # alive: the sidecar had no right to signal it
            # The trainer's exec probe, as its own UID, reads the decision through
            # the 0711 directory: it fails, and the kubelet restarts the trainer.
            probe = [*as_uid(TRAINER_UID), *liveness_command(str(private))]
            assert subprocess.run(probe, timeout=10).returncode == 1
            proc.kill()
            proc.wait(10)
            assert subprocess.run(probe, timeout=10).returncode == 0
        finally:
            proc.kill()
            proc.wait(10)


def test_a_trainer_of_another_uid_cannot_connect_to_a_private_socket(empty_dir: Path) -> None:
    """The default (socket_access user): the socket's mode keeps UID 1001 out."""
    with sidecar_in(empty_dir) as sc:
        private = empty_dir / f"trainprobe-{SIDECAR_UID}"
        proc = trainer(TRAINER_UID, f"unix://{private}/sidecar.sock", "other-refused", steps=5)
        try:
            assert proc.stdout is not None and proc.stdout.readline().strip() == b"hung"
            time.sleep(2.0)
            sc.socket = private / "sidecar.sock"  # the test (root) asks there directly
            assert list(sc.status().workers) == []
        finally:
            proc.kill()
            proc.wait(10)


def _hook_for(uid: int, target: str, seconds: float = 3.0) -> subprocess.CompletedProcess[str]:
    """A hook that reports for ``seconds``, as ``uid``."""
    code = (
        "import time; from trainprobe.hooks import LivenessProbeHook as H; "
        "h = H(interval_ms=100, job_id='j', rank=0, world_size=1); "
        f"[h.on_step_end(i) or time.sleep(0.1) for i in range({int(seconds * 10)})]; h.close()"
    )
    return subprocess.run(
        [*as_uid(uid), PYTHON, "-c", code],
        capture_output=True,
        text=True,
        env=child_env(TRAINPROBE_TARGET=target, HOME=str(home_of(uid))),
        timeout=60,
    )


def test_an_impostor_in_the_shared_directory_itself_gets_nothing(empty_dir: Path) -> None:
    """Any UID of the pod can bind <emptyDir>/sidecar.sock: no hook or CLI goes there."""
    impostor = Impostor(empty_dir)
    try:
        _hook_for(SIDECAR_UID, f"unix://{impostor.path}")
        out = subprocess.run(
            [*as_uid(SIDECAR_UID), PYTHON, "-m", "trainprobe.sidecar.cli.ctl", "status"],
            capture_output=True,
            text=True,
            env=child_env(TRAINPROBE_TARGET=str(impostor.path)),
            timeout=60,
        )
        assert out.returncode != 0
        assert f"{empty_dir}/trainprobe-{SIDECAR_UID}/sidecar.sock" in out.stderr, out.stderr
        time.sleep(0.2)
        assert impostor.accepted == 0
    finally:
        impostor.close()


def test_a_subdirectory_squatted_by_another_uid_is_refused_at_both_ends(empty_dir: Path) -> None:
    """UID 1002 of the pod makes trainprobe-1000 first (and listens in it)."""
    squat = empty_dir / f"trainprobe-{SIDECAR_UID}"
    subprocess.run([*as_uid(OTHER_UID), "mkdir", "-m", "0755", str(squat)], check=True)
    assert os.lstat(squat).st_uid == OTHER_UID
    impostor = Impostor(squat)
    try:
        out = _hook_for(SIDECAR_UID, f"unix://{empty_dir}/sidecar.sock")
        assert f"is owned by uid {OTHER_UID}" in out.stderr, out.stderr
        sc = sidecar_in(empty_dir)
        with pytest.raises(RuntimeError, match="exited 2"):
            sc.start()
        assert f"refusing to listen on unix://{squat}/sidecar.sock" in sc.log_text()
        assert f"is owned by uid {OTHER_UID}" in sc.log_text()
        assert impostor.accepted == 0
    finally:
        impostor.close()


# -- the per-user runtime directory, squatted by another local user ---------------------------


def test_a_squatted_runtime_dir_falls_back_to_home_at_both_ends() -> None:
    """UID 1002 makes <tmp>/trainprobe-1000 first (and listens in it). The sidecar
    and the hooks of UID 1000, with no address given, both warn and meet in
    ~/.trainprobe/run instead; the squatter gets no connection."""
    tmp = short_tmpdir("tp-tmp-")
    os.chmod(tmp, 0o1777)  # what /tmp is
    squat = tmp / f"trainprobe-{SIDECAR_UID}"
    subprocess.run([*as_uid(OTHER_UID), "mkdir", "-m", "0755", str(squat)], check=True)
    impostor = Impostor(squat)
    home = home_of(SIDECAR_UID)
    env = child_env(TMPDIR=str(tmp), HOME=str(home))
    env.pop("TRAINPROBE_TARGET", None)
    env.pop("TRAINPROBE_RUNTIME_DIR", None)
    state = home / "state"
    log_path = tmp / "sidecar.log"
    with open(log_path, "wb") as log:
        side = subprocess.Popen(
            [*as_uid(SIDECAR_UID), PYTHON, "-m", "trainprobe.sidecar", *FAST, "--state-dir", state],
            stdout=log,
            stderr=subprocess.STDOUT,
            env=env,
        )
    fallback = home / ".trainprobe" / "run"
    try:
        wait_for(lambda: "ready on" in log_path.read_text() or side.poll() is not None, 30)
        text = log_path.read_text()
        assert f"ready on unix://{fallback}/sidecar.sock" in text, text
        assert f"{squat} is owned by uid {OTHER_UID}" in text and f"using {fallback}" in text
        st = os.lstat(fallback)
        assert (st.st_uid, st.st_mode & 0o777) == (SIDECAR_UID, 0o700)
        hung = subprocess.Popen(
            [*as_uid(SIDECAR_UID), PYTHON, str(HANG), "squatted", "20"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=env,
        )
        try:
            assert hung.stdout is not None and hung.stdout.readline().strip() == b"hung"
            hung.wait(30)  # found, verified and killed: monitoring was not switched off
            assert hung.returncode is not None and hung.returncode < 0
            assert hung.stderr is not None
            warning = hung.stderr.read().decode()
            assert warning.count(f"using {fallback}") == 1, warning
        finally:
            if hung.poll() is None:
                hung.kill()
            hung.wait(10)
        wait_for(lambda: "(verified, uid 1000" in log_path.read_text(), 10)
        status = subprocess.run(
            [*as_uid(SIDECAR_UID), PYTHON, "-m", "trainprobe.sidecar.cli.ctl", "status"],
            capture_output=True,
            text=True,
            env=env,
            timeout=60,
        )
        assert status.returncode == 0 and "squatted" in status.stdout, status.stderr
        assert impostor.accepted == 0
    finally:
        impostor.close()
        side.terminate()
        side.wait(20)


# -- the manifests' own pods ----------------------------------------------------------------


def _manifest_pods() -> list[tuple[str, dict[str, Any], dict[str, Any]]]:
    from tests.unit.test_deploy_manifest import JOB, _load, _ray_pods

    job = _load(JOB)["spec"]["template"]["spec"]
    out = [("k8s-job", job, job["containers"][0])]
    out += [(f"kuberay-{g}", t["spec"], t["spec"]["containers"][0]) for g, t in _ray_pods()]
    return out


def _run_as(pod: dict[str, Any], container: dict[str, Any]) -> tuple[int, int, list[str]]:
    ctx = {**pod.get("securityContext", {}), **container.get("securityContext", {})}
    caps = [c.lower() for c in ctx.get("capabilities", {}).get("add", [])]
    return ctx["runAsUser"], ctx.get("runAsGroup", ctx["runAsUser"]), caps


class PodStandIn:
    """Each emptyDir of ``pod`` as a kubelet makes it (root's, 0777), and a
    container's paths and TCP port rewritten onto those directories."""

    def __init__(self, pod: dict[str, Any], port: int) -> None:
        self.dirs = {}
        for vol in pod["volumes"]:
            if "emptyDir" in vol:
                d = short_tmpdir(f"tp-{vol['name'][:8]}-")
                os.chmod(d, 0o777)
                self.dirs[vol["name"]] = d
        self.port = port

    def rewrite(self, container: dict[str, Any], text: str) -> str:
        mounts = sorted(container.get("volumeMounts", []), key=lambda m: -len(m["mountPath"]))
        for m in mounts:
            if m["name"] in self.dirs:
                text = text.replace(m["mountPath"], str(self.dirs[m["name"]]))
        return text.replace("tcp://0.0.0.0:7070", f"tcp://127.0.0.1:{self.port}")

    def env(self, container: dict[str, Any], uid: int) -> dict[str, str]:
        out = {"HOME": str(home_of(uid))}
        for e in container.get("env", []):
            if e["name"].startswith("RAY_") or e["name"] == "TRAINPROBE_RAY_ADDRESS":
                continue  # no Ray cluster here: the socket layout is what is under test
            value = e.get("value", "pod-test-token")  # else from a Secret
            out[e["name"]] = self.rewrite(container, value)
        return out


@contextlib.contextmanager
def manifest_sidecar(pod: dict[str, Any], stand_in: PodStandIn) -> Iterator[Path]:
    """The pod's sidecar from the manifest's own command, args, env, UID and
    capabilities, on ``stand_in``'s directories, until its startup probe's
    health check is SERVING (the kubelet starts the trainer then). Yields its log."""
    from grpc_health.v1 import health_pb2, health_pb2_grpc

    from tests.unit.test_deploy_manifest import _sidecar

    side = _sidecar(pod)
    uid, gid, caps = _run_as(pod, side)
    args = [stand_in.rewrite(side, a) for a in side.get("args", [])]
    assert side.get("command", ["trainprobe-sidecar"]) == ["trainprobe-sidecar"]
    log_path = short_tmpdir("tp-podlog-") / "sidecar.log"
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(
            [*as_uid(uid, *caps, gid=gid), PYTHON, "-m", "trainprobe.sidecar", *args],
            stdout=log,
            stderr=subprocess.STDOUT,
            env=child_env(**stand_in.env(side, uid)),
        )
    try:
        wait_for(lambda: "ready on" in log_path.read_text() or proc.poll() is not None, 30)
        assert proc.poll() is None, log_path.read_text()
        with grpc.insecure_channel(f"127.0.0.1:{stand_in.port}") as ch:
            health = health_pb2_grpc.HealthStub(ch)
            serving = health_pb2.HealthCheckResponse.SERVING
            wait_for(
                lambda: health.Check(health_pb2.HealthCheckRequest(), timeout=2).status == serving,
                side["startupProbe"]["failureThreshold"] * side["startupProbe"]["periodSeconds"],
                what="the startup probe's answer",
            )
        yield log_path
    finally:
        proc.terminate()
        proc.wait(20)


def liveness_probe(stand_in: PodStandIn, pod: dict[str, Any], main: dict[str, Any]) -> list[str]:
    """The trainer's exec liveness probe, rewritten onto ``stand_in``, as its UID."""
    t_uid, t_gid, _ = _run_as(pod, main)
    live = [stand_in.rewrite(main, a) for a in main["livenessProbe"]["exec"]["command"]]
    assert Path(live[-1].split('"')[1]).is_dir()  # the sidecar made what it reads
    return [*as_uid(t_uid, gid=t_gid), *live]


@pytest.mark.parametrize(("name", "pod", "main"), _manifest_pods(), ids=lambda v: str(v)[:16])
def test_the_manifests_pod_starts_and_its_hook_is_verified(
    name: str, pod: dict[str, Any], main: dict[str, Any]
) -> None:
    """The sidecar from the manifest's own command, args, env, UID and
    capabilities on stand-ins for its emptyDirs; its startup probe's health
    check SERVING; a hook with the trainer's env and UID verified."""
    stand_in = PodStandIn(pod, free_port())
    with manifest_sidecar(pod, stand_in) as log_path:
        t_uid, t_gid, _ = _run_as(pod, main)
        env = child_env(**stand_in.env(main, t_uid))
        code = (
            "import time; from trainprobe.hooks import LivenessProbeHook as H; "
            "h = H(interval_ms=100, job_id='pod', rank=0, world_size=1); "
            "[h.on_step_end(i) or time.sleep(0.1) for i in range(30)]; h.close()"
        )
        out = subprocess.run(
            [*as_uid(t_uid, gid=t_gid), PYTHON, "-c", code],
            capture_output=True,
            text=True,
            env=env,
            timeout=60,
        )
        assert out.returncode == 0, out.stderr
        assert f"(verified, uid {t_uid}" in log_path.read_text(), out.stderr
        if "livenessProbe" in main:  # its exec probe, as the trainer's UID: healthy
            assert subprocess.run(liveness_probe(stand_in, pod, main), timeout=10).returncode == 0
