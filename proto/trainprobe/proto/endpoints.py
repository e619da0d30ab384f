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

import logging
import os
import stat
import tempfile
from dataclasses import dataclass
from pathlib import Path

log = logging.getLogger("trainprobe")

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
    """Per-user directory for sockets and stack files.

    ``$TRAINPROBE_RUNTIME_DIR`` (or, if that is a shared directory, this
    user's own ``trainprobe-<uid>`` inside it: :func:`private_dir`), else
    ``<tmp>/trainprobe-<uid>``. When another user has taken that name first
    (made it, or a symlink or file of that name), sockets go to
    ``~/.trainprobe/run`` instead, which only this user can create; one
    warning says so. Sidecar and hooks decide alike, so they still meet.
    """
    explicit = os.environ.get("TRAINPROBE_RUNTIME_DIR")
    if explicit:
        return private_dir(Path(explicit))
    primary = Path(tempfile.gettempdir()) / f"trainprobe-{os.getuid()}"
    taken = _taken(primary)
    if taken is None:
        return primary
    fallback = Path(os.path.expanduser("~")) / ".trainprobe" / "run"
    if primary not in _warned:
        _warned.add(primary)
        log.warning(
            "trainprobe: %s %s: another user made it first; using %s instead (remove it, "
            "or set TRAINPROBE_RUNTIME_DIR)",
            primary,
            taken,
            fallback,
        )
    return fallback


_warned: set[Path] = set()


def _taken(directory: Path) -> str | None:
    """Why ``directory``, this user's by name, is someone else's (None: free or ours)."""
    try:
        st = os.lstat(directory)
    except OSError:
        return None  # absent: whoever uses it first makes it 0700
    if stat.S_ISLNK(st.st_mode):
        return "is a symbolic link"
    if not stat.S_ISDIR(st.st_mode):
        return "is not a directory"
    if st.st_uid != os.getuid():
        return f"is owned by uid {st.st_uid}, not this user ({os.getuid()})"
    return None


def _shared(directory: Path) -> bool:
    """A directory root owns and anyone may write: ``/tmp``, a Kubernetes emptyDir (0777).

    For root, only a sticky one (``/tmp``, ``/var/tmp``): an emptyDir is root's
    own, which the sidecar tightens, but tightening ``/tmp`` would take it from
    every other user of the machine.
    """
    try:
        st = os.lstat(directory)
    except OSError:
        return False
    return (
        stat.S_ISDIR(st.st_mode)
        and st.st_uid == 0
        and (os.geteuid() != 0 or bool(st.st_mode & stat.S_ISVTX))
        and bool(st.st_mode & stat.S_IWOTH)
    )


def private_dir(directory: Path) -> Path:
    """Where this user keeps sockets it was told to keep in ``directory``.

    ``directory`` itself, unless it is shared (root's and writable by anyone,
    as a kubelet makes an emptyDir): any user could swap a socket there, so
    this user's own ``trainprobe-<uid>`` inside it is used instead. Only this
    user (or root) can make a directory owned by it, and one named for its
    uid is what :func:`socket_dir_problem` accepts from a hook of another uid.
    """
    if _shared(directory):
        return directory / f"trainprobe-{os.getuid()}"
    return directory


def resolve_socket(ep: Endpoint) -> Endpoint:
    """``ep`` with a Unix socket in a shared directory moved to :func:`private_dir`."""
    if ep.kind != "unix":
        return ep
    path = Path(ep.path)
    folder = private_dir(path.parent)
    if folder == path.parent:
        return ep
    return _unix(str(folder / path.name), str(folder / path.name))


def socket_dir_problem(directory: Path) -> str | None:
    """Why a socket in ``directory`` could be swapped by another user, or None.

    Whoever can write a socket's directory can replace the socket: a sidecar
    must not listen there, and a hook must not send there. The directory must
    be a real directory (not a symlink), owned by this user, root, or the uid
    it is named for (``trainprobe-<uid>``: a sidecar of another uid in a pod,
    named by the one who chose that path), and writable by no one else. Both
    ends call this (one rule).
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
    if st.st_uid not in (uid, 0) and directory.name != f"trainprobe-{st.st_uid}":
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


class SocketDirMissing(ConnectionError):
    """A Unix socket whose directory does not exist (yet): nothing to connect to."""


def check_socket_dir(
    ep: Endpoint, doing: str = "not connecting to", *, present: bool = False
) -> Endpoint:
    """The endpoint to connect to (:func:`resolve_socket`); raise
    :class:`UnsafeSocketDir` if it is a Unix socket in a directory
    :func:`socket_dir_problem` refuses. Every client of a sidecar socket (the
    CLI, a relay node's upstream link) calls this before it connects: one that
    connects through such a directory may be talking to an impostor.

    With ``present``, a missing directory raises :class:`SocketDirMissing`:
    a client that then opened a channel anyway would have gRPC connect to
    whatever appears there later, unchecked (a directory made 0777 and
    listened in between)."""
    if ep.kind != "unix":
        return ep
    ep = resolve_socket(ep)
    directory = Path(ep.path).parent
    problem = socket_dir_problem(directory)
    if problem is not None:
        raise UnsafeSocketDir(f"{doing} {ep}: {problem}")
    if present and not os.path.lexists(directory):
        raise SocketDirMissing(f"{directory} does not exist yet")
    return ep


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
