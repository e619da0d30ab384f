"""``Trainer(..., callbacks=[LivenessProbeCallback()])``: trainprobe for Hugging Face.

A :class:`transformers.TrainerCallback`; the same in ``Trainer`` and
``Seq2SeqTrainer`` (and other subclasses). Only this module imports
transformers.

During ``trainer.train()`` each process holds one
:class:`~trainprobe.hooks.LivenessProbeHook` named from ``TrainingArguments``
(process index, world size, local process index). A step ends at
``on_step_end`` (``state.global_step``: optimizer steps). Evaluation and
checkpoint saving are phases: transformers has no callback before either, but
it decides both in ``on_step_end``/``on_epoch_end`` (``control.should_evaluate``,
``control.should_save``, set by its DefaultFlowCallback, which runs first), and
runs them right after; ``on_evaluate`` and ``on_save`` close them, the next
step's ``on_step_begin`` at the latest. An evaluation that starts otherwise
(``eval_on_start``, several eval datasets) opens its phase at its first
``on_prediction_step``.

Under torchrun, importing this module is what makes restarts work:
``TrainingArguments`` creates the process group (accelerate's
``PartialState``) before any callback exists, so the import (at the top of
the script, before the arguments are built) is the earliest place trainprobe
can act. It prefixes torchrun's store by the attempt and watches the
start-up of every attempt (:mod:`trainprobe.hooks.framework.startup`).

The DDP wrapper (``trainer.model_wrapped``) is watched at ``on_train_begin``,
and so is the Trainer's ``accelerator.gather``, with which each step of
several processes begins: the peers of a rank that hangs before a step (its
first one included) wait there.
Callbacks are handed only the unwrapped model, so the callback finds the
trainer that called it on the stack, once per ``train()``.
"""

from __future__ import annotations

import logging
import sys
from types import FrameType
from typing import Any

from transformers import TrainerCallback, TrainerControl, TrainerState, TrainingArguments

from trainprobe.hooks.framework.guard import guarded, report_failure
from trainprobe.hooks.framework.phases import OpenPhases, within
from trainprobe.hooks.framework.startup import callback_made, end_startup_watch, prepare
from trainprobe.hooks.liveness import LivenessProbeHook

log = logging.getLogger("trainprobe.hooks")

# The earliest place we run: TrainingArguments makes the process group later.
prepare()

#: How far up the stack the calling Trainer may be (callback <- call_event <-
#: on_train_begin <- _inner_training_loop, plus room for subclasses' wrappers).
_MAX_FRAMES = 12


#: Never let trainprobe raise into the Trainer's loop.
_guarded = guarded(keep_result=False)


def calling_trainer(max_frames: int = _MAX_FRAMES) -> Any:
    """The Trainer whose callback handler called us, found on the stack, or None."""
    frame: FrameType | None = sys._getframe(1)
    for _ in range(max_frames):
        if frame is None:
            return None
        obj = frame.f_locals.get("self")
        if hasattr(obj, "model_wrapped") and hasattr(obj, "callback_handler"):
            return obj
        frame = frame.f_back
    return None


class LivenessProbeCallback(TrainerCallback):
    """Reports this process's liveness to the node's trainprobe sidecar.

    Keyword arguments go to :class:`~trainprobe.hooks.LivenessProbeHook`
    (``target``, ``interval_ms``, ``job_id``, ``token``...); ``rank``,
    ``world_size`` and ``local_rank`` default to the TrainingArguments'.
    """

    def __init__(self, **hook_kwargs: Any) -> None:
        self.hook_kwargs = hook_kwargs
        #: The hook of the train() in progress (None outside it).
        self.hook: LivenessProbeHook | None = None
        self._phases = OpenPhases()
        self._gather: tuple[Any, Any] | None = None
        self._warned = False
        callback_made()  # the start-up hook watches the framework's collectives from now

    # -- lifecycle ---------------------------------------------------------------

    @_guarded
    def on_train_begin(
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kwargs: Any
    ) -> None:
        if self.hook is None:
            ident = {
                "rank": args.process_index,
                "world_size": args.world_size,
                "local_rank": args.local_process_index,
            }
            end_startup_watch()  # the process group exists: one hook a process from here on
            self.hook = LivenessProbeHook(**{**ident, **self.hook_kwargs})
        self._watch(kwargs.get("model"))

    def _watch(self, model: Any) -> None:
        from torch.nn.parallel import DistributedDataParallel

        trainer = calling_trainer()
        self._watch_gather(trainer)
        wrapped = getattr(trainer, "model_wrapped", None)
        for candidate in (wrapped, model):
            if isinstance(candidate, DistributedDataParallel) and self.hook is not None:
                self.hook.watch_ddp(candidate)
                return
        if self.hook is not None and self.hook.identity.world_size > 1 and trainer is None:
            log.warning(
                "trainprobe: the Trainer was not found on the stack; its DDP model is not "
                "watched, so a hang is detected but its culprit may not be named"
            )

    def _watch_gather(self, trainer: Any) -> None:
        """Make the Trainer's ``accelerator.gather`` a watched collective.

        Each optimizer step of several processes begins with one, ahead of
        ``on_step_begin``: the count of label tokens, gathered across ranks
        (``average_tokens_across_devices``, on by default). A rank that hangs
        before a step (its first one: a restarted group's start-up) leaves
        its peers waiting there, in no DDP bucket: unwatched, they are not
        seen waiting, and the rank is named only at ``startup_timeout_s``
        (600 s), not ``init_straggler_s`` after they began (rule
        ``startup_straggler``). This Trainer's accelerator only, until
        ``on_train_end``.
        """
        accelerator: Any = getattr(trainer, "accelerator", None)
        original = getattr(accelerator, "gather", None)
        hook = self.hook
        if hook is None or self._gather is not None or not callable(original):
            return
        if hook.identity.world_size < 2:
            return

        gather = within(self, original, lambda h: h.collective("all_gather"))
        accelerator.gather = gather
        self._gather = (accelerator, gather)

    def _unwatch_gather(self) -> None:
        if self._gather is not None:
            accelerator, patched = self._gather
            if vars(accelerator).get("gather") is patched:
                del accelerator.gather
            self._gather = None

    @_guarded
    def on_train_end(
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kwargs: Any
    ) -> None:
        self._unwatch_gather()
        self._phases.close_all()
        if self.hook is not None:
            # A clean Goodbye: what the script does after train() is not a stall.
            self.hook.close()
            self.hook = None

    # -- steps -------------------------------------------------------------------

    def on_step_end(
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kwargs: Any
    ) -> None:
        # The hot path: inlined rather than @_guarded, one call less per step.
        try:
            if self.hook is not None:
                self.hook.on_step_end(state.global_step)
                if control.should_evaluate or control.should_save:
                    self._open_flagged(args, control)
        except Exception:
            report_failure(self, "on_step_end")

    @_guarded
    def on_step_begin(
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kwargs: Any
    ) -> None:
        # Whatever ran between two steps is over; a phase left open would hide a hang.
        if self._phases:
            self._phases.close_all()

    @_guarded
    def on_epoch_end(
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kwargs: Any
    ) -> None:
        self._open_flagged(args, control)

    # -- phases ------------------------------------------------------------------

    def _open_flagged(self, args: TrainingArguments, control: TrainerControl) -> None:
        if control.should_evaluate:
            self._phases.open(self.hook, "evaluation")
        if control.should_save:
            self._phases.open(self.hook, "checkpoint")

    @_guarded
    def on_prediction_step(
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kwargs: Any
    ) -> None:
        if "evaluation" not in self._phases:
            self._phases.open(self.hook, "evaluation")

    @_guarded
    def on_evaluate(
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kwargs: Any
    ) -> None:
        self._phases.close("evaluation")
        if str(getattr(args, "save_strategy", "")).endswith("best"):
            # Whether to save is decided only now, after this callback.
            self._phases.open(self.hook, "checkpoint")

    @_guarded
    def on_save(
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kwargs: Any
    ) -> None:
        self._phases.close("checkpoint")
