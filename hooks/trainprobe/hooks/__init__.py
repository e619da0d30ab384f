"""In-process hooks: what a training process runs to report its liveness.

Public API:

- :class:`LivenessProbeHook`: register one per training process; call
  :meth:`~LivenessProbeHook.on_step_end` each step and wrap long phases in
  :meth:`~LivenessProbeHook.phase`.
- :meth:`LivenessProbeHook.watch_ddp` and :meth:`LivenessProbeHook.collective`:
  gradient-sync latency and per-group collective sequence numbers;
  :func:`group_label` names a process group the way reports do.
- :func:`resolve_identity`: how the hook finds job, rank and Ray ids.
- :func:`report_checkpoint`: under Ray Train, write and ``ray.train.report`` a
  checkpoint inside ``hook.phase("checkpoint")`` (imports Ray only when called).
- :func:`install_restart_prefix`: under torchrun restarts, a plain
  ``init_process_group`` on a store prefixed by the attempt (the hook calls it
  itself when it is made before the process group).

Framework callbacks, in their own modules (imported only from there, so
``import trainprobe.hooks`` never imports the framework):

- ``trainprobe.hooks.lightning.LivenessProbeCallback``: Lightning
  (``lightning.pytorch`` or ``pytorch_lightning``),
  ``Trainer(callbacks=[LivenessProbeCallback()])``.
- ``trainprobe.hooks.transformers.LivenessProbeCallback``: Hugging Face
  ``Trainer``/``Seq2SeqTrainer``, ``Trainer(..., callbacks=[LivenessProbeCallback()])``.
- Importing either of those two, under torchrun, also prefixes the store by
  the attempt and watches the start-up (``trainprobe.hooks.framework.startup``):
  both frameworks make the process group before any callback exists.
- :func:`replicate`: ``model, opt = replicate(hook, model, opt)`` makes a DDP
  loop replicated (torchft replica groups) under ``trainprobe run --replicas N``,
  and changes nothing else under plain torchrun (``trainprobe[torchft]``);
  ``trainprobe.hooks.replicated_lightning.ReplicatedCallback`` does it for Lightning,
  ``trainprobe.hooks.replicated_transformers.ReplicatedCallback`` for the Hugging
  Face ``Trainer``.
- ``trainprobe.hooks.torchft``: ``DistributedDataParallel(manager, module)``,
  torchft's wrapper with a comm hook whose error path works; the hook's
  :meth:`LivenessProbeHook.watch_torchft` reports the replica group.
"""

# First: gRPC must be imported with its fork handlers off (see _grpc_fork).
from trainprobe.hooks import _grpc_fork  # noqa: F401
from trainprobe.hooks.liveness import HOOK_VERSION, LivenessProbeHook
from trainprobe.hooks.ray_train import report_checkpoint
from trainprobe.hooks.replica.replicate import replicate
from trainprobe.hooks.report.identity import Identity, RayIds, resolve_identity
from trainprobe.hooks.report.ray_handle import HandleRegistration
from trainprobe.hooks.report.target import resolve_target
from trainprobe.hooks.startup.restart_store import install_restart_prefix
from trainprobe.hooks.watch.collectives import Collective
from trainprobe.hooks.watch.sync import group_label

__version__ = HOOK_VERSION

__all__ = [
    "HOOK_VERSION",
    "Collective",
    "HandleRegistration",
    "Identity",
    "LivenessProbeHook",
    "RayIds",
    "group_label",
    "install_restart_prefix",
    "replicate",
    "report_checkpoint",
    "resolve_identity",
    "resolve_target",
]
