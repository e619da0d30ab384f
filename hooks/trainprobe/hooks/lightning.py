"""``Trainer(callbacks=[LivenessProbeCallback()])``: trainprobe for Lightning.

Works with ``lightning.pytorch`` and, when that is what is installed (or
already imported), ``pytorch_lightning``. Only this module imports Lightning.

During ``trainer.fit`` each process holds one
:class:`~trainprobe.hooks.LivenessProbeHook` named after the trainer's global
rank, world size and local rank. A step ends when ``trainer.global_step``
advances (optimizer steps: gradient accumulation makes longer steps, not
repeated ones). Validation, the sanity check and ``trainer.save_checkpoint``
(every checkpoint callback goes through it, the write and the barrier
included) are phases, so they never count as a stall. Under a DDP strategy
the wrapped model is watched (:meth:`~trainprobe.hooks.LivenessProbeHook.watch_ddp`),
so a hang names the rank that broke it; so are Lightning's other collectives
from the callback's ``setup`` on (the strategy's barriers and broadcasts, the
DDP wrapper's construction, the broadcast each batch begins with), where the
peers of a rank that hangs before its first batch wait: in the module's or a
later callback's ``setup``, a checkpoint's restore, ``on_fit_start``, the
first batch's fetch. Before the callback's ``setup``, under torchrun, the
start-up hook reports for the rank, and holds ``prepare_data`` as a phase
(:mod:`trainprobe.hooks.framework.startup`).

``trainer.validate/test/predict`` alone run without a hook: with no training
steps there is nothing for the stall rule to judge.

Under torchrun, importing this module is what makes restarts work: Lightning
creates the process group in ``trainer.fit`` before any callback runs, so the
import (at the top of the script, before the Trainer) is the earliest place
trainprobe can act. It prefixes torchrun's store by the attempt and watches
the start-up of every attempt (:mod:`trainprobe.hooks.framework.startup`).

Lightning's SIGTERM handler only sets a flag checked at the next step
boundary, which a hung rank never reaches; the sidecar sees the handler
(``SigCgt``) and sends SIGKILL after 0.5 s instead of waiting out its grace.
"""

from __future__ import annotations

import sys
from typing import Any

from trainprobe.hooks.framework.guard import guarded, report_failure
from trainprobe.hooks.framework.phases import OpenPhases, Scope, within
from trainprobe.hooks.framework.startup import Patch, callback_made, end_startup_watch, prepare
from trainprobe.hooks.liveness import LivenessProbeHook

if "pytorch_lightning" in sys.modules and "lightning.pytorch" not in sys.modules:
    import pytorch_lightning as pl  # the user's script already chose it
else:
    try:
        import lightning.pytorch as pl  # type: ignore[no-redef]
    except ImportError:
        import pytorch_lightning as pl


def _set_up_calls() -> tuple[Patch, ...]:
    """Lightning's own call of its set-up, for the start-up hook: ``prepare_data``
    (local rank 0 downloads while the others wait in the barrier around it,
    for as long as it takes) is a phase, judged by ``phase_timeout_s`` as
    validation is, so a slow download is no straggler to kill."""
    connector = sys.modules.get(f"{pl.__name__}.trainer.connectors.data_connector")
    owner = getattr(connector, "_DataConnector", None)
    if not isinstance(owner, type):
        return ()
    return ((owner, "prepare_data", lambda hook: hook.phase("prepare_data")),)


# The earliest place we run: Lightning's init_process_group comes later, in fit.
prepare(_set_up_calls())


#: Never let trainprobe raise into Lightning's loop.
_guarded = guarded(keep_result=True)


class LivenessProbeCallback(pl.Callback):
    """Reports this process's liveness to the node's trainprobe sidecar.

    Keyword arguments go to :class:`~trainprobe.hooks.LivenessProbeHook`
    (``target``, ``interval_ms``, ``job_id``, ``token``...); ``rank``,
    ``world_size`` and ``local_rank`` default to the trainer's.
    """

    def __init__(self, **hook_kwargs: Any) -> None:
        super().__init__()
        self.hook_kwargs = hook_kwargs
        #: The hook of the fit in progress (None outside ``trainer.fit``).
        self.hook: LivenessProbeHook | None = None
        self._phases = OpenPhases()
        self._last_step = -1
        #: (owner, attribute, wrapper) of each method patched on one instance.
        self._patched: list[tuple[Any, str, Any]] = []
        self._warned = False
        callback_made()  # the start-up hook watches the framework's collectives from now

    # -- lifecycle ---------------------------------------------------------------

    @_guarded
    def setup(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        if stage != "fit" or self.hook is not None:
            return
        kwargs = {
            "rank": trainer.global_rank,
            "world_size": trainer.world_size,
            "local_rank": trainer.local_rank,
            **self.hook_kwargs,
        }
        end_startup_watch()  # the process group exists: one hook a process from here on
        self.hook = LivenessProbeHook(**kwargs)
        self._last_step = -1
        self._wrap_save_checkpoint(trainer)
        self._watch_collectives(trainer)

    @_guarded
    def on_fit_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        # strategy.setup has wrapped the model by now, and no backward has run.
        from torch.nn.parallel import DistributedDataParallel

        model = trainer.strategy.model
        if self.hook is not None and isinstance(model, DistributedDataParallel):
            self.hook.watch_ddp(model)

    @_guarded
    def teardown(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        if stage == "fit":
            self._finish(trainer)

    @_guarded
    def on_exception(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, exception: BaseException
    ) -> None:
        self._finish(trainer)

    def _finish(self, trainer: pl.Trainer) -> None:
        self._phases.close_all()
        for owner, name, patched in self._patched:
            if vars(owner).get(name) is patched:
                delattr(owner, name)
        self._patched = []
        if self.hook is not None:
            # A clean Goodbye: what the script does after fit is not a stall.
            self.hook.close()
            self.hook = None

    # -- steps -------------------------------------------------------------------

    def on_train_batch_end(
        self,
        trainer: pl.Trainer,
        pl_module: pl.LightningModule,
        outputs: Any,
        batch: Any,
        batch_idx: int,
    ) -> None:
        # The hot path: inlined rather than @_guarded, one call less per batch.
        try:
            step = trainer.global_step
            if self.hook is not None and step != self._last_step:
                self._last_step = step
                self.hook.on_step_end(step)
        except Exception:
            report_failure(self, "on_train_batch_end")

    # -- phases ------------------------------------------------------------------

    @_guarded
    def on_sanity_check_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._phases.open(self.hook, "sanity_check")

    @_guarded
    def on_sanity_check_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._phases.close("sanity_check")

    @_guarded
    def on_validation_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if not trainer.sanity_checking:
            self._phases.open(self.hook, "validation")

    @_guarded
    def on_validation_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._phases.close("validation")

    def _patch(self, owner: Any, name: str, scope: Scope) -> None:
        """``owner.name`` run within ``scope(hook)``, on this instance only, until fit ends."""
        original = getattr(owner, name, None)
        if owner is None or original is None or not callable(original):
            return
        wrapped = within(self, original, scope)
        setattr(owner, name, wrapped)
        self._patched.append((owner, name, wrapped))

    def _watch_collectives(self, trainer: pl.Trainer) -> None:
        """Make Lightning's collectives outside DDP's buckets watched collectives.

        A rank that hangs after the process group, before its first batch (a
        restarted group's start-up), leaves its peers waiting in one of them:
        the strategy's barriers (after every rank's ``setup``, before the
        sanity check and training), its broadcasts (a checkpoint callback's
        directory), the DDP wrapper's construction (it broadcasts the module's
        state, after a checkpoint's restore) and the broadcast that Lightning
        (2.6) begins each batch of several processes with (whether rank 0 got
        SIGTERM, ahead of the batch's fetch; a rank stuck in that fetch leaves
        its peers in the next one, or in DDP's first bucket). Unwatched, the
        peers are not seen waiting, and the rank is named only at
        ``startup_timeout_s`` (600 s), not ``init_straggler_s`` after they
        began (rule ``startup_straggler``). Each rank calls them in the same
        order, so their numbers agree. This trainer's strategy and loop only;
        a method this Lightning lacks is left out.
        """
        # The trainer's own process group: a replica group's, under ReplicatedCallback.
        if self.hook is None or trainer.world_size < 2:
            return
        strategy = getattr(trainer, "strategy", None)
        self._patch(strategy, "barrier", lambda h: h.collective("barrier"))
        self._patch(strategy, "broadcast", lambda h: h.collective("broadcast"))
        # DDP's constructor checks the parameters' shapes and broadcasts rank 0's state.
        self._patch(strategy, "configure_ddp", lambda h: h.collective("broadcast"))
        loop = getattr(getattr(trainer, "fit_loop", None), "epoch_loop", None)
        self._patch(loop, "_broadcast_sigterm_tensor", lambda h: h.collective("broadcast"))

    def _wrap_save_checkpoint(self, trainer: pl.Trainer) -> None:
        """Make ``trainer.save_checkpoint`` a phase, on this trainer instance only.

        Lightning has no callback after a checkpoint is written
        (``on_save_checkpoint`` runs before, while the dict is built), and
        rank 0's write plus every rank's barrier are the long part.
        """
        self._patch(trainer, "save_checkpoint", lambda h: h.phase("checkpoint"))
