"""The trainer's liveness probe that fails only on the sidecar's evidence.

A kubelet probe that asks the sidecar (``grpc: {service: trainprobe.workers}``)
fails whenever the sidecar does not answer in time: while it restarts, is
OOM-killed, is frozen or is busy past the probe's timeout. The kubelet then
restarts a healthy trainer. The sidecar therefore also writes its decision
down: for each process it decided to kill (a pid it verified, so a pid of
this pod's namespace), a file ``<socket dir>/doomed/<pid>`` holding the
process's start time in clock ticks (``/proc/<pid>/stat`` field 22). The
probe below, run in the trainer's container, fails only while such a file
names a process that still runs with that start time: no sidecar, no file,
no restart. It needs a POSIX ``sh`` and ``cat``, and a shared PID namespace
(``shareProcessNamespace: true``), which verification needs anyway.
"""

from __future__ import annotations

__all__ = ["DOOMED_DIR_NAME", "liveness_command", "liveness_script"]

#: The directory, beside the sidecar's first Unix socket, of its kill decisions.
DOOMED_DIR_NAME = "doomed"

# ${s##*) } drops "pid (comm) " (a comm may hold ") "): the state is then $1,
# and field 22 $20. A zombie (Z) has ended, as the sidecar's pid_alive says.
_SCRIPT = (
    'for f in "{dir}"/*; do '
    '[ -f "$f" ] || continue; '
    's=$(cat "/proc/${{f##*/}}/stat" 2>/dev/null) || continue; '
    "set -- ${{s##*) }}; "
    '[ "$1" = Z ] && continue; '
    '[ "${{20}}" = "$(cat "$f")" ] && exit 1; '
    "done; exit 0"
)


def liveness_script(socket_dir: str) -> str:
    """The probe's shell text for a sidecar whose Unix socket is in ``socket_dir``."""
    if not socket_dir.startswith("/"):
        raise ValueError(f"{socket_dir!r}: the socket directory must be an absolute path")
    if any(c in socket_dir for c in '"$`\\'):
        raise ValueError(f"{socket_dir!r}: a socket directory for a probe has no quotes or $")
    return _SCRIPT.format(dir=f"{socket_dir.rstrip('/')}/{DOOMED_DIR_NAME}")


def liveness_command(socket_dir: str) -> list[str]:
    """``livenessProbe: exec: command:`` for a sidecar whose socket is in ``socket_dir``."""
    return ["sh", "-c", liveness_script(socket_dir)]
