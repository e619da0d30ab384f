"""In-process hooks: what a training process runs to report its liveness.

Public API:

- :class:`LivenessProbeHook`: register one per training process; call
  :meth:`~LivenessProbeHook.on_step_end` each step and wrap long phases in
  :meth:`~LivenessProbeHook.phase`.
- :func:`resolve_identity`: how the hook finds job, rank and Ray ids.
"""

# First: gRPC must be imported with its fork handlers off (see _grpc_fork).
from trainprobe.hooks import _grpc_fork  # noqa: F401
from trainprobe.hooks.identity import Identity, RayIds, resolve_identity
from trainprobe.hooks.liveness import HOOK_VERSION, LivenessProbeHook, resolve_target

__version__ = HOOK_VERSION

__all__ = [
    "HOOK_VERSION",
    "Identity",
    "LivenessProbeHook",
    "RayIds",
    "resolve_identity",
    "resolve_target",
]
