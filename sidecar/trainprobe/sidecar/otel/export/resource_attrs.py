"""The sidecar's OpenTelemetry resource, as plain attributes.

``service.name=trainprobe-sidecar``, ``host.name`` and, under Kubernetes, the
``k8s.*`` attributes the environment reveals. Kubernetes does not tell a
container its pod's name or namespace by itself: expose them with the
downward API as ``K8S_POD_NAME``, ``K8S_NAMESPACE_NAME``, ``K8S_NODE_NAME``,
``K8S_POD_UID``, ``K8S_CONTAINER_NAME``. Inside a cluster
(``KUBERNETES_SERVICE_HOST`` set) ``POD_NAME``, ``POD_NAMESPACE``, ``NODE_NAME``
and ``POD_UID`` work too, the pod name falls back to ``HOSTNAME`` and the
namespace to the service account's namespace file.
``OTEL_RESOURCE_ATTRIBUTES`` and ``OTEL_SERVICE_NAME`` override all of this
(the SDK adapter merges them last).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

SERVICE_NAME = "trainprobe-sidecar"
NAMESPACE_FILE = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"

#: Explicit downward-API variables, read wherever they are set.
_K8S_ENV = {
    "k8s.pod.name": "K8S_POD_NAME",
    "k8s.namespace.name": "K8S_NAMESPACE_NAME",
    "k8s.node.name": "K8S_NODE_NAME",
    "k8s.pod.uid": "K8S_POD_UID",
    "k8s.container.name": "K8S_CONTAINER_NAME",
}
#: Common generic names, trusted only inside a cluster (KUBERNETES_SERVICE_HOST).
_K8S_GENERIC_ENV = {
    "k8s.pod.name": "POD_NAME",
    "k8s.namespace.name": "POD_NAMESPACE",
    "k8s.node.name": "NODE_NAME",
    "k8s.pod.uid": "POD_UID",
}


def _read(path: str) -> str:
    try:
        with open(path) as fh:
            return fh.read().strip()
    except OSError:
        return ""


def resource_attributes(
    env: Mapping[str, str],
    hostname: str,
    version: str,
    read_text: Callable[[str], str] = _read,
) -> dict[str, str]:
    """Resource attributes before the ``OTEL_*`` overrides."""
    attrs = {"service.name": SERVICE_NAME, "service.version": version, "host.name": hostname}
    in_cluster = bool(env.get("KUBERNETES_SERVICE_HOST"))
    for key, name in _K8S_ENV.items():
        value = env.get(name, "").strip() or (
            env.get(_K8S_GENERIC_ENV.get(key, ""), "").strip() if in_cluster else ""
        )
        if value:
            attrs[key] = value
    if in_cluster:
        attrs.setdefault("k8s.pod.name", env.get("HOSTNAME", "") or hostname)
        namespace = read_text(NAMESPACE_FILE)
        if namespace:
            attrs.setdefault("k8s.namespace.name", namespace)
    return attrs
