"""TLS settings: the certificate a sidecar serves, and the one a relay node pins.

A relay node sends its bearer token upstream, and carries out the kill orders
that come back: it must know it talks to the real upstream first. The upstream
serves TLS with its own key (``tls_cert_file``, ``tls_key_file``); the node
trusts that one certificate and no other root (``relay_tls_cert_file``), so
the handshake fails, before any metadata is sent, against anyone without the
upstream's key. grpc's own credentials do the work
(``grpc.ssl_server_credentials``, ``grpc.ssl_channel_credentials``).
"""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import Any

#: Largest certificate chain or key file read (a chain of a few certificates is ~10 KiB).
MAX_PEM_BYTES = 1 << 20


class TlsFileError(ValueError):
    """A certificate or key file that cannot be used; the message says why."""


def read_pem(path: Path, what: str, private: bool = False) -> bytes:
    """The PEM file's bytes; :class:`TlsFileError` if missing, not PEM, or (for
    a ``private`` key) readable by group or others."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except OSError as err:
        raise TlsFileError(f"{what} {path}: {err.strerror}") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise TlsFileError(f"{what} {path}: not a regular file")
        if private and st.st_mode & 0o077:
            raise TlsFileError(
                f"{what} {path}: mode {stat.S_IMODE(st.st_mode):04o} lets group or others "
                f"read or write the private key; chmod 600 {path}"
            )
        data = os.read(fd, MAX_PEM_BYTES)
    finally:
        os.close(fd)
    if b"-----BEGIN " not in data:
        raise TlsFileError(f"{what} {path}: not a PEM file (no -----BEGIN line)")
    return data


def tls_problem(values: dict[str, Any]) -> str | None:
    """What is wrong with the TLS settings among ``values``, or None."""
    cert, key = values["tls_cert_file"], values["tls_key_file"]
    if (cert is None) != (key is None):
        return "tls_cert_file and tls_key_file go together; give both or neither"
    relay_to, pinned = values["relay_to"] or "", values["relay_tls_cert_file"]
    # Summary mode pins its upstream the same way, with the same file.
    relay_to = relay_to or values.get("job_sync_to") or ""
    if pinned is not None and not relay_to.startswith("tcp://"):
        return (
            "relay_tls_cert_file is for a tcp:// relay_to or job_sync_to "
            "(a Unix socket needs no TLS)"
        )
    if relay_to.startswith("tcp://") and pinned is None and not values["insecure"]:
        return (
            "relay_to: a tcp:// upstream needs relay_tls_cert_file, the upstream's TLS "
            "certificate (its tls_cert_file), so that the token and the kill orders go "
            "only to that upstream; pass --insecure to relay over TCP without TLS"
        )
    try:
        if cert is not None:
            read_pem(cert, "tls_cert_file")
            read_pem(key, "tls_key_file", private=True)
        if pinned is not None:
            read_pem(pinned, "relay_tls_cert_file")
    except TlsFileError as err:
        return str(err)
    return None
