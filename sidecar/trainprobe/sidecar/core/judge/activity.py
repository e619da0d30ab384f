"""Where a training thread's stack is: the activity the sidecar names for it.

Pure: frames in (:class:`~trainprobe.sidecar.core.judge.stackframes.Frame`,
innermost first), one word out. :mod:`trainprobe.sidecar.core.judge.evidence`
combines it with the kernel's view of the process.

Activities (:func:`classify_frames`), first match wins on the library frames
below the innermost user frame, then the user frame's own source line:

| activity     | frames                                                        |
|--------------|---------------------------------------------------------------|
| collective   | torch.distributed, DDP, trainprobe's ddp/collective wrappers, |
|              | torchft's Manager, process group and DDP                      |
| checkpoint   | torch.save/load, torch.distributed.checkpoint, safetensors    |
| data_loading | torch.utils.data, multiprocessing queues                      |
| compile      | torch._dynamo, torch._inductor, triton                        |
| backward     | the autograd engine (DDP's gradient allreduce waits in there) |
| lock         | threading's acquire/wait, or ``.acquire(`` in user code        |
| sleep        | ``sleep(`` in the user's line                                 |
| reading      | ``read(``/``recv(``/``open(`` in the user's line, or state D  |
| user         | anything else                                                 |

A rank in ``backward`` whose CPU is idle is waiting for the gradient
allreduce: evidence counts it as ``collective``
(:attr:`~trainprobe.sidecar.core.judge.evidence.RankEvidence.waiting`).
"""

from __future__ import annotations

from collections.abc import Sequence

from trainprobe.sidecar.core.judge.stackframes import Frame

__all__ = [
    "ACTIVITIES",
    "BACKWARD",
    "CHECKPOINT",
    "COLLECTIVE",
    "COMPILE",
    "DATA",
    "LOCK",
    "READING",
    "SLEEP",
    "USER",
    "classify_frames",
]

COLLECTIVE, CHECKPOINT, DATA, COMPILE, BACKWARD = (
    "collective",
    "checkpoint",
    "data_loading",
    "compile",
    "backward",
)
LOCK, SLEEP, READING, USER = "lock", "sleep", "reading", "user"
ACTIVITIES = (COLLECTIVE, CHECKPOINT, DATA, COMPILE, BACKWARD, LOCK, SLEEP, READING, USER)

#: (activity, path fragments) for library frames, in order of precedence.
_LIBRARY_KINDS: tuple[tuple[str, tuple[str, ...]], ...] = (
    (
        COLLECTIVE,
        (
            "torch/distributed/distributed_c10d",
            "torch/distributed/c10d",
            "torch/nn/parallel/distributed",
            "trainprobe/hooks/watch/ddp",
            "trainprobe/hooks/watch/collectives",
            "torch/distributed/algorithms",
            # torchft: its quorum, replicated allreduce and commit wait for other replicas.
            "trainprobe/hooks/torchft",
            "torchft/manager",
            "torchft/process_group",
            "torchft/ddp",
        ),
    ),
    (
        CHECKPOINT,
        ("torch/serialization", "torch/distributed/checkpoint", "safetensors", "orbax"),
    ),
    (DATA, ("torch/utils/data", "multiprocessing/queues", "multiprocessing/connection")),
    (COMPILE, ("torch/_dynamo", "torch/_inductor", "torch/fx", "triton/")),
    (BACKWARD, ("torch/autograd", "torch/_tensor")),
    (LOCK, ("threading.py",)),
)
#: (activity, fragments of a user frame's source line).
_USER_KINDS: tuple[tuple[str, tuple[str, ...]], ...] = (
    (SLEEP, ("sleep(",)),
    (LOCK, (".acquire(", ".wait(", "with lock")),
    (READING, ("read(", "recv(", "open(", "readline(", ".get(")),
)


def classify_frames(frames: Sequence[Frame]) -> str:
    """The activity of a training thread's stack (frames innermost first)."""
    found = ""
    for f in frames:
        path = f.file.replace("\\", "/")
        if not f.library:
            # The innermost user frame: what it calls tells the most.
            if found:
                return found
            for kind, marks in _USER_KINDS:
                if any(m in f.code for m in marks):
                    return kind
            if f.function == "sleep":  # py-spy --native names the C call
                return SLEEP
            return USER
        for rank, (kind, marks) in enumerate(_LIBRARY_KINDS):
            if any(m in path for m in marks):
                if not found or rank < _rank(found):
                    found = kind
                break
    return found or USER


def _rank(kind: str) -> int:
    return next(i for i, (k, _) in enumerate(_LIBRARY_KINDS) if k == kind)
