"""The KubeRay sample manifest: its pieces must fit together.

There is no Kubernetes here, so this checks what would otherwise only fail
in a cluster: the hooks' target is the sidecar's socket on a volume both
containers mount, /tmp/ray is shared (the sidecar joins Ray as a driver),
the PID namespace is shared (pid fallback), and the sidecar's environment
is valid trainprobe configuration.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.support import REPO
from trainprobe.proto import parse_endpoint
from trainprobe.sidecar import load_settings

MANIFEST = REPO / "deploy" / "kuberay-raycluster.yaml"


def _pod_templates() -> list[tuple[str, dict[str, Any]]]:
    doc = yaml.safe_load(MANIFEST.read_text())
    assert doc["kind"] == "RayCluster"
    spec = doc["spec"]
    out = [("head", spec["headGroupSpec"]["template"]["spec"])]
    out += [(g["groupName"], g["template"]["spec"]) for g in spec["workerGroupSpecs"]]
    return out


def _env(container: dict[str, Any]) -> dict[str, Any]:
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in container.get("env", [])}


def _mounts(container: dict[str, Any]) -> dict[str, str]:
    return {m["mountPath"]: m["name"] for m in container.get("volumeMounts", [])}


@pytest.mark.parametrize(("group", "pod"), _pod_templates())
def test_sidecar_container_fits_the_ray_container(group: str, pod: dict[str, Any]) -> None:
    assert pod["shareProcessNamespace"] is True
    ray_c, *others = pod["containers"]
    assert ray_c["name"].startswith("ray"), "KubeRay needs the Ray container first"
    (side,) = [c for c in others if c.get("command", [None])[0] == "trainprobe-sidecar"]
    empty_dirs = {v["name"] for v in pod["volumes"] if "emptyDir" in v}

    target = parse_endpoint(_env(ray_c)["TRAINPROBE_TARGET"])
    listen = parse_endpoint(_env(side)["TRAINPROBE_LISTEN"])
    assert target.kind == "unix" and target == listen
    sock_dir = str(Path(listen.path).parent)
    assert _mounts(ray_c)[sock_dir] == _mounts(side)[sock_dir]
    assert _mounts(side)[sock_dir] in empty_dirs
    assert _mounts(ray_c)["/tmp/ray"] == _mounts(side)["/tmp/ray"]
    assert _env(ray_c)["RAY_AUTH_TOKEN"] == _env(side)["RAY_AUTH_TOKEN"]

    side_env = {k: str(v) for k, v in _env(side).items() if isinstance(v, str)}
    settings = load_settings(env=side_env)  # raises SettingsError naming a bad key
    assert settings.ray_address and settings.on_hung == "restart"
    assert settings.listen_addresses == (str(listen),)
