"""Ray Train helpers: report a checkpoint inside a declared phase; a TorchftConfig
whose lighthouse lets survivors go on at once.

Saving and reporting a checkpoint can take far longer than a step, and
``ray.train.report`` also waits for every rank. Inside ``hook.phase("checkpoint")``
the stall rule does not apply, so a slow checkpoint is never taken for a hang
(the phase's own timeout still catches a checkpoint that never ends).

Ray is imported only when a helper is called.
"""

from __future__ import annotations

import contextlib
import tempfile
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from trainprobe.hooks.liveness import LivenessProbeHook
from trainprobe.proto.lighthouse import LIGHTHOUSE_DEFAULTS

__all__ = ["CHECKPOINT_PHASE", "LIGHTHOUSE_DEFAULTS", "report_checkpoint", "torchft_config"]

#: The phase name the helpers declare.
CHECKPOINT_PHASE = "checkpoint"


@contextlib.contextmanager
def report_checkpoint(
    hook: LivenessProbeHook,
    metrics: Mapping[str, Any],
    timeout_s: float | None = None,
) -> Iterator[Path]:
    """Write a checkpoint into a fresh directory, then ``ray.train.report`` it.

    Everything, the writing and the report, runs inside
    ``hook.phase("checkpoint", timeout_s)``::

        with report_checkpoint(hook, {"step": step, "loss": loss}) as ckpt_dir:
            if ray.train.get_context().get_world_rank() == 0:
                torch.save(model.state_dict(), ckpt_dir / "model.pt")

    Every rank must enter it (``ray.train.report`` is collective). A rank that
    writes nothing reports its metrics without a checkpoint. If the body
    raises, nothing is reported and the exception propagates.
    """
    import ray.train

    with (
        hook.phase(CHECKPOINT_PHASE, timeout_s),
        tempfile.TemporaryDirectory(prefix="trainprobe-ckpt-") as tmp,
    ):
        ckpt_dir = Path(tmp)
        yield ckpt_dir
        checkpoint = ray.train.Checkpoint.from_directory(tmp) if any(ckpt_dir.iterdir()) else None
        ray.train.report(dict(metrics), checkpoint=checkpoint)


def torchft_config(lighthouse_kwargs: Mapping[str, Any] | None = None, **kwargs: Any) -> Any:
    """Ray Train's ``TorchftConfig`` with :data:`LIGHTHOUSE_DEFAULTS` under ``lighthouse_kwargs``:
    the settings ``trainprobe run --replicas`` gives its lighthouse, and why
    (:mod:`trainprobe.proto.lighthouse`).

    ``kwargs`` go to ``TorchftConfig`` as they are (``backend="gloo"``, ...)::

        TorchTrainer(train_func, torch_config=torchft_config(backend="gloo"), ...)
    """
    from ray.train.v2.torch.torchft_config import TorchftConfig

    return TorchftConfig(
        lighthouse_kwargs={**LIGHTHOUSE_DEFAULTS, **(lighthouse_kwargs or {})}, **kwargs
    )
