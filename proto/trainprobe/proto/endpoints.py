"""Where a sidecar listens and how a hook finds it.

Accepted forms (both ends):

- ``unix:///abs/path.sock`` or a bare absolute path: a Unix socket;
- ``tcp://host:port`` or ``host:port``: TCP (token required on the sidecar).

The default is a per-user Unix socket in :func:`runtime_dir`. Under Ray, each
node's sidecar listens on :func:`ray_node_socket_path`, so that hooks on that
node find it with no configuration even when several Ray nodes share one
file system (``ray.cluster_utils.Cluster``).
"""

from __future__ import annotations

import os
import stat
import tempfile
from dataclasses import dataclass
from pathlib import Path

#: Environment variable naming the hook's target.
DEFAULT_TARGET_ENV = "TRAINPROBE_TARGET"
#: Unix socket paths are limited to 107 bytes by sun_path.
_MAX_UNIX_PATH = 107


class EndpointError(ValueError):
    """An address that is neither a Unix socket nor host:port."""


@dataclass(frozen=True)
class Endpoint:
    """A parsed address. ``kind`` is ``"unix"`` or ``"tcp"``."""

    kind: str
    path: str = ""
    host: str = ""
    port: int = 0

    @property
    def grpc_target(self) -> str:
        """The address in gRPC's own syntax."""
        if self.kind == "unix":
            return f"unix://{self.path}"
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{host}:{self.port}"

    def __str__(self) -> str:
        return f"unix://{self.path}" if self.kind == "unix" else f"tcp://{self.grpc_target}"


def runtime_dir() -> Path:
    """Per-user directory for sockets: ``$TRAINPROBE_RUNTIME_DIR`` or
    ``<tmp>/trainprobe-<uid>``."""
    explicit = os.environ.get("TRAINPROBE_RUNTIME_DIR")
    if explicit:
        return Path(explicit)
    return Path(tempfile.gettempdir()) / f"trainprobe-{os.getuid()}"


def socket_dir_problem(directory: Path) -> str | None:
    """Why a socket in ``directory`` could be swapped by another user, or None.

    Whoever can write a socket's directory can replace the socket: a sidecar
    must not listen there, and a hook must not send there. The directory must
    be a real directory (not a symlink), owned by this user or root, and
    writable by no one else. Both ends call this (one rule).
    """
    try:
        st = os.lstat(directory)
    except FileNotFoundError:
        return None  # nothing to trust yet; whoever creates it makes it 0700
    except OSError as err:
        return f"{directory}: cannot be checked ({err.strerror})"
    if stat.S_ISLNK(st.st_mode):
        return f"{directory} is a symbolic link; refusing a socket directory another user may aim"
    if not stat.S_ISDIR(st.st_mode):
        return f"{directory} is not a directory"
    uid = os.geteuid()
    if st.st_uid not in (uid, 0):
        return (
            f"{directory} is owned by uid {st.st_uid}, not by this user ({uid}) or root; "
            "another user could swap the socket (remove it, or set TRAINPROBE_RUNTIME_DIR)"
        )
    if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        return (
            f"{directory} is writable by others (mode {stat.S_IMODE(st.st_mode):04o}); "
            f"another user could swap the socket (chmod 700 {directory})"
        )
    return None


class UnsafeSocketDir(Exception):
    """A Unix socket whose directory another user could write: refused.

    The command-line programs print it as one line and exit with status 2.
    """


def check_socket_dir(ep: Endpoint, doing: str = "not connecting to") -> None:
    """Raise :class:`UnsafeSocketDir` if ``ep`` is a Unix socket in a directory
    :func:`socket_dir_problem` refuses. Every client of a sidecar socket (the
    CLI, a relay node's upstream link) calls this before it connects: one that
    connects through such a directory may be talking to an impostor."""
    if ep.kind != "unix":
        return
    problem = socket_dir_problem(Path(ep.path).parent)
    if problem is not None:
        raise UnsafeSocketDir(f"{doing} {ep}: {problem}")


def default_socket_path() -> Path:
    """The socket a stand-alone sidecar listens on when given no ``--listen``."""
    return runtime_dir() / "sidecar.sock"


def ray_node_socket_path(node_id: str) -> Path:
    """The socket of the sidecar that serves Ray node ``node_id``."""
    return runtime_dir() / f"ray-{node_id[:40]}.sock"


#: Ray namespace of every actor trainprobe creates.
RAY_NAMESPACE = "trainprobe"


def ray_node_actor_name(node_id: str) -> str:
    """Name of the Ray actor that stands for the sidecar of node ``node_id``.

    It is the per-node sidecar itself (``--ray-per-node``), or the small handle
    registry a stand-alone sidecar with ``--ray-address`` creates. Hooks in Ray
    actors hand their own handle to it, so that the sidecar can ``ray.kill``
    them by actor id.
    """
    return f"trainprobe-sidecar-{node_id}"


def parse_endpoint(text: str) -> Endpoint:
    """Parse an address; raise :class:`EndpointError` with the accepted forms."""
    raw = text.strip()
    if not raw:
        raise EndpointError("empty address; use unix:///abs/path or host:port")
    if raw.startswith("unix://"):
        path = raw[len("unix://") :]
        if not path.startswith("/"):
            raise EndpointError(
                f"{text!r}: a unix address needs an absolute path (unix:///abs/path)"
            )
        return _unix(path, text)
    if raw.startswith("/"):
        return _unix(raw, text)
    scheme, sep, _ = raw.partition("://")
    if sep and scheme != "tcp":
        # http://host:port would otherwise parse as host "http://host".
        raise EndpointError(f"{text!r}: use tcp://HOST:PORT or unix:///PATH")
    rest = raw[len("tcp://") :] if raw.startswith("tcp://") else raw
    host, sep, port_text = rest.rpartition(":")
    if not sep or not host:
        raise EndpointError(f"{text!r}: expected unix:///abs/path, tcp://host:port or host:port")
    host = host.strip("[]")
    try:
        port = int(port_text)
    except ValueError:
        raise EndpointError(f"{text!r}: port {port_text!r} is not a number") from None
    if not 0 <= port <= 65535:
        raise EndpointError(f"{text!r}: port must be in 0..65535")
    return Endpoint(kind="tcp", host=host, port=port)


def _unix(path: str, original: str) -> Endpoint:
    if len(path.encode()) > _MAX_UNIX_PATH:
        raise EndpointError(
            f"{original!r}: unix socket paths are limited to {_MAX_UNIX_PATH} bytes; "
            "set TRAINPROBE_RUNTIME_DIR to a shorter directory"
        )
    return Endpoint(kind="unix", path=path)
