"""The manifests under deploy/: valid Kubernetes objects whose pieces fit.

There is no Kubernetes here, so this checks what would otherwise only fail
in a cluster: every object against the Kubernetes API's schema (the
``kubernetes`` client's models, see tests/k8s_schema.py; the RayCluster
custom resource through its pod templates), the sidecar as a native sidecar
(init container with restartPolicy Always), the hooks' target being the
sidecar's socket on a volume both containers mount, the shared PID
namespace, the kubelet probes asking the sidecar's TCP port, and the
sidecar's configuration being valid trainprobe configuration, and the UIDs
fitting: the same for both containers, or else what a trainer of another
UID needs. tests/test_pod_dirs.py starts these pods' sidecars and hooks on
directories made as a kubelet makes an emptyDir.
"""

from __future__ import annotations

import copy
import re
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.k8s_schema import schema_errors, validate
from tests.support import REPO
from trainprobe.proto import liveness_command, parse_endpoint
from trainprobe.sidecar import Settings, load_settings
from trainprobe.sidecar.cli.sidecar import build_parser

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

DEPLOY = REPO / "deploy"
KUBERAY = DEPLOY / "kuberay-raycluster.yaml"
JOB = DEPLOY / "k8s-job.yaml"
DOCKERFILE = DEPLOY / "sidecar.Dockerfile"


def _load(path: Path) -> dict[str, Any]:
    return yaml.safe_load(path.read_text())


def _ray_pods() -> list[tuple[str, dict[str, Any]]]:
    spec = _load(KUBERAY)["spec"]
    out = [("head", spec["headGroupSpec"]["template"])]
    out += [(g["groupName"], g["template"]) for g in spec["workerGroupSpecs"]]
    return out


def _env(container: dict[str, Any]) -> dict[str, Any]:
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in container.get("env", [])}


def _mounts(container: dict[str, Any]) -> dict[str, str]:
    return {m["mountPath"]: m["name"] for m in container.get("volumeMounts", [])}


def _sidecar(pod: dict[str, Any]) -> dict[str, Any]:
    (side,) = [c for c in pod.get("initContainers", []) if c["name"] == "trainprobe-sidecar"]
    assert not [c for c in pod["containers"] if c["name"] == "trainprobe-sidecar"]
    return side


def _settings(side: dict[str, Any]) -> Settings:
    """The sidecar's settings as it would load them: its env, then its flags
    (through the CLI's own parser, so an unknown flag fails here as there)."""
    assert side.get("command", ["trainprobe-sidecar"]) == ["trainprobe-sidecar"]
    env = {k: v if isinstance(v, str) else "from-a-secret" for k, v in _env(side).items()}
    args = vars(build_parser().parse_args(side.get("args", [])))
    del args["config"], args["list_settings"]
    return load_settings(env=env, cli={k: v for k, v in args.items() if v is not None})


def _tcp_port(settings: Settings) -> int:
    (tcp,) = [parse_endpoint(a) for a in settings.listen_addresses if a.startswith("tcp://")]
    return tcp.port


def _unix(settings: Settings) -> Any:
    (unix,) = [parse_endpoint(a) for a in settings.listen_addresses if a.startswith("unix://")]
    return unix


@pytest.mark.parametrize(
    ("name", "doc", "kind"),
    [("k8s-job", _load(JOB), "V1Job")]
    + [(f"kuberay-{g}", t, "V1PodTemplateSpec") for g, t in _ray_pods()],
)
def test_manifest_is_valid_against_the_kubernetes_api(name: str, doc: Any, kind: str) -> None:
    validate(doc, kind)


def test_the_schema_check_rejects_what_a_cluster_would() -> None:
    doc = _load(JOB)
    pod = doc["spec"]["template"]["spec"]
    bad = copy.deepcopy(doc)
    bad["spec"]["template"]["spec"]["initContainers"][0]["restartPolicyy"] = "Always"
    assert any(
        "restartPolicyy: not a field of V1Container" in e for e in schema_errors(bad, "V1Job")
    )
    bad = copy.deepcopy(doc)
    bad["spec"]["template"]["spec"]["initContainers"][0]["livenessProbe"]["grpc"]["port"] = "7070"
    assert any("grpc.port: expected int" in e for e in schema_errors(bad, "V1Job"))
    bad = copy.deepcopy(doc)
    del bad["spec"]["template"]["spec"]["containers"][0]["name"]
    with pytest.raises(ValueError, match="name"):
        validate(bad, "V1Job")
    assert pod["shareProcessNamespace"] is True


def _check_pod(pod: dict[str, Any], main: dict[str, Any], probed: bool) -> Settings:
    assert pod["shareProcessNamespace"] is True
    side = _sidecar(pod)
    assert side["restartPolicy"] == "Always", "a native sidecar"
    settings = _settings(side)
    # The hooks' target is the sidecar's socket, on an emptyDir both mount.
    target, unix = parse_endpoint(_env(main)["TRAINPROBE_TARGET"]), _unix(settings)
    assert target == unix
    sock_dir = str(Path(unix.path).parent)
    empty_dirs = {v["name"] for v in pod["volumes"] if "emptyDir" in v}
    assert _mounts(main)[sock_dir] == _mounts(side)[sock_dir] in empty_dirs
    # The hooks' stack files go where the sidecar reads them: its socket's directory.
    assert _env(main)["TRAINPROBE_RUNTIME_DIR"] == _env(side)["TRAINPROBE_RUNTIME_DIR"] == sock_dir
    _check_uids(pod, side, main, settings, target)
    # TCP: behind a token from a Secret; the kubelet asks Health on that port.
    port = _tcp_port(settings)
    assert "secretKeyRef" in _env(side)["TRAINPROBE_TOKEN"]
    assert side["ports"][0]["containerPort"] == port
    for probe in ("startupProbe", "livenessProbe"):
        assert side[probe]["grpc"] == {"port": port}, probe  # service "": the sidecar
    if not probed:
        assert "livenessProbe" not in main
    else:
        # The exec probe reads the decisions beside the sidecar's socket: in its
        # own trainprobe-<uid>/ inside the emptyDir (a kubelet's is root's, 0777).
        side_uid, _ = _uid(pod, side)
        live = main["livenessProbe"]
        assert live["exec"]["command"] == liveness_command(f"{sock_dir}/trainprobe-{side_uid}")
        assert live["timeoutSeconds"] >= 2  # a shell and two cats, on a loaded node
        # Long enough for the sidecar's own kill to end the process first.
        assert live["periodSeconds"] * live["failureThreshold"] > settings.kill_grace_s
    return settings


def _uid(pod: dict[str, Any], container: dict[str, Any]) -> tuple[int, list[str]]:
    ctx = {**pod.get("securityContext", {}), **container.get("securityContext", {})}
    return ctx["runAsUser"], ctx.get("capabilities", {}).get("add", [])


def _check_uids(
    pod: dict[str, Any], side: dict[str, Any], main: dict[str, Any], settings: Settings, target: Any
) -> None:
    """A sidecar may signal (and verify, connect) its own UID's processes; a
    trainer of another UID needs the socket opened to it, the sidecar's own
    directory named in its target, and CAP_KILL on the sidecar."""
    side_uid, caps = _uid(pod, side)
    main_uid, _ = _uid(pod, main)
    assert side_uid != 0, "the sidecar needs no root; its emptyDir rule is for a non-root UID"
    if main_uid == side_uid:
        return
    assert settings.socket_access == "all" and "KILL" in caps
    assert Path(target.path).parent.name == f"trainprobe-{side_uid}"


def test_another_trainer_uid_is_caught_by_the_uid_check() -> None:
    pod = copy.deepcopy(_load(JOB)["spec"]["template"]["spec"])
    pod["containers"][0]["securityContext"] = {"runAsUser": 1001}
    with pytest.raises(AssertionError):
        _check_pod(pod, pod["containers"][0], True)


def test_job_runs_torchrun_beside_a_native_sidecar_whose_probe_restarts_it() -> None:
    pod = _load(JOB)["spec"]["template"]["spec"]
    assert pod["restartPolicy"] == "OnFailure"  # the probe's restart stays in the pod
    (trainer,) = pod["containers"]
    _check_pod(pod, trainer, True)
    cmd = trainer["command"]
    assert cmd[0] == "torchrun" and any(a.startswith("--max-restarts=") for a in cmd)
    assert (REPO / cmd[cmd.index("--max-restarts=3") + 1]).exists()
    ckpt = next(a.split("=", 1)[1] for a in cmd if a.startswith("--ckpt-dir="))
    assert _mounts(trainer)[ckpt] == "ckpt"


@pytest.mark.parametrize(("group", "template"), _ray_pods())
def test_kuberay_sidecar_fits_the_ray_container(group: str, template: dict[str, Any]) -> None:
    pod = template["spec"]
    ray_c = pod["containers"][0]
    assert ray_c["name"].startswith("ray"), "KubeRay needs the Ray container first"
    # No workers probe on the head: restarting it would end the cluster.
    settings = _check_pod(pod, ray_c, group != "head")
    side = _sidecar(pod)
    assert _mounts(ray_c)["/tmp/ray"] == _mounts(side)["/tmp/ray"]
    assert _env(ray_c)["RAY_AUTH_TOKEN"] == _env(side)["RAY_AUTH_TOKEN"]
    assert settings.ray_address and settings.on_hung == "restart"


def test_sidecar_image_builds_from_files_that_exist() -> None:
    """No container engine here: the build file's inputs and entry point are checked."""
    text = DOCKERFILE.read_text()
    for line in re.findall(r"^COPY (?!--from)(.+)$", text, flags=re.M):
        *sources, _dest = line.split()
        for src in sources:
            assert (REPO / src).exists(), src
    scripts = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["scripts"]
    (entry,) = re.findall(r'^ENTRYPOINT \["([^"]+)"\]', text, flags=re.M)
    assert entry in scripts
    build = text[text.index("\nFROM") :]  # the instructions, not the header comment
    assert "[ray]" not in build and "torch" not in build


def test_job_comes_back_after_a_kill() -> None:
    """A kill ends in training again: torchrun restarts the ranks from their
    checkpoint (--max-restarts), and once its restarts run out the kubelet
    restarts the trainer container in the same pod (OnFailure), up to
    backoffLimit times, on a checkpoint volume that outlives the container;
    nothing fails the Job on the exit code a kill leaves."""
    job = _load(JOB)["spec"]
    pod = job["template"]["spec"]
    assert pod["restartPolicy"] == "OnFailure"
    assert job.get("backoffLimit", 6) >= 1  # Kubernetes' default is 6
    fail_job = [
        r for r in job.get("podFailurePolicy", {}).get("rules", []) if r["action"] == "FailJob"
    ]
    assert not fail_job, fail_job
    (trainer,) = pod["containers"]
    restarts = [
        int(a.split("=", 1)[1]) for a in trainer["command"] if a.startswith("--max-restarts=")
    ]
    assert restarts and restarts[0] >= 1
    ckpt = next(a.split("=", 1)[1] for a in trainer["command"] if a.startswith("--ckpt-dir="))
    (volume,) = [v for v in pod["volumes"] if v["name"] == _mounts(trainer)[ckpt]]
    assert "emptyDir" in volume or "persistentVolumeClaim" in volume, volume
